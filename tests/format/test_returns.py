"""Returns: one summation order (left to right from 0.0) on every reader path."""

from __future__ import annotations

import functools
import operator

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import marl_minari as mm
from marl_minari.describe import describe
from marl_minari.format.returns import episode_returns, sequential_sums


def _left_to_right(values: list[float]) -> float:
    return functools.reduce(operator.add, values, 0.0)


finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(finite, min_size=0, max_size=40), min_size=1, max_size=12))
def test_episode_returns_add_left_to_right_from_zero(episodes: list[list[float]]) -> None:
    rewards = np.array([r for episode in episodes for r in episode], dtype=np.float64)
    lengths = [len(episode) for episode in episodes]
    got = episode_returns(rewards, lengths)
    assert got.tolist() == [_left_to_right(episode) for episode in episodes]
    # Per-agent columns are summed the same way, independently.
    two = np.stack([rewards, -rewards], axis=1) if len(rewards) else np.zeros((0, 2))
    assert episode_returns(two, lengths).tolist() == [
        [_left_to_right(e), _left_to_right([-r for r in e])] for e in episodes]


def test_any_segment_layout_gives_the_same_bits_where_numpy_sum_does_not() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=(5000, 3)) * 0.1
    expected = [_left_to_right(values[:, i].tolist()) for i in range(3)]
    # The segment alone (a view), among many short ones, and beside overlapping segments of
    # its length (gathered rows) gives the same bits.
    long_only = sequential_sums(values, [0], [5000])
    many = sequential_sums(values, [0, *range(1, 4000)], [5000, *range(2, 4001)])
    overlapping = sequential_sums(values[:-1].tolist() + [values[-1].tolist()], [7, 0, 3],
                                  [4006, 5000, 4002])
    assert long_only[0].tolist() == many[0].tolist() == overlapping[1].tolist() == expected
    assert overlapping[0].tolist() == [_left_to_right(values[7:4006, i].tolist())
                                       for i in range(3)]
    assert values.sum(axis=0).tolist() != expected or values[:, 0].sum() != expected[0], (
        "numpy's pairwise sum must differ somewhere for this test to bite")
    assert sequential_sums(np.full((3, 1), -0.0), [0], [3]).tolist() == [[0.0]]
    assert sequential_sums(values, [3], [3]).tolist() == [[0.0, 0.0, 0.0]]


def test_every_reader_path_gives_the_same_returns() -> None:
    env = mm.make_env("mpe2/simple_spread_v3", max_cycles=60)
    collector = mm.ParallelDataCollector(env)
    logged: list[list[dict[str, float]]] = []
    for seed in range(4):
        collector.reset(seed=seed)
        rng = np.random.default_rng(seed)
        logged.append([])
        while collector.agents:
            _, rewards, *_ = collector.step(
                {a: int(rng.integers(5)) for a in collector.agents})
            logged[-1].append(dict(rewards))
    dataset = collector.create_dataset("tests/returns-v0", algorithm_name="random",
                                       author="tests", author_email="t@example.com",
                                       code_permalink="https://example.com", description="t")
    collector.close()
    agents = dataset.possible_agents
    expected = [[_left_to_right([float(s.get(a, 0.0)) for s in steps]) for a in agents]
                for steps in logged]
    arrays = dataset.to_arrays()
    assert arrays.returns().tolist() == expected
    for i, episode in enumerate(dataset):
        assert [episode.returns[a] for a in agents] == expected[i]
        assert [dataset.episode(i).returns[a] for a in agents] == expected[i]
        assert [arrays.episode(i).returns[a] for a in agents] == expected[i]
    assert describe(dataset).episode_returns.tolist() == expected
