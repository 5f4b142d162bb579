"""HTTP handlers for the range-reading tests: a static server that honours ``Range`` (as nginx,
CDNs and S3 do; Python's ``http.server`` does not), and mirrors that lie, truncate or trickle.

Each handler counts the requests and bytes it served in class attributes, so tests can tell
what moved over the wire.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

from registry_helpers import drip

_RANGE = re.compile(r"^bytes=(\d+)-(\d+)$")


class RangeHandler(SimpleHTTPRequestHandler):
    """Serves files, answering ``Range: bytes=a-b`` with 206 and exactly those bytes, over
    HTTP/1.1 connections kept alive between requests (as real static hosts keep them)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as nginx's tcp_nodelay: no 40 ms wait for the body

    served: ClassVar[list[tuple[str, int, int]]] = []
    """``(path, offset, length)`` of every answer with a body."""
    lock: ClassVar[threading.Lock] = threading.Lock()
    shift: ClassVar[int] = 0
    """Answer every range this many bytes later than asked (a broken proxy), saying so in
    ``Content-Range``."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def body(self, path: str, data: bytes, offset: int) -> bytes:
        """What is sent for ``data`` found at ``offset`` of ``path`` (mirrors override it)."""
        return data

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """An error with a short body, the connection kept open (as nginx answers a 404;
        ``http.server`` closes the connection after every error)."""
        body = f"{code} {message or self.responses.get(code, ('',))[0]}\n".encode()
        self.send_response(code, message)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_head(self) -> Any:
        path = Path(self.translate_path(self.path))
        match = _RANGE.match(self.headers.get("Range", ""))
        if not path.is_file():
            return super().send_head()
        whole = path.read_bytes()
        if match is None:
            first, data, status = 0, whole, 200
        else:
            first, last = int(match.group(1)), int(match.group(2))
            if first >= len(whole):
                self.send_error(416)
                return None
            first, last = first + self.shift, last + self.shift
            data, status = whole[first:last + 1], 206
        data = self.body(self.path, data, first)
        with self.lock:
            self.served.append((self.path, first, len(data)))
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        if status == 206:
            self.send_header("Content-Range",
                             f"bytes {first}-{first + len(data) - 1}/{len(whole)}")
        self.end_headers()
        self.wfile.write(data)
        return None


def range_handler(name: str, base: type[RangeHandler] = RangeHandler,
                  **attributes: Any) -> type[RangeHandler]:
    """A fresh subclass of ``base`` with its own request log (tests run servers side by side)."""
    return type(name, (base,), {"served": [], "lock": threading.Lock(), **attributes})


class LyingHandler(RangeHandler):
    """Honours ranges, but flips the byte at file offset ``flip_at`` of files ending in
    ``target`` whenever an answer contains it."""

    target: ClassVar[str] = "main_data.hdf5"
    flip_at: ClassVar[int] = 0

    def body(self, path: str, data: bytes, offset: int) -> bytes:
        where = self.flip_at - offset
        if path.endswith(self.target) and 0 <= where < len(data):
            data = data[:where] + bytes([data[where] ^ 0xFF]) + data[where + 1:]
        return data


class TruncatingHandler(RangeHandler):
    """Honours ranges, but answers for files ending in ``target`` stop at file offset
    ``stop_at`` (announcing the shorter length: a mirror holding a truncated copy)."""

    target: ClassVar[str] = "main_data.hdf5"
    stop_at: ClassVar[int] = 0

    def body(self, path: str, data: bytes, offset: int) -> bytes:
        if path.endswith(self.target):
            return data[:max(0, self.stop_at - offset)]
        return data


class TricklingHandler(RangeHandler):
    """Honours ranges, but sends the body of files ending in ``target`` one byte per
    ``interval`` seconds, for at most ``give_up`` seconds (a slow mirror)."""

    target: ClassVar[str] = "main_data.hdf5"
    interval: ClassVar[float] = 0.2
    give_up: ClassVar[float] = 20.0

    def send_head(self) -> Any:
        if not self.path.endswith(self.target):
            return super().send_head()
        path = Path(self.translate_path(self.path))
        match = _RANGE.match(self.headers.get("Range", ""))
        whole = path.read_bytes()
        first, last = (int(match.group(1)), int(match.group(2))) if match else (0, len(whole) - 1)
        data = whole[first:last + 1]
        self.send_response(206)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Range", f"bytes {first}-{last}/{len(whole)}")
        self.end_headers()
        drip(self.wfile, data, self.interval, self.give_up)
        self.close_connection = True
        return None


class CredentialRecordingHandler(RangeHandler):
    """Honours ranges and records the ``Authorization`` header of every request (``None``
    where there was none): a CDN that must never see the registry's credentials."""

    authorizations: ClassVar[list[str | None]] = []

    def send_head(self) -> Any:
        with self.lock:
            self.authorizations.append(self.headers.get("Authorization"))
        return super().send_head()


class RedirectingHandler(CredentialRecordingHandler):
    """Serves small files itself and answers a request for a file ending in ``target`` with a
    302 to the same path under ``elsewhere`` (a Hugging Face repository: its large files
    redirect to a CDN)."""

    target: ClassVar[str] = "main_data.hdf5"
    elsewhere: ClassVar[str] = ""

    def send_head(self) -> Any:
        if not self.path.endswith(self.target):
            return super().send_head()
        with self.lock:
            self.authorizations.append(self.headers.get("Authorization"))
        self.send_response(302)
        self.send_header("Location", f"{self.elsewhere}{self.path}")
        self.send_header("Content-Length", "0")
        self.end_headers()
        return None


class PublicBucketHandler(RangeHandler):
    """A public-read S3 bucket's HTTPS endpoint (or its static website): files are served
    with ranges, and a file that is not there is ``403 AccessDenied``, as S3 answers a reader
    who may not list the bucket; with ``refuse_all``, every file is (a private bucket)."""

    refuse_all: ClassVar[bool] = False

    def send_head(self) -> Any:
        if self.refuse_all or not Path(self.translate_path(self.path)).is_file():
            body = b"<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>"
            self.send_response(403)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        return super().send_head()


class ForwardProxyHandler(BaseHTTPRequestHandler):
    """A forward proxy over HTTP/1.1 connections kept alive: ``GET http://host/path`` is
    fetched from ``host`` and relayed; ``CONNECT host:port`` tunnels the bytes both ways (what
    HTTPS through a proxy uses). Counts the connections clients opened to it, the requests and
    the tunnels."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    connections: ClassVar[list[int]] = []
    requests: ClassVar[list[str]] = []
    credentials: ClassVar[list[str | None]] = []
    """The ``Proxy-Authorization`` of every ``CONNECT``."""
    lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, *args: Any, directory: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # serves no folder of its own

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def setup(self) -> None:
        super().setup()
        with self.lock:
            self.connections.append(1)

    def do_GET(self) -> None:  # noqa: N802
        with self.lock:
            self.requests.append(f"GET {self.path}")
        target = urlsplit(self.path)
        upstream = http.client.HTTPConnection(target.netloc, timeout=30)
        try:
            wanted = {k: v for k, v in self.headers.items()
                      if k.lower() not in ("proxy-connection", "connection")}
            upstream.request("GET", target.path or "/", headers=wanted)
            answer = upstream.getresponse()
            body = answer.read()
        finally:
            upstream.close()
        self.send_response(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_CONNECT(self) -> None:  # noqa: N802
        with self.lock:
            self.requests.append(f"CONNECT {self.path}")
            self.credentials.append(self.headers.get("Proxy-Authorization"))
        host, _, port = self.path.rpartition(":")
        upstream = socket.create_connection((host, int(port)), timeout=30)
        self.send_response(200, "Connection established")
        self.end_headers()
        self.close_connection = True
        relay = threading.Thread(target=_pipe, args=(upstream, self.connection), daemon=True)
        relay.start()
        _pipe(self.connection, upstream)
        relay.join(30)
        upstream.close()


def _pipe(source: socket.socket, target: socket.socket) -> None:
    """Copy bytes from ``source`` to ``target`` until ``source`` ends, then end ``target``'s
    sending side."""
    try:
        while chunk := source.recv(1 << 16):
            target.sendall(chunk)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)
