"""RLlib multi-agent offline training: MultiAgentPreLearner and multi_agent_offline.

Episodes are built locally (no Ray needed) and checked against the local reader's rows per
agent; training runs on a local Ray instance with 2 CPUs (``ray_local`` in conftest.py) with
tiny networks and two iterations. Skipped only when ray is not installed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("ray.rllib")
pytest.importorskip("torch")

import marl_minari as mm  # noqa: E402
import marl_minari.ray as R  # noqa: E402
from marl_minari.errors import (  # noqa: E402
    IncompatibleSourcesError,
    InvalidOptionError,
    MarlMinariError,
    RLlibOfflineError,
)
from marl_minari.ray import rllib_offline as O  # noqa: E402
from marl_minari.ray.rllib_export import observation_column  # noqa: E402
from marl_minari.rows import patterns as P  # noqa: E402

SPEAKER = ("mpe2/simple_speaker_listener_v4", {"max_cycles": 10})
KAZ = ("butterfly/knights_archers_zombies_v11",
       {"max_cycles": 150, "spawn_delay": 1, "line_death": True})


def _episodes(dataset_id: str, **kwargs: Any) -> list[Any]:
    source = mm.open_source(dataset_id)
    return O.episodes_from_rows(R.local_rows(dataset_id, "episodes"), source.spec,
                                mapping_fn=kwargs.pop("mapping_fn", O.per_agent_module),
                                **kwargs)


def assert_episodes_match_local_rows(dataset: Any, episodes: list[Any]) -> None:
    """Every agent's SingleAgentEpisode holds exactly its agent-step rows of the local
    reader: observations (then the last next observation), actions, rewards, done flags,
    action masks."""
    spec, arrays = dataset.spec, dataset.to_arrays()
    by_id = {int(e.id_.rsplit(":", 1)[1]): e for e in episodes}
    assert sorted(by_id) == arrays.episode_ids.tolist()
    for agent in spec.possible_agents:
        rows = P.agent_step_rows(arrays, spec, agents=[agent])
        space = spec.observation_spaces[agent]
        obs = observation_column(rows, P.OBS, space, None, "float32")
        next_obs = observation_column(rows, P.NEXT_OBS, space, None, "float32")
        for episode_id, episode in by_id.items():
            mine = np.flatnonzero(rows[P.EPISODE_ID] == episode_id)
            if not mine.size:
                assert agent not in episode.agent_episodes
                continue
            single = episode.agent_episodes[agent]
            assert single.module_id == agent
            assert len(single) == mine.size
            got_obs = np.asarray(single.get_observations())
            assert np.array_equal(got_obs, np.concatenate([obs[mine], next_obs[mine[-1:]]]))
            assert np.array_equal(np.asarray(single.get_actions()), rows[P.ACTION][mine])
            assert np.array_equal(np.asarray(single.get_rewards()), rows[P.REWARD][mine])
            assert single.is_terminated == bool(rows[P.TERMINATED][mine[-1]])
            assert single.is_truncated == bool(rows[P.TRUNCATED][mine[-1]])
            masks = [info["action_mask"] for info in single.get_infos()]
            assert np.array_equal(np.asarray(masks),
                                  np.concatenate([rows[P.LEGAL_MASK][mine],
                                                  rows[P.NEXT_LEGAL_MASK][mine[-1:]]]))


def _tiny(config: Any, batch: int = 16) -> Any:
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    return (config.training(train_batch_size_per_learner=batch)
            .rl_module(model_config=DefaultModelConfig(fcnet_hiddens=[8]))
            # Two CPUs: one pre-learner actor, so that the read task gets the other.
            .offline_data(map_batches_kwargs={"concurrency": 1, "num_cpus": 0.5}))


def _prelearner(config: Any) -> Any:
    spaces = (config.observation_space, config.action_space)
    return O.MultiAgentPreLearner(config=config, spaces=spaces,
                                  module_spec=config.get_multi_rl_module_spec())


def _real_rows(out: dict[str, Any], module_id: str) -> int:
    return int(np.asarray(out[f"{module_id}/loss_mask"]).sum())


def _weights(algo: Any, module_id: str) -> list[np.ndarray]:
    # Offline algorithms have no env runner holding modules: read the learner's weights.
    state = algo.learner_group.get_weights(module_ids=[module_id])[module_id]
    return [np.asarray(v).copy() for v in state.values()]


def test_speaker_listener_episodes_equal_local_rows(recorded_parallel: Any) -> None:
    dataset, _ = recorded_parallel(SPEAKER[0], episodes=4, dataset_id="rl/sl-v0", **SPEAKER[1])
    spec = dataset.spec
    assert spec.observation_spaces["speaker_0"] != spec.observation_spaces["listener_0"]
    assert_episodes_match_local_rows(dataset, _episodes("rl/sl-v0"))


def test_kaz_dead_agents_have_no_steps_after_death(recorded_parallel: Any) -> None:
    dataset, _ = recorded_parallel(KAZ[0], episodes=2, dataset_id="rl/kaz-v0", **KAZ[1])
    arrays = dataset.to_arrays()
    episodes = _episodes("rl/kaz-v0")
    assert_episodes_match_local_rows(dataset, episodes)
    deaths = 0
    for position, episode in enumerate(episodes):
        start = int(arrays.step_starts[position])
        length = int(arrays.episode_lengths[position])
        for a, agent in enumerate(dataset.possible_agents):
            died = np.flatnonzero(arrays.terminations[start:start + length, a])
            if not died.size or agent not in episode.agent_episodes:
                continue
            deaths += 1
            single = episode.agent_episodes[agent]
            # Present from step 0, acting every step up to the one it died at, then nothing.
            assert len(single) == died[0] + 1 and single.is_terminated
            after = list(episode.env_t_to_agent_t[agent])[died[0] + 2:]
            assert all(v == episode.SKIP_ENV_TS_TAG for v in after)
    assert deaths, "an agent must die mid-episode for this test to bite"


def test_tictactoe_turns_only_the_acting_player_steps(record_tictactoe: Any) -> None:
    dataset = record_tictactoe("rl/ttt-v0", 5)
    episodes = _episodes("rl/ttt-v0")
    assert_episodes_match_local_rows(dataset, episodes)
    for episode, stored in zip(episodes, dataset, strict=True):
        selection = stored.extras["agent_selection"]
        for agent, single in episode.agent_episodes.items():
            position = dataset.possible_agents.index(agent)
            # Each player's steps are its own moves: one per turn it acted on.
            assert len(single) == int(stored.acted[:, position].sum())
            assert len(single) <= int((selection == position).sum())
            assert single.is_terminated  # every game ends with both players done


def test_agent_that_skips_a_step_is_refused(recorded_parallel: Any) -> None:
    recorded_parallel(SPEAKER[0], episodes=2, dataset_id="rl/sl-v0", **SPEAKER[1])
    rows = R.local_rows("rl/sl-v0", "episodes")
    acted = np.array(rows["acted"][0], copy=True)
    acted[3, 1] = False  # listener_0 present at step 3 but silent, acting again at step 4
    rows["acted"] = rows["acted"].copy()
    rows["acted"][0] = acted
    with pytest.raises(RLlibOfflineError, match="did not act, and acted later"):
        O.episodes_from_rows(rows, mm.open_source("rl/sl-v0").spec,
                             mapping_fn=O.per_agent_module)


def test_pad_modules_masks_padding_out_of_the_loss() -> None:
    import torch

    batch = {"a": {"obs": torch.arange(6.0).reshape(3, 2), "actions": np.arange(3)},
             "b": {"obs": torch.ones(1, 2), "actions": np.arange(1),
                   "loss_mask": torch.tensor([True])}}
    out = O.pad_modules(batch)
    assert out["a"]["loss_mask"].tolist() == [True, True, True]
    assert out["b"]["loss_mask"].tolist() == [True, False, False]
    assert out["b"]["obs"].shape == (3, 2) and out["b"]["actions"].tolist() == [0, 0, 0]


def test_config_guards(recorded_parallel: Any, record_tictactoe: Any) -> None:
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.algorithms.cql import CQLConfig

    recorded_parallel(SPEAKER[0], episodes=2, dataset_id="rl/sl-v0", **SPEAKER[1])
    record_tictactoe("rl/ttt-v0", 1)
    with pytest.raises(RLlibOfflineError, match="CQL") as refused:
        R.multi_agent_offline(CQLConfig(), "rl/sl-v0")
    assert isinstance(refused.value, MarlMinariError) and "BCConfig()" in str(refused.value)
    with pytest.raises(InvalidOptionError, match="default_policy"):
        R.multi_agent_offline(BCConfig(), "rl/ttt-v0",
                              policy_mapping_fn=lambda agent, episode=None, **kw:
                              "default_policy")
    with pytest.raises(IncompatibleSourcesError, match="policy_mapping_fn"):
        R.multi_agent_offline(BCConfig(), "rl/sl-v0",
                              policy_mapping_fn={"speaker_0": "m", "listener_0": "m"})


def test_bc_trains_two_heterogeneous_modules(ray_local: Any, recorded_parallel: Any) -> None:
    from ray.rllib.algorithms.bc import BCConfig

    dataset, _ = recorded_parallel(SPEAKER[0], episodes=6, dataset_id="rl/sl-v0", **SPEAKER[1])
    config = _tiny(R.multi_agent_offline(BCConfig(), "rl/sl-v0"))
    assert set(config.policies) == {"speaker_0", "listener_0"}
    # Each module gets only its own agent's steps: as many real rows as the agent acted.
    out = _prelearner(config)(R.local_rows(config.input_, "episodes"))
    acted = dataset.to_arrays().acted.sum(axis=0)
    for a, agent in enumerate(dataset.possible_agents):
        assert _real_rows(out, agent) == acted[a] == 6 * 10
    assert out["speaker_0/obs"].shape[1:] == dataset.spec.observation_spaces["speaker_0"].shape
    assert out["listener_0/obs"].shape[1:] == (11,)

    algo = config.build_algo()
    try:
        before = {m: _weights(algo, m) for m in config.policies}
        results = [algo.train() for _ in range(2)]
        for module_id in config.policies:
            learner = results[-1]["learners"][module_id]
            assert np.isfinite(learner["policy_loss"])
            assert learner["num_module_steps_trained"] == 16
            after = _weights(algo, module_id)
            assert any(not np.array_equal(x, y)
                       for x, y in zip(before[module_id], after, strict=True))
    finally:
        algo.stop()


def test_marwil_trains_tictactoe_players(ray_local: Any, record_tictactoe: Any) -> None:
    from ray.rllib.algorithms.marwil import MARWILConfig

    dataset = record_tictactoe("rl/ttt-v0", 8)
    acted = dataset.to_arrays().acted.sum(axis=0)
    assert acted[0] != acted[1]  # player_1 moves first: the modules are padded
    separate = R.multi_agent_offline(MARWILConfig(), "rl/ttt-v0")
    out = _prelearner(_tiny(separate))(R.local_rows(separate.input_, "episodes"))
    # MARWIL adds one masked step per trajectory; padding is masked out too.
    assert _real_rows(out, "player_1") == acted[0]
    assert _real_rows(out, "player_2") == acted[1]
    assert len(out["player_1/obs"]) == len(out["player_2/obs"])

    shared = _tiny(R.multi_agent_offline(MARWILConfig(), "rl/ttt-v0",
                                         policy_mapping_fn={"player_1": "player",
                                                            "player_2": "player"}))
    assert list(shared.policies) == ["player"]
    algo = shared.build_algo()
    try:
        before = _weights(algo, "player")
        for _ in range(2):
            result = algo.train()
        assert np.isfinite(result["learners"]["player"]["policy_loss"])
        assert any(not np.array_equal(x, y)
                   for x, y in zip(before, _weights(algo, "player"), strict=True))
    finally:
        algo.stop()


def test_one_liner_trains(ray_local: Any, recorded_parallel: Any) -> None:
    from ray.rllib.algorithms.bc import BCConfig

    recorded_parallel(SPEAKER[0], episodes=3, dataset_id="rl/sl-v0", **SPEAKER[1])
    config = R.multi_agent_offline(BCConfig(), "rl/sl-v0")
    # Pre-learner actors of half a CPU: RLlib's whole-CPU ones starve the reads on 2 CPUs.
    assert config.map_batches_kwargs["num_cpus"] == 0.5
    assert config.dataset_num_iters_per_learner == 1
    mine = R.multi_agent_offline(BCConfig().offline_data(map_batches_kwargs={"concurrency": 1}),
                                 "rl/sl-v0")
    assert mine.map_batches_kwargs == {"concurrency": 1}
    algo = config.build_algo()
    try:
        result = algo.train()
    finally:
        algo.stop()
    assert set(result["learners"]) >= {"speaker_0", "listener_0"}
    assert isinstance(mm.load_dataset("rl/sl-v0"), mm.MultiAgentDataset)


# --------------------------------------------------------------------------- Parquet export


def assert_same_episodes(got: list[Any], expected: list[Any]) -> None:
    """Per agent: module, observations, actions, rewards, infos and done flags are equal."""
    got, expected = (sorted(e, key=lambda x: x.id_) for e in (got, expected))
    assert [e.id_ for e in got] == [e.id_ for e in expected]
    for mine, theirs in zip(got, expected, strict=True):
        assert (mine.is_terminated, mine.is_truncated) == (theirs.is_terminated,
                                                           theirs.is_truncated)
        assert set(mine.agent_episodes) == set(theirs.agent_episodes)
        for agent, single in mine.agent_episodes.items():
            other = theirs.agent_episodes[agent]
            assert single.module_id == other.module_id
            for name in ("get_observations", "get_actions", "get_rewards"):
                x, y = np.asarray(getattr(single, name)()), np.asarray(getattr(other, name)())
                assert x.dtype == y.dtype and np.array_equal(x, y), (agent, name)
            assert (single.is_terminated, single.is_truncated) == (other.is_terminated,
                                                                   other.is_truncated)
            masks = [[np.asarray(i["action_mask"]) for i in e.get_infos()]
                     for e in (single, other)]
            assert all(np.array_equal(x, y) for x, y in zip(*masks, strict=True))


def _parquet_episodes(config: Any) -> list[Any]:
    import ray.data

    batch = ray.data.read_parquet(config.input_).take_batch(1000, batch_format="numpy")
    return _prelearner(config)._map_to_episodes(batch)["episodes"]


def test_bc_trains_from_a_parquet_episode_export(ray_local: Any, recorded_parallel: Any,
                                                 tmp_path: Any) -> None:
    import shutil

    from ray.rllib.algorithms.bc import BCConfig

    recorded_parallel(SPEAKER[0], episodes=3, dataset_id="rl/sl-v0", **SPEAKER[1])
    streamed = _tiny(R.multi_agent_offline(BCConfig(), "rl/sl-v0"))
    batch = R.read_dataset("rl/sl-v0", "episodes").take_batch(1000, batch_format="numpy")
    expected = _prelearner(streamed)._map_to_episodes(batch)["episodes"]
    export = R.export_episodes("rl/sl-v0", tmp_path / "episodes")
    assert export.episodes == 3 and list(export.specs) == ["rl/sl-v0"]
    # The export stands alone: the dataset is gone and no spec is cached.
    shutil.rmtree(mm.open_source("rl/sl-v0").data_path.parent)
    O._spec_of.cache_clear()

    config = _tiny(R.multi_agent_offline(BCConfig(), str(export.path)))
    assert config.input_read_method == "read_parquet" and config.input_ == [str(export.path)]
    assert config.policies.keys() == streamed.policies.keys()
    assert_same_episodes(_parquet_episodes(config), expected)
    algo = config.build_algo()
    try:
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    for module_id in ("speaker_0", "listener_0"):
        assert np.isfinite(results[-1]["learners"][module_id]["policy_loss"])


def test_ragged_turn_based_episodes_survive_parquet(ray_local: Any, record_tictactoe: Any,
                                                    tmp_path: Any) -> None:
    from ray.rllib.algorithms.marwil import MARWILConfig

    dataset = record_tictactoe("rl/ttt-v0", 6)
    assert len(set(dataset.to_arrays().episode_lengths.tolist())) > 1  # variable shapes
    export = R.export_episodes("rl/ttt-v0", tmp_path / "ttt", override_num_blocks=2)
    config = _tiny(R.multi_agent_offline(MARWILConfig(), str(export.path)))
    episodes = _parquet_episodes(config)
    assert_episodes_match_local_rows(dataset, episodes)
    assert_same_episodes(episodes, _episodes("rl/ttt-v0"))


def test_parquet_export_guards(ray_local: Any, recorded_parallel: Any, tmp_path: Any) -> None:
    import json

    from ray.rllib.algorithms.bc import BCConfig

    from marl_minari.errors import CorruptedDataError, DatasetExistsError, DatasetNotFoundError

    recorded_parallel(SPEAKER[0], episodes=1, dataset_id="rl/sl-v0", **SPEAKER[1])
    folder = tmp_path / "episodes"
    R.export_episodes("rl/sl-v0", folder)
    with pytest.raises(DatasetExistsError, match="overwrite=True"):
        R.export_episodes("rl/sl-v0", folder)
    R.export_episodes("rl/sl-v0", folder, overwrite=True)
    with pytest.raises(InvalidOptionError, match="mix Parquet episode exports and datasets"):
        R.multi_agent_offline(BCConfig(), [str(folder), "rl/sl-v0"])

    manifest = folder / R.EPISODES_MANIFEST
    content = json.loads(manifest.read_text())
    manifest.write_text(json.dumps(content | {"format_version": 99}))
    with pytest.raises(CorruptedDataError, match="version 99.*export_episodes"):
        R.multi_agent_offline(BCConfig(), str(folder))
    manifest.write_text(json.dumps({k: v for k, v in content.items() if k != "specs"}))
    with pytest.raises(CorruptedDataError, match="'specs'.*export again"):
        R.multi_agent_offline(BCConfig(), str(folder))
    for mangled in ({"specs": ["rl/sl-v0"]}, {"specs": {"rl/sl-v0": 3}}, {"episodes": "all"}):
        manifest.write_text(json.dumps(content | mangled))
        with pytest.raises(CorruptedDataError, match=R.EPISODES_MANIFEST):
            R.load_episodes_export(folder)
    manifest.unlink()
    with pytest.raises(DatasetNotFoundError, match=R.EPISODES_MANIFEST):
        R.multi_agent_offline(BCConfig(), str(folder))
    # Without a manifest the folder is not an export to replace.
    with pytest.raises(DatasetExistsError):
        R.export_episodes("rl/sl-v0", folder, overwrite=True)
    rllib = R.export_rllib("rl/sl-v0", tmp_path / "rllib",
                           policy_mapping_fn={"speaker_0": "s", "listener_0": "l"})
    with pytest.raises(DatasetNotFoundError, match="export_episodes writes it"):
        R.multi_agent_offline(BCConfig(), str(rllib.path))
