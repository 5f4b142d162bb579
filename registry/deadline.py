"""One deadline per registry operation, shared by every request the operation makes.

A socket timeout bounds one wait for the server; it never bounds a server that sends a byte a
second, because every byte starts the wait again. So every operation (listing a registry,
downloading or publishing a dataset, finding which registry a URL names) carries one
:class:`Deadline`, and every request of the operation (the index, manifests, metadata and the
data files alike) spends from it. The operation may run ``http_timeout`` seconds plus the time
the bytes it has received need at ``min_download_rate``
(:meth:`~marl_minari.registry.settings.RemoteSettings.download_deadline` of those bytes): a
server that keeps that average rate gets all the time the transfer needs; one sending at
``rate`` below it is cut off after ``http_timeout / (1 - rate / min_download_rate)`` seconds,
about ``http_timeout`` for a trickle.

The deadline is checked after every arrival of data. On ``http(s)://`` a watchdog thread also
shuts an operation's sockets down once its deadline has passed, so a server that trickles the
status line or the headers (which the HTTP client reads on its own) is cut off too.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
import weakref
from typing import Final

from .settings import RemoteSettings

_WAKE_SLACK: Final = 0.01
"""Seconds the watchdog sleeps past a deadline, so it never wakes just before it."""


class DeadlineExceeded(TimeoutError):
    """An operation ran past its deadline (each remote kind turns it into a ``RemoteError``)."""


class Deadline:
    """The time limit of one operation, shared by all its requests (see the module docstring).

    The clock starts at the first request (:meth:`remaining`, :meth:`wait_limit`,
    :meth:`check`), so local work before it, such as validating a dataset before publishing
    it, is not counted. Thread-safe: the parallel parts of one upload spend from one deadline.

    Args:
        settings: ``http_timeout`` (the time allowed with no data at all) and
            ``min_download_rate`` (what each byte received adds).
    """

    def __init__(self, settings: RemoteSettings) -> None:
        self.settings = settings
        self._started: float | None = None
        self._received = 0
        self._lock = threading.Lock()

    @property
    def received(self) -> int:
        """Bytes this operation has received or sent so far."""
        return self._received

    def allowed(self) -> float:
        """Seconds the operation may run, given the bytes received so far."""
        return self.settings.download_deadline(self._received)

    def restart(self) -> None:
        """Start afresh (no time spent, no bytes), for an operation made of independent
        steps, such as rebuilding an index dataset by dataset."""
        with self._lock:
            self._started = None
            self._received = 0

    def credit(self, count: int) -> None:
        """Record ``count`` bytes received (or sent): each adds ``1 / min_download_rate`` s."""
        with self._lock:
            self._received += count

    def remaining(self) -> float:
        """Seconds left (negative once the deadline has passed); starts the clock."""
        now = time.monotonic()
        with self._lock:
            if self._started is None:
                self._started = now
            started = self._started
        return started + self.allowed() - now

    def expired(self) -> bool:
        """True once the deadline has passed."""
        return self.remaining() <= 0

    def check(self) -> None:
        """Raise :class:`DeadlineExceeded` once the deadline has passed."""
        if self.expired():
            raise DeadlineExceeded

    def wait_limit(self) -> float:
        """Seconds the next wait for the server may take: ``http_timeout``, or what is left.

        Raises:
            DeadlineExceeded: nothing is left.
        """
        left = self.remaining()
        if left <= 0:
            raise DeadlineExceeded
        return min(self.settings.http_timeout, left)

    def watch(self, sock: socket.socket) -> Watch:
        """Shut ``sock`` down once this deadline has passed, unless it was closed or the
        returned watch ended before (a kept-alive connection goes on to other operations)."""
        return _WATCHDOG.watch(self, sock)


class Watch:
    """One deadline's watch over one socket, from :meth:`Deadline.watch` until :meth:`end`."""

    __slots__ = ("deadline", "socket", "ended")

    def __init__(self, deadline: Deadline, sock: socket.socket) -> None:
        self.deadline = deadline
        self.socket = weakref.ref(sock)
        self.ended = False

    def end(self) -> None:
        """Stop watching: the deadline no longer shuts the socket down."""
        self.ended = True


class _Watchdog:
    """One daemon thread that shuts down the sockets of operations past their deadline.

    It holds sockets weakly and runs only while some watched socket is open; it sleeps until
    the earliest deadline, which the bytes arriving meanwhile may have pushed back.
    """

    def __init__(self) -> None:
        self._wake = threading.Condition()
        self._watched: list[Watch] = []
        self._running = False

    def watch(self, deadline: Deadline, sock: socket.socket) -> Watch:
        watch = Watch(deadline, sock)
        with self._wake:
            self._watched.append(watch)
            if not self._running:
                self._running = True
                threading.Thread(target=self._run, name="marl-minari-registry-deadlines",
                                 daemon=True).start()
            self._wake.notify()
        return watch

    def _run(self) -> None:
        with self._wake:
            while True:
                pending = []
                for watch in self._watched:
                    sock = watch.socket()
                    if watch.ended or sock is None or sock.fileno() < 0:
                        continue  # its request is over
                    if watch.deadline.expired():
                        _cut(sock)
                        continue
                    pending.append(watch)
                self._watched = pending
                if not pending:
                    self._running = False
                    return
                self._wake.wait(min(w.deadline.remaining() for w in pending) + _WAKE_SLACK)


def _cut(sock: socket.socket) -> None:
    """Shut the connection down, which wakes a thread blocked reading it.

    The plain ``socket.socket.shutdown`` is called on purpose for TLS sockets too: it acts on
    the file descriptor only, and leaves the TLS object to the thread reading through it.
    """
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


_WATCHDOG: Final = _Watchdog()
