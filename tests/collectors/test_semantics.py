"""Recording rules of ``docs/format.md`` that a careless policy or env can put to the test.

* an agent acts only at a row where it is live and observed (actions passed for dead agents
  are ignored);
* a reward or flag handed to an agent without an observation is kept, the agent is marked
  not ``active``;
* ``create_dataset`` never cuts an episode: the one in progress goes whole, from its reset,
  into the next dataset;
* the team reward adds agents in ``possible_agents`` order; the global state is stored
  exactly when recorded; JPEG leaves are one Pillow image per row, fill rows black;
* what is recorded is what was handed out at that step, even if the env (or the policy)
  later writes into the same buffers.
"""

from __future__ import annotations

import io
import warnings
from typing import Any

import h5py
import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

import marl_minari as mm

PROVENANCE = {"algorithm_name": "random", "author": "tests", "author_email": "t@example.com",
              "code_permalink": "https://example.com", "description": "test"}


def _every_agent_policy(env: Any, rng: np.random.Generator) -> dict[str, Any]:
    """An action for every *possible* agent, dead ones included (as many training loops do)."""
    actions = {}
    for agent in env.possible_agents:
        space = env.action_space(agent)
        space.seed(int(rng.integers(2**31)))
        actions[agent] = space.sample()
    return actions


def test_kaz_dead_agents_never_act_when_the_policy_acts_for_every_agent() -> None:
    env = mm.make_env("butterfly/knights_archers_zombies_v11", max_cycles=150, spawn_delay=1,
                      line_death=True)
    collector = mm.ParallelDataCollector(env)
    live_before: list[list[set[str]]] = []
    taken: list[list[dict[str, Any]]] = []
    for seed in range(3):
        collector.reset(seed=seed)
        rng = np.random.default_rng(seed)
        live_before.append([])
        taken.append([])
        while collector.agents:
            live_before[-1].append(set(collector.agents))
            actions = _every_agent_policy(collector, rng)
            taken[-1].append(actions)
            collector.step(actions)
    dataset = collector.create_dataset("butterfly/kaz-every-v0", **PROVENANCE)
    collector.close()

    dead_rows = 0
    for e, episode in enumerate(dataset):
        assert episode.total_steps == len(live_before[e])
        for a, agent in enumerate(dataset.possible_agents):
            for t, live in enumerate(live_before[e]):
                if agent in live:
                    assert episode.acted[t, a], (e, t, agent)
                    assert episode.actions[agent][t] == taken[e][t][agent]
                else:
                    dead_rows += 1
                    assert not episode.acted[t, a], (e, t, agent)
                    assert episode.actions[agent][t] == 0  # the fill value
        # An agent acts only from a row where it is active.
        assert not (episode.acted & ~episode.active[:-1]).any()
    assert dead_rows > 0, "some agent must die before the end for this test to bite"


class _RewardWithoutObservation(ParallelEnv):
    """Two agents; at step 1 agent ``b`` leaves: it is in the reward and termination dicts but
    not in the observation dict (a PettingZoo env may do this on the step it removes an agent)."""

    metadata = {"name": "reward_without_observation_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-10.0, 10.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3)

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self._t, agent == "b"], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = list(self.possible_agents)
        self._t = 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self._t += 1
        rewards = {a: 1.0 for a in self.agents}
        terms = {a: False for a in self.agents}
        truncs = {a: False for a in self.agents}
        if self._t == 1:
            rewards["b"], terms["b"] = 5.0, True
            self.agents = ["a"]
        observations = {a: self._obs(a) for a in self.agents}
        if self._t == 3:  # a leaves as PettingZoo envs usually do: with its last observation
            terms["a"] = True
            self.agents = []
        return observations, rewards, terms, truncs, {a: {} for a in observations}


class _ReusedBuffers(ParallelEnv):
    """Hands out the same observation, info mask and state arrays every step, rewritten in
    place (as envs that keep preallocated buffers do)."""

    metadata = {"name": "reused_buffers_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []
        self._t = 0
        self._obs = {a: np.zeros(2, np.float32) for a in self.possible_agents}
        self._mask = {a: np.ones(3, np.int8) for a in self.possible_agents}
        self._state = np.zeros(4, np.float32)
        self.state_space = spaces.Box(-100.0, 100.0, (4,), np.float32)

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-100.0, 100.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-100.0, 100.0, (2,), np.float32)

    def state(self) -> np.ndarray:
        return self._state

    def _fill(self) -> tuple[dict, dict]:
        for agent in self.possible_agents:
            self._obs[agent][:] = self._t
            self._mask[agent][:] = 0
            self._mask[agent][self._t % 3] = 1
        self._state[:] = -self._t
        return (dict(self._obs), {a: {"action_mask": self._mask[a]} for a in self.agents})

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents, self._t = list(self.possible_agents), 0
        return self._fill()

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self._t += 1
        observations, infos = self._fill()
        done = self._t == 4
        flags = {a: done for a in self.agents}
        if done:
            self.agents = []
        return observations, {a: 1.0 for a in flags}, flags, dict.fromkeys(flags, False), infos


def test_buffers_rewritten_in_place_after_a_step_keep_what_was_recorded() -> None:
    from marl_minari.format.env_descriptor import EnvDescriptor

    collector = mm.ParallelDataCollector(_ReusedBuffers(), env_descriptor=EnvDescriptor(
        api="parallel", entry_point="tests:reused_buffers"))
    action = np.zeros(2, np.float32)  # the policy reuses its action buffer too
    collector.reset(seed=0)
    step = 0
    while collector.agents:
        action[:] = step
        collector.step({a: action for a in collector.agents})
        step += 1
    dataset = collector.create_dataset("tests/reused-v0", **PROVENANCE)
    collector.close()
    episode = next(dataset.iterate_episodes())
    rows = np.arange(5, dtype=np.float32)
    for agent in ("a", "b"):
        np.testing.assert_array_equal(episode.observations[agent][:, 0], rows)
        np.testing.assert_array_equal(episode.actions[agent][:, 0], rows[:4])
        np.testing.assert_array_equal(
            episode.agent_infos[agent]["action_mask"].argmax(axis=1), rows % 3)
    np.testing.assert_array_equal(episode.state[:, 0], -rows)


def test_reward_without_observation_is_kept_and_the_agent_marked_absent() -> None:
    collector = mm.ParallelDataCollector(_RewardWithoutObservation(),
                                         env_descriptor=mm.EnvDescriptor("parallel", None))
    collector.reset(seed=0)
    while collector.agents:
        collector.step({"a": 1, "b": 2})  # an action for b also after it left
    dataset = collector.create_dataset("toy/presence-v0", **PROVENANCE)
    collector.close()
    episode = dataset.episode(0)
    a, b = 0, 1
    # Row 1 holds what step 0 handed out: b's reward and flag, but no observation.
    assert episode.rewards[:, b].tolist() == [5.0, 0.0, 0.0]
    assert episode.terminations[:, b].tolist() == [True, False, False]
    assert episode.active[:, b].tolist() == [True, False, False, False]
    assert not episode.observations["b"][1:].any()  # fill values where b is absent
    assert episode.acted[:, b].tolist() == [True, False, False]
    assert episode.actions["b"].tolist() == [2, 0, 0]
    assert episode.acted[:, a].all() and episode.active[:, a].all()
    # The team reward and the returns count b's reward (nothing is dropped).
    assert episode.team_rewards.tolist() == [6.0, 1.0, 1.0]
    assert episode.returns == {"a": 3.0, "b": 5.0}
    assert dataset.to_arrays().returns().tolist() == [[3.0, 5.0]]


def _spread() -> Any:
    return mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=5))


def _play(collector: Any, steps: int) -> list[dict[str, Any]]:
    """Step ``steps`` times (or to the end) with fixed actions; the observations handed out."""
    rows = []
    for _ in range(steps):
        if not collector.agents:
            break
        observations, *_ = collector.step({a: 1 for a in collector.agents})
        rows.append(observations)
    return rows


def test_create_dataset_mid_episode_keeps_the_episode_whole_for_the_next_dataset() -> None:
    collector = _spread()
    first_obs, _ = collector.reset(seed=7)
    rows = _play(collector, 3)
    with pytest.warns(UserWarning, match=r"episode in progress \(3 steps so far\) is not "
                                         r"written to 'tests/first-v0'"):
        first = collector.create_dataset("tests/first-v0", **PROVENANCE)
    rows += _play(collector, 10)
    collector.reset(seed=8)
    _play(collector, 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing in progress: no warning
        second = collector.create_dataset("tests/second-v0", **PROVENANCE)
    collector.close()

    assert first.total_episodes == 0
    assert second.total_episodes == 2
    whole = second.episode(0)
    assert whole.seed == 7 and whole.total_steps == 5 == len(rows)
    assert whole.episode_truncations[-1] and not whole.episode_truncations[:-1].any()
    for agent in second.possible_agents:
        np.testing.assert_array_equal(whole.observations[agent][0], first_obs[agent])
        np.testing.assert_array_equal(whole.observations[agent][1:],
                                      np.stack([r[agent] for r in rows]))
    assert second.episode(1).seed == 8


def test_add_to_dataset_mid_episode_never_writes_part_of_an_episode_twice() -> None:
    collector = _spread()
    collector.reset(seed=1)
    _play(collector, 10)
    collector.reset(seed=2)
    _play(collector, 2)
    collector.create_dataset("tests/grow-v0", **PROVENANCE)
    _play(collector, 1)
    grown = collector.add_to_dataset("tests/grow-v0")
    _play(collector, 10)
    grown = collector.add_to_dataset("tests/grow-v0")
    collector.close()
    assert grown.episode_seeds() == [1, 2]
    assert [e.total_steps for e in grown] == [5, 5]
    assert grown.total_steps == 10


def test_reset_mid_episode_still_saves_the_cut_episode() -> None:
    collector = _spread()
    collector.reset(seed=3)
    _play(collector, 2)
    collector.reset(seed=4)  # cuts the episode: saved as truncated
    dataset = collector.create_dataset("tests/cut-v0", **PROVENANCE)
    collector.close()
    assert dataset.episode_seeds() == [3]
    cut = dataset.episode(0)
    assert cut.total_steps == 2 and cut.episode_truncations.tolist() == [False, True]


def test_team_reward_adds_agents_in_order_from_zero() -> None:
    env = mm.make_env("mpe2/simple_spread_v3", N=10, max_cycles=8, local_ratio=0.3)
    collector = mm.ParallelDataCollector(env)
    collector.reset(seed=5)
    rng = np.random.default_rng(5)
    expected = []
    while collector.agents:
        _, rewards, *_ = collector.step({a: int(rng.integers(5)) for a in collector.agents})
        total = 0.0
        for agent in collector.possible_agents:  # the spec's order
            if agent in rewards:
                total += float(rewards[agent])
        expected.append(total)
    dataset = collector.create_dataset("tests/team-v0", **PROVENANCE)
    collector.close()
    assert dataset.episode(0).team_rewards.tolist() == expected


@pytest.mark.parametrize("record_state", [True, False])
def test_global_state_is_stored_exactly_when_recorded(record_state: bool) -> None:
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3),
                                         record_state=record_state)
    states = []
    for seed in range(2):
        collector.reset(seed=seed)
        states.append([collector.state()])
        while collector.agents:
            collector.step({a: 0 for a in collector.agents})
            states[-1].append(collector.state())
    dataset = collector.create_dataset("tests/state-v0", **PROVENANCE)
    collector.close()
    assert (dataset.metadata["marl_minari"]["state_space"] is not None) is record_state
    with h5py.File(dataset.data_path / "main_data.hdf5", "r") as file:
        for i in range(2):
            assert ("infos/marl/state" in file[f"episode_{i}"]) is record_state
    for i, episode in enumerate(dataset):
        if record_state:
            np.testing.assert_array_equal(episode.state, np.stack(states[i]))
        else:
            assert episode.state is None


class _Cameras(ParallelEnv):
    """Two agents seeing 32x32 RGB frames: ``a`` noise, ``b`` black; ``b`` leaves at step 1."""

    metadata = {"name": "cameras_v0"}

    def __init__(self) -> None:
        self.possible_agents = ["a", "b"]
        self.agents: list[str] = []
        self._rng = np.random.default_rng(0)
        self.handed: list[dict[str, np.ndarray]] = []

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0, 255, (32, 32, 3), np.uint8)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def _observe(self) -> dict[str, np.ndarray]:
        frames = {a: (self._rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) if a == "a"
                      else np.zeros((32, 32, 3), np.uint8)) for a in self.agents}
        self.handed.append({a: f.copy() for a, f in frames.items()})
        return frames

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = ["a", "b"]
        self._t = 0
        return self._observe(), {}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self._t += 1
        done = self._t == 3
        terms = {a: done or (a == "b" and self._t == 1) for a in self.agents}
        observations = self._observe()
        self.agents = [a for a in self.agents if not terms[a]]
        return observations, {a: 0.0 for a in terms}, terms, {a: False for a in terms}, {}


def test_jpeg_leaves_are_one_pillow_image_per_row_fill_rows_black() -> None:
    from PIL import Image

    env = _Cameras()
    collector = mm.ParallelDataCollector(env, env_descriptor=mm.EnvDescriptor("parallel", None))
    collector.reset(seed=0)
    while collector.agents:
        collector.step({a: 0 for a in collector.agents})
    dataset = collector.create_dataset("toy/cameras-v0", **PROVENANCE)
    collector.close()

    def encoded(frame: np.ndarray) -> bytes:
        buffer = io.BytesIO()
        Image.fromarray(frame).save(buffer, format="JPEG")  # Pillow's defaults
        return buffer.getvalue()

    black = np.zeros((32, 32, 3), np.uint8)
    with h5py.File(dataset.data_path / "main_data.hdf5", "r") as file:
        noise = file["episode_0/observations/a"]
        dark = file["episode_0/observations/b"]
        # Rows of different lengths: variable-length uint8, one entry per row.
        assert noise.shape == (4,) and h5py.check_vlen_dtype(noise.dtype) == np.uint8
        assert [bytes(row) for row in noise[()]] == [encoded(r["a"]) for r in env.handed]
        # Rows of one length: a (rows, L) uint8 dataset; b's absent rows are black frames.
        assert dark.dtype == np.uint8 and dark.shape == (4, len(encoded(black)))
        assert [bytes(row) for row in dark[()]] == [encoded(black)] * 4
        assert "infos/marl/state" not in file["episode_0"]
    assert dataset.episode(0).active[:, 1].tolist() == [True, True, False, False]
