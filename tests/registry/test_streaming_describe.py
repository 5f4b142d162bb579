"""A metadata-only ``describe`` of a dataset read in place fetches nothing of the data file
beyond the blocks that open it (the manifest's ``open_blocks``), over a real HTTP server on
127.0.0.1 that logs every range it serves."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from range_servers import range_handler
from registry_helpers import entry_of, manifest_document, replace_published_file

import marl_minari as mm
from marl_minari import registry
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir

DATASET = "mpe2/spread/described-v0"
MAIN_PATH = f"data/{layout.MAIN_FILE_NAME}"


pytestmark = pytest.mark.usefixtures("block_cache")  # the default cache, per test


def leaf_ranges(h5_path: Path) -> list[tuple[int, int, int]]:
    """``(episode, start, end)`` of every contiguous leaf dataset of every episode."""
    ranges: list[tuple[int, int, int]] = []

    def visit(episode: int, group: h5py.Group) -> None:
        for item in group.values():
            if isinstance(item, h5py.Group):
                visit(episode, item)
            elif item.id.get_storage_size():
                start = item.id.get_offset()
                if start is not None:
                    ranges.append((episode, start, start + item.id.get_storage_size()))

    with h5py.File(h5_path, "r") as file:
        for name, group in file.items():
            visit(int(name.removeprefix("episode_")), group)
    return ranges


def test_a_metadata_only_describe_fetches_no_episode(
        record_parallel: Callable[..., Any], registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    record_parallel("mpe2/simple_spread_v3", 80, max_cycles=25, dataset_id=DATASET)
    registry.publish(DATASET)
    local = mm.describe(DATASET)
    shutil.rmtree(dataset_dir(DATASET))
    entry = entry_of(manifest_document(registry_dir, DATASET), MAIN_PATH)
    block_size, opening = entry["block_size"], set(entry["open_blocks"])
    handler = range_handler("DescribeRanges")
    url = thread_server(registry_dir, handler)

    source = mm.open_source(f"{url}/{DATASET}", streaming=True)
    opened = len(handler.served)
    described = mm.describe(source, statistics=False)
    assert handler.served[opened:] == []  # nothing at all moved for the description
    assert (described.total_episodes, described.total_steps) == (80, local.total_steps)
    assert described.episode_lengths == local.episode_lengths
    assert described.metadata == local.metadata
    fetched = [(offset, offset + length) for path, offset, length in handler.served
               if path.endswith(layout.MAIN_FILE_NAME)]
    blocks = {number for start, end in fetched
              for number in range(start // block_size, (end - 1) // block_size + 1)}
    assert blocks <= opening  # only what opening the file reads (HDF5's header and B-trees)
    assert sum(end - start for start, end in fetched) <= len(opening) * block_size
    # episodes whose data happens to share a block with those headers: a few
    h5_path = registry_dir / DATASET / MAIN_PATH
    touched = {episode for episode, start, end in leaf_ranges(h5_path)
               if any(start < stop and begin < end for begin, stop in fetched)}
    assert len(touched) < 80 // 4, sorted(touched)

    mm.describe(source)  # the statistics pass reads every episode
    assert sum(length for path, _, length in handler.served[opened:]
               if path.endswith(layout.MAIN_FILE_NAME)) >= h5_path.stat().st_size // 2


def test_lengths_come_from_the_index_only_while_the_file_seals_it(
        small_dataset: Callable[..., str], registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    # A publisher re-signs an index whose lengths were moved between two episodes (the sum
    # kept) but cannot make the data file's seal match without re-publishing the file: the
    # lengths then come from the episodes' own attributes.
    dataset_id = small_dataset("mpe2/spread/relengthed-v0", episodes=3)
    registry.publish(dataset_id)
    true_lengths = mm.load_dataset(dataset_id).to_arrays().episode_lengths.tolist()
    shutil.rmtree(dataset_dir(dataset_id))
    index_file = registry_dir / dataset_id / "data" / layout.INDEX_FILE_NAME
    with np.load(index_file) as stored:
        arrays = {key: stored[key].copy() for key in stored.files}
    arrays["steps"][0] += 1
    arrays["steps"][1] -= 1
    forged = io.BytesIO()
    np.savez(forged, **arrays)
    replace_published_file(registry_dir, dataset_id, f"data/{layout.INDEX_FILE_NAME}",
                           forged.getvalue())
    url = thread_server(registry_dir, range_handler("RelengthedRanges"))
    source = mm.open_source(f"{url}/{dataset_id}", streaming=True)
    assert source.episode_lengths().tolist() == true_lengths
    assert mm.describe(source, statistics=False).episode_length_values.tolist() == true_lengths
