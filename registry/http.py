"""``http://`` and ``https://`` remotes: read-only, any static web server serving a registry.

Point a web server (nginx, a CDN, ``python -m http.server``, GitHub Pages, an S3 website
endpoint...) at a ``file://`` registry directory or a synced copy of an ``s3://`` one, and
``http(s)://host[:port]/path`` is a registry others can list and download from. The index
makes listing one request; downloads check every file against the manifest.

Credentials, if the server needs them, go in the URL's user-info (``https://user:pass@host``,
sent as HTTP Basic auth) or in Minari's ``token`` (sent as a Bearer token). They never appear in
errors or logs, and a redirect to another host is refused while credentials are attached.
``RemoteSettings.http_timeout`` (default ``MARL_MINARI_HTTP_TIMEOUT``, else 60 s) bounds each wait
for the server, and every file must arrive within ``RemoteSettings.download_deadline(size)``,
so a server that trickles bytes is cut off.
"""

from __future__ import annotations

import base64
import http.client
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from marl_minari.errors import RemoteError

from .credentials import scrub, split_userinfo
from .manifest import missing_remote_file, wrong_size
from .settings import RemoteSettings
from .storage import RegistryStorage
from .transfer import DeadlineExceeded, Progress, copy_and_hash, too_large


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never carry credentials to another scheme, host or port."""

    def __init__(self, origin: tuple[str, str], authenticated: bool) -> None:
        self._origin = origin
        self._authenticated = authenticated

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> Any:
        target = urlsplit(newurl)
        if self._authenticated and (target.scheme, target.netloc) != self._origin:
            raise RemoteError(scrub(f"refusing a redirect to {target.scheme}://{target.netloc} "
                                    "with credentials attached"))
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class HttpStorage(RegistryStorage):
    """Read-only registry over HTTP. ``name`` is the URL after ``http://``."""

    kind = "http"
    scheme = "http"
    writable = False

    def __init__(self, name: str, token: str | None = None, *,
                 settings: RemoteSettings | None = None) -> None:
        super().__init__(name, token, settings=settings)
        userinfo, address = split_userinfo(name)
        try:
            parts = urlsplit(f"{self.scheme}://{address}")
            hostname, port = parts.hostname, parts.port
        except ValueError:
            # The parser's message quotes the part it failed on, which may be a credential.
            raise self._fail(f"malformed URL {self.scheme}://{name}: expected "
                             f"{self.scheme}://[user:password@]host[:port]/path") from None
        if not hostname:
            raise self._fail(f"no host in {self.scheme}://{name}")
        netloc = hostname if ":" not in hostname else f"[{hostname}]"
        if port is not None:
            netloc = f"{netloc}:{port}"
        self._base = urlunsplit((self.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._headers = {"User-Agent": "marl-minari-registry"}
        if userinfo is not None:
            user, _, password = (unquote(piece) for piece in userinfo.partition(":"))
            pair = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {pair}"
            self._secrets.append(pair)
        elif token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._opener = urllib.request.build_opener(
            _SameOriginRedirects((self.scheme, netloc), "Authorization" in self._headers))

    @property
    def location(self) -> str:
        """The base URL, without credentials."""
        return self._base

    def _open(self, key: str) -> Any:
        request = urllib.request.Request(f"{self._base}/{quote(key)}", headers=self._headers)
        return self._opener.open(request, timeout=self.settings.http_timeout)

    def _read(self, key: str, limit: int) -> bytes | None:
        try:
            with self._open(key) as response:
                length = response.headers.get("Content-Length")
                if length is not None and length.isdigit() and int(length) > limit:
                    raise too_large(f"{self.location}/{key}", limit)
                data: bytes = response.read(limit + 1)
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 410):
                return None
            raise self._fail(f"GET {self.location}/{key} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise self._fail(f"cannot read {self.location}/{key}", exc) from None
        if len(data) > limit:
            raise too_large(f"{self.location}/{key}", limit)
        if length is not None and length.isdigit() and len(data) != int(length):
            raise self._fail(f"connection to {self.location} dropped while reading {key}")
        return data

    def _get_file(self, key: str, target: Path, size: int, algorithm: str,
                  progress: Progress | None) -> tuple[int, str]:
        where = f"{self.location}/{key}"
        seconds = self.settings.download_deadline(size)
        deadline = time.monotonic() + seconds
        try:
            response = self._open(key)
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 410):
                raise missing_remote_file(where) from None
            raise self._fail(f"GET {where} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise self._fail(f"cannot download {where}", exc) from None
        with response:
            header = response.headers.get("Content-Length")
            announced = int(header) if header is not None and header.isdigit() else None
            if announced is not None and announced != size:
                raise wrong_size(where, announced, size)
            try:
                received, digests = copy_and_hash(response, target, (algorithm,), limit=size,
                                                  progress=progress, deadline=deadline)
            except DeadlineExceeded:
                raise self._fail(
                    f"download of {where} did not finish within {seconds:.1f} s, the deadline "
                    f"for {size} bytes (http_timeout + size / min_download_rate of "
                    "RemoteSettings): the server is stalled or too slow; try again later, or "
                    "lower min_download_rate for a slow link") from None
            except (TimeoutError, http.client.HTTPException, ConnectionError) as exc:
                raise self._fail(f"connection to {self.location} dropped while downloading "
                                 f"{key}", exc) from None
            except OSError as exc:  # the local side: disk full, permissions
                raise self._fail(f"cannot write the download of {where} to {target}",
                                 exc) from None
        if announced is not None and received < announced:
            raise self._fail(f"connection to {self.location} dropped while downloading {key} "
                             f"after {received} of {announced} bytes")
        return received, digests[algorithm]


class HttpsStorage(HttpStorage):
    """Read-only registry over HTTPS (certificates checked by Python's default context)."""

    kind = "https"
    scheme = "https"
