"""Kept-alive connections for the ``http(s)://`` remotes, shared by every backend of a process.

urllib opens a connection for each request and closes it after (its handlers send
``Connection: close``). On a far host every new connection costs a round trip before the
request (TCP), two under HTTPS (TLS), so a streamed dataset whose reads each wait on one
request would wait two round trips for each, three under HTTPS. :func:`open_kept_alive` is
the body of our urllib handlers instead: it takes an idle connection to the same server when
there is one, and a response read to its end gives its connection back. Redirects, proxies
and errors stay urllib's.

A connection is watched by the deadline of the operation using it (:class:`~.deadline.Watch`),
from its socket's creation or its taking from the pool to its giving back: a deadline that
passes later never cuts a connection that has gone on to another operation. A kept-alive
connection the server has closed meanwhile fails before any answer; the request is then sent
once more on a new connection (requests here are all ``GET``s, safe to repeat). A forked
child starts with no idle connections: its parent's sockets are not its own to use.

A caller about to send several requests at once can have connections made ahead
(:func:`warming_request`, through the same handlers, so a proxy and TLS apply as for its
requests): the pool counts the connections to each server in use as well as idle, and
warming stops once enough are open.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import ipaddress
import os
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Hashable
from typing import Any, Final, Protocol

from .deadline import Deadline, Watch

IDLE_PER_SERVER = 16
"""Idle connections kept per server: the streaming reader's parallel requests (8 by default)
and the lookup's candidate registries (up to 8) each hold one. ``0`` keeps none (a
connection per request, as urllib alone: ``benchmarks/bench_remote.py`` compares both)."""


class _Keepable(Protocol):
    """What a connection class of :mod:`.http` adds to ``http.client.HTTPConnection``."""

    sock: Any
    timeout: float | None
    watch: Watch | None

    def watch_with(self, deadline: Deadline) -> None: ...
    def connect(self) -> None: ...
    def set_tunnel(self, host: str, port: int | None = None,
                   headers: dict[str, str] | None = None) -> None: ...
    def request(self, method: str, url: str, body: Any = None,
                headers: dict[str, str] = ...) -> None: ...
    def getresponse(self) -> http.client.HTTPResponse: ...
    def close(self) -> None: ...


class KeptAliveResponse(http.client.HTTPResponse):
    """A response that gives its connection back once closed, if its body was read to the end
    (its ``Content-Length`` reached) and the server keeps the connection open."""

    give_back: Callable[[bool], None] | None = None

    def close(self) -> None:
        finished = self.length == 0 and not self.will_close
        super().close()
        give_back, self.give_back = self.give_back, None
        if give_back is not None:
            give_back(finished)


class _Pool:
    """Idle connections by server (scheme, host, tunnelled host, TLS context), and how many
    to each are in use."""

    def __init__(self) -> None:
        self._idle: dict[Hashable, list[_Keepable]] = {}
        self._in_use: dict[Hashable, int] = {}
        # Re-entrant: a response the garbage collector finalizes gives its connection back
        # on whatever thread it runs, possibly one inside this lock.
        self._lock = threading.RLock()

    def take(self, server: Hashable) -> _Keepable | None:
        """An idle connection to ``server``, if any; either way, the caller now uses one
        until :meth:`give_back` or :meth:`drop`."""
        with self._lock:
            self.begin(server)
            idle = self._idle.get(server)
            return idle.pop() if idle else None

    def begin(self, server: Hashable) -> None:
        """The caller now uses a new connection to ``server``, until :meth:`give_back` or
        :meth:`drop`."""
        with self._lock:
            self._in_use[server] = self._in_use.get(server, 0) + 1

    def drop(self, server: Hashable) -> None:
        """A connection to ``server`` taken is not used any more, nor kept."""
        with self._lock:
            # Nothing counted: a connection taken before a fork (the child forgot it).
            left = self._in_use.pop(server, 0) - 1
            if left > 0:
                self._in_use[server] = left

    def give_back(self, server: Hashable, connection: _Keepable) -> None:
        with self._lock:
            self.drop(server)
            idle = self._idle.setdefault(server, [])
            if len(idle) < IDLE_PER_SERVER:
                idle.append(connection)
                return
        connection.close()

    def idle(self) -> int:
        """How many connections are idle."""
        with self._lock:
            return sum(len(idle) for idle in self._idle.values())

    def open_to(self, server: Hashable) -> int:
        """How many connections to ``server`` are idle or in use."""
        with self._lock:
            return len(self._idle.get(server, ())) + self._in_use.get(server, 0)

    def begin_below(self, server: Hashable, enough: int) -> bool:
        """:meth:`begin` a new connection to ``server`` unless ``enough`` are open (decided
        under the lock: callers at once never make more than ``enough`` between them)."""
        with self._lock:
            if self.open_to(server) >= enough:
                return False
            self.begin(server)
            return True

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()

    def forget(self) -> None:
        """Drop every idle connection without a word to its server: a forked child's are
        its parent's. Their sockets close with their last reference."""
        self._idle = {}
        self._in_use = {}
        self._lock = threading.RLock()


_POOL: Final = _Pool()
os.register_at_fork(after_in_child=_POOL.forget)


def close_idle_connections() -> None:
    """Close every idle kept-alive connection of this process (the next requests open new
    ones)."""
    _POOL.close()


def idle_connections() -> int:
    """How many kept-alive connections this process holds idle."""
    return _POOL.idle()


ERROR_BODY_READ: Final = 64 * 1024
"""Longest error body read to its end so that its connection is kept."""


def finish_error(error: urllib.error.HTTPError) -> None:
    """Read an error answer's short body to its end and close it: its connection is then
    kept (the candidate registries of a lookup answer 404s)."""
    length = error.headers.get("Content-Length", "")
    with contextlib.suppress(OSError, http.client.HTTPException):
        if length.isdigit() and int(length) <= ERROR_BODY_READ:
            error.read()
    error.close()


def _end_watch(connection: _Keepable) -> None:
    if connection.watch is not None:
        connection.watch.end()
        connection.watch = None


def _given_back(server: Hashable, connection: _Keepable, finished: bool) -> None:
    _end_watch(connection)
    if finished and connection.sock is not None:
        _POOL.give_back(server, connection)
    else:
        _POOL.drop(server)
        connection.close()


_STALE: Final = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                 ConnectionAbortedError)
"""What sending on a kept-alive connection the server has closed raises before any answer."""


def _closed_while_idle(exc: BaseException) -> bool:
    return isinstance(exc, _STALE) or (isinstance(exc, urllib.error.URLError)
                                       and isinstance(exc.reason, _STALE))


def on_loopback(url: str) -> bool:
    """Whether ``url``'s host is this machine's loopback (``localhost``, ``127.0.0.0/8``,
    ``::1``), named as such: a connection there costs no round trip."""
    try:
        host = urllib.parse.urlsplit(url).hostname
    except ValueError:
        return False
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Warmed(Exception):  # noqa: N818 - an outcome, not a failure
    """What a request to warm a connection (:func:`warming_request`) ends with, its
    connection idle in the pool (or none made: enough were idle)."""


def warming_request(url: str, headers: dict[str, str], enough: int) -> urllib.request.Request:
    """A request that only connects to ``url``'s server (TCP, a proxy's tunnel, TLS) and
    leaves the connection idle, unless ``enough`` connections to that server already are:
    opened, it raises :class:`Warmed`. An open warms connections while its first requests are
    in flight, so that its next ones, sent together, each find one ready (on a far host, a
    new connection costs one round trip, two under HTTPS)."""
    request = urllib.request.Request(url, headers=headers)
    request.warm_below = enough  # type: ignore[attr-defined]  # read by open_kept_alive
    return request


def open_kept_alive(make: Callable[[str, float | None], _Keepable], request: Any,
                    deadline: Deadline, tls: object = None) -> http.client.HTTPResponse:
    """What urllib's ``AbstractHTTPHandler.do_open`` does, on a kept-alive connection.

    Args:
        make: a new connection to a host (``"host[:port]"``) with a socket timeout.
        request: the ``urllib.request.Request`` (proxied, when a proxy applies); one of
            :func:`warming_request` only connects.
        deadline: the operation's deadline, which watches the connection while it is used.
        tls: the TLS context of HTTPS connections (connections made with another are not
            taken).

    Raises:
        Warmed: ``request`` only warms a connection, and did.
    """
    host = request.host
    if not host:
        raise urllib.error.URLError("no host given")
    headers = dict(request.unredirected_hdrs)
    headers.update({k: v for k, v in request.headers.items() if k not in headers})
    headers = {name.title(): value for name, value in headers.items()}
    tunnel = request._tunnel_host  # set by urllib's ProxyHandler for HTTPS through a proxy
    tunnel_headers = {}
    if tunnel and "Proxy-Authorization" in headers:  # for the proxy, not the server
        tunnel_headers["Proxy-Authorization"] = headers.pop("Proxy-Authorization")
    server = (request.type, host, tunnel, id(tls) if tls is not None else None)
    warm_below = getattr(request, "warm_below", None)
    if warm_below is not None:
        _warm(server, functools.partial(make, host, request.timeout), tunnel, tunnel_headers,
              deadline, warm_below)
        raise Warmed
    connection = _POOL.take(server)
    while True:
        kept = connection is not None
        if connection is None:  # a new one (counted as in use already)
            connection = make(host, request.timeout)
            if tunnel:
                connection.set_tunnel(tunnel, headers=tunnel_headers)
        else:
            connection.sock.settimeout(request.timeout)
            connection.timeout = request.timeout
        connection.watch_with(deadline)
        try:
            try:
                connection.request(request.get_method(), request.selector, request.data,
                                   headers)
            except OSError as exc:  # as urllib says it
                raise urllib.error.URLError(exc) from None
            response = connection.getresponse()
        except BaseException as exc:
            if kept and _closed_while_idle(exc) and not deadline.expired():
                _end_watch(connection)  # once more, on a new connection (still in use)
                connection.close()
                connection = None
                continue
            _given_back(server, connection, False)
            raise
        break
    assert isinstance(response, KeptAliveResponse)
    response.give_back = functools.partial(_given_back, server, connection)
    response.url = request.get_full_url()
    response.msg = response.reason  # type: ignore[assignment]  # as urllib sets it
    return response


def _warm(server: Hashable, make: Callable[[], _Keepable], tunnel: str | None,
          tunnel_headers: dict[str, str], deadline: Deadline, enough: int) -> None:
    """Connect new connections and leave them idle until ``enough`` to ``server`` are idle or
    in use (at most :data:`IDLE_PER_SERVER`). A request sent meanwhile may take one: it
    still counts once, and another is made for the requests to come."""
    enough = min(enough, IDLE_PER_SERVER)
    for _ in range(enough):
        connection = make()  # no socket until connected
        if not _POOL.begin_below(server, enough):
            return
        if tunnel:
            connection.set_tunnel(tunnel, headers=tunnel_headers)
        connection.watch_with(deadline)
        try:
            connection.connect()
        except BaseException:
            _given_back(server, connection, False)
            raise
        _given_back(server, connection, True)
