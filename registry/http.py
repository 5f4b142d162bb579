"""``http://`` and ``https://`` remotes: read-only, any static web server serving a registry.

Point a web server (nginx, a CDN, ``python -m http.server``, GitHub Pages, an S3 website
endpoint...) at a ``file://`` registry directory or a synced copy of an ``s3://`` one, and
``http(s)://host[:port]/path`` is a registry others can list and download from. The index
makes listing one request; downloads check every file against the manifest.

Connections are kept alive between requests (:mod:`.connections`). Credentials, if the
server needs them, go in the URL's user-info (``https://user:pass@host``, sent as HTTP Basic
auth) or in Minari's ``token`` (sent as a Bearer token). They never appear in errors or logs,
and a redirect to another host is followed without them.

Every request spends from its operation's :class:`~.deadline.Deadline`: each wait for the
server is bounded by ``http_timeout`` (or what is left of the deadline), the deadline is
checked after every arrival of data, and each connection is watched from the moment its
socket exists (before the TLS handshake) or it is taken idle, so a server that trickles its
handshake, status line, headers or body is cut off at the deadline.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import ssl
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from marl_minari.errors import RemoteError

from .backend import Backend, RangesIgnored
from .connections import (
    KeptAliveResponse,
    Warmed,
    finish_error,
    open_kept_alive,
    warming_request,
)
from .credentials import split_userinfo
from .deadline import Deadline, DeadlineExceeded, Watch
from .settings import RemoteSettings
from .transfer import (
    Progress,
    copy_and_hash,
    fill_buffer,
    missing_remote_file,
    read_small,
    too_large,
    wrong_size,
)

_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, OSError)
"""What a request can raise when the server or the network fails (``HTTPError`` is caught
before these)."""


class _CredentialsStayAtOrigin(urllib.request.HTTPRedirectHandler):
    """Follow redirects as curl and ``requests`` do: credentials go to the registry's own
    scheme, host and port only, never to another a redirect names (a Hugging Face
    repository's large files redirect to a CDN whose signed URLs need none)."""

    def __init__(self, origin: tuple[str, str]) -> None:
        self._origin = origin

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> Any:
        followed = super().redirect_request(req, fp, code, msg, headers, newurl)
        target = urlsplit(newurl)
        if followed is not None and (target.scheme, target.netloc) != self._origin:
            followed.remove_header("Authorization")
        return followed


class _WatchedConnection(http.client.HTTPConnection):
    """An HTTP connection kept alive between requests (:mod:`.connections`), whose socket the
    deadline of the operation using it shuts down at that deadline."""

    response_class = KeptAliveResponse

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: Deadline | None = None
        self.watch: Watch | None = None

    def watch_with(self, deadline: Deadline) -> None:
        """Be watched by ``deadline`` from now on (from the connection's start, when it has
        no socket yet)."""
        self._deadline = deadline
        if self.sock is not None:
            self._watch(self.sock)

    def _watch(self, sock: Any) -> None:
        assert self._deadline is not None and self.watch is None
        self.watch = self._deadline.watch(sock)

    def connect(self) -> None:
        super().connect()
        self._watch(self.sock)


class _WatchedHTTPSConnection(_WatchedConnection, http.client.HTTPSConnection):
    """An HTTPS connection watched from before the TLS handshake on (a server that stalls
    the handshake is cut at the deadline too)."""

    def __init__(self, *args: Any, context: ssl.SSLContext, **kwargs: Any) -> None:
        super().__init__(*args, context=context, **kwargs)
        self._tls = context

    def connect(self) -> None:
        http.client.HTTPConnection.connect(self)  # TCP (through a proxy's tunnel, if any)
        tunnel = getattr(self, "_tunnel_host", None)  # what set_tunnel named: a proxied host
        wrapped = self._tls.wrap_socket(self.sock, server_hostname=tunnel or self.host,
                                        do_handshake_on_connect=False)
        self._watch(wrapped)
        wrapped.do_handshake()
        self.sock = wrapped


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, deadline: Deadline) -> None:
        super().__init__()
        self._deadline = deadline

    def http_open(self, req: Any) -> Any:
        return open_kept_alive(lambda host, timeout: _WatchedConnection(host, timeout=timeout),
                               req, self._deadline)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    """HTTPS through :func:`_system_tls_context`, made on the process's first HTTPS request:
    loading the system's certificates takes 20-100 ms, which an ``http://`` registry never
    needs to pay, and which the several backends of one streaming open (each candidate
    registry of a URL, each published file) pay once between them."""

    def __init__(self, deadline: Deadline) -> None:
        # Not HTTPSHandler.__init__: from Python 3.12 on it makes a default TLS context (the
        # system's certificates loaded) for every handler, and every backend builds one.
        urllib.request.AbstractHTTPHandler.__init__(self)
        self._deadline = deadline

    def https_open(self, req: Any) -> Any:
        tls = _system_tls_context()
        return open_kept_alive(
            lambda host, timeout: _WatchedHTTPSConnection(host, timeout=timeout, context=tls),
            req, self._deadline, tls)


def _system_tls_context() -> ssl.SSLContext:
    """What ``ssl.create_default_context()`` makes (certificates and host names checked),
    once per process: a context may be shared by threads, and holds nothing of a request.
    Made under a lock: the candidate registries of one URL are asked at once."""
    global _system_tls
    with _SYSTEM_TLS_LOCK:
        if _system_tls is None:
            _system_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            _system_tls.load_default_certs()
        return _system_tls


_system_tls: ssl.SSLContext | None = None
"""The process's client TLS context, once made (:func:`_system_tls_context`)."""
_SYSTEM_TLS_LOCK = threading.Lock()


class HttpBackend(Backend):
    """Read-only registry over HTTP. ``name`` is the URL after ``http://``."""

    kind = "http"
    scheme = "http"
    writable = False

    def __init__(self, name: str, token: str | None = None, *,
                 settings: RemoteSettings | None = None,
                 deadline: Deadline | None = None) -> None:
        super().__init__(name, token, settings=settings, deadline=deadline)
        userinfo, address = split_userinfo(name)
        try:
            parts = urlsplit(f"{self.scheme}://{address}")
            hostname, port = parts.hostname, parts.port
        except ValueError:
            # The parser's message quotes the part it failed on, which may be a credential.
            raise self.fail(f"malformed URL {self.scheme}://{name}: expected "
                            f"{self.scheme}://host[:port]/path, with a port from 0 to 65535, "
                            "an IPv6 host in brackets and any credentials as user:password@ "
                            "before the host") from None
        if not hostname:
            raise self.fail(f"no host in {self.scheme}://{name}")
        netloc = hostname if ":" not in hostname else f"[{hostname}]"
        if port is not None:
            netloc = f"{netloc}:{port}"
        self._base = urlunsplit((self.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._headers = {"User-Agent": "marl-minari-registry"}
        if userinfo is not None:
            user, _, password = (unquote(piece) for piece in userinfo.partition(":"))
            pair = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {pair}"
            self.secrets.append(pair)
        elif token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._opener = urllib.request.build_opener(
            _CredentialsStayAtOrigin((self.scheme, netloc)),
            _WatchedHTTPHandler(self.deadline), _WatchedHTTPSHandler(self.deadline))

    @property
    def location(self) -> str:
        """The base URL, without credentials."""
        return self._base

    def _open(self, key: str) -> Any:
        request = urllib.request.Request(f"{self._base}/{quote(key)}", headers=self._headers)
        return self._opener.open(request, timeout=self.deadline.wait_limit())

    def _failure(self, what: str, where: str, exc: BaseException) -> RemoteError:
        """The error for a request (``what``: ``"read"``, ``"download"``) that failed: the
        deadline's, if the deadline passed (its watchdog may be what cut the connection)."""
        if isinstance(exc, DeadlineExceeded) or self.deadline.expired():
            return self.deadline_passed(f"{'reading' if what == 'read' else 'download of'} "
                                        f"{where}")
        if isinstance(exc, urllib.error.HTTPError):
            if exc.code == 403:
                return self.forbidden(f"GET {where} answered HTTP 403 Forbidden")
            return self.fail(f"GET {where} answered HTTP {exc.code}")
        return self.fail(f"cannot {what} {where}", exc)

    def warm(self, enough: int) -> None:
        # Through the opener, so that a proxy, its tunnel and the TLS context are the ones
        # the requests will use: the connection is kept for exactly their server.
        request = warming_request(f"{self._base}/", self._headers, enough)
        # The error, if any, is the next request's to meet and report.
        with contextlib.suppress(Warmed, DeadlineExceeded, *_NETWORK_ERRORS):
            self._opener.open(request, timeout=self.deadline.wait_limit())

    def read(self, key: str, limit: int) -> bytes | None:
        where = f"{self.location}/{key}"
        try:
            with self._open(key) as response:
                length = response.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) > limit:
                    raise too_large(where, limit)
                data = read_small(response, limit, self.deadline)
        except urllib.error.HTTPError as exc:
            finish_error(exc)
            if exc.code in (404, 410):
                return None
            raise self._failure("read", where, exc) from None
        except (DeadlineExceeded, *_NETWORK_ERRORS) as exc:
            raise self._failure("read", where, exc) from None
        if len(data) > limit:
            raise too_large(where, limit)
        if length is not None and length.isdigit() and len(data) != int(length):
            raise self.fail(f"connection to {self.location} dropped while reading {key}")
        return data

    def read_range(self, key: str, offset: int, length: int) -> bytes | memoryview:
        where = f"{self.location}/{key}"
        asked = f"bytes={offset}-{offset + length - 1}"
        request = urllib.request.Request(f"{self._base}/{quote(key)}",
                                         headers={**self._headers, "Range": asked})
        try:
            response = self._opener.open(request, timeout=self.deadline.wait_limit())
        except urllib.error.HTTPError as exc:
            finish_error(exc)
            if exc.code in (404, 410):
                raise missing_remote_file(where) from None
            if exc.code == 416:  # past the end: the caller's verification names the range
                return b""
            raise self._failure("read", where, exc) from None
        except (DeadlineExceeded, *_NETWORK_ERRORS) as exc:
            raise self._failure("read", where, exc) from None
        with response:
            header = response.headers.get("Content-Length")
            # A 200 to a range asking for the whole file is the bytes asked (a small file
            # read from any static host): no whole-file fallback, no warning.
            whole = offset == 0 and header == str(length)
            if response.status == 200 and not whole:
                raise RangesIgnored(f"{self.location} answered a request for {asked} of {key} "
                                    "with the whole file (HTTP 200): it ignores Range requests")
            answered = response.headers.get("Content-Range", "")
            if response.status != 200 and (response.status != 206
                                           or not answered.startswith(f"bytes {offset}-")):
                raise self.fail(f"GET {where} ({asked}) answered HTTP {response.status} "
                                f"with Content-Range {answered!r}")
            buffer = bytearray(length)
            try:  # straight into one buffer, no copies (a range is a few MiB)
                count = fill_buffer(response.readinto1, buffer, self.deadline)
            except DeadlineExceeded:
                raise self.deadline_passed(f"reading {where}") from None
            except (TimeoutError, http.client.HTTPException, ConnectionError) as exc:
                raise self._failure("read", where, exc) from None
        if header is not None and header.isdigit() and count < min(int(header), length):
            raise self.fail(f"connection to {self.location} dropped while reading {asked} of "
                            f"{key} after {count} of {header} bytes")
        return memoryview(buffer)[:count]

    def get_file(self, key: str, target: Path, size: int, algorithm: str,
                 progress: Progress | None) -> tuple[int, str]:
        where = f"{self.location}/{key}"
        try:
            response = self._open(key)
        except urllib.error.HTTPError as exc:
            finish_error(exc)
            if exc.code in (404, 410):
                raise missing_remote_file(where) from None
            raise self._failure("download", where, exc) from None
        except (DeadlineExceeded, *_NETWORK_ERRORS) as exc:
            raise self._failure("download", where, exc) from None
        with response:
            header = response.headers.get("Content-Length")
            announced = int(header) if header is not None and header.isdigit() else None
            if announced is not None and announced != size:
                raise wrong_size(where, announced, size)
            try:
                received, digests = copy_and_hash(response, target, (algorithm,), limit=size,
                                                  progress=progress, deadline=self.deadline)
            except DeadlineExceeded:
                raise self.deadline_passed(f"download of {where}") from None
            except (TimeoutError, http.client.HTTPException, ConnectionError) as exc:
                if self.deadline.expired():
                    raise self.deadline_passed(f"download of {where}") from None
                raise self.fail(f"connection to {self.location} dropped while downloading "
                                f"{key}", exc) from None
            except OSError as exc:  # the local side: disk full, permissions
                raise self.fail(f"cannot write the download of {where} to {target}",
                                exc) from None
        if announced is not None and received < announced:
            raise self.fail(f"connection to {self.location} dropped while downloading {key} "
                            f"after {received} of {announced} bytes")
        return received, digests[algorithm]


class HttpsBackend(HttpBackend):
    """Read-only registry over HTTPS (certificates checked as Python's default context does)."""

    kind = "https"
    scheme = "https"
