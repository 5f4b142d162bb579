"""A pass over cached blocks through one reused window: each run of a pack read into it,
hashed there and used before the next run is read, so a pack changed between two windows
of one read, or between two reads of one source, is caught in the window it is read into."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from marl_minari.registry.blocks import MIN_BLOCK_SIZE
from marl_minari.registry.remote_file import StreamSettings, open_remote_file
from registry_helpers import pack_files

import marl_minari as mm

DATASET = "mpe2/spread/streamed-v0"
BLOCKS = 4


@pytest.fixture
def settings(tmp_path: Path) -> StreamSettings:
    """One block per window and nothing kept in memory between reads, so every window of a
    read is a read of its pack."""
    return StreamSettings(cache_dir=tmp_path / "cache", cache_bytes=1 << 30,
                          max_request_bytes=MIN_BLOCK_SIZE, memory_bytes=0)


def _cached(registry_dir: Path, settings: StreamSettings) -> Path:
    """Blocks ``0..BLOCKS-1`` fetched in one request each and kept; their packs' folder."""
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    source.read_ranges([(0, BLOCKS * MIN_BLOCK_SIZE)])
    return pack_files(settings.cache().folder)[0].parent


def _edit(pack: Path, at: int) -> None:
    data = bytearray(pack.read_bytes())
    data[at] ^= 0xFF
    pack.write_bytes(bytes(data))


def test_windows_of_cached_blocks_reuse_one_memory(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    _cached(registry_dir, settings)
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    content = streamable.read_bytes()
    addresses = set()
    for offset, window in source.read_windows([(0, BLOCKS * MIN_BLOCK_SIZE)]):
        assert bytes(window) == content[offset:offset + len(window)]
        addresses.add(np.frombuffer(window, dtype=np.uint8).ctypes.data)
    assert len(addresses) == 1
    assert source.counts.bytes == 0


def test_a_pack_edited_between_two_windows_of_one_read_is_refetched(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    """The first window is checked and used; the pack of a later one is then edited: that
    window's block fails its digest there, is fetched again from the remote, and the pack
    is deleted. Every byte the read gives is the published file's."""
    folder = _cached(registry_dir, settings)
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    content = streamable.read_bytes()
    windows = source.read_windows([(0, BLOCKS * MIN_BLOCK_SIZE)])
    offset, window = next(windows)
    got = {offset: bytes(window)}
    edited = folder / "2-1"
    _edit(edited, 11)
    got.update((offset, bytes(window)) for offset, window in windows)
    assert sorted(got) == [n * MIN_BLOCK_SIZE for n in range(BLOCKS)]
    assert all(data == content[offset:offset + len(data)] for offset, data in got.items())
    assert source.counts.bytes == MIN_BLOCK_SIZE  # block 2 alone, fetched again
    assert edited.read_bytes() == content[2 * MIN_BLOCK_SIZE:3 * MIN_BLOCK_SIZE]  # anew


def test_a_pack_edited_between_two_passes_of_one_source_is_caught(
        streamable: Path, registry_dir: Path, block_cache: Path) -> None:
    """The cached blocks a pass reads are not kept in memory for the next: a source's second
    pass reads the packs again and checks them again, so an edit made in between never
    reaches it (its blocks are fetched again)."""
    url = f"file://{registry_dir}/{DATASET}"
    filler = mm.open_source(url, streaming=True)
    filler.read(filler.episode_indices)  # every block fetched and kept in packs
    expected = mm.load_dataset(DATASET).to_arrays()
    source = mm.open_source(url, streaming=True, stream_settings=StreamSettings(
        memory_bytes=0))  # no block of HDF5's own reads kept in memory either
    passes = [source.read(source.episode_indices)]
    fetched = source.remote_file.counts.bytes
    for pack in pack_files(block_cache):
        _edit(pack, pack.stat().st_size // 2)
    passes.append(source.read(source.episode_indices))
    assert source.remote_file.counts.bytes > fetched  # the edited blocks, fetched again
    for arrays in passes:
        for agent in expected.possible_agents:
            np.testing.assert_array_equal(arrays.observations[agent],
                                          expected.observations[agent])
            np.testing.assert_array_equal(arrays.actions[agent], expected.actions[agent])
        np.testing.assert_array_equal(arrays.rewards, expected.rewards)
