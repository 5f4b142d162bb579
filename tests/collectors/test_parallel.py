"""``ParallelDataCollector`` on real PettingZoo/mpe2 envs and on random-space envs.

Every test compares what the dataset holds with what the environment handed out while it was
being recorded (deep copies taken at the time), never with what the recorder believes.
"""

from __future__ import annotations

import copy
import importlib.util
import itertools
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pettingzoo.test import parallel_api_test
from pettingzoo.utils.env import ParallelEnv

import marl_minari as mm
from marl_minari.errors import (
    DatasetExistsError,
    InfoStructureError,
    InvalidDatasetIdError,
    StepDataError,
    UnsupportedSpaceError,
)
from marl_minari.format import layout


def _load_strategies() -> Any:
    path = Path(__file__).resolve().parents[1] / "support" / "marl_strategies.py"
    module_spec = importlib.util.spec_from_file_location("marl_strategies", path)
    assert module_spec is not None and module_spec.loader is not None
    module = sys.modules.get("marl_strategies")
    if module is None:
        module = importlib.util.module_from_spec(module_spec)
        sys.modules["marl_strategies"] = module
        module_spec.loader.exec_module(module)
    return module


strategies = _load_strategies()
RandomSpacesEnv = strategies.RandomSpacesEnv
_ids = itertools.count()

PROVENANCE = {"algorithm_name": "random", "author": "tests", "author_email": "t@example.com",
              "code_permalink": "https://example.com", "description": "test"}


# --- playing and logging what the env handed out ----------------------------------------------


def play_logged(env: Any, episodes: int, seed: int = 0, options: Any = None,
                max_steps: int | None = None) -> list[dict[str, Any]]:
    """Play random episodes through ``env``; deep-copy everything it handed out."""
    has_state = env.spec.state_space is not None if hasattr(env, "spec") else False
    logs = []
    for episode in range(episodes):
        episode_seed = seed + episode
        episode_options = options(episode) if callable(options) else options
        obs, infos = env.reset(seed=episode_seed, options=episode_options)
        log: dict[str, Any] = {
            "seed": episode_seed, "options": copy.deepcopy(episode_options),
            "rows": [copy.deepcopy({"observations": obs, "infos": infos,
                                    "state": env.state() if has_state else None})],
            "steps": [],
        }
        rng = np.random.default_rng(episode_seed)
        while env.agents and (max_steps is None or len(log["steps"]) < max_steps):
            actions = {}
            for agent in env.agents:
                space = env.action_space(agent)
                space.seed(int(rng.integers(2**31)))
                actions[agent] = space.sample()
            obs, rewards, terms, truncs, infos = env.step(actions)
            log["steps"].append(copy.deepcopy({"actions": actions, "rewards": rewards,
                                               "terminations": terms, "truncations": truncs}))
            log["rows"].append(copy.deepcopy({
                "observations": obs, "infos": infos,
                "state": env.state() if has_state else None}))
        logs.append(log)
    return logs


def _equal(actual: Any, expected: Any, where: str) -> None:
    if isinstance(expected, dict):
        assert set(actual) == set(expected), where
        for key in expected:
            _equal(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, tuple):
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            _equal(a, e, f"{where}[{i}]")
    elif isinstance(expected, str):
        assert actual == expected, where
    else:
        np.testing.assert_array_equal(actual, np.asarray(expected), err_msg=where)


def _row(tree: Any, k: int) -> Any:
    if isinstance(tree, dict):
        return {key: _row(sub, k) for key, sub in tree.items()}
    if isinstance(tree, tuple):
        return tuple(_row(sub, k) for sub in tree)
    return tree[k]


def _fill(space: spaces.Space) -> Any:
    if isinstance(space, spaces.Dict):
        return {key: _fill(sub) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_fill(sub) for sub in space.spaces)
    if isinstance(space, spaces.Text):
        return ""
    return np.zeros(space.shape, dtype=np.int64 if isinstance(space, spaces.Discrete)
                    else space.dtype)


def assert_episode_matches_log(episode: Any, log: dict[str, Any], spec: Any, *,
                               exact_observations: bool = True,
                               record_infos: bool = False) -> None:
    """The stored episode holds exactly what the env handed out (fill values elsewhere)."""
    agents = spec.possible_agents
    rows, steps = log["rows"], log["steps"]
    assert episode.total_steps == len(steps)
    assert episode.seed == log["seed"]
    for k, row in enumerate(rows):
        for i, agent in enumerate(agents):
            present = agent in row["observations"]
            assert episode.active[k, i] == present, (k, agent)
            stored = _row(episode.observations[agent], k)
            expected = row["observations"][agent] if present else _fill(
                spec.observation_spaces[agent])
            if exact_observations or not present:
                _equal(stored, expected, f"observation {agent!r} row {k}")
        if row["state"] is not None and spec.state_encoding == "jpeg":  # lossy
            assert np.abs(episode.state[k].astype(int) - row["state"]).mean() < 6
        elif row["state"] is not None:
            np.testing.assert_array_equal(episode.state[k], row["state"])
        if record_infos:
            for agent, info in row["infos"].items():
                if info:
                    _equal(_row(episode.agent_infos[agent], k), info, f"info {agent!r} row {k}")
    for t, step in enumerate(steps):
        for i, agent in enumerate(agents):
            acted = agent in step["actions"]
            assert episode.acted[t, i] == acted
            stored = _row(episode.actions[agent], t)
            expected = step["actions"][agent] if acted else _fill(spec.action_spaces[agent])
            _equal(stored, expected, f"action {agent!r} step {t}")
            assert episode.rewards[t, i] == float(step["rewards"].get(agent, 0.0))
            assert episode.terminations[t, i] == bool(step["terminations"].get(agent, False))
            assert episode.truncations[t, i] == bool(step["truncations"].get(agent, False))
    assert episode.returns == pytest.approx(
        {a: sum(float(s["rewards"].get(a, 0.0)) for s in steps) for a in agents})
    assert episode.agent_steps == {a: sum(a in s["actions"] for s in steps) for a in agents}
    last = steps[-1]
    truncated = any(last["truncations"].values())
    assert episode.episode_truncations.tolist() == [False] * (len(steps) - 1) + [truncated]
    assert episode.episode_terminations.tolist() == [False] * (len(steps) - 1) + [not truncated]


def _record(env: Any, episodes: int, dataset_id: str | None = None, seed: int = 0,
            **collector_kwargs: Any) -> tuple[Any, list[dict[str, Any]]]:
    collector = mm.ParallelDataCollector(env, **collector_kwargs)
    logs = play_logged(collector, episodes, seed=seed)
    dataset = collector.create_dataset(dataset_id or f"tests/rec-v{next(_ids)}", **PROVENANCE)
    collector.close()
    return dataset, logs


# --- real environments -------------------------------------------------------------------------


def test_simple_spread_records_the_global_state(record_parallel: Any) -> None:
    env = mm.make_env("mpe2/simple_spread_v3", max_cycles=8)
    dataset, logs = _record(env, 3, "mpe2/spread-v0")
    assert dataset.spec.state_space == env.state_space
    for i, log in enumerate(logs):
        assert_episode_matches_log(dataset.episode(i), log, dataset.spec)
    plain = next(minari.load_dataset("mpe2/spread-v0").iterate_episodes())
    assert plain.infos[layout.INFOS_GROUP][layout.STATE].shape == (9, 54)
    np.testing.assert_array_equal(plain.infos["marl"]["state"], dataset.episode(0).state)

    # the conftest recorder agrees on returns, lengths and per-agent step counts
    recorded, records = record_parallel("mpe2/simple_spread_v3", episodes=2, max_cycles=5)
    for episode, record in zip(recorded, records, strict=True):
        assert episode.total_steps == record["steps"]
        assert episode.returns == pytest.approx(record["returns"])
        assert episode.agent_steps == record["agent_steps"]
        assert episode.seed == record["seed"]


def test_knights_archers_zombies_agents_die_and_nothing_is_dropped() -> None:
    env = mm.make_env("butterfly/knights_archers_zombies_v11", max_cycles=150, spawn_delay=1,
                      line_death=True)
    dataset, logs = _record(env, 3, "butterfly/kaz-v0")
    arrays = dataset.to_arrays()
    assert not arrays.active.all(), "some agent must die mid-episode for this test to bite"
    for i, log in enumerate(logs):
        episode = dataset.episode(i)
        assert_episode_matches_log(episode, log, dataset.spec)
        handed_out = sum(len(row["observations"]) for row in log["rows"])
        assert int(episode.active.sum()) == handed_out
        for a, agent in enumerate(dataset.possible_agents):
            died = np.flatnonzero(episode.terminations[:, a])
            if died.size:  # its last row is the observation of the step it died at
                assert episode.active[died[0] + 1, a]
                assert not episode.active[died[0] + 2:, a].any()
                assert not episode.acted[died[0] + 1:, a].any()
                assert not episode.observations[agent][died[0] + 2:].any()
    np.testing.assert_allclose(arrays.returns(),
                               [[sum(float(s["rewards"].get(a, 0)) for s in log["steps"])
                                 for a in dataset.possible_agents] for log in logs])


@pytest.mark.parametrize("jpeg", [False, True])
def test_pistonball_images(jpeg: bool) -> None:
    env = mm.make_env("butterfly/pistonball_v6", n_pistons=3, max_cycles=3)
    dataset, logs = _record(env, 2, f"butterfly/pistonball-v{int(jpeg)}", seed=5,
                            jpeg_encoding=jpeg)
    assert dataset.metadata["jpeg_encoding"] is jpeg
    plain = list(minari.load_dataset(f"butterfly/pistonball-v{int(jpeg)}").iterate_episodes())
    for i, log in enumerate(logs):
        episode = dataset.episode(i)
        assert_episode_matches_log(episode, log, dataset.spec, exact_observations=not jpeg)
        for agent in dataset.possible_agents:
            handed = np.stack([row["observations"][agent] for row in log["rows"]])
            stored = episode.observations[agent]
            assert stored.shape == handed.shape == (len(log["rows"]), 457, 120, 3)
            if not jpeg:
                np.testing.assert_array_equal(stored, handed)
            else:
                assert np.abs(stored.astype(int) - handed).mean() < 6
            np.testing.assert_array_equal(plain[i].observations[agent], stored)


def test_rock_paper_scissors_through_aec_to_parallel() -> None:
    env = mm.make_env("classic/rps_v2", num_actions=3, max_cycles=6)
    dataset, logs = _record(env, 3, "classic/rps-v0")
    assert dataset.spec.env.env_id == "classic/rps_v2"
    assert dataset.spec.state_space is None
    for i, log in enumerate(logs):
        assert_episode_matches_log(dataset.episode(i), log, dataset.spec)
    recovered = dataset.recover_environment()
    assert recovered.possible_agents == ["player_0", "player_1"]
    observations, _ = recovered.reset(seed=0)
    assert set(observations) == {"player_0", "player_1"}
    _, rewards, *_ = recovered.step({"player_0": 0, "player_1": 1})
    assert rewards == {"player_0": -1, "player_1": 1}


def test_speaker_listener_heterogeneous_spaces() -> None:
    env = mm.make_env("mpe2/simple_speaker_listener_v4", max_cycles=6)
    dataset, logs = _record(env, 2, "mpe2/speaker-v0")
    spec = dataset.spec
    assert spec.observation_spaces["speaker_0"].shape == (3,)
    assert spec.observation_spaces["listener_0"].shape == (11,)
    assert spec.action_spaces["speaker_0"] == spaces.Discrete(3)
    assert spec.action_spaces["listener_0"] == spaces.Discrete(5)
    for i, log in enumerate(logs):
        assert_episode_matches_log(dataset.episode(i), log, spec)
    plain = minari.load_dataset("mpe2/speaker-v0")
    assert plain.observation_space == spaces.Dict(
        {a: env.observation_space(a) for a in env.possible_agents})
    episode = next(plain.iterate_episodes())
    assert episode.observations["speaker_0"].shape == (7, 3)
    assert episode.observations["listener_0"].shape == (7, 11)


def test_parallel_api_test_passes_on_the_wrapper() -> None:
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=10))
    parallel_api_test(collector, num_cycles=30)
    collector.reset(seed=0)
    while collector.agents:
        collector.step({a: 0 for a in collector.agents})
    dataset = collector.create_dataset("tests/apitest-v0", **PROVENANCE)
    collector.close()
    assert dataset.total_episodes >= 2  # the api test's episodes were recorded too
    assert dataset.episode_seeds()[-1] == 0


def test_recovered_pettingzoo_env_is_the_recorded_one(record_parallel: Any) -> None:
    dataset, _ = record_parallel("mpe2/simple_spread_v3", episodes=1, max_cycles=7, N=2)
    env = mm.load_dataset("tests/recorded-v0").recover_environment()
    assert isinstance(env, ParallelEnv)
    assert env.possible_agents == list(dataset.possible_agents) == ["agent_0", "agent_1"]
    for agent in env.possible_agents:
        assert env.observation_space(agent) == dataset.spec.observation_spaces[agent]
    parallel_api_test(env, num_cycles=20)
    env.reset(seed=0)
    steps = 0
    while env.agents:
        env.step({a: 0 for a in env.agents})
        steps += 1
    assert steps == 7  # max_cycles came back with the descriptor


# --- random-space environments (property tests) ------------------------------------------------


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(strategies.agent_spaces(), st.data())
def test_random_spaces_env_round_trip(agent_sp: tuple, data: st.DataObject) -> None:
    agents, obs, act = agent_sp
    max_steps = data.draw(st.integers(1, 5), label="max_steps")
    joins = {a: data.draw(st.integers(0, 2), label=f"join {a}") for a in agents[1:]}
    leaves = {a: data.draw(st.integers(1, 6), label=f"leave {a}") for a in agents}
    env = RandomSpacesEnv(agents, obs, act, max_steps=max_steps, joins=joins, leaves=leaves)
    collector = mm.ParallelDataCollector(env, record_infos=True, jpeg_encoding=False)
    logs = play_logged(collector, 2, seed=data.draw(st.integers(0, 1000), label="seed"))
    dataset_id = f"prop/env-v{next(_ids)}"
    dataset = collector.create_dataset(dataset_id, **PROVENANCE)
    collector.close()
    assert dataset.spec.state_space == env.state_space
    arrays = dataset.to_arrays()
    for i, log in enumerate(logs):
        assert_episode_matches_log(dataset.episode(i), log, dataset.spec, record_infos=True)
        strategies.assert_episode_equal(arrays.episode(i), dataset.episode(i))
    assert minari.load_dataset(dataset_id).total_episodes == 2


def test_random_spaces_env_passes_the_api_test() -> None:
    agents = ["a", "b"]
    space = spaces.Dict({"x": spaces.Box(-1, 1, (2,)), "t": spaces.Text(3)})
    env = RandomSpacesEnv(agents, {a: space for a in agents},
                          {a: spaces.Discrete(2) for a in agents}, max_steps=4)
    collector = mm.ParallelDataCollector(env)
    parallel_api_test(collector, num_cycles=10)
    assert collector.create_dataset("tests/random-api-v0", **PROVENANCE).total_episodes >= 1


# --- collector behaviour -----------------------------------------------------------------------


def _spread(**kwargs: Any) -> Any:
    return mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=5),
                                    **kwargs)


def test_unstorable_space_is_refused_at_construction_naming_the_agent() -> None:
    agents = ["ok", "bad"]
    obs = {"ok": spaces.Discrete(2), "bad": spaces.Sequence(spaces.Discrete(2))}
    env = RandomSpacesEnv(agents, obs, {a: spaces.Discrete(2) for a in agents})
    with pytest.raises(UnsupportedSpaceError, match=r"observation_space\('bad'\) is a Sequence"):
        mm.ParallelDataCollector(env)
    graph = spaces.Graph(node_space=spaces.Discrete(2), edge_space=None)
    env = RandomSpacesEnv(["a"], {"a": spaces.Discrete(2)}, {"a": graph})
    with pytest.raises(UnsupportedSpaceError, match=r"action_space\('a'\) is a Graph"):
        mm.ParallelDataCollector(env)


class _ChangingInfos(RandomSpacesEnv):
    def _infos(self, present: list[str]) -> dict[str, Any]:
        infos = {a: {"t": self._t} for a in present}
        if self._t == 2 and "b" in infos:
            infos["b"]["new"] = 1.0
        return infos


def test_info_keys_changing_are_refused_naming_agent_and_step() -> None:
    env = _ChangingInfos(["a", "b"], {a: spaces.Discrete(2) for a in "ab"},
                         {a: spaces.Discrete(2) for a in "ab"}, max_steps=4)
    collector = mm.ParallelDataCollector(env, record_infos=True)
    collector.reset(seed=0)
    collector.step({"a": 0, "b": 0})
    with pytest.raises(InfoStructureError, match=r"agent 'b' at step 2 has keys \['new', 't'\]"):
        collector.step({"a": 0, "b": 0})
    # not recording infos, the same env records fine
    dataset, logs = _record(_ChangingInfos(["a", "b"], {a: spaces.Discrete(2) for a in "ab"},
                                           {a: spaces.Discrete(2) for a in "ab"}, max_steps=4),
                            1)
    assert_episode_matches_log(dataset.episode(0), logs[0], dataset.spec)
    assert dataset.episode(0).agent_infos is None


def test_record_infos_keeps_the_info_dicts() -> None:
    agents = ["a", "b", "c"]
    env = RandomSpacesEnv(agents, {a: spaces.Discrete(3) for a in agents},
                          {a: spaces.Discrete(3) for a in agents}, max_steps=4,
                          leaves={"b": 2}, joins={"c": 1})
    dataset, logs = _record(env, 2, record_infos=True)
    assert dataset.spec.record_infos is True
    for i, log in enumerate(logs):
        episode = dataset.episode(i)
        assert_episode_matches_log(episode, log, dataset.spec, record_infos=True)
        assert set(episode.agent_infos["a"]) == {"t", "x", "deep"}
        assert episode.agent_infos["b"]["t"].tolist() == [0, 1, 2, 0, 0]  # gone after step 2
        assert episode.agent_infos["c"]["t"].tolist() == [0, 1, 2, 3, 4]
    without, _ = _record(RandomSpacesEnv(agents, {a: spaces.Discrete(3) for a in agents},
                                         {a: spaces.Discrete(3) for a in agents}, max_steps=2),
                         1)
    assert without.episode(0).agent_infos is None
    assert without.spec.record_infos is False


def test_action_masks_in_infos_are_kept_without_record_infos() -> None:
    class Masked(RandomSpacesEnv):
        def _infos(self, present: list[str]) -> dict[str, Any]:
            return {a: {"action_mask": np.array([1, self._t % 2, 1], dtype=np.int8),
                        "noise": float(self._rng.normal())} for a in present}

    env = Masked(["a"], {"a": spaces.Discrete(2)}, {"a": spaces.Discrete(3)}, max_steps=3)
    dataset, logs = _record(env, 1)
    infos = dataset.episode(0).agent_infos
    assert set(infos["a"]) == {"action_mask"}
    np.testing.assert_array_equal(infos["a"]["action_mask"],
                                  [row["infos"]["a"]["action_mask"] for row in logs[0]["rows"]])


@pytest.mark.parametrize("aggregation", ["sum", "mean", "max", "min"])
def test_reward_aggregation_options(aggregation: str) -> None:
    agents = ["a", "b", "c"]
    env = RandomSpacesEnv(agents, {a: spaces.Discrete(2) for a in agents},
                          {a: spaces.Discrete(2) for a in agents}, max_steps=5,
                          leaves={"a": 2}, joins={"c": 3})
    dataset, logs = _record(env, 2, reward_aggregation=aggregation)
    assert dataset.spec.reward_aggregation == aggregation
    reduce = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[aggregation]
    expected = [reduce(list(step["rewards"].values())) if step["rewards"] else 0.0
                for log in logs for step in log["steps"]]
    np.testing.assert_allclose(dataset.to_arrays().team_rewards, expected)
    plain = np.concatenate([e.rewards for e in minari.load_dataset(
        dataset.metadata["dataset_id"]).iterate_episodes()])
    np.testing.assert_allclose(plain, expected)
    env_spec = json.loads(dataset.metadata["env_spec"])
    assert env_spec["kwargs"]["reward_aggregation"] == aggregation


def test_seeds_and_options_round_trip() -> None:
    env = RandomSpacesEnv(["a"], {"a": spaces.Discrete(2)}, {"a": spaces.Discrete(2)},
                          max_steps=2)
    collector = mm.ParallelDataCollector(env)
    play_logged(collector, 3, seed=40, options=lambda i: None if i == 1 else
                {"level": i, "cfg": {"name": f"n{i}", "hard": bool(i)}})
    collector.reset(options={"minari_autoseed": False})  # no seed, and none drawn
    collector.step({"a": 0})
    collector.step({"a": 1})
    dataset = collector.create_dataset("tests/seeds-v0", **PROVENANCE)
    collector.close()
    assert dataset.episode_seeds() == [40, 41, 42, None]
    assert dataset.episode(3).options == {"minari_autoseed": False}
    assert dataset.episode(0).options == {"level": 0, "cfg": {"name": "n0", "hard": False}}
    assert dataset.episode(1).options is None
    assert dataset.episode(2).options == {"level": 2, "cfg": {"name": "n2", "hard": True}}
    metadata = list(minari.load_dataset("tests/seeds-v0").storage.get_episode_metadata([2]))
    assert metadata[0]["seed"] == 42 and metadata[0]["options"]["cfg"]["name"] == "n2"


@pytest.mark.parametrize("api", ["parallel", "aec"])
def test_a_reset_without_a_seed_is_seeded_and_replays_from_the_stored_seed(api: str) -> None:
    """Minari's ``DataCollector`` draws a 64-bit seed for an unseeded reset, so that every
    episode can be replayed; the seed was stored as ``None`` before."""
    env = mm.make_env("mpe2/simple_spread_v3", api=api, max_cycles=2)
    collector = (mm.ParallelDataCollector if api == "parallel" else mm.AECDataCollector)(env)
    for _ in range(2):
        collector.reset()
        if api == "parallel":
            while collector.agents:
                collector.step({a: 0 for a in collector.agents})
        else:
            for agent in collector.agent_iter():
                done = collector.terminations[agent] or collector.truncations[agent]
                collector.step(None if done else 0)
    dataset = collector.create_dataset("tests/autoseed-v0", **PROVENANCE)
    collector.close()
    seeds = dataset.episode_seeds()
    assert all(isinstance(seed, int) and 0 <= seed < 2**64 for seed in seeds)
    assert seeds[0] != seeds[1]
    replay = mm.make_env("mpe2/simple_spread_v3", max_cycles=2)
    for index, seed in enumerate(seeds):
        observations, _ = replay.reset(seed=seed)
        np.testing.assert_array_equal(dataset.episode(index).observations["agent_0"][0],
                                      observations["agent_0"])
    stored = minari.load_dataset("tests/autoseed-v0").storage.get_episode_metadata([0, 1])
    assert [int(metadata["seed"]) for metadata in stored] == seeds


def test_options_minari_cannot_store_are_refused_before_recording() -> None:
    collector = _spread()
    play_logged(collector, 1, seed=0)
    with pytest.raises(StepDataError, match=r"options\['level'\] = None cannot be stored"):
        collector.reset(seed=1, options={"level": None})
    for _ in range(2):  # not recorded: the episode never started
        collector.step({a: 0 for a in collector.agents})
    play_logged(collector, 1, seed=2, options={"level": 3})
    dataset = collector.create_dataset("tests/options-v0", **PROVENANCE)
    collector.close()
    assert dataset.episode_seeds() == [0, 2]
    assert dataset.episode(1).options == {"level": 3}


def test_reset_mid_episode_saves_the_cut_episode_as_truncated() -> None:
    collector = _spread()
    logs = play_logged(collector, 1, seed=3, max_steps=2)  # reset before the end
    logs += play_logged(collector, 1, seed=9)
    dataset = collector.create_dataset("tests/cut-v0", **PROVENANCE)
    collector.close()
    cut, full = dataset.episode(0), dataset.episode(1)
    assert cut.total_steps == 2 and full.total_steps == 5
    assert cut.episode_truncations.tolist() == [False, True]
    assert not cut.episode_terminations.any()
    assert not cut.truncations.any()  # no agent was truncated: the episode was cut
    assert cut.seed == 3 and full.seed == 9
    np.testing.assert_array_equal(cut.observations["agent_0"][-1],
                                  logs[0]["rows"][-1]["observations"]["agent_0"])


def test_create_dataset_twice_keeps_the_episode_in_progress_whole() -> None:
    collector = _spread()
    logs = play_logged(collector, 2, seed=0)
    with pytest.warns(UserWarning, match="episode in progress") as said:
        collector.reset(seed=7)
        for _ in range(3):
            collector.step({a: 1 for a in collector.agents})
        first = collector.create_dataset("tests/twice-v0", **PROVENANCE)
    assert [w.filename for w in said if "in progress" in str(w.message)] == [__file__]
    while collector.agents:
        collector.step({a: 2 for a in collector.agents})
    play_logged(collector, 1, seed=20)
    second = collector.create_dataset("tests/twice-v1", **PROVENANCE)
    collector.close()

    assert first.total_episodes == 2 and second.total_episodes == 2
    for i in range(2):
        assert_episode_matches_log(first.episode(i), logs[i], first.spec)
    whole = second.episode(0)
    assert whole.total_steps == 5 and whole.seed == 7  # from its reset, not cut
    assert whole.acted.all()
    assert whole.actions["agent_0"].tolist() == [1, 1, 1, 2, 2]
    assert second.episode(1).seed == 20
    assert first.total_steps + second.total_steps == 2 * 5 + 5 + 5


def test_add_to_dataset_appends() -> None:
    collector = _spread()
    logs = play_logged(collector, 2, seed=0)
    collector.create_dataset("tests/grow-v0", **PROVENANCE)
    logs += play_logged(collector, 3, seed=10)
    grown = collector.add_to_dataset("tests/grow-v0")
    collector.close()
    assert grown.total_episodes == 5 and grown.total_steps == 25
    for i, log in enumerate(logs):
        assert_episode_matches_log(grown.episode(i), log, grown.spec)
    assert minari.load_dataset("tests/grow-v0").total_episodes == 5
    assert grown.episode_seeds() == [0, 1, 10, 11, 12]


def test_bad_or_taken_ids_keep_the_recorded_episodes(datasets_root: Path) -> None:
    collector = _spread()
    logs = play_logged(collector, 2, seed=0)
    for bad in ("t/x-v0", "../x-v0", "x"):
        with pytest.raises(InvalidDatasetIdError):
            collector.create_dataset(bad, **PROVENANCE)
    assert sorted(p.name for p in datasets_root.iterdir()) == [".marl_minari"]
    collector.create_dataset("tests/taken-v0", **PROVENANCE)
    logs += play_logged(collector, 1, seed=5)
    with pytest.raises(DatasetExistsError):
        collector.create_dataset("tests/taken-v0", **PROVENANCE)
    dataset = collector.create_dataset("tests/taken-v1", **PROVENANCE)
    collector.close()
    assert dataset.total_episodes == 1
    assert_episode_matches_log(dataset.episode(0), logs[2], dataset.spec)


def test_close_keeps_unsaved_episodes_recoverable() -> None:
    collector = _spread()
    logs = play_logged(collector, 2, seed=0)
    collector.reset(seed=2)
    collector.step({a: 0 for a in collector.agents})
    path = collector.recording_path
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collector.close()
    assert [w.filename for w in caught
            if "3 recorded episode(s) are in no dataset yet" in str(w.message)] == [__file__]
    assert [r.path for r in mm.list_recordings()] == [path]
    mm.recover_recording(path, "tests/closed-v0")
    dataset = mm.load_dataset("tests/closed-v0")
    assert dataset.total_episodes == 3
    for i in range(2):
        assert_episode_matches_log(dataset.episode(i), logs[i], dataset.spec)
    assert dataset.episode(2).total_steps == 1 and dataset.episode(2).episode_truncations[0]


def test_steps_after_the_end_are_passed_through_unrecorded() -> None:
    collector = _spread()
    play_logged(collector, 1, seed=0)
    assert collector.step({}) == ({}, {}, {}, {}, {})
    dataset = collector.create_dataset("tests/after-v0", **PROVENANCE)
    collector.close()
    assert dataset.total_episodes == 1 and dataset.total_steps == 5


def test_callbacks_change_what_is_recorded_and_add_episode_metadata() -> None:
    def step_callback(data: dict[str, Any]) -> dict[str, Any]:
        data = dict(data)
        data["observations"] = {a: np.zeros_like(o) for a, o in data["observations"].items()}
        if "rewards" in data:
            data["rewards"] = {a: 1.0 for a in data["rewards"]}
        return data

    collector = _spread(step_data_callback=step_callback,
                        episode_metadata_callback=lambda e: {"steps": e.total_steps,
                                                             "first": e.possible_agents[0]})
    play_logged(collector, 2, seed=0)
    dataset = collector.create_dataset("tests/callbacks-v0", **PROVENANCE)
    collector.close()
    arrays = dataset.to_arrays()
    assert not arrays.observations["agent_0"].any()
    assert (arrays.rewards == 1.0).all() and (arrays.team_rewards == 3.0).all()
    assert dataset.metadata["episode_metadata"] == [{"steps": 5, "first": "agent_0"}] * 2


def test_wrapper_behaves_like_the_env_and_exposes_the_spec() -> None:
    env = mm.make_env("mpe2/simple_spread_v3", max_cycles=5)
    collector = mm.ParallelDataCollector(env)
    assert collector.possible_agents == env.possible_agents
    assert collector.metadata is env.metadata
    assert collector.spec.possible_agents == tuple(env.possible_agents)
    assert collector.spec.env.kwargs == {**collector.spec.env.kwargs, "max_cycles": 5, "N": 3}
    reference = mm.make_env("mpe2/simple_spread_v3", max_cycles=5)
    a, _ = collector.reset(seed=4)
    b, _ = reference.reset(seed=4)
    for agent in env.possible_agents:
        np.testing.assert_array_equal(a[agent], b[agent])
    out_a = collector.step({x: 1 for x in collector.agents})
    out_b = reference.step({x: 1 for x in reference.agents})
    assert out_a[1] == out_b[1]
    np.testing.assert_array_equal(collector.state(), reference.state())
    collector.close()
    reference.close()


def test_dataset_metadata_names_the_env_and_provenance() -> None:
    collector = _spread()
    play_logged(collector, 1)
    dataset = collector.create_dataset("tests/provenance-v0", **PROVENANCE,
                                       requirements=["mpe2>=1.1"],
                                       extra_metadata={"note": "hello"})
    collector.close()
    metadata = json.loads((dataset.data_path / "metadata.json").read_text())
    assert metadata["algorithm_name"] == "random" and metadata["note"] == "hello"
    assert metadata["requirements"] == ["mpe2>=1.1"]
    env = metadata[layout.METADATA_KEY][layout.META_ENV]
    assert env["env_id"] == "mpe2/simple_spread_v3"
    assert env["kwargs"]["max_cycles"] == 5 and env["kwargs"]["N"] == 3  # given, and defaults
    assert env["kwargs_known"] is True


class _DriftingInfos(RandomSpacesEnv):
    """Infos whose value turns from int to float in the second episode."""

    episodes = 0

    def reset(self, seed: int | None = None, options: Any = None) -> tuple[dict, dict]:
        self.episodes += 1
        return super().reset(seed, options)

    def _infos(self, present: list[str]) -> dict[str, Any]:
        value = self._t + 0.5 if self.episodes == 2 else self._t
        return {a: {"score": value, "ok": "yes"} for a in present}


def test_an_episode_that_cannot_be_stored_is_refused_once_and_recording_goes_on() -> None:
    env = _DriftingInfos(["a"], {"a": spaces.Discrete(2)}, {"a": spaces.Discrete(2)},
                         max_steps=2)
    collector = mm.ParallelDataCollector(env, record_infos=True)
    play_logged(collector, 1, seed=0)
    collector.reset(seed=1)
    collector.step({"a": 0})
    with pytest.raises(InfoStructureError, match=r"agent 'a' has leaves .*score: float64"):
        collector.step({"a": 0})  # the episode ends here and cannot be stored
    logs = play_logged(collector, 1, seed=2)  # resets and records normally
    dataset = collector.create_dataset("tests/drift-v0", **PROVENANCE)
    collector.close()
    assert dataset.episode_seeds() == [0, 2]
    assert_episode_matches_log(dataset.episode(1), logs[0], dataset.spec, record_infos=True)


@pytest.mark.parametrize("key", ["a/b", "", "."])
def test_info_keys_that_cannot_name_a_dataset_are_refused(key: str) -> None:
    class BadKeys(RandomSpacesEnv):
        def _infos(self, present: list[str]) -> dict[str, Any]:
            return {a: {"fine": 1, "nested": {key: 1.0}} for a in present}

    collector = mm.ParallelDataCollector(
        BadKeys(["a"], {"a": spaces.Discrete(2)}, {"a": spaces.Discrete(2)}, max_steps=1),
        record_infos=True)
    collector.reset(seed=0)
    with pytest.raises(InfoStructureError, match=rf"info of 'a'\['nested'\]: key {key!r}"):
        collector.step({"a": 0})


def test_a_ragged_info_value_is_refused_naming_the_key() -> None:
    class RaggedInfos(RandomSpacesEnv):
        def _infos(self, present: list[str]) -> dict[str, Any]:
            return {a: {"fine": 1, "ragged": [[1, 2], [3]] if self._t else [[1], [2]]}
                    for a in present}

    collector = mm.ParallelDataCollector(
        RaggedInfos(["a"], {"a": spaces.Discrete(2)}, {"a": spaces.Discrete(2)}, max_steps=2),
        record_infos=True)
    collector.reset(seed=0)
    collector.step({"a": 0})
    with pytest.raises(InfoStructureError, match=r"info of 'a'\['ragged'\], row 1: .*rectangular"):
        collector.step({"a": 0})  # the episode ends: its infos are stacked
    collector.close()


def test_agent_joining_only_in_a_later_episode_keeps_its_infos() -> None:
    env = RandomSpacesEnv(["a", "b"], {a: spaces.Discrete(2) for a in "ab"},
                          {a: spaces.Discrete(2) for a in "ab"}, max_steps=3, joins={"b": 5})
    collector = mm.ParallelDataCollector(env, record_infos=True)
    logs = play_logged(collector, 1, seed=0)  # b never shows up
    env.joins = {"b": 1}
    logs += play_logged(collector, 1, seed=1)
    dataset = collector.create_dataset("tests/late-v0", **PROVENANCE)
    collector.close()
    arrays = dataset.to_arrays()
    for i, log in enumerate(logs):
        assert_episode_matches_log(arrays.episode(i), {**log, "seed": None}, dataset.spec,
                                   record_infos=True)
        assert_episode_matches_log(dataset.episode(i), log, dataset.spec, record_infos=True)
    assert not arrays.episode(0).agent_infos["b"]["t"].any()


def test_episode_metadata_follows_episodes_into_the_dataset_they_join() -> None:
    collector = _spread(episode_metadata_callback=lambda e: {"seed": e.seed})
    play_logged(collector, 2, seed=0)
    collector.create_dataset("tests/meta-v0", **PROVENANCE)
    play_logged(collector, 2, seed=10)
    grown = collector.add_to_dataset("tests/meta-v0")
    play_logged(collector, 1, seed=20)
    other = collector.create_dataset("tests/meta-v1", **PROVENANCE)
    collector.close()
    assert grown.metadata["episode_metadata"] == [{"seed": s} for s in (0, 1, 10, 11)]
    assert other.metadata["episode_metadata"] == [{"seed": 20}]
