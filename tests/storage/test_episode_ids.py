"""Episode ids and positions are integers: anything else is refused by name, never cast to
another episode (``iterate_episodes([1.5])`` read episode 1, a boolean mask episodes 0 and 1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import marl_minari as mm
from marl_minari.errors import EpisodeIndexError, InvalidOptionError

DATASET = "ids/spread-v0"


@pytest.fixture
def dataset(record_parallel: Callable[..., Any]) -> Any:
    recorded, _ = record_parallel("mpe2/simple_spread_v3", 5, max_cycles=3, dataset_id=DATASET)
    return recorded


@pytest.mark.parametrize(("call", "message"), [
    (lambda d: list(d.iterate_episodes([1.5])), r"integers, got float64 values \[1.5\]"),
    (lambda d: d.to_arrays([2.9]), r"integers, got float64 values \[2.9\]"),
    (lambda d: d.to_arrays([True, False, True, False, False]), r"np.flatnonzero\(mask\)"),
    (lambda d: d.episode_attributes([1.5]), "integers"),
    (lambda d: list(d.iterate_episodes(["a"])), "integers, got <U1"),
    (lambda d: d[1.0], r"dataset\[1.0\]: an episode is chosen by one integer position"),
    (lambda d: d["0"], r"dataset\['0'\]"),
    (lambda d: d[1:3], r"dataset\[slice\(1, 3, None\)\].*iterate_episodes\(ids\)"),
    (lambda d: d[True], r"dataset\[True\]"),
    (lambda d: d.sample_episodes(1.5), "sample_episodes' n_episodes must be a non-negative"),
    (lambda d: mm.split_dataset(d, [2.5]), "each split size must be a non-negative integer"),
    (lambda d: mm.open_source(DATASET).episode_attributes([0.5]), "integers"),
], ids=["iterate-float", "arrays-float", "arrays-mask", "attributes-float", "iterate-str",
        "item-float", "item-str", "item-slice", "item-bool", "sample-float", "split-float",
        "source-attributes-float"])
def test_what_is_not_an_integer_is_refused_by_name(dataset: Any, call: Any, message: str
                                                   ) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        call(dataset)


@pytest.mark.parametrize("ids", [[5], [-1]])
def test_a_source_names_ids_outside_the_stored_episodes(dataset: Any, ids: list[int]) -> None:
    """They were a CorruptedDataError ("episode_5 is missing; restore the dataset")."""
    source = mm.open_source(DATASET)
    with pytest.raises(EpisodeIndexError, match=rf"must lie in 0..4, got \[{ids[0]}\]"):
        source.episode_attributes(ids)
    with pytest.raises(EpisodeIndexError, match="must lie in 0..4"):
        dataset.episode_attributes(ids)


def test_numpy_integers_are_ids_and_positions(dataset: Any) -> None:
    assert dataset[np.int64(1)].id == 1
    assert dataset[-1].id == 4
    arrays = dataset.to_arrays(np.array([0, 2], dtype=np.uint8))
    assert arrays.episode_ids.tolist() == [0, 2]
    assert [e.id for e in dataset.iterate_episodes(np.array([3, 1]))] == [3, 1]
    assert len(dataset.sample_episodes(np.int32(2))) == 2
