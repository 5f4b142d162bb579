"""What reading a published dataset in place moves, against downloading it first.

Records ``--episodes`` episodes of mpe2 ``simple_spread_v3`` (25 steps each), publishes them to
a ``file://`` registry and serves it over HTTP on 127.0.0.1 from a server on a thread that
honours ``Range`` and counts every request and byte. Then, each with an empty block cache:

1. bytes moved to open the dataset with ``streaming=True`` and read one episode (everything
   served: ``_index.json``, manifest, metadata, offset index, data-file blocks), against the
   published size;
2. round trips to open it and read its first episode: the time they take from a server that
   answers every request 0.1 s late and starts every new connection 0.1 s late (its TCP
   handshake), in units of 0.1 s (requests sent together cost one); with the connections kept
   alive (the default), then with a new connection for every request; the reader opens
   connections ahead as it does for a host off the loopback (``connections_ahead``);
3. bytes moved by ``subsample(source, max_steps=1% of the steps)``;
4. a full streamed ``source.read(all episodes)`` against downloading the data file with a
   plain HTTP client (``urllib``, one GET), same run, best of ``--repeats``: the first pass
   (empty block cache, no comparisons remembered) and a second pass in another process (a new
   Python process on the same block cache, timed inside it from ``open_source`` to the end of
   the read, as the download is timed without the interpreter's start: the record of the
   first pass's offset-index comparisons read from disk), then the first source's next pass
   (its blocks in memory); beside them, once, what a Minari user does after downloading:
   every episode of the downloaded copy read with ``minari.load_dataset(...)
   .iterate_episodes()``.

5. where a first pass's floor lies, same run: the open alone (``open_source``), and fetching
   and verifying every block of the data file with nothing compared or copied
   (``RemoteFile.prefetch_ranges`` of the whole file, then ``settle`` for its cache writes),
   with the disk cache and without it (``cache_bytes=0``), against the same plain download.

Minari's ``load_dataset(download=True)`` (and OG-MARL's downloader) move 100% of the files
before the first episode; ``registry.download`` too, printed beside::

    python benchmarks/bench_remote.py                  # 2,000 episodes
    python benchmarks/bench_remote.py --episodes 500
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

DATASET = "bench/remote-v0"
ROUND_TRIP = 0.1
"""Seconds a far host takes to answer each request, in the round-trip count."""


class CountingRangeHandler(SimpleHTTPRequestHandler):
    """Static files with ``Range: bytes=a-b`` answered by 206, over HTTP/1.1 connections kept
    alive, errors included (as nginx serves); counts requests, bytes and connections."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as nginx's tcp_nodelay: no 40 ms wait for the body
    log: ClassVar[list[tuple[str, int]]] = []
    connections: ClassVar[list[int]] = []
    requests: ClassVar[list[str]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()
    latency: ClassVar[float] = 0.0
    """Seconds every answer waits before it starts, and every new connection before its
    first request is read (its TCP handshake): a far host."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def setup(self) -> None:
        super().setup()
        time.sleep(self.latency)
        with self.lock:
            self.connections.append(1)

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        self.send_response(code, message)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send_head(self) -> Any:
        time.sleep(self.latency)
        with self.lock:
            self.requests.append(self.path)
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            return super().send_head()
        header = self.headers.get("Range", "")
        size = path.stat().st_size
        if header.startswith("bytes="):
            first, _, last = header[6:].partition("-")
            start, end = int(first), min(int(last), size - 1)
            status = 206
        else:
            start, end, status = 0, size - 1, 200
        with open(path, "rb") as handle:
            handle.seek(start)
            data = handle.read(end - start + 1)
        with self.lock:
            self.log.append((self.path, len(data)))
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        self.wfile.write(data)
        return None


def record_spread(dataset_id: str, episodes: int, steps: int | None = None) -> None:
    """Record ``episodes`` seeded episodes of mpe2 ``simple_spread_v3`` (random actions;
    ``steps`` per episode, the env's 25 by default) as ``dataset_id``."""
    import marl_minari as mm

    kwargs = {} if steps is None else {"max_cycles": steps}
    env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", **kwargs),
                                   durability="none")
    rng = np.random.default_rng(0)
    for episode in range(episodes):
        env.reset(seed=episode)
        while env.agents:
            env.step({a: int(rng.integers(5)) for a in env.agents})
    env.create_dataset(dataset_id)


@contextmanager
def scratch_root(prefix: str) -> Iterator[Path]:
    """A new folder for a benchmark's datasets (``MINARI_DATASETS_PATH``), registry and
    caches, removed at the end."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


class StaticHostServer(ThreadingHTTPServer):
    """A threading server with a listen queue like a real static host's (nginx: 511). The
    standard library's queue of 5 drops the sixth and later of the connections a reader opens
    at once, and the kernel retries them a second later: a second counted as reading time."""

    request_queue_size = 511
    daemon_threads = True


def far_handler(latency: float) -> type[CountingRangeHandler]:
    """A :class:`CountingRangeHandler` whose answers and new connections wait ``latency``
    seconds, with logs of its own."""
    return type("FarHandler", (CountingRangeHandler,), {
        "latency": latency, "log": [], "connections": [], "requests": [],
        "lock": threading.Lock()})


@contextmanager
def serve_counting(directory: Path, handler: type[CountingRangeHandler] = CountingRangeHandler
                   ) -> Iterator[str]:
    """A ``handler`` server over ``directory`` on a thread, shut down at the end: its base URL
    (``http://127.0.0.1:<port>``)."""
    server = StaticHostServer(("127.0.0.1", 0), partial(handler, directory=str(directory)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def data_file_size(manifest: Any) -> int:
    """Bytes of ``data/main_data.hdf5`` in a published manifest."""
    return next(e.size for e in manifest.files if e.path.endswith("main_data.hdf5"))


@contextmanager
def publish_and_serve(root: Path, dataset_id: str) -> Iterator[tuple[str, Any]]:
    """Publish the recorded ``dataset_id`` to ``root/registry``, remove the local copy (what
    is read can only come from the server) and serve the registry until the end: ``(the
    dataset's URL, its manifest)``."""
    from marl_minari import registry
    from marl_minari.format.ids import dataset_dir

    registry_dir = root / "registry"
    manifest = registry.publish(dataset_id, f"file://{registry_dir}").manifest
    shutil.rmtree(dataset_dir(dataset_id))
    with serve_counting(registry_dir) as base:
        yield f"{base}/{dataset_id}", manifest


def moved(*, clear: bool = False) -> tuple[int, int, int]:
    """``(requests, bytes, bytes of main_data.hdf5)`` served since the log was last cleared;
    ``clear`` starts a new count."""
    with CountingRangeHandler.lock:
        log = list(CountingRangeHandler.log)
        if clear:
            CountingRangeHandler.log.clear()
    return (len(log), sum(n for _, n in log),
            sum(n for path, n in log if path.endswith("main_data.hdf5")))


def fresh_cache(root: Path, name: str) -> None:
    """As for a first reader: an empty block cache, nothing remembered of the offset-index
    comparisons (on disk they live beside the cache; in memory they are forgotten), and an
    empty request log."""
    from marl_minari.format import index_trust

    os.environ["MARL_MINARI_CACHE"] = str(root / f"cache-{name}" / "blocks")
    index_trust._BINDINGS.clear()
    moved(clear=True)


def timed_pass_in_new_process(url: str) -> float:
    """Seconds a new Python process takes to open ``url`` in place and read every episode (the
    block cache and the record of comparisons are the environment's, as for any process)."""
    env = dict(os.environ)
    # Byte-compiled modules, as an installed wheel has them: the clock is for the data.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    child = subprocess.run([sys.executable, __file__, "--timed-pass", url], check=True,
                           capture_output=True, text=True, env=env)
    return float(child.stdout.split()[-1])


def timed_plain_download(url: str, target: Path) -> float:
    """Seconds one plain ``urllib`` GET takes to copy the dataset's data file to ``target``
    (what a user without marl-minari would do)."""
    started = time.perf_counter()
    with urllib.request.urlopen(f"{url}/data/main_data.hdf5") as response, \
            open(target, "wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)
    return time.perf_counter() - started


def timed_pass(url: str) -> None:
    """``--timed-pass``: the child of :func:`timed_pass_in_new_process`; imports untimed.

    Outside the clock, as the download is timed with its client imported and its first
    connection made: what any process reading in place imports once, and nothing else
    (docs/benchmarks.md lists it): the registry, its HTTP backend (``http.client``,
    ``urllib.request``), the codec of a first connection's host name (``encodings.idna``)
    and the one ``zipfile`` reads the offset index's names with (``encodings.cp437``).
    """
    import encodings.cp437  # noqa: F401
    import encodings.idna  # noqa: F401

    import marl_minari.registry  # noqa: F401  (imported by the first streaming open)
    import marl_minari.registry.http  # noqa: F401

    import marl_minari as mm

    warnings.simplefilter("ignore")
    started = time.perf_counter()
    source = mm.open_source(url, streaming=True)
    source.read(source.episode_indices)
    print(time.perf_counter() - started)


def main() -> None:
    if sys.argv[1:2] == ["--timed-pass"]:
        timed_pass(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with scratch_root("bench-remote-") as root, ExitStack() as served:
        import minari
        from marl_minari.registry import connections

        import marl_minari as mm
        from marl_minari import registry

        record_spread(DATASET, args.episodes)
        total_steps = int(mm.load_dataset(DATASET).total_steps)
        url, manifest = served.enter_context(publish_and_serve(root, DATASET))
        registry_dir = root / "registry"
        total_size = manifest.total_size
        data_size = data_file_size(manifest)
        print(f"{args.episodes} episodes, {total_steps} steps; published {total_size} bytes "
              f"(data file {data_size}, blocks of "
              f"{next(e.block_size for e in manifest.files if e.block_size)} bytes)")

        # 1: open and read two episodes
        fresh_cache(root, "one")
        source = mm.open_source(url, streaming=True)
        source.read([0])
        source.read([args.episodes // 2])
        requests, served, _ = moved()
        print(f"open + read 2 episodes: {served} bytes in {requests} requests = "
              f"{100 * served / total_size:.2f}% of the published files (goal <= 5%)")

        # 2: round trips to the first episode: the same registry answering every request
        # ROUND_TRIP late, and every new connection ROUND_TRIP late (its TCP handshake), so
        # that the time taken counts the requests and connections that waited for others;
        # then with no connection kept alive, as every request had its own before
        kept = connections.IDLE_PER_SERVER
        far_settings = registry.StreamSettings(
            connections_ahead=registry.StreamSettings().parallel_requests + 2)
        for keep_alive in (True, False):
            connections.close_idle_connections()
            connections.IDLE_PER_SERVER = kept if keep_alive else 0
            far_host = far_handler(ROUND_TRIP)
            with serve_counting(registry_dir, far_host) as far:
                fresh_cache(root, f"far-{keep_alive}")
                started = time.perf_counter()
                # As for a far host: what a host off the loopback gets by default.
                far_source = mm.open_source(f"{far}/{DATASET}", streaming=True,
                                            stream_settings=far_settings)
                opened = time.perf_counter()
                far_source.read([0])
                done = time.perf_counter()
                opened_connections = len(far_host.connections)
                opened_requests = len(far_host.requests)
                far_source.read([args.episodes // 3])
                second = time.perf_counter()
                next_connections = len(far_host.connections) - opened_connections
                next_requests = len(far_host.requests) - opened_requests
            how = "connections kept alive" if keep_alive else "a new connection per request"
            print(f"open + first episode ({how}), "
                  f"every request and every new connection answered "
                  f"{ROUND_TRIP * 1e3:.0f} ms late: "
                  f"{(done - started) / ROUND_TRIP:.1f} round trips' time "
                  f"({(opened - started) / ROUND_TRIP:.1f} to open: the registry indexes, the "
                  f"manifest, then the small files with the blocks opening reads; "
                  f"{(done - opened) / ROUND_TRIP:.1f} for the episode, after the offset "
                  f"index; {opened_requests} requests on {opened_connections} connections; the "
                  f"next episode {(second - done) / ROUND_TRIP:.2f}, {next_requests} requests on "
                  f"{next_connections} new connections) (goal <= 4 round trips after the index)")
        connections.IDLE_PER_SERVER = kept

        # 4: a full streamed pass against a plain download, same run
        streamed, second, same, plain, verified = [], [], [], [], []
        for repeat in range(args.repeats):
            fresh_cache(root, f"full-{repeat}")
            started = time.perf_counter()
            source = mm.open_source(url, streaming=True)
            source.read(source.episode_indices)
            streamed.append(time.perf_counter() - started)
            moved(clear=True)
            second.append(timed_pass_in_new_process(url))
            again = moved()
            started = time.perf_counter()
            source.read(source.episode_indices)  # the same source: its blocks in memory
            same.append(time.perf_counter() - started)
            plain.append(timed_plain_download(url, root / "plain.hdf5"))
            shutil.rmtree(root / "datasets" / "bench" / "remote-v0", ignore_errors=True)
            started = time.perf_counter()
            registry.download(DATASET, f"file://{registry_dir}", force=True)
            verified.append(time.perf_counter() - started)
        print(f"full pass: streamed read of every episode {min(streamed):.3f} s, plain "
              f"download of the data file {min(plain):.3f} s: {min(plain) / min(streamed):.2f}x "
              f"the download's speed (goal >= 0.8x); registry.download (100% moved, verified) "
              f"{min(verified):.3f} s")
        print(f"second full pass (another process: blocks cached, comparisons remembered): "
              f"{min(second):.3f} s = {min(plain) / min(second):.2f}x the download's speed; "
              f"{again[1]} bytes in {again[0]} requests moved; the same source's next pass "
              f"{min(same):.3f} s = {min(plain) / min(same):.2f}x")
        # The same work a Minari user then does: every episode of the downloaded copy read
        # with Minari's own reader (once: it takes seconds).
        started = time.perf_counter()
        episodes = sum(1 for _ in minari.load_dataset(DATASET).iterate_episodes())
        minari_read = time.perf_counter() - started
        print(f"Minari reading the downloaded copy: load_dataset + iterate_episodes over its "
              f"{episodes} episodes {minari_read:.3f} s (the first streamed pass, which also "
              f"fetches and verifies, is {minari_read / min(streamed):.1f}x faster)")
        # 5: the first pass's floor: the open, and every block fetched and verified alone
        opened, cached, uncached, plain = [], [], [], []
        for repeat in range(args.repeats):
            fresh_cache(root, f"floor-{repeat}")
            started = time.perf_counter()
            mm.open_source(url, streaming=True)
            opened.append(time.perf_counter() - started)
            for budget, times in ((None, cached), (0, uncached)):
                fresh_cache(root, f"floor-{repeat}-{budget}")
                data_file = registry.open_remote_file(
                    url.removesuffix(f"/{DATASET}"), DATASET,
                    settings=registry.StreamSettings(cache_bytes=budget))
                started = time.perf_counter()
                data_file.prefetch_ranges([(0, data_file.size)])
                data_file.settle()  # the cache writes made, as a read waits for them
                times.append(time.perf_counter() - started)
            plain.append(timed_plain_download(url, root / "plain.hdf5"))
        print(f"floor of a first pass: the open {min(opened):.3f} s; every block fetched and "
              f"verified, nothing compared or copied, {min(cached):.3f} s with the disk cache, "
              f"{min(uncached):.3f} s without it; plain download {min(plain):.3f} s: the open "
              f"and the uncached fetch alone are {min(plain) / (min(opened) + min(uncached)):.2f}x "
              "the download's speed")

        # 3: subsample 1%
        fresh_cache(root, "subsample")
        mm.subsample(mm.open_source(url, streaming=True), "bench/remote-subset-v0",
                     max_steps=max(1, total_steps // 100), seed=0)
        _, served, _ = moved()
        print(f"subsample(max_steps=1%): {served} bytes = {100 * served / total_size:.1f}% "
              "(goal <= 10%)")

        print("Minari load_dataset(download=True) / OG-MARL's downloader: 100% of the files "
              "before the first episode")


if __name__ == "__main__":
    main()
