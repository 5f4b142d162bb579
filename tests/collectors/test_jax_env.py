"""A jitted, vmapped JAX multi-agent env in Mava's loop, recorded through the collector and
loaded with plain Minari (``examples/jax_env_to_minari.py``)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import minari
import numpy as np

import marl_minari

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jax_env_to_minari.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("jax_env_to_minari", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_jax_env_rollout_loads_with_plain_minari(tmp_path: Path) -> None:
    example = _example()
    collector = example.record("jax/gridgather-v0", num_envs=4, num_agents=3, updates=6,
                               rollout=16, recording_path=str(tmp_path / "recording"))
    collector.close()
    plain = minari.load_dataset("jax/gridgather-v0")
    assert plain.total_steps == 4 * 6 * 16  # every timestep of every env, once
    assert plain.total_episodes >= 4 * 6 * 16 // 12  # episodes last at most 12 steps
    dataset = marl_minari.load_dataset("jax/gridgather-v0")
    assert dataset.possible_agents == ("walker_0", "walker_1", "walker_2")
    size = example.GridGather().size
    for index in range(dataset.total_episodes):
        episode = dataset[index]
        assert episode.total_steps <= 12
        finished = bool(episode.episode_terminations[-1])
        assert finished != bool(episode.episode_truncations[-1])
        for agent in dataset.possible_agents:
            observations = episode.observations[agent][:-1]
            masks = episode.agent_infos[agent]["action_mask"][:-1]
            actions = episode.actions[agent]
            # every logged action is legal, and the goal never moves within an episode
            assert masks[np.arange(len(actions)), actions].all()
            assert (observations[:, 2:4] == observations[0, 2:4]).all()
            assert ((observations[:, :2] * size).round() >= 0).all()
        if finished and episode.total_steps < 12:
            # ended by reaching the goal: the last step's reward is 0 distance
            assert episode.team_rewards[-1] == 0.0
