"""Values recorded outside their spaces are warned of, as Minari's ``DataCollector`` warns of
them, once per agent and kind, and stored as given."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo import ParallelEnv

import marl_minari as mm


def _ours(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "lies outside its space" in str(w.message)]


def test_actions_outside_a_real_envs_space_are_warned_of_once_and_stored() -> None:
    """mpe2 with continuous actions clips an action above 1 and goes on: the recorder warns of
    the agent that sent it, once, and stores the action as sent."""
    env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", continuous_actions=True,
                                               max_cycles=4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for episode in range(2):
            env.reset(seed=episode)
            while env.agents:
                env.step({a: np.full(5, 1.5 if a == "agent_1" else 0.5, dtype=np.float32)
                          for a in env.agents})
    ours = _ours(caught)
    assert len(ours) == 1, ours
    assert "recorded episode 0" in ours[0] and "action of agent 'agent_1'" in ours[0]
    assert "Box(0.0, 1.0, (5,), float32) at 4 step(s) (first: step 0)" in ours[0]
    dataset = env.create_dataset("mpe2/spread/outside-v0")
    env.close()
    stored = dataset[1].actions["agent_1"]
    assert np.all(stored == np.float32(1.5))
    assert caught[0].filename == __file__  # pointed at the step that sent it


def test_an_aec_recorder_warns_of_them_too() -> None:
    """The turn-based view of the same env: the agent's turn whose action is out of bounds."""
    env = mm.AECDataCollector(mm.make_env("mpe2/simple_spread_v3", api="aec",
                                          continuous_actions=True, max_cycles=3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.reset(seed=0)
        for agent in env.agent_iter():
            _, _, termination, truncation, _ = env.last()
            done = termination or truncation
            env.step(None if done else np.full(5, 1.5 if agent == "agent_2" else 0.5,
                                               dtype=np.float32))
    ours = [w for w in caught if "lies outside its space" in str(w.message)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert "the action of agent 'agent_2'" in str(ours[0].message)
    assert "agent_0" not in str(ours[0].message)
    assert ours[0].filename == __file__
    env.close()


class _Drifting(ParallelEnv):
    """Two agents for ``length`` steps. Agent ``b`` observes 2.0 (above its ``Box(0, 1)``) at
    observation row 2, and leaves after ``b_leaves`` steps; actions are ``Discrete(3,
    start=1)``, whose fill value for an absent agent's rows (0) is outside the space."""

    metadata = {"name": "drifting_v0"}

    def __init__(self, length: int = 4, b_leaves: int = 99) -> None:
        self.possible_agents = ["a", "b"]
        self.length, self.b_leaves = length, b_leaves

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(0.0, 1.0, (3,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3, start=1)

    def _observe(self) -> dict[str, np.ndarray]:
        row = np.full(3, 2.0 if self.t == 2 else 0.5, dtype=np.float32)
        return {a: (row if a == "b" else np.full(3, 0.5, dtype=np.float32)) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict | None = None) -> Any:
        self.t = 0
        self.agents = list(self.possible_agents)
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, int]) -> Any:
        self.t += 1
        done = self.t >= self.length
        leaving = {a: done or (a == "b" and self.t >= self.b_leaves) for a in self.agents}
        observations = self._observe()
        rewards = {a: 0.0 for a in self.agents}
        truncations = {a: False for a in self.agents}
        infos: dict[str, dict] = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not leaving[a]]
        return observations, rewards, leaving, truncations, infos


def test_observations_and_actions_outside_their_spaces_name_agent_and_row() -> None:
    env = mm.ParallelDataCollector(_Drifting(), env_descriptor=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.reset(seed=0)
        env.step({"a": 1, "b": 1})
        env.step({"a": 7, "b": 1})  # 7: outside Discrete(3, start=1)
        while env.agents:
            env.step({a: 1 for a in env.agents})
    ours = _ours(caught)
    assert len(ours) == 1, ours
    assert "the action of agent 'a' lies outside its space Discrete(3, start=1) at 1 step(s) " \
           "(first: step 1)" in ours[0]
    assert "the observation of agent 'b' lies outside its space" in ours[0]
    assert "(first: observation row 2)" in ours[0]
    env.close()


def test_the_rows_of_an_absent_agent_are_not_looked_at() -> None:
    """Agent ``b`` leaves after one step: its later action rows hold the fill value 0, outside
    ``Discrete(3, start=1)``, and are no value it sent."""
    env = mm.ParallelDataCollector(_Drifting(length=4, b_leaves=1), env_descriptor=None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.reset(seed=0)
        while env.agents:
            env.step({a: 1 for a in env.agents})
    assert _ours(caught) == []
    env.close()


@pytest.mark.parametrize(("env_id", "jpeg"), [("mpe2/simple_spread_v3", True),
                                              ("butterfly/pistonball_v6", True),
                                              ("butterfly/pistonball_v6", False)])
def test_values_inside_their_spaces_are_not_warned_of(env_id: str, jpeg: bool) -> None:
    """Images too: rows on their way to JPEG encoding, and stacked ones."""
    kwargs = {"max_cycles": 3} if env_id.startswith("mpe2") else {"max_cycles": 2, "n_pistons": 3}
    env = mm.ParallelDataCollector(mm.make_env(env_id, **kwargs), jpeg_encoding=jpeg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.reset(seed=0)
        while env.agents:
            env.step({a: env.action_space(a).sample() for a in env.agents})
    assert _ours(caught) == []
    env.close()


def test_a_flashbax_recorder_warns_of_observations_outside_the_spaces_it_was_given(
        tmp_path: Any) -> None:
    """Mava-style experience (normal observations) recorded with ``Box(-1, 1)`` observation
    spaces: one warning naming both agents, pointing at the user's ``write``; stored as given. The
    same buffer with the spaces read from its shapes (unbounded) warns of nothing. (Actions
    outside their spaces are refused there: a buffer holds bare numbers.)"""
    from marl_minari.collectors import FlashbaxDataCollector
    from mava_style import Rollouts, buffer_states

    rollouts = Rollouts(envs=2, agents=2, obs_dim=3, updates=3, rollout=6, seed=5)
    states = list(buffer_states(rollouts, time_axis=20))
    bounded = spaces.Box(-1, 1, (3,), np.float32)
    for given, expected in ((bounded, 1), (None, 0)):
        collector = FlashbaxDataCollector(
            experience_structure=states[0].experience,
            recording_path=tmp_path / f"recording-{expected}",
            observation_spaces=None if given is None else {f"agent_{i}": given
                                                           for i in range(2)})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for state in states:
                collector.write(state)
        ours = [w for w in caught if "lies outside its space" in str(w.message)]
        assert len(ours) == expected, [str(w.message) for w in ours]
        for warning in ours:
            for agent in ("agent_0", "agent_1"):
                assert f"the observation of agent {agent!r}" in str(warning.message)
            assert "Box(-1.0, 1.0, (3,), float32)" in str(warning.message)
            assert warning.filename == __file__
        dataset = collector.create_dataset(f"jax/outside-{expected}-v0", description="t")
        collector.close()
        stored = np.concatenate([dataset[i].observations["agent_0"]
                                 for i in range(dataset.total_episodes)])
        assert np.abs(stored).max() > 1


def test_a_batch_of_episodes_is_warned_of_as_its_episodes_one_by_one() -> None:
    """``check_arrays`` (a Flashbax write's episodes at once) says what ``check`` says of each
    episode in turn: the same episodes, rows and counts, in the same order."""
    from marl_minari.collectors.space_checks import SpaceChecks

    env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", continuous_actions=True,
                                               max_cycles=4))
    outside = {(1, "agent_2", 0), (1, "agent_2", 2), (3, "agent_1", 2), (4, "agent_2", 3)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for episode in range(6):
            env.reset(seed=episode)
            step = 0
            while env.agents:
                env.step({a: np.full(5, 1.5 if (episode, a, step) in outside else 0.5,
                                     dtype=np.float32) for a in env.agents})
                step += 1
    dataset = env.create_dataset("mpe2/spread/batch-v0")
    env.close()
    arrays = dataset.to_arrays()

    def said(run: Any) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run()
        return _ours(caught)

    one_by_one = SpaceChecks(dataset.spec)
    expected = said(lambda: [one_by_one.check(arrays.episode(p), 7 + p) for p in range(6)])
    assert said(lambda: SpaceChecks(dataset.spec).check_arrays(arrays, 7)) == expected
    assert len(expected) == 2
    assert "recorded episode 8 " in expected[0] and "'agent_2'" in expected[0]
    assert "at 2 step(s) (first: step 0)" in expected[0]
    assert "recorded episode 10 " in expected[1] and "'agent_1'" in expected[1]
    assert "at 1 step(s) (first: step 2)" in expected[1]


@pytest.mark.parametrize("render_mode", [None, "rgb_array"])
def test_an_image_observation_that_never_changes_is_warned_of_once(render_mode: Any) -> None:
    """PettingZoo's pistonball_v6 draws its frames only when it renders: without a render
    mode every row of an episode is the reset frame, recorded without a word before."""
    kwargs = {} if render_mode is None else {"render_mode": render_mode}
    env = mm.ParallelDataCollector(mm.make_env("butterfly/pistonball_v6", n_pistons=5,
                                               max_cycles=12, **kwargs))
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for seed in range(2):
            env.reset(seed=seed)
            while env.agents:  # still pistons: the episodes run their 12 cycles
                env.step({a: np.zeros(1, dtype=np.float32) for a in env.agents})
    env.close()
    frozen = [w for w in said if "is the same frame at all" in str(w.message)]
    if render_mode is None:
        assert len(frozen) == 1 and frozen[0].filename == __file__
        assert "render_mode='rgb_array'" in str(frozen[0].message)
    else:
        assert frozen == []
