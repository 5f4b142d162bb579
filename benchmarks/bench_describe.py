"""Time ``marl_minari.describe.describe`` on 1M-step datasets.

Builds, in a temporary datasets root:

* a multi-agent dataset shaped like mpe2 ``simple_spread_v3`` (3 agents, ``Box(18)``
  observations, ``Discrete(5)`` actions, 25-step episodes: 40,000 episodes, 1M steps) with
  random data, an agent leaving in some episodes, written with ``marl_minari.write_dataset``;
* the same steps as 1,000 episodes of 1,000 steps;
* plain single-agent Minari datasets (``Box(4)`` observations, ``Discrete(2)`` actions,
  1,000 episodes of 1,000 steps, and 20,000 of 50) written with Minari's
  ``create_dataset_from_buffers``;

then times ``describe`` on each (best of ``--repeats``) and a plot of the first. On the plain
datasets it also times Minari reading the same episodes (``iterate_episodes``, summing rewards
and counting actions), the baseline of "describe against Minari's own reading".

    python benchmarks/bench_describe.py [--steps 1000000] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from collections.abc import Iterator

import numpy as np

from marl_minari.storage.episode import MultiAgentEpisode


def multi_agent_episodes(episodes: int, length: int, seed: int) -> Iterator[MultiAgentEpisode]:
    agents = ("agent_0", "agent_1", "agent_2")
    rng = np.random.default_rng(seed)
    for index in range(episodes):
        t = length
        active = np.ones((t + 1, 3), dtype=bool)
        if index % 4 == 0:  # agent_2 leaves half-way
            active[t // 2 + 2:, 2] = False
        acted = active[:-1].copy()
        acted[t // 2 + 1:, 2] = acted[t // 2 + 1:, 2] & (index % 4 != 0)
        rewards = rng.normal(-1.0, 0.5, (t, 3)) * acted
        terminations = np.zeros((t, 3), dtype=bool)
        truncations = np.zeros((t, 3), dtype=bool)
        if index % 4 == 0:
            terminations[t // 2, 2] = True
        truncations[-1] = acted[-1]
        observations = {a: (rng.normal(size=(t + 1, 18)) * active[:, [i]]).astype(np.float32)
                        for i, a in enumerate(agents)}
        actions = {a: rng.integers(0, 5, t) * acted[:, i] for i, a in enumerate(agents)}
        episode_truncations = np.zeros(t, dtype=bool)
        episode_truncations[-1] = True
        yield MultiAgentEpisode(
            possible_agents=agents, observations=observations, actions=actions,
            rewards=rewards, terminations=terminations, truncations=truncations, active=active,
            acted=acted, team_rewards=rewards.sum(axis=1),
            episode_terminations=np.zeros(t, dtype=bool), episode_truncations=episode_truncations,
            seed=index)


def write_multi_agent(dataset_id: str, episodes: int, length: int) -> None:
    from gymnasium import spaces

    from marl_minari import MultiAgentSpec, write_dataset

    agents = ("agent_0", "agent_1", "agent_2")
    spec = MultiAgentSpec(
        api="parallel", possible_agents=agents,
        observation_spaces={a: spaces.Box(-np.inf, np.inf, (18,), np.float32) for a in agents},
        action_spaces={a: spaces.Discrete(5) for a in agents})
    write_dataset(dataset_id, multi_agent_episodes(episodes, length, 0), spec,
                  algorithm_name="random", author="bench", author_email="bench@example.com",
                  code_permalink="https://example.com/bench")


def write_single_agent(dataset_id: str, episodes: int, length: int) -> None:
    import gymnasium as gym
    import minari
    from minari.data_collector import EpisodeBuffer

    rng = np.random.default_rng(1)
    buffers = []
    for index in range(episodes):
        terminations = np.zeros(length, dtype=bool)
        terminations[-1] = True
        buffers.append(EpisodeBuffer(
            id=index, observations=rng.normal(size=(length + 1, 4)).astype(np.float32),
            actions=rng.integers(0, 2, length), rewards=np.ones(length),
            terminations=terminations, truncations=np.zeros(length, dtype=bool), infos={}))
    minari.create_dataset_from_buffers(
        dataset_id, buffers, env="CartPole-v1", algorithm_name="random",
        observation_space=gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
        action_space=gym.spaces.Discrete(2))


def minari_pass(dataset_id: str) -> float:
    """Seconds for Minari to read every episode and take what describe needs from it."""
    import minari

    start = time.perf_counter()
    dataset = minari.load_dataset(dataset_id)
    counts = np.zeros(2, dtype=np.int64)
    total = 0.0
    for episode in dataset.iterate_episodes():
        total += float(episode.rewards.sum())
        counts += np.bincount(episode.actions, minlength=2)
    assert counts.sum() == dataset.total_steps
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    os.environ["MINARI_DATASETS_PATH"] = tempfile.mkdtemp(prefix="bench-describe-")
    warnings.simplefilter("ignore")

    from marl_minari.describe import describe, plot_descriptions

    cases = [("bench/short-v0", 25, "multi"), ("bench/long-v0", 1000, "multi"),
             ("bench/plain-v0", 1000, "single"), ("bench/plain-short-v0", 50, "single")]
    for dataset_id, length, kind in cases:
        episodes = args.steps // length
        start = time.perf_counter()
        if kind == "multi":
            write_multi_agent(dataset_id, episodes, length)
        else:
            write_single_agent(dataset_id, episodes, length)
        built = time.perf_counter() - start
        best = np.inf
        for _ in range(args.repeats):
            start = time.perf_counter()
            description = describe(dataset_id)
            best = min(best, time.perf_counter() - start)
        assert description.total_steps == episodes * length
        print(f"{dataset_id:<16} {kind:<6} {episodes:>6} episodes x {length:>4} steps: "
              f"built in {built:5.1f} s, describe {best:6.2f} s "
              f"({description.total_steps / best / 1e6:.2f} M steps/s)")
        if kind == "single":
            baseline = min(minari_pass(dataset_id) for _ in range(args.repeats))
            print(f"{'':<16} minari iterate_episodes {baseline:6.2f} s: describe is "
                  f"{baseline / best:.1f}x faster")
        if dataset_id == "bench/short-v0":
            start = time.perf_counter()
            plot_descriptions([description], os.path.join(
                os.environ["MINARI_DATASETS_PATH"], "plot.png"))
            print(f"{'':<16} plot {time.perf_counter() - start:.2f} s")


if __name__ == "__main__":
    main()
