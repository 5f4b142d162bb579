"""``JointEnv``: the Gymnasium view that ``minari ... recover_environment()`` returns."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import minari
import numpy as np
import pytest
from gymnasium import spaces
from marl_strategies import RandomSpacesEnv

import marl_minari as mm
from marl_minari.envs.joint import JointEnv


def test_dead_agents_get_fill_values_and_actions_for_them_are_ignored() -> None:
    env = mm.make_env("butterfly/knights_archers_zombies_v11", max_cycles=150, spawn_delay=1,
                      line_death=True)
    joint = JointEnv(env)
    assert list(joint.observation_space.spaces) == sorted(env.possible_agents)
    observation, info = joint.reset(seed=0)
    # Seeded actions: with unseeded ones, some runs ended without any agent dying.
    joint.action_space.seed(0)
    assert set(observation) == set(env.possible_agents) and "agents" in info
    saw_dead, done = False, False
    while not done:
        observation, reward, terminated, truncated, info = joint.step(
            joint.action_space.sample())  # actions for dead agents too
        assert joint.observation_space.contains(observation)
        for agent in env.possible_agents:
            if agent not in env.agents and agent not in info["terminations"]:
                saw_dead = True
                assert not observation[agent].any()
        done = terminated or truncated
    assert saw_dead
    joint.close()


@pytest.mark.parametrize("aggregation", ["sum", "mean", "max", "min"])
def test_reward_is_the_dataset_aggregate(aggregation: str) -> None:
    agents = ["a", "b", "c"]
    env = RandomSpacesEnv(agents, {a: spaces.Discrete(2) for a in agents},
                          {a: spaces.Discrete(2) for a in agents}, max_steps=3)
    joint = JointEnv(env, reward_aggregation=aggregation)
    joint.reset(seed=1)
    reduce = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[aggregation]
    for _ in range(3):
        _, reward, terminated, truncated, info = joint.step({a: 0 for a in agents})
        assert reward == pytest.approx(reduce(list(info["rewards"].values())))
    assert truncated and not terminated


def test_agent_order_is_taken_from_the_dataset() -> None:
    env = mm.make_env("mpe2/simple_speaker_listener_v4")
    joint = JointEnv(env, possible_agents=["speaker_0", "listener_0"])
    assert joint.agents_order == ["speaker_0", "listener_0"]
    assert joint.observation_space["speaker_0"].shape == (3,)


def test_recovered_from_a_dataset_through_minari(record_parallel: Any) -> None:
    record_parallel("mpe2/simple_speaker_listener_v4", episodes=1, max_cycles=4)
    plain = minari.load_dataset("tests/recorded-v0")
    env = plain.recover_environment()
    assert isinstance(env.unwrapped, JointEnv)
    assert env.observation_space == plain.observation_space
    assert env.action_space == plain.action_space
    assert isinstance(env, gym.Env)
    env.reset(seed=0)
    steps = 0
    while True:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            break
    assert steps == 4
    with pytest.raises(mm.EnvDescriptorError, match="needs a PettingZoo env or an env descriptor"):
        JointEnv()


def test_minari_recovers_a_turn_based_joint_view_that_replays_the_data() -> None:
    """AEC-only games: Minari's own recover_environment() gives a working turn-based view."""
    from marl_minari.collectors.collect import collect

    dataset = collect("classic/tictactoe_v3", 2, dataset_id="classic/ttt/joint-v0")
    env = minari.load_dataset("classic/ttt/joint-v0").recover_environment()
    assert env.observation_space == dataset.spec.observation_space
    episode = dataset.episode(1)
    observation, info = env.reset(seed=episode.seed)
    assert info["agent_selection"] == "player_1"
    for t in range(episode.total_steps):
        for agent in dataset.possible_agents:
            np.testing.assert_array_equal(observation[agent]["observation"],
                                          episode.observations[agent]["observation"][t])
        observation, reward, terminated, truncated, info = env.step(
            {a: int(episode.actions[a][t]) for a in dataset.possible_agents})
        assert reward == episode.team_rewards[t]
    assert terminated and not truncated
    assert info["agent_selection"] is None


def _record(env: Any, dataset_id: str) -> None:
    collector = mm.ParallelDataCollector(env)
    collector.reset(seed=0)
    while collector.agents:
        collector.step({a: collector.action_space(a).sample() for a in collector.agents})
    collector.create_dataset(dataset_id, algorithm_name="random", author="tests",
                             author_email="tests@example.com", description="two steps",
                             code_permalink="https://example.com")
    collector.close()


def test_an_env_recreated_with_other_agents_than_the_data_is_refused() -> None:
    """Recorded from ``parallel_env(N=2)``: the inferred descriptor re-creates N=3, whose
    joint view stepped with its own action sample raised ``KeyError: 'agent_2'``."""
    from mpe2 import simple_spread_v3

    with pytest.warns(UserWarning, match="not made by marl_minari.make_env"):
        _record(simple_spread_v3.parallel_env(N=2, max_cycles=2), "tests/two-of-three-v0")
    with pytest.raises(mm.EnvDescriptorError,
                       match=r"has agents \['agent_0', 'agent_1', 'agent_2'\], the dataset "
                             r"\['agent_0', 'agent_1'\]: the dataset's descriptor was inferred"):
        minari.load_dataset("tests/two-of-three-v0").recover_environment()
    dataset = mm.load_dataset("tests/two-of-three-v0")
    with pytest.raises(mm.EnvDescriptorError, match="recover_environment\\(\\*\\*arguments\\)"):
        dataset.recover_environment()
    assert dataset.recover_environment(N=2).possible_agents == ["agent_0", "agent_1"]
    with pytest.raises(mm.EnvDescriptorError, match=r"has agents \['b', 'a'\], the dataset"):
        JointEnv(RandomSpacesEnv(["b", "a"], {a: spaces.Discrete(2) for a in "ba"},
                                 {a: spaces.Discrete(2) for a in "ba"}), possible_agents=["a"])


def test_an_env_recreated_with_other_spaces_than_the_data_is_refused() -> None:
    _record(mm.make_env("mpe2/simple_spread_v3", max_cycles=2, continuous_actions=True),
            "tests/continuous-v0")
    dataset = mm.load_dataset("tests/continuous-v0")
    assert dataset.recover_environment().possible_agents == list(dataset.possible_agents)
    with pytest.raises(mm.EnvDescriptorError,
                       match=r"gives agent 'agent_0' the action space Discrete\(5\), the dataset "
                             r"Box\(0\.0, 1\.0, \(5,\), float32\): make it with the arguments"):
        dataset.recover_environment(continuous_actions=False)
