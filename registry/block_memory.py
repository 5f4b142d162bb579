"""The verified blocks of one remote file kept in memory, and rows gathered from them.

A :class:`~.remote_file.RemoteFile` keeps the blocks it last verified (fetched, or read from
its disk cache) so that HDF5's many small reads of one region cost no new request. Each block
is a view of the buffer it arrived in: a fetched run of adjacent blocks, or a run read from a
cached pack. The comparisons of offset-index entries read thousands of small structures at a
time (object headers, local heaps, B-tree nodes, one per episode); :meth:`BlockMemory.gather`
copies them out of those few buffers with one numpy indexing per buffer, where one slice per
structure would cost a Python call each.
"""

from __future__ import annotations

import itertools
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Final

import numpy as np
from numpy.lib.stride_tricks import as_strided

_NOWHERE: Final = -1
"""The buffer key of a block not in memory (a key is a buffer's ``id``, never negative)."""


class BlockMemory:
    """Verified blocks by number, the least recently used dropped first once they hold more
    than ``max_bytes`` (the last one put is always kept). Thread-safe.

    Args:
        block_count: blocks of the file.
        max_bytes: the budget.
    """

    def __init__(self, block_count: int, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[int, bytes | memoryview] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        # Where each block lies: the key of the buffer it is a view of, and its first byte's
        # position there; each buffer, as uint8, with the number of blocks that use it.
        self._buffer_of = np.full(block_count, _NOWHERE, dtype=np.int64)
        self._start_in = np.zeros(block_count, dtype=np.int64)
        self._buffers: dict[int, tuple[np.ndarray, int]] = {}

    def get(self, number: int) -> bytes | memoryview | None:
        """Block ``number``'s bytes, if kept (then it is the most recently used)."""
        with self._lock:
            data = self._blocks.get(number)
            if data is not None:
                self._blocks.move_to_end(number)
            return data

    def get_many(self, numbers: Iterable[int]) -> dict[int, bytes | memoryview]:
        """The kept blocks among ``numbers``, by number (each now recently used)."""
        found: dict[int, bytes | memoryview] = {}
        with self._lock:
            for number in numbers:
                data = self._blocks.get(number)
                if data is not None:
                    found[number] = data
                    self._blocks.move_to_end(number)
        return found

    def absent(self, numbers: np.ndarray) -> np.ndarray:
        """Those of ``numbers`` not kept."""
        with self._lock:
            return numbers[self._buffer_of[numbers] == _NOWHERE]

    def put(self, number: int, data: bytes | memoryview) -> None:
        """Keep block ``number`` (its verified bytes); drop the oldest blocks over budget."""
        key, buffer, start = _home(memoryview(data))
        with self._lock:
            if number in self._blocks:
                return
            self._blocks[number] = data
            self._bytes += len(data)
            held = self._buffers.get(key)
            self._buffers[key] = (buffer if held is None else held[0],
                                  1 if held is None else held[1] + 1)
            self._buffer_of[number], self._start_in[number] = key, start
            while self._bytes > self.max_bytes and len(self._blocks) > 1:
                dropped, old = self._blocks.popitem(last=False)
                self._bytes -= len(old)
                self._release(dropped)

    def gather(self, addresses: np.ndarray, length: int, block_size: int
               ) -> tuple[np.ndarray, np.ndarray]:
        """``length`` bytes at each of ``addresses`` (a file's offsets, ``length`` at most
        ``block_size``): ``(rows, filled)``, ``(len(addresses), length)`` uint8 rows and which
        of them were copied from kept blocks. A row is filled when the blocks it touches are
        kept and lie next to each other in one buffer; the others are left to the caller."""
        first = addresses // block_size
        last = (addresses + (length - 1)) // block_size
        with self._lock:
            buffer_first, buffer_last = self._buffer_of[first], self._buffer_of[last]
            start_first, start_last = self._start_in[first], self._start_in[last]
            buffers = {key: held[0] for key, held in self._buffers.items()}
            used = np.zeros(len(self._buffer_of), dtype=bool)
            used[first] = True
            for number in np.flatnonzero(used).tolist():
                if number in self._blocks:
                    self._blocks.move_to_end(number)
        filled = ((buffer_first != _NOWHERE) & (buffer_first == buffer_last)
                  & (start_last - start_first == (last - first) * block_size))
        chosen = np.flatnonzero(filled)
        chosen = chosen[np.argsort(buffer_first[chosen], kind="stable")]  # buffer by buffer
        keys = buffer_first[chosen]
        positions = (start_first + (addresses - first * block_size))[chosen]
        bounds = [0, *(np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist(), len(chosen)]
        gathered = np.empty((len(chosen), length), dtype=np.uint8)
        for low, high in itertools.pairwise(bounds):
            if low == high:
                continue
            buffer = buffers[int(keys[low])]
            # Every row of the buffer as a view (no copy): indexing it copies whole rows.
            windows = as_strided(buffer, (len(buffer) - length + 1, length), (1, 1),
                                 writeable=False)
            gathered[low:high] = windows[positions[low:high]]
        rows = np.empty((len(addresses), length), dtype=np.uint8)
        rows[chosen] = gathered
        return rows, filled

    def _release(self, number: int) -> None:
        key = int(self._buffer_of[number])
        self._buffer_of[number] = _NOWHERE
        buffer, users = self._buffers[key]
        if users == 1:
            del self._buffers[key]
        else:
            self._buffers[key] = (buffer, users - 1)


def _home(view: memoryview) -> tuple[int, np.ndarray, int]:
    """The buffer ``view`` is a slice of, as ``(key, uint8 array, where the view starts)``."""
    whole = np.frombuffer(memoryview(view.obj), dtype=np.uint8)
    start = (np.frombuffer(view, dtype=np.uint8).__array_interface__["data"][0]
             - whole.__array_interface__["data"][0])
    return id(view.obj), whole, start
