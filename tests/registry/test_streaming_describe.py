"""A metadata-only ``describe`` of a dataset read in place fetches nothing of the data file
beyond the blocks that open it (the manifest's ``open_blocks``), over a real HTTP server on
127.0.0.1 that logs every range it serves."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pytest
from range_servers import range_handler
from registry_helpers import entry_of, manifest_document

import marl_minari as mm
from marl_minari import registry
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir

DATASET = "mpe2/spread/described-v0"
MAIN_PATH = f"data/{layout.MAIN_FILE_NAME}"


@pytest.fixture(autouse=True)
def block_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARL_MINARI_CACHE", str(tmp_path / "cache" / "blocks"))


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
