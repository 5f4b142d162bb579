"""The local server: the page at ``/``, one episode at ``/api/episode/<id>`` when the page
opens it (so a large dataset is never read whole for the page)."""

from __future__ import annotations

import re
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from marl_minari.errors import InvalidOptionError, MarlMinariError
from marl_minari.sources import DatasetSource
from marl_minari.view.episode import episode_payload
from marl_minari.view.page import to_json

LOOPBACK: Final = "127.0.0.1"
"""The only address the server listens on: the page shows a user's data to that user."""
_EPISODE_PATH: Final = re.compile(r"^/api/episode/(\d{1,18})$")


class _LoopbackHTTPServer(ThreadingHTTPServer):
    # A browser opens several connections at once. With the standard library's backlog of 5,
    # connections beyond it that arrive before the accept loop takes them are dropped, and the
    # kernel retries them only a second later: a page that waits a second for one episode.
    request_queue_size = 128
    daemon_threads = True


class ViewServer:
    """The page of one dataset, served on 127.0.0.1 from a background thread.

    Args:
        source: the open dataset (closed with the server when ``owns_source``).
        page: the page's HTML.
        port: the port (0: any free one).
        owns_source: close ``source`` when the server closes.
    """

    def __init__(self, source: DatasetSource, page: str, *, port: int = 0,
                 owns_source: bool = False) -> None:
        self.source = source
        self._page = page.encode("utf-8")
        self._owns_source = owns_source
        # one reader at a time: the source's open files are not shared between threads
        self._read_lock = threading.Lock()
        try:
            self._server = _LoopbackHTTPServer((LOOPBACK, port), _handler(self))
        except OSError as exc:
            raise InvalidOptionError(
                f"cannot listen on {LOOPBACK}:{port} ({exc.strerror or exc}): pick another "
                "--port, or 0 for any free one") from exc
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="marl-minari-view", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        """The port the server listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The page's address."""
        return f"http://{LOOPBACK}:{self.port}/"

    def episode(self, episode_id: int) -> bytes:
        """The JSON the page gets for one episode."""
        with self._read_lock:
            return to_json(episode_payload(self.source, episode_id)).encode("utf-8")

    def hosts(self) -> set[str]:
        """The ``Host`` headers the server answers: its own address, by number or as
        ``localhost``."""
        return {f"{LOOPBACK}:{self.port}", f"localhost:{self.port}"}

    def page(self) -> bytes:
        """The page's HTML."""
        return self._page

    def wait(self) -> None:
        """Block until the server is closed (the command line waits here until Ctrl-C)."""
        self._thread.join()

    def close(self) -> None:
        """Stop serving and release the dataset (when the server owns it)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        if self._owns_source:
            self.source.close()

    def __enter__(self) -> ViewServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _handler(view: ViewServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "marl-minari-view"

        def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
            if self.headers.get("Host", "") not in view.hosts():
                # a page elsewhere that points a name of its own at 127.0.0.1 (DNS
                # rebinding) must not read the dataset through the user's browser
                self._error(HTTPStatus.FORBIDDEN, "this server answers only requests for "
                            f"{LOOPBACK}:{view.port} or localhost:{view.port}")
                return
            path = self.path.split("?", 1)[0]
            if path in ("/", "/index.html"):
                self._send(HTTPStatus.OK, "text/html; charset=utf-8", view.page())
                return
            match = _EPISODE_PATH.match(path)
            if match is None:
                self._error(HTTPStatus.NOT_FOUND, f"nothing at {path}: the page is at /")
                return
            try:
                body = view.episode(int(match.group(1)))
            except InvalidOptionError as exc:
                self._error(HTTPStatus.NOT_FOUND, str(exc))
            except MarlMinariError as exc:
                self._error(HTTPStatus.INTERNAL_SERVER_ERROR, str(exc))
            else:
                self._send(HTTPStatus.OK, "application/json", body)

        def _error(self, status: HTTPStatus, message: str) -> None:
            self._send(status, "application/json", to_json({"error": message}).encode())

        def _send(self, status: HTTPStatus, kind: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Quiet: the command prints the address, not every request."""

    return Handler
