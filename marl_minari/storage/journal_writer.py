"""Handing finished episodes to the journal, on a background thread or in the caller's.

With ``background_writing=True`` a recorder's ``step`` only hands a finished episode over
(by default it writes it itself, before returning); a writer thread encodes (JPEG),
checksums, writes and flushes its journal record (:meth:`Recording.append`) while the env
steps on. The hand-over is bounded: at most ``capacity`` episodes wait or are being written,
and the recorder blocks until one is durable, so memory stays flat however long the
recording. An episode is durable (counted by :attr:`JournalWriter.durable_episodes`) only
once ``Recording.append`` returned for it, that is written and, by default, ``fdatasync``-ed;
:meth:`JournalWriter.flush` waits until every handed-over episode is.

The thread runs only while there is work and is not a daemon thread, so an interpreter that
exits without ``close`` still writes the queued episodes before it ends. A failure in the
thread is raised in the recorder (at the next hand-over, ``flush`` or ``close``) as the
original exception; the episode whose write failed is dropped then, as when writing in the
caller, and the episodes queued behind it are written after it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from marl_minari.errors import ConfigurationError
from marl_minari.storage.episode import MultiAgentEpisode

Append = Callable[[MultiAgentEpisode, dict[str, Any] | None], None]
"""Writes one episode (and its episode metadata) durably: :meth:`Recording.append`."""

DEFAULT_CAPACITY = 2
"""Episodes handed to the writer thread and not yet durable, at most (by default)."""


def check_capacity(capacity: int) -> int:
    """``capacity`` if it is a valid ``writer_queue`` size.

    Raises:
        ConfigurationError: not a positive integer.
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise ConfigurationError(
            f"writer_queue={capacity!r}: the number of finished episodes the background writer "
            "may hold must be an integer >= 1 (default 2)")
    return capacity


class JournalWriter:
    """Writes handed-over episodes in order, in a background thread or in the caller.

    Args:
        append: writes one episode durably (called from one thread at a time, in order).
        background: write on a background thread (else :meth:`submit` writes before it
            returns).
        capacity: episodes handed over and not yet durable, at most; :meth:`submit` blocks
            while that many are.

    Raises:
        ConfigurationError: ``capacity`` is not an integer >= 1.
    """

    def __init__(self, append: Append, *, background: bool = True,
                 capacity: int = DEFAULT_CAPACITY) -> None:
        self._append = append
        self._background = background
        self._capacity = check_capacity(capacity)
        self._waiting: deque[tuple[MultiAgentEpisode, dict[str, Any] | None]] = deque()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._submitted = 0
        self._durable = 0

    @property
    def background(self) -> bool:
        """Whether episodes are written on a background thread."""
        return self._background

    @property
    def submitted_episodes(self) -> int:
        """Finished episodes handed over so far."""
        return self._submitted

    @property
    def durable_episodes(self) -> int:
        """Handed-over episodes whose journal record is written and flushed."""
        return self._durable

    @property
    def pending_episodes(self) -> int:
        """Handed-over episodes not durable yet (waiting or being written)."""
        with self._changed:
            return len(self._waiting)

    def submit(self, episode: MultiAgentEpisode, metadata: dict[str, Any] | None) -> None:
        """Hand over a finished episode; block while ``capacity`` episodes are not durable.

        Raises:
            Exception: the error of an earlier background write (this episode is then still
                handed over, and written after the ones before it).
        """
        if not self._background:
            self._submitted += 1
            self._append(episode, metadata)
            self._durable += 1
            return
        with self._changed:
            # The thread runs whenever episodes wait and no error is pending, and a failed
            # write leaves the queue too, so this ends.
            while len(self._waiting) >= self._capacity:
                self._changed.wait()
            # Queued even when an error is about to be raised (one over the capacity then):
            # the error belongs to an earlier episode, and this one must not be lost with it.
            self._waiting.append((episode, metadata))
            self._submitted += 1
            self._start()
        self._raise_error()

    def flush(self) -> None:
        """Wait until every handed-over episode is durable.

        Raises:
            Exception: the error of a background write (the episodes queued behind the failed
                one are then written by the next ``flush``).
        """
        with self._changed:
            while self._waiting and self._error is None:
                self._changed.wait()
        self._raise_error()

    def close(self) -> None:
        """Write every handed-over episode, going on past failures; raise the first failure.

        Each failure drops one episode, so this ends; the recording can then be closed with
        nothing still being written to it.
        """
        first: BaseException | None = None
        while True:
            try:
                self.flush()
            except Exception as exc:  # noqa: BLE001 - the first is raised once all are written
                first = first or exc
                continue
            break
        if first is not None:
            raise first

    def _start(self) -> None:
        """Start the writer thread if it is not running (call holding ``_changed``)."""
        if self._thread is None and self._waiting and self._error is None:
            self._thread = threading.Thread(target=self._run, name="marl-minari-journal-writer")
            self._thread.start()

    def _raise_error(self) -> None:
        """Raise a background failure once; the episodes queued behind it go on."""
        with self._changed:
            error, self._error = self._error, None
            if error is not None:
                self._start()
        if error is not None:
            raise error

    def _run(self) -> None:
        while True:
            with self._changed:
                if not self._waiting:
                    self._thread = None
                    self._changed.notify_all()
                    return
                # Kept in the queue while written: it counts against the capacity until durable.
                episode, metadata = self._waiting[0]
            try:
                self._append(episode, metadata)
            except BaseException as exc:  # noqa: BLE001 - handed to the recorder, never lost
                with self._changed:
                    self._waiting.popleft()
                    exc.add_note(
                        f"The journal writer failed on a finished episode (seed "
                        f"{episode.seed}, {episode.total_steps} steps), which is not stored; "
                        f"{len(self._waiting)} episode(s) queued behind it are written next.")
                    self._error = exc
                    self._thread = None
                    self._changed.notify_all()
                return
            with self._changed:
                self._waiting.popleft()
                self._durable += 1
                self._changed.notify_all()
