"""Slow-loris servers: one deadline bounds every operation, small files and headers included.

A real HTTP server on 127.0.0.1 sends ``_index.json``, ``manifest.json`` (or the status line
and headers) one byte a second: every byte arrives well within the socket timeout, so only
the operation's deadline (``http_timeout`` plus what the bytes received buy at
``min_download_rate``: about 2 s here) can end it. Each test runs the operation on a thread
and asserts that it ended, with a typed ``RemoteError`` naming the deadline, long before the
server would stop on its own; nothing here depends on how fast the machine is.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from marl_minari.registry import RemoteSettings
from registry_helpers import LOOPBACK, DrippingHandler, drip, no_partial_dataset

from marl_minari import registry
from marl_minari.errors import RemoteError
from marl_minari.sources.remote import split_remote_source

SETTINGS = RemoteSettings(http_timeout=2.0)
"""The operation may take about 2 s with a trickle (the default 64 KiB/s buys nothing)."""
OUTER = 90.0
"""Generous bound on the whole operation: only an operation that hangs comes near it."""
SERVER_GIVES_UP = 3 * OUTER
"""The trickle outlasts the outer bound: an operation without a deadline would hang past it."""


def _fails_in_time(call: Callable[[], Any]) -> BaseException:
    """Run ``call`` on a thread; it must end (raising) within :data:`OUTER` seconds."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            outcome.append(exc)
        else:
            outcome.append(None)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(OUTER)
    assert not worker.is_alive(), f"still running after {OUTER} s: no deadline cut it off"
    assert outcome[0] is not None, "the operation succeeded against a trickling server"
    return outcome[0]


HEADER_INTERVAL = 1.5
"""Seconds between the bytes of a trickled status line and headers: each byte arrives within
the socket timeout, and the 80 bytes take longer than :data:`OUTER`, so that only the
watchdog, not their end, ends the operation in time."""


def _dripping(names: tuple[str, ...], headers_too: bool = False) -> type[Any]:
    return type("Handler", (DrippingHandler,), {
        "drip": names, "interval": HEADER_INTERVAL if headers_too else 1.0,
        "give_up": SERVER_GIVES_UP, "headers_too": headers_too})


def _trickling(thread_server: Callable[[Path, type[Any]], str], directory: Path,
               names: tuple[str, ...], headers_too: bool = False) -> str:
    return thread_server(directory, _dripping(names, headers_too))


def _assert_deadline(error: BaseException, name: str) -> None:
    assert isinstance(error, RemoteError), repr(error)
    assert "did not finish within" in str(error) and "deadline" in str(error), str(error)
    assert name in str(error), str(error)


def test_listing_a_trickled_index_ends_at_the_deadline(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    url = _trickling(thread_server, registry_dir, ("_index.json",))
    error = _fails_in_time(lambda: registry.list_datasets(url, settings=SETTINGS))
    _assert_deadline(error, "_index.json")


def test_downloading_with_a_trickled_manifest_ends_at_the_deadline(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    url = _trickling(thread_server, registry_dir, ("manifest.json",))
    error = _fails_in_time(lambda: registry.download(published, url, settings=SETTINGS))
    _assert_deadline(error, "manifest.json")
    no_partial_dataset(published)


def test_trickled_headers_end_at_the_deadline(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    # The HTTP client reads the status line and headers on its own, where no check of ours
    # runs: only the watchdog that shuts the connection down at the deadline ends this.
    url = _trickling(thread_server, registry_dir, ("_index.json",), headers_too=True)
    error = _fails_in_time(lambda: registry.list_datasets(url, settings=SETTINGS))
    _assert_deadline(error, "_index.json")


def test_trickled_headers_over_https_end_at_the_deadline(
        published: str, registry_dir: Path,
        https_server: Callable[[Path, type[Any], Any], str], tls_authority: Any) -> None:
    # The same through TLS: the connection's socket is watched as it is wrapped.
    url = https_server(registry_dir, _dripping(("_index.json",), headers_too=True),
                       tls_authority)
    error = _fails_in_time(lambda: registry.list_datasets(url, settings=SETTINGS))
    _assert_deadline(error, "_index.json")


def test_resolving_a_url_ends_at_the_deadline(
        published: str, registry_dir: Path, monkeypatch: pytest.MonkeyPatch,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    # Remote URLs used as sources take their settings from the environment. Every candidate
    # registry along the URL is asked for its index; all of them share the deadline.
    monkeypatch.setenv("MARL_MINARI_HTTP_TIMEOUT", str(SETTINGS.http_timeout))
    url = _trickling(thread_server, registry_dir.parent, ("_index.json",))
    dataset_url = f"{url}/{registry_dir.name}/{published}"
    error = _fails_in_time(lambda: split_remote_source(dataset_url))
    _assert_deadline(error, "_index.json")


def test_a_steady_server_is_not_cut_off(published: str, registry_dir: Path,
                                        http_server: Callable[[Path], str]) -> None:
    # The counterpart: with the same deadline settings, a server that answers normally lists
    # and downloads (the deadline grows with the bytes received).
    url = http_server(registry_dir)
    assert [d.dataset_id for d in registry.list_datasets(url, settings=SETTINGS)] == [published]
    assert registry.download(published, url, settings=SETTINGS).is_dir()


def test_a_trickled_tls_handshake_ends_at_the_deadline() -> None:
    """A server that accepts and sends its TLS handshake one byte a second (a record header,
    then the record's bytes): no read waits long enough to time out, so only the deadline,
    which watches the socket from before the handshake, can end it."""
    listener = socket.create_server((LOOPBACK, 0))
    record = b"\x16\x03\x03\x40\x00" + bytes(0x4000)  # a 16 KiB handshake record

    def serve() -> None:
        connection, _ = listener.accept()
        with connection, contextlib.suppress(OSError):  # the client hung up, as it should
            drip(connection.makefile("wb", buffering=0), record, 1.0, SERVER_GIVES_UP)

    threading.Thread(target=serve, daemon=True).start()
    try:
        failure = _fails_in_time(lambda: registry.list_datasets(
            f"https://{LOOPBACK}:{listener.getsockname()[1]}/registry", settings=SETTINGS))
    finally:
        listener.close()
    assert isinstance(failure, RemoteError) and "deadline" in str(failure), failure


def test_a_streaming_open_looks_up_the_registry_within_its_own_http_timeout(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    # The settings given to the open bound its lookup too: the indexes were read with the
    # environment's (60 s by default), only the manifest with the ones given.
    import marl_minari as mm

    url = _trickling(thread_server, registry_dir, ("_index.json",))
    settings = registry.StreamSettings(remote=SETTINGS)
    error = _fails_in_time(lambda: mm.open_source(f"{url}/{published}", streaming=True,
                                                  stream_settings=settings))
    _assert_deadline(error, "_index.json")
    assert f"http_timeout {SETTINGS.http_timeout:g} s" in str(error), str(error)
