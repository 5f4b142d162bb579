"""Minari's episode-selection API on MultiAgentDataset."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import marl_minari as mm


def test_sample_filter_split_len_and_repr(record_parallel: Any, datasets_root: Any) -> None:
    dataset, records = record_parallel("mpe2/simple_spread_v3", 6, dataset_id="tests/sel-v0",
                                       max_cycles=3)
    assert len(dataset) == 6
    np.testing.assert_array_equal(dataset.episode_indices, np.arange(6))
    assert repr(dataset) == ("MultiAgentDataset('tests/sel-v0', 6 episodes, 18 steps, "
                             "parallel, agents=['agent_0', 'agent_1', 'agent_2'])")

    dataset.set_seed(3)
    sampled = dataset.sample_episodes(4)
    assert len({e.id for e in sampled}) == 4
    for episode in sampled:  # each is the stored episode, seed included
        assert episode.seed == records[episode.id]["seed"]
        np.testing.assert_array_equal(episode.rewards, dataset.episode(episode.id).rewards)
    dataset.set_seed(3)
    assert [e.id for e in dataset.sample_episodes(4)] == [e.id for e in sampled]
    with pytest.raises(mm.MarlMinariError, match="cannot sample 7 episodes"):
        dataset.sample_episodes(7)

    odd = dataset.filter_episodes(lambda episode: episode.id % 2 == 1)
    assert isinstance(odd, mm.MultiAgentDataset)
    np.testing.assert_array_equal(odd.episode_indices, [1, 3, 5])
    assert len(odd) == 3 and odd.episode(1).id == 3 and odd.episode(1).seed == 3
    assert odd.total_steps == 9

    first, second = mm.split_dataset(dataset, [4, 2], seed=1)
    assert (len(first), len(second)) == (4, 2)
    ids = [*first.episode_indices.tolist(), *second.episode_indices.tolist()]
    assert sorted(ids) == list(range(6))
    again = mm.split_dataset(dataset, [4, 2], seed=1)
    np.testing.assert_array_equal(again[0].episode_indices, first.episode_indices)
    halves = mm.split_dataset(odd, [2], seed=0)[0]
    assert set(halves.episode_indices.tolist()) <= {1, 3, 5}
    with pytest.raises(mm.MarlMinariError, match="sum to at most"):
        mm.split_dataset(dataset, [5, 2])
