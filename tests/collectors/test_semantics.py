"""Recording rules of ``docs/format.md`` that a careless policy or env can put to the test.

* an agent acts only at a row where it is live and observed (actions passed for dead agents
  are ignored);
* a reward or flag handed to an agent without an observation is kept, the agent is marked
  not ``active``;
* ``create_dataset`` never cuts an episode: the one in progress goes whole, from its reset,
  into the next dataset.
"""

from __future__ import annotations

import warnings
from typing import Any

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
