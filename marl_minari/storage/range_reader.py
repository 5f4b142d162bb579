"""The range reader: a pass over many leaves of many episodes as coalesced byte ranges.

A reader says where each piece of bytes goes (a destination array, allocated once at its final
size, and a byte offset in it) and where it lies in the data file (an ``(offset, length)``
range the offset index placed). :func:`plan_ranges` sorts the pieces by file offset and
coalesces neighbours separated by at most ``max_gap`` bytes (HDF5's object headers between
datasets) into blocks; a block is then read in one request and scattered into the
destinations with no copy in between:

- a local file (:func:`read_plan_from_fd`): one ``preadv`` per block, its I/O vector pointing
  at the destinations and, for the gaps, at one scratch buffer; the kernel copies the page
  cache (or the disk's blocks) straight into the arrays;
- any other supplier of the file's bytes (:func:`read_plan_from_source`, a remote file):
  one :meth:`~marl_minari.storage.byte_ranges.ByteRanges.read_ranges` call for all blocks,
  then each piece copied out of its block.

The planner never assumes a local file: both ways read the same plan.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from marl_minari.errors import CorruptedDataError
from marl_minari.storage.byte_ranges import ByteRanges, holds_its_views

LOCAL_MAX_GAP: Final = 128 * 1024
"""Bytes between two pieces of a local file read (into scratch) rather than skipped: a
``preadv`` costs a few microseconds, while copying a gap from the page cache costs about as
much per 32 KiB; an unread gap of a cold file is read by the kernel's read-ahead anyway."""
REMOTE_MAX_GAP: Final = 1024 * 1024
"""The same for a remote supplier, where a request costs a round trip (milliseconds)."""
MAX_BLOCK_BYTES: Final = 64 * 2**20
"""The largest block one request asks for (a remote supplier holds a block in memory)."""


def _iov_max() -> int:
    try:
        found = os.sysconf("SC_IOV_MAX")
    except (AttributeError, ValueError, OSError):
        found = -1
    return found if found > 0 else 1024


_PIECES_PER_BLOCK: Final = max(1, _iov_max() // 2 - 1)
"""Pieces per block: each takes two I/O vector entries (the gap before it, then itself)."""


@dataclass
class RangePlan:
    """Pieces sorted by file offset, grouped into blocks.

    Attributes:
        starts: ``(K,)`` int64 file offset of every piece.
        lengths: ``(K,)`` int64 bytes of every piece.
        targets: ``(K,)`` uint64 address of every piece's destination.
        destinations: ``(K,)`` int64 index in ``keep`` of every piece's destination array.
        offsets: ``(K,)`` int64 byte offset of every piece in its destination array.
        block_bounds: ``(B + 1,)`` the pieces of block ``b`` are ``block_bounds[b]:[b + 1]``.
        max_gap: the largest gap between two pieces of one block.
        keep: the destination arrays (alive as long as the plan is).
    """

    starts: np.ndarray
    lengths: np.ndarray
    targets: np.ndarray
    destinations: np.ndarray
    offsets: np.ndarray
    block_bounds: np.ndarray
    max_gap: int
    keep: list[np.ndarray] = field(default_factory=list)

    @property
    def blocks(self) -> list[tuple[int, int]]:
        """``(offset, length)`` of every block: from its first piece to its last piece's end."""
        first = self.block_bounds[:-1]
        last = self.block_bounds[1:] - 1
        begins = self.starts[first]
        ends = self.starts[last] + self.lengths[last]
        return list(zip(begins.tolist(), (ends - begins).tolist(), strict=True))


class RangePlanner:
    """Collects pieces (destination, file range) for one pass; :meth:`plan` coalesces them."""

    def __init__(self, file_size: int, name: str) -> None:
        self._size = file_size
        self._name = name
        self._starts: list[np.ndarray] = []
        self._lengths: list[np.ndarray] = []
        self._targets: list[np.ndarray] = []
        self._destinations: list[np.ndarray] = []
        self._offsets: list[np.ndarray] = []
        self._keep: list[np.ndarray] = []

    def add(self, destination: np.ndarray, offsets: np.ndarray, starts: np.ndarray,
            lengths: np.ndarray) -> None:
        """Bytes ``starts[i]:starts[i] + lengths[i]`` of the file go to bytes
        ``offsets[i]:offsets[i] + lengths[i]`` of ``destination`` (C-contiguous).

        Raises:
            CorruptedDataError: a range reaches outside the file.
            ValueError: a piece lies outside ``destination`` (a bug of the caller).
        """
        offsets = np.asarray(offsets, dtype=np.int64)
        self.add_many([destination], np.zeros(len(offsets), dtype=np.intp), offsets, starts,
                      lengths)

    def add_many(self, destinations: Sequence[np.ndarray], owners: np.ndarray,
                 offsets: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> None:
        """:meth:`add` of pieces into several destinations at once (a read's leaves together,
        checked in one go rather than leaf by leaf): piece ``i`` goes to
        ``destinations[owners[i]]``.

        Raises:
            CorruptedDataError: a range reaches outside the file.
            ValueError: a piece lies outside its destination (a bug of the caller).
        """
        if not all(destination.flags.c_contiguous for destination in destinations):
            raise ValueError("range reader destinations must be C-contiguous")
        starts = np.asarray(starts, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        owners = np.asarray(owners, dtype=np.intp)
        if not lengths.all():
            some = lengths > 0
            starts, lengths, offsets, owners = (starts[some], lengths[some], offsets[some],
                                                owners[some])
        if not starts.size:
            return
        sizes = np.array([destination.nbytes for destination in destinations], dtype=np.int64)
        if (offsets < 0).any() or (offsets + lengths > sizes[owners]).any():
            raise ValueError("a planned piece lies outside its destination array")
        if (starts < 0).any() or (starts + lengths > self._size).any():
            raise CorruptedDataError(
                f"{self._name}: a dataset's bytes reach past the file's {self._size} bytes; "
                "the file is truncated: copy or download it again")
        addresses = np.array([destination.ctypes.data for destination in destinations],
                             dtype=np.uint64)
        self._starts.append(starts)
        self._lengths.append(lengths)
        self._targets.append(offsets.astype(np.uint64) + addresses[owners])
        self._destinations.append(owners.astype(np.int64) + len(self._keep))
        self._offsets.append(offsets)
        self._keep.extend(destinations)

    def plan(self, max_gap: int = LOCAL_MAX_GAP,
             max_block: int = MAX_BLOCK_BYTES, align: int = 0) -> RangePlan:
        """The pieces sorted by file offset and cut into blocks: a new block starts where the
        gap from the previous piece exceeds ``max_gap``, where pieces overlap (never in a
        sound file, but a block reads the file forwards only), past ``max_block`` bytes,
        every :data:`_PIECES_PER_BLOCK` pieces (one ``preadv``'s I/O vector), and, with
        ``align``, where a piece starts in another ``align``-byte block of the file than the
        one before ends in, and around a piece that spans two (a supplier verifying fixed
        blocks then returns most ranges as views of one block, and joins only the bytes of
        pieces that span blocks)."""
        if not self._starts:
            empty = np.zeros(0, dtype=np.int64)
            return RangePlan(empty, empty, empty.astype(np.uint64), empty, empty,
                             np.zeros(1, dtype=np.int64), max_gap, [])
        starts = np.concatenate(self._starts)
        order = np.argsort(starts, kind="stable")
        starts = starts[order]
        lengths = np.concatenate(self._lengths)[order]
        targets = np.concatenate(self._targets)[order]
        destinations = np.concatenate(self._destinations)[order]
        offsets = np.concatenate(self._offsets)[order]
        gaps = starts[1:] - (starts[:-1] + lengths[:-1])
        cut = np.ones(len(starts), dtype=bool)
        cut[1:] = (gaps < 0) | (gaps > max_gap)
        cut[np.arange(0, len(starts), _PIECES_PER_BLOCK)] = True
        if max_block > 0:
            # Blocks of about max_block bytes (a cut where the running size crosses a multiple).
            position = np.cumsum(lengths) // max_block
            cut[1:] |= position[1:] != position[:-1]
        if align > 0:
            first_block = starts // align
            last_block = (starts + np.maximum(lengths, 1) - 1) // align
            straddles = first_block != last_block  # read alone: only its bytes are joined
            cut[1:] |= ((first_block[1:] != last_block[:-1]) | straddles[1:]
                        | straddles[:-1])
        bounds = np.append(np.flatnonzero(cut), len(starts)).astype(np.int64)
        return RangePlan(starts, lengths, targets, destinations, offsets, bounds, max_gap,
                         self._keep)


# --------------------------------------------------------------------------- local files

_LIBC: Any = None


def _preadv() -> Any:
    """libc's ``preadv`` and ``pread`` through ctypes, or ``None`` where there is none."""
    global _LIBC
    if _LIBC is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            preadv, pread = libc.preadv, libc.pread
        except (OSError, AttributeError):
            _LIBC = False
            return None
        preadv.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_int64]
        preadv.restype = ctypes.c_ssize_t
        pread.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64]
        pread.restype = ctypes.c_ssize_t
        _LIBC = (preadv, pread)
    return _LIBC or None


def read_plan_from_fd(plan: RangePlan, fd: int, name: str) -> None:
    """Read every block of ``plan`` from the open file ``fd`` straight into its destinations.

    Raises:
        CorruptedDataError: the file ended before a range (it was truncated since).
    """
    calls = _preadv()
    if calls is None:  # no libc preadv here (Windows): copy the pieces out of a memory map
        _read_mapped(plan, fd, name)
        return
    preadv, _ = calls
    if not len(plan.starts):
        return
    scratch = np.empty(max(1, plan.max_gap), dtype=np.uint8)
    ends = plan.starts + plan.lengths
    gap_lengths = np.zeros(len(plan.starts), dtype=np.uint64)
    inner = np.ones(len(plan.starts), dtype=bool)
    inner[plan.block_bounds[:-1]] = False
    gap_lengths[1:][inner[1:]] = (plan.starts[1:] - ends[:-1])[inner[1:]].astype(np.uint64)
    # struct iovec {void *iov_base; size_t iov_len;}: a gap entry, then the piece, per piece.
    vectors = np.empty((len(plan.starts), 2, 2), dtype=np.uint64)
    vectors[:, 0, 0] = scratch.ctypes.data
    vectors[:, 0, 1] = gap_lengths
    vectors[:, 1, 0] = plan.targets
    vectors[:, 1, 1] = plan.lengths.astype(np.uint64)
    base = vectors.ctypes.data
    wanted = ends[plan.block_bounds[1:] - 1] - plan.starts[plan.block_bounds[:-1]]
    for first, last, offset, size in zip(plan.block_bounds[:-1].tolist(),
                                         plan.block_bounds[1:].tolist(),
                                         plan.starts[plan.block_bounds[:-1]].tolist(),
                                         wanted.tolist(), strict=True):
        done = preadv(fd, base + first * 32, 2 * (last - first), offset)
        if done != size:  # interrupted, short or failed: finish piece by piece
            _read_pieces(plan, first, last, fd, name)


def _read_mapped(plan: RangePlan, fd: int, name: str) -> None:
    """Every piece of ``plan`` copied out of a read-only memory map of ``fd``."""
    if not len(plan.starts):
        return
    with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
        if int((plan.starts + plan.lengths).max()) > len(mapped):
            raise CorruptedDataError(
                f"{name}: the file ends before byte {int((plan.starts + plan.lengths).max())}; "
                "it was truncated while being read: copy or download it again")
        view = np.frombuffer(mapped, dtype=np.uint8)
        base = view.ctypes.data
        for start, length, target in zip(plan.starts.tolist(), plan.lengths.tolist(),
                                         plan.targets.tolist(), strict=True):
            ctypes.memmove(target, base + start, length)
        del view  # the map closes only once nothing exports its buffer


def _read_pieces(plan: RangePlan, first: int, last: int, fd: int, name: str) -> None:
    """Pieces ``first:last`` of ``plan``, one ``pread`` loop each (the exact, slow way)."""
    _, pread = _preadv()
    for start, length, target in zip(plan.starts[first:last].tolist(),
                                     plan.lengths[first:last].tolist(),
                                     plan.targets[first:last].tolist(), strict=True):
        done = 0
        while done < length:
            count = pread(fd, target + done, length - done, start + done)
            if count < 0 and ctypes.get_errno() == errno.EINTR:
                continue
            if count < 0:
                code = ctypes.get_errno()
                raise CorruptedDataError(f"{name}: reading failed ({os.strerror(code)})")
            if count == 0:
                raise CorruptedDataError(
                    f"{name}: the file ends before byte {start + length}; it was truncated "
                    "while being read: copy or download it again")
            done += count


# --------------------------------------------------------------------------- any supplier


def read_plan_from_source(plan: RangePlan, source: ByteRanges) -> None:
    """Read the blocks of ``plan`` from ``source`` and copy every piece out of them into its
    destination: window by window where the supplier offers ``read_windows``
    (:func:`scatter_windows`), else with one ``source.read_ranges`` call
    (:func:`scatter_pieces`).

    Raises:
        CorruptedDataError: the supplier's (a block past the end, or not verified).
    """
    blocks = plan.blocks
    if not blocks:
        return
    read_windows = getattr(source, "read_windows", None)
    if read_windows is not None:
        scatter_windows(plan, read_windows(blocks))
        return
    data: Sequence[memoryview] = source.read_ranges(blocks)
    for (offset, length), block in zip(blocks, data, strict=True):
        if len(block) != length:
            raise CorruptedDataError(
                f"{source.name}: asked for {length} bytes at {offset}, got {len(block)}")
    scatter_pieces(plan, data)


_GROUP_MIN_PIECES: Final = 16
"""Pieces of one length, from one buffer into one array, copied by one numpy assignment
rather than one ``memmove`` each (a numpy call costs about as much as ten of them)."""
_GROUP_MAX_BYTES: Final = 1 << 20
"""Bytes one numpy assignment moves at most: its temporary stays in the CPU's caches."""


def scatter_windows(plan: RangePlan, windows: Iterable[tuple[int, memoryview]]) -> None:
    """Copy every piece of ``plan`` out of ``windows``: ``(file offset, bytes)`` of the file,
    in any order, not overlapping, each used before the next is asked for (a supplier may
    read them all into one reused memory). A piece split between two windows is copied in
    two parts.

    Raises:
        RuntimeError: the windows left a piece's byte uncovered (a bug of the supplier: the
            destinations would hold stale memory).
    """
    starts = plan.starts
    ends = starts + plan.lengths
    reach = np.maximum.accumulate(ends)  # pieces before the first reaching a window end there
    copied = 0
    for offset, window in windows:
        data = np.frombuffer(window, dtype=np.uint8)
        end = offset + len(data)
        chosen = np.arange(int(np.searchsorted(reach, offset, side="right")),
                           int(np.searchsorted(starts, end, side="left")))
        chosen = chosen[ends[chosen] > offset]
        inside = (starts[chosen] >= offset) & (ends[chosen] <= end)
        whole = chosen[inside]
        _copy_pieces(plan, data, whole, starts[whole] - offset)
        copied += int(plan.lengths[whole].sum())
        base = data.ctypes.data
        split = chosen[~inside]
        for start, stop, target in zip(starts[split].tolist(), ends[split].tolist(),
                                       plan.targets[split].tolist(), strict=True):
            low, high = max(start, offset), min(stop, end)
            ctypes.memmove(target + low - start, base + low - offset, high - low)
            copied += high - low
    if copied != int(plan.lengths.sum()):
        raise RuntimeError(f"the supplier's windows covered {copied} of the "
                           f"{int(plan.lengths.sum())} bytes of the read's pieces")


def scatter_pieces(plan: RangePlan, data: Sequence[memoryview]) -> None:
    """Copy every piece of ``plan`` out of its block's bytes (``data[b]`` holds the file's
    bytes of block ``b``) into its destination.

    The blocks a supplier returns are mostly views of a few buffers (the run of blocks one
    request or one cache read filled): the pieces of each buffer are copied together
    (:func:`_copy_pieces`).
    """
    count = len(plan.starts)
    if not count:
        return
    buffers: dict[int, int] = {}
    arrays: list[np.ndarray] = []
    block_buffer = np.empty(len(data), dtype=np.int64)
    block_position = np.empty(len(data), dtype=np.int64)  # of the block's first byte
    for number, view in enumerate(data):
        held = np.frombuffer(view, dtype=np.uint8)
        owner: Any = view.obj if isinstance(view, memoryview) else view
        buffer_id = id(owner) if holds_its_views(owner) else ~number  # else: its own
        which = buffers.get(buffer_id)
        if which is None:
            which = buffers[buffer_id] = len(arrays)
            arrays.append(np.frombuffer(owner, dtype=np.uint8) if buffer_id >= 0 else held)
        block_buffer[number] = which
        block_position[number] = held.ctypes.data - arrays[which].ctypes.data
    first_piece = plan.block_bounds[:-1]
    of_piece = np.repeat(np.arange(len(data)), np.diff(plan.block_bounds))
    sources = block_buffer[of_piece]
    positions = (block_position - plan.starts[first_piece])[of_piece] + plan.starts
    if len(arrays) == 1:
        _copy_pieces(plan, arrays[0], np.arange(count), positions)
        return
    order = np.argsort(sources, kind="stable")
    bounds = np.searchsorted(sources[order], np.arange(len(arrays) + 1)).tolist()
    for which, array in enumerate(arrays):
        chosen = order[bounds[which]:bounds[which + 1]]
        _copy_pieces(plan, array, chosen, positions[chosen])


def _copy_pieces(plan: RangePlan, source: np.ndarray, chosen: np.ndarray,
                 positions: np.ndarray) -> None:
    """Copy the pieces ``chosen`` of ``plan`` from bytes ``positions`` on of ``source`` (a
    flat uint8 array): pieces of one length going into one destination array together, by
    fancy indexing of two windows of items that long over the source's and the array's
    bytes; the rest one ``memmove`` each."""
    if not len(chosen):
        return
    lengths = plan.lengths[chosen]
    # one number per (destination, length): a stable sort by it keeps each group's pieces in
    # the order given (the file's, where the caller's positions grow)
    groups = plan.destinations[chosen] * (int(plan.lengths.max()) + 1) + lengths
    order = np.argsort(groups, kind="stable")
    sorted_groups = groups[order]
    edges = np.flatnonzero(sorted_groups[1:] != sorted_groups[:-1]) + 1
    bounds = np.concatenate([[0], edges, [len(chosen)]]).tolist()
    offsets = plan.offsets[chosen]
    single: list[np.ndarray] = []
    for begin, end in zip(bounds[:-1], bounds[1:], strict=True):
        if end - begin < _GROUP_MIN_PIECES:
            single.append(order[begin:end])
            continue
        first = int(chosen[order[begin]])
        length = int(plan.lengths[first])
        rows_in = _rows(source, length)
        rows_out = _rows(plan.keep[int(plan.destinations[first])].reshape(-1).view(np.uint8),
                         length)
        step = max(1, _GROUP_MAX_BYTES // length)
        for at in range(begin, end, step):
            part = order[at:min(at + step, end)]
            rows_out[offsets[part]] = rows_in[positions[part]]
    if single:
        rest = np.concatenate(single)
        base = source.ctypes.data
        for start, size, target in zip((positions[rest] + base).tolist(),
                                       lengths[rest].tolist(),
                                       plan.targets[chosen[rest]].tolist(), strict=True):
            ctypes.memmove(target, start, size)


def _rows(flat: np.ndarray, length: int) -> np.ndarray:
    """Every run of ``length`` bytes of ``flat`` as one opaque item: item ``i`` is
    ``flat[i:i + length]`` (numpy copies an item with one ``memcpy``; writable where ``flat``
    is)."""
    return np.ndarray((flat.size - length + 1,), dtype=np.dtype((np.void, length)),
                      buffer=flat, strides=(1,))
