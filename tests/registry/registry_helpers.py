"""Helpers of the registry tests: loopback servers, interruptions, leftover checks."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import queue
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler
from pathlib import Path
from typing import Any

import minari
import pytest

from marl_minari.format.ids import dataset_dir, datasets_root

LOOPBACK = "127.0.0.1"
S3_SECRET = "registry-tests-secret-key-9f8e7d"
S3_KEY_ID = "registrytestskeyid"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes] | None = None,
                  timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {LOOPBACK}:{port}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class DroppingHandler(SimpleHTTPRequestHandler):
    """Serves files, but for names in ``drop`` announces the full length, sends half, hangs up."""

    drop: tuple[str, ...] = ()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def send_head(self) -> Any:
        if not self.path.endswith(self.drop):
            return super().send_head()
        path = Path(self.translate_path(self.path))
        data = path.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True
        return None


def drip(out: Any, data: bytes, interval: float, give_up: float) -> None:
    """Write ``data`` to ``out`` one byte per ``interval`` seconds, for at most ``give_up``
    seconds (a slow server); a client that hangs up ends it."""
    stop = time.monotonic() + give_up
    try:
        for byte in data:
            if time.monotonic() > stop:
                break
            out.write(bytes([byte]))
            out.flush()
            time.sleep(interval)
    except OSError:
        pass  # the client gave up, as it should


class DrippingHandler(SimpleHTTPRequestHandler):
    """Serves files, but for names in ``drip`` announces the full length and then sends one
    byte every ``interval`` seconds, for at most ``give_up`` seconds (then hangs up).

    With ``headers_too`` the status line and the headers are sent a byte at a time as well
    (a slow-loris server: each byte arrives well within any socket timeout)."""

    drip: tuple[str, ...] = ()
    interval = 0.5
    give_up = 20.0
    headers_too = False

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def send_head(self) -> Any:
        path = Path(self.translate_path(self.path))
        if not self.path.endswith(self.drip) or not path.is_file():
            return super().send_head()
        data = path.read_bytes()
        head = (f"HTTP/1.0 200 OK\r\nContent-Type: application/octet-stream\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode()
        if self.headers_too:
            data = head + data
        else:
            self.wfile.write(head)
            self.wfile.flush()
        drip(self.wfile, data, self.interval, self.give_up)
        self.close_connection = True
        return None


class FailingHandler(SimpleHTTPRequestHandler):
    """Answers every request with HTTP 500 and a body that echoes the request headers."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        body = str(self.headers).encode()
        self.send_response(500)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    """Start ``moto_server`` on a free loopback port; ``(process, endpoint)``."""
    executable = shutil.which("moto_server", path=str(Path(sys.executable).parent)) or "moto_server"
    for _ in range(3):
        port = free_port()
        process = subprocess.Popen([executable, "-H", LOOPBACK, "-p", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port, process)
        except RuntimeError:
            stop(process)
            continue
        return process, f"http://{LOOPBACK}:{port}"
    raise RuntimeError("moto_server did not start")


def use_s3_endpoint(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Point boto3 at ``endpoint`` with test credentials, through the usual AWS variables."""
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", S3_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", S3_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")


def new_bucket() -> str:
    import boto3

    name = f"registry-{uuid.uuid4().hex[:12]}"
    boto3.session.Session().client("s3").create_bucket(Bucket=name)
    return name


class Interrupted(Exception):
    """Stands in for Ctrl-C or a killed process in the middle of a transfer."""


def interrupt_after(calls: int) -> Callable[[int], None]:
    seen = [0]

    def progress(count: int) -> None:
        seen[0] += 1
        if seen[0] >= calls:
            raise Interrupted

    return progress


def no_partial_dataset(dataset_id: str) -> None:
    """Nothing of ``dataset_id`` where Minari looks, and no staging leftovers."""
    assert not dataset_dir(dataset_id).exists()
    staging = datasets_root() / ".marl_minari"
    leftovers = [p for p in staging.glob("download-*")] if staging.exists() else []
    assert leftovers == []
    assert dataset_id not in minari.list_local_datasets()


def replace_published_file(registry_dir: Path, dataset_id: str, relative: str,
                           data: bytes) -> None:
    """Replace a file of a published dataset and re-sign its manifest entry, as a publisher
    of that content would have: the download's checks all pass, so what it reads is ``data``."""
    import blake3

    (registry_dir / dataset_id / relative).write_bytes(data)
    manifest_path = registry_dir / dataset_id / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    for entry in manifest["files"]:
        if entry["path"] == relative:
            entry.update(size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                         blake3=blake3.blake3(data).hexdigest())
    manifest_path.write_text(json.dumps(manifest))


def as_older_manifest(raw: bytes) -> bytes:
    """A stored manifest without BLAKE3 digests, as marl-minari 0.0 wrote them."""
    document = json.loads(raw)
    for entry in document["files"]:
        entry.pop("blake3")
    return json.dumps(document).encode()


def manifest_document(registry_dir: Path, dataset_id: str) -> dict[str, Any]:
    """The published manifest of ``dataset_id``, as JSON."""
    return json.loads((registry_dir / dataset_id / "manifest.json").read_text())


def entry_of(document: dict[str, Any], path: str) -> dict[str, Any]:
    """The manifest entry of the published file ``path``."""
    return next(e for e in document["files"] if e["path"] == path)


def drop_range_digests(registry_dir: Path, dataset_id: str) -> None:
    """Rewrite ``dataset_id``'s manifest as publishers wrote it before range digests."""
    document = manifest_document(registry_dir, dataset_id)
    for entry in document["files"]:
        entry.pop("block_size", None)
        entry.pop("block_blake3", None)
        entry.pop("open_blocks", None)
    (registry_dir / dataset_id / "manifest.json").write_text(json.dumps(document))


def cached_block_numbers(cache: Path, pinned_digest: str | None = None) -> set[int]:
    """The block numbers the packs in block cache folder ``cache`` hold: of the file whose
    ``RemoteFile.pinned_digest`` is ``pinned_digest``, else of any file."""
    held: set[int] = set()
    folder = pinned_digest[:32] if pinned_digest else "*"
    for pack in cache.glob(f"packs/{folder}/*"):
        first, _, count = pack.name.partition("-")
        if first.isdigit() and count.isdigit():
            held.update(range(int(first), int(first) + int(count)))
    return held


def pack_files(cache: Path) -> list[Path]:
    """The pack files in block cache folder ``cache`` (no write in progress)."""
    return sorted(p for p in cache.glob("packs/*/*") if not p.name.startswith("."))


def answer_in_forked_child(answer: Callable[[], Any], timeout: float = 120) -> Any:
    """What ``answer()`` returns in a forked child of this process. A child that gives no
    answer (it hung on something of its parent's, as fork bugs do, or it died) fails the
    test; the wait is generous, never a speed check."""
    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    child = context.Process(target=lambda: answers.put(answer()))
    child.start()
    try:
        return answers.get(timeout=timeout)
    except queue.Empty:
        pytest.fail("the forked child gave no answer: it hung or died")
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()
            child.join()
