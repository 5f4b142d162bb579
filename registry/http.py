"""``http://`` and ``https://`` remotes: read-only, any static web server serving a registry.

Point a web server (nginx, a CDN, ``python -m http.server``, GitHub Pages, an S3 website
endpoint...) at a ``file://`` registry directory or a synced copy of an ``s3://`` one, and
``http(s)://host[:port]/path`` is a registry others can list and download from. The index
makes listing one request; downloads check every file against the manifest.

Credentials, if the server needs them, go in the URL's user-info (``https://user:pass@host``,
sent as HTTP Basic auth) or in Minari's ``token`` (sent as a Bearer token). They never appear in
errors or logs, and a redirect to another host is refused while credentials are attached.
``MARL_MINARI_HTTP_TIMEOUT`` sets the socket timeout in seconds (default 60).
"""

from __future__ import annotations

import base64
import http.client
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from marl_minari.errors import RemoteError

from .manifest import Progress, copy_and_hash, missing_remote_file, wrong_size
from .storage import RegistryStorage, scrub


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

    def __init__(self, name: str, token: str | None = None) -> None:
        super().__init__(name, token)
        parts = urlsplit(f"{self.scheme}://{name}")
        if not parts.hostname:
            raise RemoteError(scrub(f"no host in {self.scheme}://{name}"))
        netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
        if parts.port is not None:
            netloc = f"{netloc}:{parts.port}"
        self._base = urlunsplit((self.scheme, netloc, parts.path.rstrip("/"), "", ""))
        self._headers = {"User-Agent": "marl-minari-registry"}
        secrets = [token]
        if parts.username is not None:
            user, password = unquote(parts.username), unquote(parts.password or "")
            pair = base64.b64encode(f"{user}:{password}".encode()).decode()
            self._headers["Authorization"] = f"Basic {pair}"
            secrets += [password, pair]
        elif token:
            self._headers["Authorization"] = f"Bearer {token}"
        self._secrets = [s for s in secrets if s]
        self._opener = urllib.request.build_opener(
            _SameOriginRedirects((self.scheme, netloc), "Authorization" in self._headers))
        self._timeout = float(os.environ.get("MARL_MINARI_HTTP_TIMEOUT", "60"))

    @property
    def location(self) -> str:
        """The base URL, without credentials."""
        return self._base

    def _fail(self, message: str, exc: BaseException | None = None) -> RemoteError:
        detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        return RemoteError(scrub(f"{message}{detail}", self._secrets))

    def _open(self, key: str) -> Any:
        request = urllib.request.Request(f"{self._base}/{quote(key)}", headers=self._headers)
        return self._opener.open(request, timeout=self._timeout)

    def _read(self, key: str) -> bytes | None:
        try:
            with self._open(key) as response:
                data: bytes = response.read()
                length = response.headers.get("Content-Length")
        except urllib.error.HTTPError as exc:
            if exc.code in (404, 410):
                return None
            raise self._fail(f"GET {self.location}/{key} answered HTTP {exc.code}") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            raise self._fail(f"cannot read {self.location}/{key}", exc) from None
        if length is not None and length.isdigit() and len(data) != int(length):
            raise self._fail(f"connection to {self.location} dropped while reading {key}")
        return data

    def _get_file(self, key: str, target: Path, size: int, algorithm: str,
                  progress: Progress | None) -> tuple[int, str]:
        where = f"{self.location}/{key}"
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
                                                  progress=progress)
            except (TimeoutError, http.client.HTTPException, ConnectionError) as exc:
                raise self._fail(f"connection to {self.location} dropped while downloading "
                                 f"{key}", exc) from None
        if announced is not None and received < announced:
            raise self._fail(f"connection to {self.location} dropped while downloading {key} "
                             f"after {received} of {announced} bytes")
        return received, digests[algorithm]


class HttpsStorage(HttpStorage):
    """Read-only registry over HTTPS (certificates checked by Python's default context)."""

    kind = "https"
    scheme = "https"
