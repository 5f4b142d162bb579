"""Connections warmed ahead of a streaming open's second round of requests: the small files
and the blocks that open the data file, all asked at once once the manifest is read, find
connections opened (TCP, a proxy's tunnel, TLS) while the lookup was in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import serve_on_thread
from marl_minari.registry import connections, http
from marl_minari.registry.connections import idle_connections
from marl_minari.registry.http import HttpBackend, HttpsBackend
from marl_minari.registry.stream_settings import StreamSettings
from range_servers import ForwardProxyHandler, RangeHandler, range_handler

import marl_minari as mm
from marl_minari.errors import RemoteError

DATASET = "mpe2/spread/streamed-v0"
GATE_SECONDS = 60.0
"""How long the gated manifest waits for connections before it is answered anyway (only a
failing test waits that long)."""


class Accepting(RangeHandler):
    """Counts the connections it accepted; answers a ``gated`` path only once ``gate`` of
    them are (or :data:`GATE_SECONDS` passed), noting whether they were."""

    accepted: ClassVar[list[int]] = []
    gated: ClassVar[str] = "/manifest.json"
    gate: ClassVar[int] = 0
    reached: ClassVar[list[bool]] = []

    def setup(self) -> None:
        super().setup()
        with self.lock:
            self.accepted.append(1)

    def send_head(self) -> Any:
        if self.gate and self.path.endswith(self.gated):
            given_up = time.monotonic() + GATE_SECONDS
            while len(self.accepted) < self.gate and time.monotonic() < given_up:
                time.sleep(0.005)
            with self.lock:
                self.reached.append(len(self.accepted) >= self.gate)
        return super().send_head()


def _accepting(thread_server: Callable[[Path, type[Any]], str], directory: Path,
               **attributes: Any) -> tuple[str, Any]:
    handler = range_handler("Accepting", Accepting, accepted=[], reached=[], **attributes)
    return thread_server(directory, handler), handler


def _accepted_at_least(handler: Any, count: int) -> None:
    """Wait until the server has run ``setup`` for ``count`` connections (it does so on its
    own threads, after the client's ``connect`` returned)."""
    given_up = time.monotonic() + 60
    while len(handler.accepted) < count:
        assert time.monotonic() < given_up, (len(handler.accepted), count)
        time.sleep(0.005)


@pytest.mark.parametrize("ahead", [6, 10])
def test_an_open_has_its_next_rounds_connections_before_its_manifest_is_answered(
        ahead: int, streamable: Path, registry_dir: Path, block_cache: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """The manifest is answered only once the server has accepted the connections the open
    asks for ahead (as for a far host: this one is on the loopback), more than the four
    requests of its lookup make (three candidate registries' indexes and the manifest): the
    open makes them while its lookup waits."""
    url, handler = _accepting(thread_server, registry_dir, gate=ahead)
    source = mm.open_source(f"{url}/{DATASET}", streaming=True,
                            stream_settings=StreamSettings(connections_ahead=ahead))
    assert source.total_episodes == 12
    assert handler.reached == [True]


@pytest.mark.parametrize(("host", "ahead"), [("127.0.0.1", 0), ("localhost", 0),
                                              ("127.0.0.1", None)])
def test_an_open_makes_no_connection_ahead_on_the_loopback_or_when_told(
        host: str, ahead: int | None, streamable: Path, registry_dir: Path, block_cache: Path,
        thread_server: Callable[[Path, type[Any]], str], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """By default (``None``) a host on the loopback gets no connection ahead: a handshake
    there costs no round trip. The open still reads the dataset."""
    asked: list[int] = []
    monkeypatch.setattr(HttpBackend, "warm", lambda self, enough: asked.append(enough))
    url, _ = _accepting(thread_server, registry_dir)
    source = mm.open_source(f"{url.replace('127.0.0.1', host)}/{DATASET}", streaming=True,
                            stream_settings=StreamSettings(connections_ahead=ahead))
    assert source.total_episodes == 12
    assert asked == []


def test_a_far_host_gets_a_reads_parallel_requests_and_the_small_files_ahead(
        streamable: Path, registry_dir: Path, block_cache: Path,
        thread_server: Callable[[Path, type[Any]], str], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """Any host not on the loopback (``on_loopback`` is what decides) gets
    ``parallel_requests`` + 2 connections ahead by default."""
    asked: list[int] = []
    monkeypatch.setattr(HttpBackend, "warm", lambda self, enough: asked.append(enough))
    monkeypatch.setattr(connections, "on_loopback", lambda url: False)
    url, _ = _accepting(thread_server, registry_dir)
    mm.open_source(f"{url}/{DATASET}", streaming=True,
                   stream_settings=StreamSettings(parallel_requests=5))
    assert asked and set(asked) == {7}


@pytest.mark.parametrize(("url", "loopback"), [
    ("http://127.0.0.1:8000/registry", True), ("https://127.9.8.7/r", True),
    ("http://[::1]:80/r", True), ("http://localhost/r", True),
    ("https://user:secret@localhost:99/r", True), ("https://huggingface.co/datasets/x", False),
    ("http://10.0.0.1/r", False), ("http://localhost.example.org/r", False),
    ("s3://bucket/r", False), ("file:///srv/registry", False), ("http://[::1/r", False)])
def test_which_hosts_are_on_the_loopback(url: str, loopback: bool) -> None:
    assert connections.on_loopback(url) is loopback


def test_warming_tops_up_the_connections_to_a_server(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    url, handler = _accepting(thread_server, registry_dir)
    backend = HttpBackend(url.removeprefix("http://"))
    backend.warm(3)
    assert idle_connections() == 3
    _accepted_at_least(handler, 3)
    backend.warm(3)  # enough already
    assert idle_connections() == 3
    assert backend.read("_index.json", 1 << 20) is not None
    assert len(handler.accepted) == 3 and idle_connections() == 3  # the read took one
    backend.warm(5)
    assert idle_connections() == 5
    _accepted_at_least(handler, 5)


@pytest.fixture
def connects_tried(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Grows by one for every HTTP connection the process tries to make."""
    tried: list[int] = []
    connect = http._WatchedConnection.connect

    def counted(self: Any) -> None:
        tried.append(1)
        connect(self)

    monkeypatch.setattr(http._WatchedConnection, "connect", counted)
    return tried


def test_warming_makes_no_more_than_the_pool_keeps(
        published: str, registry_dir: Path, connects_tried: list[int],
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    url, _ = _accepting(thread_server, registry_dir)
    HttpBackend(url.removeprefix("http://")).warm(10 * connections.IDLE_PER_SERVER)
    assert idle_connections() == len(connects_tried) == connections.IDLE_PER_SERVER


def test_warming_counts_the_connections_in_use(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """A response not yet read holds its connection: warming to two makes one more."""
    url, handler = _accepting(thread_server, registry_dir)
    backend = HttpBackend(url.removeprefix("http://"))
    response = backend._open("_index.json")
    backend.warm(2)
    assert idle_connections() == 1
    response.read()
    response.close()
    assert idle_connections() == 2
    _accepted_at_least(handler, 2)
    backend.warm(2)
    assert idle_connections() == 2 and len(handler.accepted) == 2


def test_a_warmed_tunnel_through_a_proxy_is_the_one_a_request_takes(
        published: str, registry_dir: Path, tls_authority: Any, running_servers: list[Any],
        https_server: Callable[[Path, type[Any], Any], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTPS through ``https_proxy``: warming opens the ``CONNECT`` tunnel and the TLS session
    in it, and the request that follows is sent inside them (no second tunnel)."""
    origin = range_handler("Origin", Accepting, accepted=[], reached=[])
    url = https_server(registry_dir, origin, tls_authority)
    proxy = type("Proxy", (ForwardProxyHandler,), {
        "connections": [], "requests": [], "credentials": [], "lock": threading.Lock()})
    port = serve_on_thread(running_servers, registry_dir, proxy)
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("https_proxy", f"http://127.0.0.1:{port}")
    backend = HttpsBackend(url.removeprefix("https://"))
    backend.warm(1)
    assert idle_connections() == 1
    assert backend.read("_index.json", 1 << 20) is not None
    assert [r.split()[0] for r in proxy.requests] == ["CONNECT"]
    assert len(origin.accepted) == 1 and idle_connections() == 1


def test_a_warming_that_fails_leaves_the_error_to_the_request(
        connects_tried: list[int]) -> None:
    """Nothing listens: warming raises nothing and keeps nothing (a second warming tries
    again: the failed connection is not counted as open); the read says why."""
    import socket

    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    backend = HttpBackend(f"127.0.0.1:{port}")
    backend.warm(1)
    backend.warm(1)
    assert idle_connections() == 0 and len(connects_tried) == 2
    with pytest.raises(RemoteError, match="cannot read"):
        backend.read("_index.json", 1 << 20)


def test_more_connections_ahead_than_a_server_keeps_are_not_made(
        streamable: Path, registry_dir: Path, block_cache: Path,
        thread_server: Callable[[Path, type[Any]], str], monkeypatch: pytest.MonkeyPatch
        ) -> None:
    """``connections_ahead=10**6`` started a thread per connection asked for, and failed with
    ``RuntimeError: can't start new thread``; a server's connections kept idle bound them."""
    asked: list[int] = []
    monkeypatch.setattr(HttpBackend, "warm", lambda self, enough: asked.append(enough))
    url, _ = _accepting(thread_server, registry_dir)
    source = mm.open_source(f"{url}/{DATASET}", streaming=True,
                            stream_settings=StreamSettings(connections_ahead=10**6))
    assert source.total_episodes == 12
    assert asked and set(asked) == {connections.IDLE_PER_SERVER}
    assert len(asked) <= connections.IDLE_PER_SERVER
