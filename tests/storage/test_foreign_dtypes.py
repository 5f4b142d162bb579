"""A dataset another writer stored in other dtypes than its spaces' is read by the writers'
casting rule: values that survive the cast (or only round to a float dtype) are read as the
space's dtype; any other is refused by name, never changed (HDF5's own conversion would
truncate 2.5 to 2 and overflow 1e300 to infinity without a word)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import minari
import numpy as np
import pytest

import marl_minari as mm
from marl_minari.errors import LayoutError
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir

DATASET = "foreign/dtypes-v0"


@pytest.fixture
def rewrite_leaf(record_parallel: Callable[..., Any]) -> Callable[[str, Any], Path]:
    """``rewrite_leaf(path, change)``: the recorded dataset's leaf ``episode_1/<path>`` stored
    again, as another writer would, as ``change(values as stored)`` (no offset index, so
    every reader reads the file through HDF5); returns the data file."""
    record_parallel("mpe2/simple_spread_v3", 3, max_cycles=5, dataset_id=DATASET)
    data = dataset_dir(DATASET) / "data"
    main = data / layout.MAIN_FILE_NAME
    for extra in data.iterdir():
        if extra.name not in (layout.MAIN_FILE_NAME, "metadata.json"):
            extra.unlink()

    def store(path: str, change: Any) -> Path:
        with h5py.File(main, "a") as file:
            name = f"episode_1/{path}"
            values = change(file[name][()])
            del file[name]
            file[name] = values
        return main

    return store


def _read_both_ways(episode: int = 1) -> tuple[Any, Any]:
    dataset = mm.load_dataset(DATASET)
    return dataset[episode], dataset.to_arrays([0, 1, 2]).episode(episode)


def test_values_that_survive_the_cast_are_read_as_the_spaces_dtype(
        rewrite_leaf: Callable[[str, Any], Path]) -> None:
    main = rewrite_leaf("actions/agent_0", lambda a: a.astype(np.int8))
    rewrite_leaf("observations/agent_1", lambda o: o.astype(np.float64) + 1e-12)  # rounds
    with h5py.File(main, "r") as file:
        actions = file["episode_1/actions/agent_0"][()]
        observations = file["episode_1/observations/agent_1"][()]
    for read in _read_both_ways():
        assert read.actions["agent_0"].dtype == np.int64
        np.testing.assert_array_equal(read.actions["agent_0"], actions)
        assert read.observations["agent_1"].dtype == np.float32
        np.testing.assert_array_equal(read.observations["agent_1"],
                                      observations.astype(np.float32))


@pytest.mark.parametrize(("path", "value", "stored", "read_as"), [
    ("actions/agent_0", 2.5, "float64 value 2.5", "int64 (it would be read as 2)"),
    ("actions/agent_2", np.nan, "float64 value nan", "int64 (it would be read as"),
    ("actions/agent_1", np.uint64(2**63 + 1), "uint64 value 9223372036854775809",
     "int64 (it would be read as -9223372036854775807)"),
    ("observations/agent_0", 1e300, "float64 value 1e+300",
     "float32 (it would be read as inf)"),
], ids=["fraction", "nan", "wraps", "overflows"])
def test_a_value_the_space_cannot_hold_is_refused_by_name(
        rewrite_leaf: Callable[[str, Any], Path], path: str, value: Any, stored: str,
        read_as: str) -> None:
    def change(values: np.ndarray) -> np.ndarray:
        changed = values.astype(np.asarray(value).dtype)
        changed[2] = value
        return changed

    main = rewrite_leaf(path, change)
    for read in (lambda: mm.load_dataset(DATASET)[1],
                 lambda: mm.load_dataset(DATASET).to_arrays()):
        with pytest.raises(LayoutError) as refused:
            read()
        message = str(refused.value)
        assert message.startswith(f"{main}: episode_1/{path}, row 2: stored {stored} does "
                                  f"not fit the space's {read_as}"), message
        assert "minari.load_dataset" in message
    mm.load_dataset(DATASET)[0]  # the other episodes stay readable
    plain = next(minari.load_dataset(DATASET).iterate_episodes([1]))  # Minari: as stored
    group, leaf = path.split("/")
    stored_value = getattr(plain, group)[leaf][2]
    assert np.isnan(stored_value).all() if np.isnan(value) else (stored_value == value).all()


def test_values_that_are_not_numbers_are_refused(rewrite_leaf: Callable[[str, Any], Path]
                                                 ) -> None:
    main = rewrite_leaf("actions/agent_0", lambda a: np.array([str(v).encode() for v in a]))
    with pytest.raises(LayoutError, match=rf"^{main}: episode_1/actions/agent_0 stores \|S1 "
                                          "values where its space holds int64 numbers"):
        mm.load_dataset(DATASET)[1]


@pytest.mark.parametrize("first", ["episode", "all"])
def test_the_layouts_own_columns_are_read_as_the_layout_types_them(
        rewrite_leaf: Callable[[str, Any], Path], first: str) -> None:
    """An ``int8`` ``active`` column holding a 5 was returned as stored by ``dataset[1]``
    (indexing with it picks rows), and then by every ``to_arrays()`` of the process."""
    def five(active: np.ndarray) -> np.ndarray:
        changed = active.astype(np.int8)
        changed[3, 0] = 5
        return changed

    main = rewrite_leaf("infos/marl/active", five)
    dataset = mm.load_dataset(DATASET)
    reads = [lambda: dataset[1], lambda: dataset.to_arrays()]
    for read in reads if first == "episode" else reads[::-1]:
        with pytest.raises(LayoutError, match=rf"^{main}: episode_1/infos/marl/active, row 3: "
                                              "stored int8 value 5 does not fit the layout's "
                                              "bool"):
            read()
    rewrite_leaf("infos/marl/active", lambda active: (active != 0).astype(np.int8))
    for read in (lambda: mm.load_dataset(DATASET)[1],
                 lambda: mm.load_dataset(DATASET).to_arrays()):
        assert read().active.dtype == np.bool_
