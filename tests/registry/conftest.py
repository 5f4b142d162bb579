"""Real servers on 127.0.0.1 for the registry tests: a static HTTP server process, a
misbehaving HTTP server that drops connections, HTTPS servers whose certificates a test
authority issues, and moto's standalone S3 server.

Also makes ``registry_helpers`` importable in any import mode.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from marl_minari import registry
from marl_minari.format.ids import dataset_dir

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from registry_helpers import (  # noqa: E402
    LOOPBACK,
    DroppingHandler,
    free_port,
    new_bucket,
    start_moto,
    stop,
    use_s3_endpoint,
    wait_for_port,
)


@pytest.fixture
def block_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default block cache of datasets read in place, in the test's folder."""
    folder = tmp_path / "cache" / "blocks"
    monkeypatch.setenv("MARL_MINARI_CACHE", str(folder))
    return folder


@pytest.fixture
def minari_kinds() -> Iterator[None]:
    """Minari's own functions know file://, s3:// and http(s):// (as after a user's
    ``registry.register_remote_kinds()``); Minari's table is restored afterwards."""
    from minari.storage.remotes import _registry

    saved = dict(_registry)
    registry.register_remote_kinds()
    yield
    _registry.clear()
    _registry.update(saved)


@pytest.fixture
def registry_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder set as the default registry (``MARL_MINARI_REGISTRY``)."""
    path = tmp_path / "registry"
    monkeypatch.setenv("MARL_MINARI_REGISTRY", str(path))
    monkeypatch.delenv("MINARI_REMOTE", raising=False)
    return path


@pytest.fixture
def small_dataset(record_parallel: Callable[..., Any]) -> Callable[..., str]:
    """Record a small real mpe2 dataset: ``small_dataset(dataset_id="...")`` -> its id."""

    def make(dataset_id: str = "mpe2/spread/random-v0", episodes: int = 2) -> str:
        record_parallel("mpe2/simple_spread_v3", episodes, max_cycles=10, dataset_id=dataset_id)
        return dataset_id

    return make


@pytest.fixture
def http_server() -> Iterator[Callable[[Path], str]]:
    """``serve(directory)`` -> ``http://127.0.0.1:<port>``: ``python -m http.server`` process."""
    processes: list[subprocess.Popen[bytes]] = []

    def serve(directory: Path) -> str:
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "http.server", "--bind", LOOPBACK, "--directory",
             str(directory), str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(process)
        wait_for_port(port, process)
        return f"http://{LOOPBACK}:{port}"

    yield serve
    for process in processes:
        stop(process)


@pytest.fixture
def running_servers() -> Iterator[list[ThreadingHTTPServer]]:
    """The servers a test started on threads (:func:`serve_on_thread`), stopped after it,
    with the connections kept alive to them (a later server may get the same port)."""
    from marl_minari.registry.connections import close_idle_connections

    servers: list[ThreadingHTTPServer] = []
    yield servers
    close_idle_connections()
    for server in servers:
        server.shutdown()
        server.server_close()


def serve_on_thread(servers: list[ThreadingHTTPServer], directory: Path, handler: type[Any],
                    tls: ssl.SSLContext | None = None) -> int:
    """Serve ``directory`` with ``handler`` on a thread (through ``tls`` when given), kept in
    ``servers``; its port."""
    directory.mkdir(parents=True, exist_ok=True)
    server = ThreadingHTTPServer((LOOPBACK, 0), partial(handler, directory=str(directory)),
                                 bind_and_activate=False)
    # A listen queue like a real host's (nginx: 511): the standard library's 5 drops the
    # sixth and later connections an open makes at once, and the kernel retries them a
    # second later.
    server.request_queue_size = 511
    server.server_bind()
    server.server_activate()
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True,
                                        do_handshake_on_connect=False)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    servers.append(server)
    return int(server.server_address[1])


@pytest.fixture
def thread_server(running_servers: list[ThreadingHTTPServer]
                  ) -> Callable[[Path, type[Any]], str]:
    """``serve(directory, handler_class)`` -> ``http://127.0.0.1:<port>``: a real HTTP server
    on a thread with a misbehaving handler (see ``registry_helpers``)."""

    def serve(directory: Path, handler: type[Any]) -> str:
        return f"http://{LOOPBACK}:{serve_on_thread(running_servers, directory, handler)}"

    return serve


@pytest.fixture
def dropping_http_server(thread_server: Callable[[Path, type[Any]], str]
                         ) -> Callable[[Path, tuple[str, ...]], str]:
    """``serve(directory, names)``: a real HTTP server whose responses for files ending in
    ``names`` are cut off halfway (the connection drops)."""

    def serve(directory: Path, names: tuple[str, ...]) -> str:
        return thread_server(directory, type("Handler", (DroppingHandler,), {"drop": names}))

    return serve


@pytest.fixture
def published(registry_dir: Path, small_dataset: Callable[..., str]) -> str:
    """A dataset published to the default registry, with its local copy removed."""
    dataset_id = small_dataset()
    registry.publish(dataset_id)
    shutil.rmtree(dataset_dir(dataset_id))
    return dataset_id


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A moto S3 server process on loopback for the whole session (stopped at the end)."""
    pytest.importorskip("boto3")
    pytest.importorskip("moto")
    process, endpoint = start_moto()
    try:
        yield endpoint
    finally:
        stop(process)


@pytest.fixture
def s3_remote(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://<fresh bucket>/registry`` on the session's moto server."""
    use_s3_endpoint(monkeypatch, moto_endpoint)
    return f"s3://{new_bucket()}/registry"


@pytest.fixture
def s3_client(s3_remote: str) -> Any:
    import boto3

    return boto3.session.Session().client("s3")


STREAMED_DATASET = "mpe2/spread/streamed-v0"
"""The dataset of :func:`streamable`."""


@pytest.fixture
def streamable(registry_dir: Path, record_parallel: Callable[..., Any]) -> Path:
    """A dataset whose data file spans several range-digest blocks (``STREAMED_DATASET``),
    published to the default registry; the local copy is kept to compare bytes. Returns the
    local ``main_data.hdf5``."""
    from marl_minari.registry.blocks import MIN_BLOCK_SIZE

    record_parallel("mpe2/simple_spread_v3", 12, max_cycles=25, dataset_id=STREAMED_DATASET)
    registry.publish(STREAMED_DATASET)
    local = dataset_dir(STREAMED_DATASET) / "data" / "main_data.hdf5"
    assert local.stat().st_size > 4 * MIN_BLOCK_SIZE
    return local



@pytest.fixture
def tls_authority(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A certificate authority this process's TLS context trusts for the test, as if it were
    the system's (``SSL_CERT_FILE``, read when the context loads the system's certificates;
    the process's context is made again before and after)."""
    import trustme
    from marl_minari.registry import http

    authority = trustme.CA()
    bundle = tmp_path / "authority.pem"
    authority.cert_pem.write_to_path(str(bundle))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setattr(http, "_system_tls", None)
    yield authority


@pytest.fixture
def https_server(running_servers: list[ThreadingHTTPServer]
                 ) -> Callable[[Path, type[Any], Any], str]:
    """``serve(directory, handler_class, authority)`` -> ``https://127.0.0.1:<port>``: a real
    HTTPS server on a thread, its certificate for 127.0.0.1 issued by ``authority``."""

    def serve(directory: Path, handler: type[Any], authority: Any) -> str:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        authority.issue_cert(LOOPBACK).configure_cert(tls)
        return f"https://{LOOPBACK}:{serve_on_thread(running_servers, directory, handler, tls)}"

    return serve
