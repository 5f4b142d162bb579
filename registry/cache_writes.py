"""Writing verified blocks to the disk cache on a thread of their own, while the read goes on.

A first pass over a streamed file fetches every block, then compares the offset index's
entries with the file's structure before it copies a byte out. Writing the fetched blocks to
the cache on the fetching threads held the comparisons back by as long as the writes took (a
fifth of the pass); handed to this writer, they are made meanwhile, on the other core.

What is written is unchanged (verified blocks, one pack per fetched run, under a temporary name
then renamed). What changes is when: a write is *pending* from its hand-over until its pack is
in place. Every read of the cache in this process first waits for the pending writes of its
file (:meth:`BackgroundWrites.settle`), so a process never fetches again what it has just
fetched; a read operation of a streaming source waits for its writes before it returns, so the
cache is as full when the call returns as it was when writes were made in place. The thread
is not a daemon thread: an interpreter that exits normally first finishes the writes. A
forked child starts with none pending (its parent writes them).
"""

from __future__ import annotations

import os
import threading
from collections import Counter, deque
from collections.abc import Callable
from typing import Final

DEFAULT_MAX_PENDING_BYTES: Final = 128 << 20
"""Bytes handed over and not yet written, at most: a hand-over past it waits for the writer
(the pending runs' buffers stay in memory until written)."""


class BackgroundWrites:
    """Writes run in order on one background thread, each under a key (a file's pack folder);
    :meth:`settle` waits for a key's. Thread-safe.

    Args:
        max_pending_bytes: bytes pending at most before :meth:`submit` waits.
    """

    def __init__(self, max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES) -> None:
        self.max_pending_bytes = max_pending_bytes
        self._changed = threading.Condition()
        self._reset()

    def _reset(self) -> None:
        self._queue: deque[tuple[str, int, Callable[[], None]]] = deque()
        self._pending: Counter[str] = Counter()
        self._pending_bytes = 0
        self._failures: dict[str, BaseException] = {}
        self._thread: threading.Thread | None = None

    def after_fork_in_child(self) -> None:
        """Forget the parent's pending writes and its thread (the parent makes them)."""
        self._changed = threading.Condition()
        self._reset()

    def submit(self, key: str, size: int, write: Callable[[], None]) -> None:
        """Run ``write`` (``size`` bytes' worth, under ``key``) on the writer thread, after
        the writes handed over before it; wait first while too many bytes are pending."""
        with self._changed:
            while self._pending_bytes and self._pending_bytes + size > self.max_pending_bytes:
                self._changed.wait()
            self._queue.append((key, size, write))
            self._pending[key] += 1
            self._pending_bytes += size
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="marl-minari-cache-writer")
                self._thread.start()

    def settle(self, key: str) -> None:
        """Wait until no write under ``key`` is pending; raise the first error one of them
        raised (an error of the cache's own code: the writes turn a failing disk into
        :attr:`BlockCache.write_failure`)."""
        with self._changed:
            while self._pending[key]:
                self._changed.wait()
            del self._pending[key]
            failure = self._failures.pop(key, None)
        if failure is not None:
            raise failure

    def pending(self, key: str) -> int:
        """Writes under ``key`` handed over and not yet made."""
        with self._changed:
            return self._pending[key]

    def _run(self) -> None:
        while True:
            with self._changed:
                if not self._queue:
                    self._thread = None
                    self._changed.notify_all()
                    return
                key, size, write = self._queue.popleft()
            try:
                write()
            except BaseException as exc:  # noqa: BLE001 - raised in whoever settles the key
                with self._changed:
                    self._failures.setdefault(key, exc)
            with self._changed:
                self._pending[key] -= 1
                self._pending_bytes -= size
                self._changed.notify_all()


CACHE_WRITES: Final = BackgroundWrites()
"""The process's writer of verified blocks to the disk cache."""

os.register_at_fork(after_in_child=CACHE_WRITES.after_fork_in_child)
