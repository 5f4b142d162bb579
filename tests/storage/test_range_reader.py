"""The range reader: pieces planned by file offset, coalesced into blocks, read straight into
their destinations from a local file (``preadv``) or from any ``ByteRanges`` supplier."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from marl_strategies import assert_episode_equal, random_episode

import marl_minari as mm
from marl_minari.errors import CorruptedDataError
from marl_minari.format import layout, offset_index
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage import range_reader
from marl_minari.storage.byte_ranges import LocalFileRanges
from marl_minari.storage.episode_reader import EpisodeReader
from marl_minari.storage.range_reader import (
    RangePlan,
    RangePlanner,
    read_plan_from_fd,
    read_plan_from_source,
)
from marl_minari.storage.writer import write_dataset

SIZE = 1 << 20


@pytest.fixture
def data_file(tmp_path: Path) -> tuple[Path, bytes]:
    content = np.random.default_rng(0).integers(0, 256, SIZE, dtype=np.uint8).tobytes()
    path = tmp_path / "bytes.bin"
    path.write_bytes(content)
    return path, content


class CountingRanges(LocalFileRanges):
    """The local supplier, remembering the ranges asked for."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.asked: list[list[tuple[int, int]]] = []

    def read_ranges(self, ranges: Any) -> list[memoryview]:
        self.asked.append(list(ranges))
        return super().read_ranges(ranges)


def _planned(pieces: list[tuple[int, int]], size: int = SIZE) -> tuple[RangePlanner, np.ndarray]:
    """A planner with ``(file offset, length)`` pieces laid end to end in one destination."""
    lengths = np.asarray([length for _, length in pieces], dtype=np.int64)
    out = np.zeros(int(lengths.sum()), dtype=np.uint8)
    planner = RangePlanner(size, "bytes.bin")
    planner.add(out, np.concatenate([[0], np.cumsum(lengths)[:-1]]),
                np.asarray([start for start, _ in pieces]), lengths)
    return planner, out


def _expected(content: bytes, pieces: list[tuple[int, int]]) -> bytes:
    return b"".join(content[start:start + length] for start, length in pieces)


PIECES = [(5000, 100), (100, 50), (300, 7), (400_000, 1000), (5100, 3), (350, 0)]


def test_pieces_are_sorted_and_coalesced_across_small_gaps_only(data_file: tuple) -> None:
    planner, _ = _planned(PIECES)
    plan = planner.plan(max_gap=8192)
    # 100..357 and 5000..5103 are 4.6 KB apart (one block); 400,000 is far (its own)
    assert plan.blocks == [(100, 5003), (400_000, 1000)]
    assert plan.starts.tolist() == [100, 300, 5000, 5100, 400_000]  # the empty piece dropped
    planner, _ = _planned(PIECES)
    assert planner.plan(max_gap=200).blocks == [(100, 207), (5000, 103), (400_000, 1000)]


def _read_local(plan: RangePlan, path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        read_plan_from_fd(plan, fd, str(path))
    finally:
        os.close(fd)


def test_aligned_plans_keep_each_range_inside_one_block_of_the_supplier(
        data_file: tuple) -> None:
    """With ``align`` (a supplier verifying fixed blocks), a planned range never spans two
    of its blocks, except a piece that does by itself, which is then a range of its own."""
    path, content = data_file
    pieces = [(10, 20), (40, 30), (1000, 30), (1020, 10), (1040, 10), (2100, 20), (2130, 5)]
    planner, out = _planned(pieces)
    plan = planner.plan(max_gap=8192, align=1024)
    assert plan.blocks == [(10, 60), (1000, 30), (1020, 10), (1040, 10), (2100, 35)]
    _read_local(plan, path)
    assert out.tobytes() == _expected(content, pieces)
    planner, _ = _planned(pieces)
    assert planner.plan(max_gap=8192).blocks == [(10, 1020), (1020, 1115)]  # overlap only


def test_overlapping_pieces_start_a_new_block(data_file: tuple) -> None:
    path, content = data_file
    pieces = [(1000, 500), (1200, 100), (1600, 10)]
    planner, out = _planned(pieces)
    plan = planner.plan(max_gap=8192)
    assert plan.blocks == [(1000, 500), (1200, 410)]
    _read_local(plan, path)
    assert out.tobytes() == _expected(content, pieces)


@pytest.mark.parametrize("preadv", [True, False])
@pytest.mark.parametrize("max_gap", [0, 64, 1 << 17])
def test_a_local_read_puts_every_piece_where_it_belongs(
        data_file: tuple, max_gap: int, preadv: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if not preadv:  # as where libc has no preadv (Windows): a memory map
        monkeypatch.setattr(range_reader, "_LIBC", False)
    path, content = data_file
    rng = np.random.default_rng(1)
    starts = rng.integers(0, SIZE - 5000, 3000)
    pieces = [(int(s), int(n)) for s, n in zip(starts, rng.integers(0, 5000, 3000),
                                              strict=True)]
    planner, out = _planned(pieces)
    plan = planner.plan(max_gap=max_gap)
    _read_local(plan, path)
    assert out.tobytes() == _expected(content, pieces)


def test_a_supplier_gets_one_call_for_all_blocks(data_file: tuple) -> None:
    path, content = data_file
    planner, out = _planned(PIECES)
    plan = planner.plan(max_gap=8192)
    with CountingRanges(path) as source:
        read_plan_from_source(plan, source)
    assert source.asked == [[(100, 5003), (400_000, 1000)]]
    assert out.tobytes() == _expected(content, PIECES)


def test_pieces_of_several_destinations_planned_at_once_land_in_their_own(
        data_file: tuple) -> None:
    path, content = data_file
    first, second = np.zeros(300, dtype=np.uint8), np.zeros(200, dtype=np.uint8)
    planner = RangePlanner(SIZE, "bytes.bin")
    # Interleaved in the file, owned alternately: each piece goes to its own destination.
    planner.add_many([first, second], np.array([0, 1, 0, 1]), np.array([0, 0, 100, 100]),
                     np.array([5000, 1000, 9000, 20_000]), np.array([100, 100, 200, 100]))
    _read_local(planner.plan(), path)
    assert first.tobytes() == content[5000:5100] + content[9000:9200]
    assert second.tobytes() == content[1000:1100] + content[20_000:20_100]


def test_a_piece_past_its_own_destination_is_refused(data_file: tuple) -> None:
    planner = RangePlanner(SIZE, "bytes.bin")
    with pytest.raises(ValueError, match="outside its destination"):
        # Inside the larger destination, past the end of the one that owns it.
        planner.add_many([np.zeros(300, dtype=np.uint8), np.zeros(200, dtype=np.uint8)],
                         np.array([1]), np.array([150]), np.array([0]), np.array([100]))


def test_a_range_past_the_end_of_the_file_is_refused_when_planned(data_file: tuple) -> None:
    with pytest.raises(CorruptedDataError, match="bytes.bin.*past the file's"):
        _planned([(SIZE - 10, 11)])


def test_a_file_truncated_after_planning_is_a_typed_error(data_file: tuple) -> None:
    path, _ = data_file
    planner, _ = _planned([(1000, 10), (SIZE - 100, 100)])
    plan = planner.plan()
    os.truncate(path, SIZE - 50)
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(CorruptedDataError, match="bytes.bin: the file ends before"):
            read_plan_from_fd(plan, fd, str(path))
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- the reader

AGENTS = ["p", "q"]
OBS = {a: spaces.Box(-3, 3, (6,), dtype=np.float32) for a in AGENTS}
ACT = {a: spaces.Discrete(4) for a in AGENTS}
STATE = spaces.Box(-1, 1, (5,), dtype=np.float32)


@pytest.fixture
def recorded() -> tuple[Any, list]:
    spec = MultiAgentSpec(api="parallel", possible_agents=tuple(AGENTS), observation_spaces=OBS,
                          action_spaces=ACT, state_space=STATE)
    episodes = [random_episode(AGENTS, OBS, ACT, steps, seed, state_space=STATE)
                for seed, steps in enumerate([4, 1, 9, 3, 6])]
    write_dataset("ranges/read-v0", episodes, spec)
    return mm.load_dataset("ranges/read-v0"), episodes


def test_the_reader_reads_through_a_byte_supplier(recorded: tuple) -> None:
    """Any supplier (a remote file) gets the leaves' bytes asked as one planned pass, after
    each entry was compared with HDF5's own offsets: what the supplier claims about the file
    (a digest equal to the index's header) never stands in for that comparison."""
    dataset, episodes = recorded
    h5_path = dataset.data_path / layout.MAIN_FILE_NAME
    with CountingRanges(h5_path) as source:
        source.blake3 = offset_index.fingerprint(h5_path)
        with EpisodeReader(dataset.data_path, dataset.spec, dataset.metadata,
                           byte_source=source) as reader:
            arrays = reader.read(np.asarray([4, 0, 2]))
    for position, index in enumerate([4, 0, 2]):
        assert_episode_equal(arrays.episode(position), episodes[index])
    data_bytes = sum(length for _, length in source.asked[-1])
    assert data_bytes >= 3 * (4 + 10 + 7) * 6 * 4  # the observations at least


class SharedBufferRanges:
    """A supplier returning every range as a view of one buffer holding the whole file (as
    a remote file returns the blocks one request or one cache read filled)."""

    def __init__(self, content: bytes, kind: str) -> None:
        self.name, self.size = "shared.bin", len(content)
        self.buffer: Any = {"bytes": content, "bytearray": bytearray(content),
                            "ndarray": np.frombuffer(content, dtype=np.uint8).copy(),
                            "array": __import__("array").array("B", content)}[kind]

    def read_ranges(self, ranges: Any) -> list[memoryview]:
        return [memoryview(self.buffer)[offset:offset + length] for offset, length in ranges]


@pytest.mark.parametrize("kind", ["bytes", "bytearray", "ndarray", "array"])
def test_pieces_from_views_of_one_buffer_land_where_they_belong(
        data_file: tuple, kind: str) -> None:
    """Pieces of one length from one buffer into one array are copied together (episodes of
    one length: most of a pass); others, and views of other exporters, one by one."""
    _, content = data_file
    rng = np.random.default_rng(2)
    rows = np.zeros((300, 3), dtype=np.float32)  # 12-byte pieces, in shuffled file order
    row_starts = rng.permutation(np.arange(300) * 3000 + 17)
    mixed = np.zeros(4000, dtype=np.uint8)  # pieces of many lengths, some overlapping
    mixed_starts = rng.integers(0, SIZE - 100, 40)
    mixed_lengths = rng.integers(1, 100, 40)
    mixed_offsets = np.concatenate([[0], np.cumsum(mixed_lengths)[:-1]])
    planner = RangePlanner(SIZE, "shared.bin")
    planner.add(rows, np.arange(300) * 12, row_starts, np.full(300, 12))
    planner.add(mixed, mixed_offsets, mixed_starts, mixed_lengths)
    plan = planner.plan(max_gap=1 << 17, align=1 << 16)
    read_plan_from_source(plan, SharedBufferRanges(content, kind))
    assert rows.tobytes() == b"".join(content[s:s + 12] for s in row_starts.tolist())
    expected = b"".join(content[s:s + n] for s, n in zip(mixed_starts.tolist(),
                                                        mixed_lengths.tolist(), strict=True))
    assert mixed[:len(expected)].tobytes() == expected
    assert not mixed[len(expected):].any()


class WindowedRanges(LocalFileRanges):
    """The local supplier offering ``read_windows``: the blocks asked for, cut into windows
    of ``window`` bytes read one after the other into one reused buffer (pieces fall across
    two windows); ``skip`` leaves one window out."""

    def __init__(self, path: Path, window: int, skip: int | None = None) -> None:
        super().__init__(path)
        self.window, self.skip = window, skip

    def read_windows(self, ranges: Any) -> Any:
        reused = bytearray(self.window)
        count = 0
        union: list[list[int]] = []  # windows never overlap, though the ranges may
        for offset, length in sorted(ranges):
            if union and offset <= union[-1][1]:
                union[-1][1] = max(union[-1][1], offset + length)
            else:
                union.append([offset, offset + length])
        for offset, end in union:
            for at in range(offset, end, self.window):
                size = min(self.window, end - at)
                reused[:size] = os.pread(self._fd, size, at)
                count += 1
                if count != self.skip:
                    yield at, memoryview(reused)[:size]


def test_pieces_read_window_by_window_land_where_they_belong(data_file: tuple) -> None:
    """A supplier's windows each used before the next is read (one memory reused): pieces
    inside one window and pieces split between two land where they belong."""
    path, content = data_file
    rng = np.random.default_rng(3)
    rows = np.zeros((300, 3), dtype=np.float32)
    row_starts = rng.permutation(np.arange(300) * 3000 + 17)
    mixed = np.zeros(120_000, dtype=np.uint8)  # pieces up to 3 windows long
    mixed_starts = rng.integers(0, SIZE - 3000, 40)
    mixed_lengths = rng.integers(1, 3000, 40)
    planner = RangePlanner(SIZE, "windowed.bin")
    planner.add(rows, np.arange(300) * 12, row_starts, np.full(300, 12))
    planner.add(mixed, np.concatenate([[0], np.cumsum(mixed_lengths)[:-1]]), mixed_starts,
                mixed_lengths)
    with WindowedRanges(path, 1000) as source:
        read_plan_from_source(planner.plan(max_gap=1 << 17), source)
    assert rows.tobytes() == b"".join(content[s:s + 12] for s in row_starts.tolist())
    expected = b"".join(content[s:s + n] for s, n in zip(mixed_starts.tolist(),
                                                        mixed_lengths.tolist(), strict=True))
    assert mixed[:len(expected)].tobytes() == expected


def test_windows_leaving_a_piece_uncovered_are_refused(data_file: tuple) -> None:
    """A destination is never left holding stale memory because a window was missing."""
    path, _ = data_file
    planner, _ = _planned([(100, 5000), (200_000, 300)])
    with WindowedRanges(path, 1000, skip=3) as source, \
            pytest.raises(RuntimeError, match="covered 4300 of the 5300 bytes"):
        read_plan_from_source(planner.plan(), source)
