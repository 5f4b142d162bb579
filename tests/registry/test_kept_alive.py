"""Connections kept alive between requests to ``http(s)://`` registries: a streamed dataset's
reads reuse them, a connection the server closed while idle is replaced without an error, a
deadline watches a kept connection only while its operation uses it, and a forked child
starts with none of its parent's."""

from __future__ import annotations

import dataclasses
import gc
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import serve_on_thread
from marl_minari.registry import connections
from marl_minari.registry.connections import close_idle_connections, idle_connections
from marl_minari.registry.deadline import Deadline
from marl_minari.registry.http import HttpBackend
from marl_minari.registry.settings import RemoteSettings
from marl_strategies import assert_tree_equal
from range_servers import ForwardProxyHandler, RangeHandler, range_handler
from registry_helpers import DrippingHandler, answer_in_forked_child

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import RemoteError

DATASET = "mpe2/spread/streamed-v0"


class CountingHandler(RangeHandler):
    """Counts the connections it accepted and the answers it gave (404s too)."""

    connections: ClassVar[list[int]] = []
    answers: ClassVar[list[int]] = []

    def setup(self) -> None:
        super().setup()
        with self.lock:
            self.connections.append(1)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        with self.lock:
            self.answers.append(int(code))


def _counting(thread_server: Callable[[Path, type[Any]], str], directory: Path,
              base: type[RangeHandler] = CountingHandler, **attributes: Any
              ) -> tuple[str, Any]:
    handler = range_handler("Counting", base, connections=[], answers=[], **attributes)
    return thread_server(directory, handler), handler


def test_a_streamed_pass_reuses_its_connections(
        streamable: Path, registry_dir: Path, block_cache: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    url, handler = _counting(thread_server, registry_dir)
    _read_three_times(url, handler.connections, handler.answers)


def test_the_manifest_is_requested_once_with_the_lookup(
        streamable: Path, registry_dir: Path, block_cache: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """The manifest of the version a URL names goes out with the registries' indexes, and
    its bytes are the ones parsed: one request for it in a streaming open."""
    url, handler = _counting(thread_server, registry_dir)
    source = mm.open_source(f"{url}/{DATASET}", streaming=True)
    assert source.total_episodes == 12
    manifests = [path for path, _, _ in handler.served if path.endswith("/manifest.json")]
    assert manifests == [f"/{DATASET}/manifest.json"]


def test_a_manifest_requested_at_another_url_is_read_again_from_the_registry(
        streamable: Path, registry_dir: Path, block_cache: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """A doubled slash: the manifest requested with the lookup is at the URL's path, the
    registry found reads it at its own location, so it is read again there (the server
    takes both paths for one: Python's server folds leading slashes)."""
    url, handler = _counting(thread_server, registry_dir)
    source = mm.open_source(f"{url}//{DATASET}", streaming=True)
    assert source.total_episodes == 12
    manifests = [path for path, _, _ in handler.served if path.endswith("manifest.json")]
    assert manifests == [f"/{DATASET}/manifest.json"] * 2


class FailingOnce(CountingHandler):
    """Answers the first request for a manifest with HTTP 503."""

    failed: ClassVar[list[str]] = []

    def send_head(self) -> Any:
        if self.path.endswith("manifest.json") and not self.failed:
            self.failed.append(self.path)
            self.send_error(503)
            return None
        return super().send_head()


def test_a_manifest_request_failing_with_the_lookup_is_made_again(
        streamable: Path, registry_dir: Path, block_cache: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """The error of the manifest's early request is not the open's: the manifest is read
    again for the registry found, and that read's error, if any, is raised."""
    url, handler = _counting(thread_server, registry_dir, FailingOnce, failed=[])
    assert mm.open_source(f"{url}/{DATASET}", streaming=True).total_episodes == 12
    assert handler.failed == [f"/{DATASET}/manifest.json"]


class AnswersPerConnection(CountingHandler):
    """Also counts the answers each connection carried."""

    carried: ClassVar[list[int]] = []

    def setup(self) -> None:
        super().setup()
        self.answered = 0

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        super().log_request(code, size)
        with self.lock:
            if not self.answered:  # a connection is listed once it carries an answer
                self.carried.append(0)
                self.at = len(self.carried) - 1
            self.answered += 1
            self.carried[self.at] = self.answered


def test_a_server_speaking_http_1_0_gets_a_connection_per_request(
        streamable: Path, registry_dir: Path, block_cache: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """Each connection carries one request; those the open warmed and no request took are
    the only ones idle."""
    url, handler = _counting(thread_server, registry_dir, AnswersPerConnection,
                             protocol_version="HTTP/1.0", carried=[])
    source = mm.open_source(f"{url}/{DATASET}", streaming=True)
    source.read([0, source.total_episodes - 1])
    assert len(handler.answers) > 5 and set(handler.carried) == {1}
    unused = idle_connections()
    waited_until = time.monotonic() + 60  # the server meets idle connections on its threads
    while len(handler.connections) < len(handler.answers) + unused:
        assert time.monotonic() < waited_until
        time.sleep(0.01)
    assert len(handler.connections) == len(handler.answers) + unused


def test_https_reads_reuse_their_connections(
        streamable: Path, registry_dir: Path, block_cache: Path, tls_authority: Any,
        https_server: Callable[[Path, type[Any], Any], str]) -> None:
    handler = range_handler("TlsCounting", CountingHandler, connections=[], answers=[])
    url = https_server(registry_dir, handler, tls_authority)
    _read_three_times(url, handler.connections, handler.answers)


def _all_given_back(connections: list[int]) -> None:
    """Wait until every connection the server has accepted is idle in the pool again: a
    lookup returns once a registry lists the id, and the indexes asked of the candidates
    after it may still be arriving on their threads (their connections come back then)."""
    waited_until = time.monotonic() + 60
    while idle_connections() < len(connections):
        assert time.monotonic() < waited_until, "a connection was never given back"
        time.sleep(0.01)


LOOKUP_IN_FLIGHT = 4
"""Requests an open of ``DATASET``'s URL has in flight at once at most: the indexes of its
three candidate registries and the manifest."""


def _read_three_times(url: str, connections: list[int], requests: list[Any]) -> None:
    """Stream the whole dataset from ``url`` and compare it with the local copy, then open it
    and list the registry three times more: ``requests`` (those a server counts) grow, while
    ``connections`` (those it accepts) stay what one operation needs at once. (The first open
    may have needed fewer: whether its lookup's requests overlap is up to its threads.)"""
    source = mm.open_source(f"{url}/{DATASET}", streaming=True)
    local = mm.open_source(DATASET).read(range(source.total_episodes))
    assert_tree_equal(dataclasses.asdict(source.read(range(source.total_episodes))),
                      dataclasses.asdict(local))
    _all_given_back(connections)
    opening = len(connections)
    for _ in range(3):
        mm.open_source(f"{url}/{DATASET}", streaming=True).read([0])
        _all_given_back(connections)
        registry.list_datasets(url)
    assert len(requests) > 20
    assert len(connections) <= max(opening, LOOKUP_IN_FLIGHT), (opening, len(connections))
    assert idle_connections() >= 1


def _use_proxy(monkeypatch: pytest.MonkeyPatch, variable: str, proxy: str) -> None:
    """``variable`` (``http_proxy``, ``https_proxy``) names ``proxy``, as urllib reads it, and
    nothing exempts the loopback servers from it."""
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, proxy)


def _proxy(running_servers: list[Any], directory: Path) -> tuple[str, Any]:
    handler = type("Proxy", (ForwardProxyHandler,), {
        "connections": [], "requests": [], "credentials": [], "lock": threading.Lock()})
    return f"http://127.0.0.1:{serve_on_thread(running_servers, directory, handler)}", handler


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_reads_through_a_proxy_keep_their_connections_to_it(
        scheme: str, streamable: Path, registry_dir: Path, block_cache: Path,
        running_servers: list[Any], monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """``http_proxy``/``https_proxy`` as urllib reads them: plain requests go to the proxy
    on connections kept alive to it; HTTPS goes through ``CONNECT`` tunnels, each kept alive
    with the TLS session inside it."""
    handler = range_handler("Origin", CountingHandler, connections=[], answers=[])
    if scheme == "http":
        url = f"http://127.0.0.1:{serve_on_thread(running_servers, registry_dir, handler)}"
    else:
        authority = request.getfixturevalue("tls_authority")
        url = request.getfixturevalue("https_server")(registry_dir, handler, authority)
    proxy, proxy_handler = _proxy(running_servers, registry_dir)
    _use_proxy(monkeypatch, f"{scheme}_proxy", proxy)
    if scheme == "http":
        _read_three_times(url, proxy_handler.connections, proxy_handler.requests)
    else:
        _read_three_times(url, proxy_handler.connections, handler.answers)
    verb = "GET http://" if scheme == "http" else "CONNECT "
    assert proxy_handler.requests and all(r.startswith(verb) for r in proxy_handler.requests)
    if scheme == "http":  # every request went through the proxy
        assert len(proxy_handler.requests) == len(handler.answers)
    else:  # a tunnel per connection, and requests many more than tunnels
        assert len(handler.connections) == len(proxy_handler.requests) < len(handler.answers)


def test_a_tunnel_through_a_proxy_reaches_only_its_own_server(
        published: str, registry_dir: Path, tmp_path: Path, tls_authority: Any,
        https_server: Callable[[Path, type[Any], Any], str], running_servers: list[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two HTTPS registries through one proxy: a tunnel kept alive to the first is never
    taken for the second."""
    first = https_server(registry_dir, RangeHandler, tls_authority)
    second = https_server(tmp_path / "empty-registry", RangeHandler, tls_authority)
    proxy, _ = _proxy(running_servers, registry_dir)
    _use_proxy(monkeypatch, "https_proxy", proxy)
    assert [d.dataset_id for d in registry.list_datasets(first)] == [published]
    assert idle_connections() == 1
    assert registry.list_datasets(second) == []


class ProxyCredentialsRecorder(RangeHandler):
    seen: ClassVar[list[str | None]] = []

    def send_head(self) -> Any:
        with self.lock:
            self.seen.append(self.headers.get("Proxy-Authorization"))
        return super().send_head()


def test_a_proxys_credentials_go_to_the_proxy_only(
        published: str, registry_dir: Path, tls_authority: Any,
        https_server: Callable[[Path, type[Any], Any], str], running_servers: list[Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    origin = range_handler("Origin", ProxyCredentialsRecorder, seen=[])
    url = https_server(registry_dir, origin, tls_authority)
    proxy, proxy_handler = _proxy(running_servers, registry_dir)
    _use_proxy(monkeypatch, "https_proxy", proxy.replace("http://", "http://proxy-user:pw-42@"))
    for _ in range(2):
        registry.download(published, url, force=True)
    assert proxy_handler.credentials and all(
        seen is not None and seen.startswith("Basic ") for seen in proxy_handler.credentials)
    assert origin.seen and not any(origin.seen)


def test_a_connection_is_kept_for_its_own_tls_settings_only(
        published: str, registry_dir: Path, tmp_path: Path, tls_authority: Any,
        https_server: Callable[[Path, type[Any], Any], str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection made while the server's authority was trusted is not taken once the
    process's TLS context trusts another (its requests would skip the new check)."""
    import trustme
    from marl_minari.registry import http

    url = https_server(registry_dir, RangeHandler, tls_authority)
    assert [d.dataset_id for d in registry.list_datasets(url)] == [published]
    assert idle_connections() == 1
    bundle = tmp_path / "another-authority.pem"
    trustme.CA().cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setattr(http, "_system_tls", None)
    with pytest.raises(RemoteError, match="CERTIFICATE_VERIFY_FAILED"):
        registry.list_datasets(url)


class ClosingWhileIdle(CountingHandler):
    """Answers the first request of each connection, then hangs up when the next one arrives
    without answering it: a server whose idle timeout fell between two requests."""

    def handle(self) -> None:
        self.handle_one_request()
        if not self.close_connection:
            self.rfile.readline()  # the next request line, never answered


def test_a_connection_closed_while_idle_is_replaced(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    url, handler = _counting(thread_server, registry_dir, ClosingWhileIdle)
    backend = HttpBackend(url.removeprefix("http://"))
    first = backend.read("_index.json", 1 << 20)
    assert first is not None and idle_connections() == 1
    assert backend.read("_index.json", 1 << 20) == first  # sent again on a new connection
    assert len(handler.connections) == 2 and len(handler.served) == 2
    registry.download(published, url)
    assert mm.load_dataset(published).total_episodes == 2


def test_a_kept_connection_is_watched_by_the_operation_using_it(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """The listing leaves a connection idle; the download takes it, and the manifest's
    status line and headers trickle on it: the download's deadline cuts it in time."""
    handler = type("Handler", (DrippingHandler,), {
        "protocol_version": "HTTP/1.1", "drip": ("manifest.json",), "interval": 1.5,
        "give_up": 120.0, "headers_too": True})
    url = thread_server(registry_dir, handler)
    settings = RemoteSettings(http_timeout=2.0)
    assert [d.dataset_id for d in registry.list_datasets(url, settings=settings)] == [published]
    assert idle_connections() == 1
    outcome: list[BaseException | None] = []

    def download() -> None:
        try:
            registry.download(published, url, settings=settings)
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=download, daemon=True)
    worker.start()
    worker.join(90)  # the trickled head alone would take about two minutes
    assert outcome, "the trickle on the kept connection was not cut at the deadline"
    assert "deadline" in str(outcome[0]) and "manifest.json" in str(outcome[0])
    assert idle_connections() == 0


def test_a_kept_connection_waits_as_long_as_its_new_operation_allows(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """A connection's socket timeout is the wait its current request may take, not the one
    of the request that opened it."""
    url, handler = _counting(thread_server, registry_dir)
    address = url.removeprefix("http://")
    HttpBackend(address, settings=RemoteSettings(http_timeout=0.5)).read("_index.json", 1 << 20)
    HttpBackend(address, settings=RemoteSettings(http_timeout=30.0)).read("_index.json",
                                                                          1 << 20)
    assert len(handler.connections) == 1 and idle_connections() == 1
    (kept,) = (c for idle in connections._POOL._idle.values() for c in idle)
    assert kept.sock.gettimeout() > 20


def test_a_response_finalized_inside_the_pool_gives_its_connection_back(
        published: str, registry_dir: Path, monkeypatch: pytest.MonkeyPatch,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """The garbage collector may finalize a response left in a reference cycle on a thread
    that holds the pool's lock: giving its connection back then must not wait on itself."""
    monkeypatch.setattr(connections, "_POOL", connections._Pool())  # a stuck one stays here
    url, _ = _counting(thread_server, registry_dir)
    backend = HttpBackend(url.removeprefix("http://"))
    response = backend._open("_index.json")
    response.read()
    response.cycle = response  # only the collector frees it
    del response
    done = threading.Event()

    def collect_inside_the_lock() -> None:
        with connections._POOL._lock:
            gc.collect()
        done.set()

    threading.Thread(target=collect_inside_the_lock, daemon=True).start()
    assert done.wait(30), "giving the connection back waited on the pool's own lock"
    assert idle_connections() == 1


class SwitchedDeadline(Deadline):
    """A deadline that passes when the test says so."""

    passed = False

    def remaining(self) -> float:
        return -1.0 if self.passed else 3600.0


def test_an_ended_watch_leaves_its_socket_alone() -> None:
    """A connection given back keeps no watch: the deadline of the operation that used it
    passes, and the connection still works for the next."""
    deadline = SwitchedDeadline(RemoteSettings())
    kept, kept_peer = socket.socketpair()
    other, other_peer = socket.socketpair()
    with kept, kept_peer, other, other_peer:
        deadline.watch(kept).end()
        deadline.passed = True
        deadline.watch(other)  # wakes the watchdog, which cuts this one
        other.settimeout(30)
        assert other.recv(1) == b""  # cut: the watchdog's pass is over
        kept.sendall(b"x")
        kept_peer.settimeout(30)
        assert kept_peer.recv(1) == b"x"


def test_a_forked_child_starts_with_no_connections(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    url, _ = _counting(thread_server, registry_dir)
    assert [d.dataset_id for d in registry.list_datasets(url)] == [published]
    assert idle_connections() == 1
    assert answer_in_forked_child(idle_connections) == 0
    assert idle_connections() == 1
    close_idle_connections()
    assert idle_connections() == 0


@pytest.fixture(autouse=True)
def _no_connections_left() -> Any:
    close_idle_connections()
    yield
    close_idle_connections()
