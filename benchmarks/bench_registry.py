"""Registry throughput: publish and download a ~200 MB dataset, against plain copies.

Compares, in the same run and on the same files:

* ``file://``: :func:`marl_minari.registry.publish` / :func:`~marl_minari.registry.download`
  versus ``shutil.copy2`` of every file (and versus a copy followed by ``fsync``, which is what
  publish does by default for durability);
* ``s3://`` (moto's standalone server on 127.0.0.1, started here): publish / download versus
  boto3 ``upload_file`` / ``download_file`` of every file with the same client defaults.

Runs are interleaved (baseline, registry, baseline, ...) after an ``os.sync()`` each, and the
median of ``--repeat`` runs is reported. Ratio = baseline time / registry time (1.0: as fast
as the plain copy; the target is at least 0.8).

    python benchmarks/bench_registry.py [--size-mb 200] [--repeat 5] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"


def make_dataset(dataset_id: str, size_mb: float) -> Path:
    """Record a few real mpe2 episodes, then write them repeatedly up to ``size_mb``."""
    import marl_minari as mm
    from marl_minari.format.ids import dataset_dir

    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=500))
    for seed in range(4):
        collector.reset(seed=seed)
        while collector.agents:
            collector.step({a: collector.action_space(a).sample() for a in collector.agents})
    seed_dataset = collector.create_dataset("bench/seed-v0", algorithm_name="random")
    collector.close()
    episodes = list(seed_dataset)
    episode_bytes = seed_dataset.data_path.joinpath("main_data.hdf5").stat().st_size / len(
        episodes)
    count = max(1, int(size_mb * 1e6 / episode_bytes))
    mm.write_dataset(dataset_id, (episodes[i % len(episodes)] for i in range(count)),
                     seed_dataset.spec, algorithm_name="random", author="bench",
                     author_email="bench@example.com", code_permalink="https://example.com",
                     description="registry benchmark")
    return dataset_dir(dataset_id)


def files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))


def plain_copy(source: Path, target: Path, fsync: bool = False) -> None:
    for path in files_of(source):
        destination = target / path.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)
        if fsync:
            with open(destination, "rb") as handle:
                os.fsync(handle.fileno())


def timed_publish(registry: Any, dataset_id: str, folder: Path, keep: bool = False) -> float:
    """Seconds to publish into a new ``file://`` registry at ``folder`` (then removed)."""
    seconds = timed(partial(registry.publish, dataset_id, f"file://{folder}"))
    if not keep:
        shutil.rmtree(folder)
    return seconds


@contextlib.contextmanager
def no_fsync() -> Iterator[None]:
    os.environ["MARL_MINARI_REGISTRY_FSYNC"] = "0"
    try:
        yield
    finally:
        del os.environ["MARL_MINARI_REGISTRY_FSYNC"]


@contextlib.contextmanager
def forgotten_digests(folder: Path) -> Iterator[None]:
    """Hide the remembered digests (renaming keeps the sidecar's mtime)."""
    from marl_minari.format.layout import DIGESTS_FILE_NAME

    sidecar = folder / DIGESTS_FILE_NAME
    hidden = folder / ".hidden-digests"
    os.rename(sidecar, hidden)
    try:
        yield
    finally:
        os.rename(hidden, sidecar)


def timed(action: Callable[[], Any]) -> float:
    os.sync()
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    executable = shutil.which("moto_server", path=str(Path(sys.executable).parent))
    process = subprocess.Popen([executable or "moto_server", "-H", LOOPBACK, "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.2):
                return process, f"http://{LOOPBACK}:{port}"
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError("moto_server did not start")


def summary(name: str, baseline: list[float], ours: list[float], size: int) -> dict[str, Any]:
    base, mine = statistics.median(baseline), statistics.median(ours)
    row = {"case": name, "baseline_s": round(base, 3), "registry_s": round(mine, 3),
           "baseline_MBps": round(size / 1e6 / base, 1),
           "registry_MBps": round(size / 1e6 / mine, 1),
           "ratio": round(base / mine, 2),
           "baseline_runs": [round(x, 3) for x in baseline],
           "registry_runs": [round(x, 3) for x in ours]}
    print(f"{name:<44} baseline {base:7.3f} s ({row['baseline_MBps']:7.1f} MB/s)   registry "
          f"{mine:7.3f} s ({row['registry_MBps']:7.1f} MB/s)   ratio {row['ratio']:.2f}",
          flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, default=200.0)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--skip-s3", action="store_true")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-registry-"))
    os.environ["MINARI_DATASETS_PATH"] = str(work / "datasets")
    warnings.simplefilter("ignore")
    from marl_minari import registry
    from marl_minari.format.digests import remember_digests

    dataset_id = "bench/spread-v0"
    local = make_dataset(dataset_id, args.size_mb)
    size = sum(p.stat().st_size for p in files_of(local))
    keep = work / "pristine"
    shutil.copytree(local, keep)
    print(f"dataset {dataset_id}: {len(files_of(local))} files, {size / 1e6:.1f} MB; "
          f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}", flush=True)
    rows = []

    def fresh(name: str) -> Path:
        return work / f"{name}-{uuid.uuid4().hex[:8]}"

    def restore_local() -> None:
        shutil.rmtree(local, ignore_errors=True)
        shutil.copytree(keep, local)
        time.sleep(0.05)  # a clock tick after the copy, as after a real write
        remember_digests(local, [p.relative_to(local).as_posix() for p in files_of(local)])

    try:
        # ---------------------------------------------------------------- file:// publish
        # Every timed step starts after os.sync() and its output is deleted right after, so
        # no step pays for the previous one's writeback. The dataset was written by
        # marl-minari, so it remembers its digests; "not remembered" hides the sidecar, as for
        # a dataset written by plain Minari. The references hash every file once, nothing else.
        from marl_minari.format.digests import BLAKE3, SHA256, hash_file

        base, base_sync, ours, ours_nosync, cold, cold_sync = [], [], [], [], [], []
        hashing: dict[str, list[float]] = {SHA256: [], BLAKE3: [], "both": []}
        published = fresh("registry")
        for run in range(args.repeat):
            target = fresh("copy")
            base.append(timed(partial(plain_copy, local, target / dataset_id)))
            shutil.rmtree(target)
            ours.append(timed_publish(registry, dataset_id,
                                      published if run == 0 else fresh("registry"), run == 0))
            target = fresh("copy")
            base_sync.append(timed(partial(plain_copy, local, target / dataset_id, True)))
            shutil.rmtree(target)
            with forgotten_digests(local):
                cold_sync.append(timed_publish(registry, dataset_id, fresh("cold")))
            with no_fsync():
                ours_nosync.append(timed_publish(registry, dataset_id, fresh("nosync")))
                with forgotten_digests(local):
                    cold.append(timed_publish(registry, dataset_id, fresh("cold")))
            for name, algorithms in ((SHA256, (SHA256,)), (BLAKE3, (BLAKE3,)),
                                     ("both", (SHA256, BLAKE3))):
                hashing[name].append(timed(lambda a=algorithms: [hash_file(p, a)
                                                                 for p in files_of(local)]))
        rows.append(summary("file:// publish (fsync) vs copy+fsync", base_sync, ours, size))
        rows.append(summary("file:// publish (no fsync) vs copy", base, ours_nosync, size))
        rows.append(summary("file:// publish (fsync) vs copy", base, ours, size))
        rows.append(summary("  digests not remembered (fsync) vs copy+fsync", base_sync,
                            cold_sync, size))
        rows.append(summary("  digests not remembered (no fsync) vs copy", base, cold, size))
        rows.append(summary("reference: SHA-256 only vs copy", base, hashing[SHA256], size))
        rows.append(summary("reference: BLAKE3 only vs copy", base, hashing[BLAKE3], size))
        rows.append(summary("reference: SHA-256 + BLAKE3 (write-time cost)", base,
                            hashing["both"], size))

        # ---------------------------------------------------------------- file:// download
        base, ours = [], []
        source = published / dataset_id
        for _ in range(args.repeat):
            target = fresh("copy")
            base.append(timed(partial(plain_copy, source, target / dataset_id)))
            shutil.rmtree(target)
            shutil.rmtree(local)
            ours.append(timed(partial(registry.download, dataset_id, f"file://{published}")))
        rows.append(summary("file:// download (verified) vs copy", base, ours, size))
        shutil.rmtree(published)
        restore_local()

        if not args.skip_s3:
            rows.extend(bench_s3(registry, dataset_id, local, size, args.repeat, work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json is not None:
        args.json.write_text(json.dumps({"size_bytes": size, "cpus": os.cpu_count(),
                                         "rows": rows}, indent=1))


def bench_s3(registry: Any, dataset_id: str, local: Path, size: int, repeat: int,
             work: Path) -> list[dict[str, Any]]:
    import boto3

    process, endpoint = start_moto()
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
                       "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    rows = []
    try:
        client = boto3.session.Session().client("s3")
        bucket = "bench"
        client.create_bucket(Bucket=bucket)
        files = files_of(local)

        def upload(prefix: str) -> None:
            for path in files:
                client.upload_file(str(path), bucket,
                                   f"{prefix}/{dataset_id}/{path.relative_to(local).as_posix()}")

        def empty(prefix: str) -> None:
            pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                     Prefix=f"{prefix}/")
            for page in pages:
                for item in page.get("Contents", []):
                    client.delete_object(Bucket=bucket, Key=item["Key"])

        # Each timed step leaves the store as it found it (its objects are deleted right
        # after), so every upload meets the same server state; reg0 is the download source.
        registry.publish(dataset_id, f"s3://{bucket}/reg0")
        base, ours, cold = [], [], []
        for run in range(repeat):
            base.append(timed(partial(upload, f"plain{run}")))
            empty(f"plain{run}")
            ours.append(timed(partial(registry.publish, dataset_id, f"s3://{bucket}/reg{run + 1}")))
            empty(f"reg{run + 1}")
            with forgotten_digests(local):
                cold.append(timed(partial(registry.publish, dataset_id,
                                          f"s3://{bucket}/cold{run}")))
            empty(f"cold{run}")
        rows.append(summary("s3:// publish vs boto3 upload_file", base, ours, size))
        rows.append(summary("  digests not remembered", base, cold, size))

        base, ours = [], []
        for _ in range(repeat):
            target = work / f"s3copy-{uuid.uuid4().hex[:8]}"

            def download_plain(target: Path = target) -> None:
                for path in files:
                    relative = path.relative_to(local).as_posix()
                    destination = target / relative
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    client.download_file(bucket, f"reg0/{dataset_id}/{relative}",
                                         str(destination))

            base.append(timed(download_plain))
            shutil.rmtree(target)
            shutil.rmtree(local)
            ours.append(timed(lambda: registry.download(dataset_id, f"s3://{bucket}/reg0")))
        rows.append(summary("s3:// download (verified) vs boto3 download_file", base, ours,
                            size))
    finally:
        process.terminate()
        process.wait(timeout=10)
    return rows


if __name__ == "__main__":
    main()
