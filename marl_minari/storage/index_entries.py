"""The offset-index entries of one read, every leaf at once: where each episode's dataset
lies, which entries may be read as bytes (compared with HDF5 a slice of episodes at a time:
:func:`comparison_chunks`), and the pieces they become in a
:class:`~marl_minari.storage.range_reader.RangePlanner`.

A read of a chunk of episodes handles its leaves (15 for a three-agent recording) together,
one array per quantity with a row per leaf, rather than numpy calls per leaf: per-leaf calls
are a fixed cost of every chunk, comparable to a small chunk's bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from marl_minari.format import offset_index
from marl_minari.storage.range_reader import RangePlanner
from marl_minari.storage.reader_state import Leaf


@dataclass
class IndexEntries:
    """The index entries of a read's indexed leaves, one row per leaf.

    Attributes:
        positions: ``(L,)`` each row's leaf, as a position in the read's leaves.
        row_bytes: ``(L,)`` bytes of one row of each leaf.
        starts: ``(L, E)`` the index's offset of every episode's dataset (-1: none).
        stored: ``(L, E)`` rows every dataset holds.
        kept: ``(L, E)`` rows of every episode the output keeps.
        found: ``(L, E)`` the entries to read as bytes: those inside the file, until the
            reader leaves only the trusted ones (written in place).
    """

    positions: list[int]
    row_bytes: np.ndarray
    starts: np.ndarray
    stored: np.ndarray
    kept: np.ndarray
    found: np.ndarray


def index_entries(index: offset_index.OffsetIndex | None, leaves: Sequence[Leaf | None],
                  indices: np.ndarray, lengths: np.ndarray, file_size: int) -> IndexEntries:
    """The entries of ``leaves`` (``None``: a leaf the index may not place) for episodes
    ``indices`` of ``lengths`` steps, in a data file of ``file_size`` bytes."""
    positions = [n for n, leaf in enumerate(leaves) if leaf is not None and leaf.row_bytes]
    chosen = [leaf for leaf in leaves if leaf is not None and leaf.row_bytes]
    row_bytes = np.array([leaf.row_bytes for leaf in chosen], dtype=np.int64)
    stored = lengths[None, :] + np.array([int(leaf.per_obs) for leaf in chosen],
                                         dtype=np.int64)[:, None]
    kept = lengths[None, :] + np.array([int(leaf.per_obs and leaf.drop is None)
                                        for leaf in chosen], dtype=np.int64)[:, None]
    if chosen:
        assert index is not None
        starts = np.stack([index.offsets[leaf.path][indices] for leaf in chosen])
    else:
        starts = np.zeros((0, len(indices)), dtype=np.int64)
    found = (starts >= 0) & (starts + stored * row_bytes[:, None] <= file_size)
    # A leaf without a row to keep (one-step episodes of a dropped row) is not planned.
    found &= kept.sum(axis=1, keepdims=True) > 0
    return IndexEntries(positions, row_bytes, starts, stored, kept, found)


def plan_entries(planner: RangePlanner, entries: IndexEntries, leaves: Sequence[Leaf],
                 outs: Sequence[np.ndarray]) -> None:
    """Plan every ``found`` entry into its leaf's output array (``outs``, by the read's leaf
    positions, C-contiguous, each episode's kept rows back to back): one planner call for
    all leaves. A leaf stored with a row the output leaves out (``drop="first"``) is read
    from its second row."""
    found = entries.found
    if not found.any():
        return
    skip = np.array([row_bytes if leaves[n].drop == "first" else 0 for n, row_bytes in
                     zip(entries.positions, entries.row_bytes.tolist(), strict=True)],
                    dtype=np.int64)
    every = bool(found.all())  # the usual case: flattened, not selected (no copy)

    def pieces(values: np.ndarray) -> np.ndarray:
        return values.reshape(-1) if every else values[found]

    firsts = np.cumsum(entries.kept, axis=1) - entries.kept
    owners = np.broadcast_to(np.arange(len(entries.positions))[:, None], found.shape)
    planner.add_many([outs[n].reshape(-1).view(np.uint8) for n in entries.positions],
                     pieces(owners), pieces(firsts * entries.row_bytes[:, None]),
                     pieces(entries.starts + skip[:, None]),
                     pieces(entries.kept * entries.row_bytes[:, None]))


def comparison_chunks(supplier: object, candidates: list[tuple[int, Leaf, np.ndarray, np.ndarray]],
                      usable: list[np.ndarray], count: int
                      ) -> Iterator[tuple[slice, Callable[[], None] | None]]:
    """Slices of a read's ``count`` episodes whose entries are compared with HDF5 together,
    each with what fetches the slice's leaves at once should any of them be compared: a
    ``supplier`` that can prefetch (a remote file's ``prefetch_ranges``) is asked for a
    memory budget (its ``prefetch_budget``) at a time; one slice of them all, and nothing
    to fetch, for any other.

    Args:
        candidates: ``(row of the entries, leaf, its offsets, its stored rows)`` per leaf.
        usable: per row of the entries, which of the episodes' entries may be read.
    """
    prefetch = getattr(supplier, "prefetch_ranges", None)
    budget = int(getattr(supplier, "prefetch_budget", 0))
    if prefetch is None or budget <= 0:
        yield slice(0, count), None
        return
    sizes = np.zeros(count, dtype=np.int64)
    for position, leaf, _, stored in candidates:
        sizes += np.where(usable[position], stored * leaf.row_bytes, 0)
    ends = np.cumsum(sizes)
    first = 0
    while first < count:
        last = max(first + 1, int(np.searchsorted(ends, ends[first] - sizes[first] + budget,
                                                  side="right")))
        chunk = slice(first, last)
        yield chunk, partial(_prefetch_leaves, prefetch, candidates, usable, chunk)
        first = last


def _prefetch_leaves(prefetch: Callable[[np.ndarray], None],
                     candidates: list[tuple[int, Leaf, np.ndarray, np.ndarray]],
                     usable: list[np.ndarray], chunk: slice) -> None:
    """Ask ``prefetch`` for the byte ranges of the usable entries of ``chunk``'s episodes."""
    prefetch(np.concatenate([
        np.stack([starts[chunk][usable[position][chunk]],
                  stored[chunk][usable[position][chunk]] * leaf.row_bytes], axis=1)
        for position, leaf, starts, stored in candidates]))
