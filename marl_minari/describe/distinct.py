"""Counting distinct rows of a stream of arrays, in memory bounded by the distinct rows.

Coverage (:mod:`marl_minari.describe.coverage`) counts distinct (state, joint action) and
(observation, action) rows over a whole dataset read chunk by chunk. Keeping the rows
themselves would cost as much memory as the dataset when most rows are distinct (continuous
observations); instead every row becomes a digest of its bytes, and only digests are kept.

A row's digest is two 64-bit lanes computed with numpy over every 8-byte word of the row's
bytes (little-endian, zero-padded): each word is XOR-ed with a constant of its position and
mixed with MurmurHash3's 64-bit finaliser; lane 1 is the sum of the mixed words, lane 2 their
sum weighted by odd constants of their positions (both modulo 2**64). Both are stable: the same
bytes give the same digest on every machine and in every run.

:class:`DistinctCounter` keeps, per lane, a sorted table of the distinct values seen, and
counts ``max(distinct lane 1, distinct lane 2)``. Rows with equal bytes have equal digests, so
the count is never above the true number of distinct rows; it is below only if both lanes
merge distinct rows, each somewhere among the ``U`` distinct rows: probability about
``(U**2 / 2**65) ** 2``, below ``1e-11`` for ten million distinct rows. Sorting each lane on
its own (numpy's fast ``uint64`` sort) instead of the 128-bit pair is what keeps counting
cheap.

Beside lane 1's table it keeps how often each of its values occurred (8 more bytes per
distinct row), which gives the count frequencies (:meth:`DistinctCounter.count_frequencies`:
how many distinct rows occur once, twice, ...). Those are exact unless lane 1 alone merges two
distinct rows (probability about ``U**2 / 2**65``, 3e-6 for ten million distinct rows): their
occurrences then add up as one row's.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from collections.abc import Sequence
from typing import Final

import numpy as np

BLOCK_ROWS: Final = 8192
"""Rows hashed at a time by :func:`row_digests` (a few MiB of work that stays in cache)."""
PENDING_DIGESTS: Final = 1 << 22
"""Digests per lane held unsorted before they are merged into the table (32 MiB a lane,
shared by all the tables of one count); more are held only while a table itself is larger
(the pending part of a table never exceeds the table)."""

_M1: Final = np.uint64(0xFF51AFD7ED558CCD)
_M2: Final = np.uint64(0xC4CEB9FE1A85EC53)
_SHIFT: Final = np.uint64(33)
_GOLDEN: Final = 0x9E3779B97F4A7C15
_MASK: Final = (1 << 64) - 1


def _mix(x: np.ndarray, scratch: np.ndarray | None = None) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser applied in place to a ``uint64`` array (a bijection);
    ``scratch`` (same shape) saves allocating the shifted copies."""
    t = np.empty_like(x) if scratch is None else scratch
    for multiplier in (_M1, _M2, None):
        np.right_shift(x, _SHIFT, out=t)
        x ^= t
        if multiplier is not None:
            x *= multiplier
    return x


@functools.lru_cache(maxsize=16)
def _position_constants(words: int) -> tuple[np.ndarray, np.ndarray]:
    """``(seeds, odd multipliers)`` of the first ``words`` word positions (SplitMix64 of the
    position: fixed, so digests are stable across runs and machines)."""
    positions = np.arange(1, 2 * words + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        values = _mix(positions * np.uint64(_GOLDEN))
    seeds, multipliers = values[:words].copy(), values[words:] | np.uint64(1)
    seeds.setflags(write=False)
    multipliers.setflags(write=False)
    return seeds, multipliers


def _capacity(words: int) -> int:
    """The cached constant table size that covers ``words`` positions (a power of two)."""
    return 1 << max(6, (words - 1).bit_length())


def row_words(values: np.ndarray) -> np.ndarray:
    """``(n, k)`` little-endian ``uint64`` words of each row's bytes (zero-padded).

    ``values`` is ``(n, ...)``; fixed-size strings and numbers are taken as their bytes;
    Python objects (``Text`` spaces) and variable-width strings by a digest of their
    UTF-8 text, so that the same text gives the same words whatever the array's width.
    """
    n = len(values)
    flat = np.asarray(values).reshape(n, -1)
    if flat.dtype.kind in "OUS":
        flat = _text_words(flat)
    elif flat.dtype.byteorder == ">" or (flat.dtype.byteorder == "=" and sys.byteorder == "big"
                                        and flat.dtype.itemsize > 1):
        flat = flat.astype(flat.dtype.newbyteorder("<"))
    raw = np.ascontiguousarray(flat).view(np.uint8).reshape(n, -1)
    width = raw.shape[1]
    if width % 8:
        padded = np.zeros((n, width + 8 - width % 8), dtype=np.uint8)
        padded[:, :width] = raw
        raw = padded
    return raw.view("<u8")


def _text_words(flat: np.ndarray) -> np.ndarray:
    """One 8-byte BLAKE2b digest per text element (width-independent)."""
    out = np.empty(flat.shape, dtype="<u8")
    for index, item in np.ndenumerate(flat):
        text = item.decode("utf-8", "surrogateescape") if isinstance(item, bytes) else str(item)
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
        out[index] = int.from_bytes(digest, "little")
    return out


def canonical_floats(values: np.ndarray, *, copy: bool = True) -> np.ndarray:
    """``values`` with ``-0.0`` made ``0.0`` and every NaN one NaN, so that rows equal in
    value have equal bytes (``copy=False`` changes a float array in place); other dtypes are
    returned as they are."""
    if values.dtype.kind not in "fc":
        return values
    out = values + values.dtype.type(0) if copy else values  # -0.0 + 0.0 == +0.0
    if not copy:
        out += values.dtype.type(0)
    if out.size and np.isnan(out.min()):  # one pass; NaNs are rare
        out[np.isnan(out)] = np.nan
    return out


def row_digests(parts: Sequence[np.ndarray]) -> np.ndarray:
    """``(2, n)`` ``uint64`` digests (two lanes) of rows made of ``parts`` side by side
    (each ``(n, ...)``).

    Equal rows (equal bytes in every part) have equal digests. Float parts are taken as they
    are: pass them through :func:`canonical_floats` first to count ``-0.0`` and ``0.0`` (and
    NaNs) as equal. Rows are hashed :data:`BLOCK_ROWS` at a time, so the work stays in the
    processor's cache.
    """
    n = len(parts[0]) if parts else 0
    words = [row_words(part) for part in parts]
    widths = [w.shape[1] for w in words]
    digests = np.zeros((2, n), dtype=np.uint64)
    if n == 0 or not sum(widths):
        return digests
    seeds, multipliers = _position_constants(_capacity(sum(widths)))
    rows = min(n, BLOCK_ROWS)
    mixed = np.empty((max(widths), rows), dtype=np.uint64)
    scratch = np.empty_like(mixed)
    with np.errstate(over="ignore"):
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            position = 0
            for part, width in zip(words, widths, strict=True):
                if not width:
                    continue
                # (width, rows): each word position is one contiguous row, summed below
                x, t = mixed[:width, :stop - start], scratch[:width, :stop - start]
                np.bitwise_xor(part[start:stop].T, seeds[position:position + width, None],
                               out=x)
                _mix(x, t)
                digests[0, start:stop] += x.sum(axis=0, dtype=np.uint64)
                x *= multipliers[position:position + width, None]
                digests[1, start:stop] += x.sum(axis=0, dtype=np.uint64)
                position += width
    return digests


def _distinct(values: np.ndarray, *, runs: bool = False) -> np.ndarray:
    """The distinct values of ``values``, sorted; ``runs``: ``values`` is a few sorted runs
    side by side (numpy's stable sort merges them in linear time)."""
    ordered = np.sort(values, kind="stable" if runs else "quicksort")
    if len(ordered) < 2:
        return ordered
    keep = np.empty(len(ordered), dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


class DistinctCounter:
    """Counts distinct rows from their :func:`row_digests`, added in any number of batches.

    Memory: the distinct digests and how often each occurred (24 bytes per distinct row) plus
    at most as many pending digests (or :data:`PENDING_DIGESTS` per lane while the table is
    smaller).
    """

    def __init__(self, pending_limit: int = PENDING_DIGESTS) -> None:
        self._tables = [np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.uint64)]
        self._occurrences = np.zeros(0, dtype=np.int64)
        """How often each value of lane 1's table (``_tables[0]``) occurred, aligned with it."""
        self._pending: list[list[np.ndarray]] = [[], []]
        self._pending_size = 0
        self._pending_limit = pending_limit
        self.rows = 0
        """Rows added (distinct or not)."""

    def add(self, digests: np.ndarray) -> None:
        """Add the ``(2, n)`` digests of ``n`` rows (lanes as rows, as :func:`row_digests`
        returns them)."""
        if not digests.shape[1]:
            return
        self.rows += digests.shape[1]
        for lane in (0, 1):
            self._pending[lane].append(digests[lane])
        self._pending_size += digests.shape[1]
        if self._pending_size > max(self._pending_limit, len(self._tables[0])):
            self._merge()

    def _merge(self) -> None:
        if self._pending[0]:
            self._merge_counted(np.concatenate(self._pending[0]))
        if self._pending[1]:
            # sort only the new digests; merging two sorted runs is linear
            new = _distinct(np.concatenate(self._pending[1]))
            self._tables[1] = _distinct(np.concatenate([self._tables[1], new]), runs=True)
        self._pending = [[], []]
        self._pending_size = 0

    def _merge_counted(self, digests: np.ndarray) -> None:
        """Merge lane 1's pending ``digests`` into its table and their occurrences."""
        new, occurrences = np.unique(digests, return_counts=True)
        table = self._tables[0]
        at = np.searchsorted(table, new)
        seen = at < len(table)
        seen[seen] = table[at[seen]] == new[seen]
        # ``new`` is distinct, so the positions of values already seen are distinct too
        self._occurrences[at[seen]] += occurrences[seen]
        unseen = ~seen
        self._tables[0] = np.insert(table, at[unseen], new[unseen])
        self._occurrences = np.insert(self._occurrences, at[unseen], occurrences[unseen])

    @property
    def table_bytes(self) -> int:
        """Bytes the digests and their occurrences take now (table and pending)."""
        return 8 * (2 * len(self._tables[0]) + len(self._tables[1]) + 2 * self._pending_size)

    def count(self) -> int:
        """Distinct rows added so far."""
        self._merge()
        return max(len(self._tables[0]), len(self._tables[1]))

    def count_frequencies(self) -> tuple[np.ndarray, np.ndarray]:
        """``(occurrences, rows)``: the distinct numbers of times a distinct row occurred, in
        increasing order, and how many distinct rows occurred that many times (both
        ``int64``). ``sum(occurrences * rows)`` is :attr:`rows`; ``sum(rows)`` is
        :meth:`count` (unless lane 1 alone merged rows, see the module)."""
        self._merge()
        occurrences, rows = np.unique(self._occurrences, return_counts=True)
        return occurrences.astype(np.int64), rows.astype(np.int64)
