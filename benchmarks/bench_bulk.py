"""Bulk reads against the file: ``to_arrays()``, ``make_buffer`` and one episode, beside one
read of ``main_data.hdf5`` into memory (the floor), page cache warm and cold.

Records mpe2 ``simple_spread_v3`` on defaults twice (4,000 episodes x 25 steps and 400 x 250
steps) into ``--root`` (kept between runs: ``--root`` of an earlier run skips the recording),
then times, in one process and one run, best of ``--repeats``:

- ``read file``: ``main_data.hdf5`` read once into a buffer whose pages were touched before
  (the floor: the kernel's copy alone, the least any read of the file into memory costs; it
  does not move with the state of the allocator, as a read into fresh memory does);
- ``fresh``: the same read into a new ``np.empty`` (its pages faulted in by the read), printed
  beside it for reference;
- ``to_arrays()`` of every episode;
- ``make_buffer([dataset], ...)`` (CPU: the host arrays are the buffer);
- one episode (``to_arrays([k])`` of a middle episode).

Ratios are ``floor / ours`` (1.0 is the floor), of the best times; the calls are measured in
interleaved rounds, and the median of each round's ratio is printed too. ``--cold`` drops
the page cache before each timed call (``sync; echo 3 > /proc/sys/vm/drop_caches``: root
only), so the floor is the disk.
``--fresh-memory`` fixes glibc's mmap threshold at 4 MiB (``mallopt``) so that every large array
of every call is a fresh mapping whose pages the call faults in, as in a process that builds
one buffer; by default glibc raises the threshold after the first free and later calls reuse
the freed heap blocks, their pages already faulted in (the floor, larger than 32 MiB, is a
fresh mapping either way).
``--profile NAME`` prints a cProfile of one call (``to_arrays`` or ``make_buffer``) instead;
``--stages`` prints where the fastest of ``--repeats`` ``make_buffer`` calls spent its wall
time (each stage timed around the library's functions: no profiler's per-call cost).

    python benchmarks/bench_bulk.py [--root DIR] [--repeats 5] [--cold] [--fresh-memory]
    python benchmarks/bench_bulk.py [--profile to_arrays]
    python benchmarks/bench_bulk.py --stages [--only long]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SHAPES = ((4000, 25), (400, 250))


def dataset_id(episodes: int, steps: int) -> str:
    return f"bench/spread-{episodes}x{steps}-v0"


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def fresh_memory() -> None:
    """Every allocation of 4 MiB or more a fresh mapping, returned to the system when freed
    (glibc's ``M_MMAP_THRESHOLD``, fixed: no longer raised after a free)."""
    import ctypes

    m_mmap_threshold = -3
    if not ctypes.CDLL(None).mallopt(m_mmap_threshold, 4 * 2**20):
        raise SystemExit("--fresh-memory needs glibc's mallopt")


def touched_buffer(path: Path) -> np.ndarray:
    """A buffer the size of ``path`` whose every page is already faulted in."""
    buffer = np.empty(path.stat().st_size, dtype=np.uint8)
    buffer.fill(1)
    return buffer


def read_file(path: Path, buffer: np.ndarray | None = None) -> None:
    """The file read once into ``buffer`` (the floor, when its pages are touched already), or
    into fresh memory (``np.empty``: its pages are first touched by the read, as the reader's
    arrays are; a ``bytearray`` would zero them first)."""
    size = path.stat().st_size
    if buffer is None:
        buffer = np.empty(size, dtype=np.uint8)
    with open(path, "rb", buffering=0) as handle:
        view = memoryview(buffer)
        done = 0
        while done < size:
            done += handle.readinto(view[done:])


STAGES = (
    # (module, owner, function, stage): the stages of make_buffer, timed around the calls.
    ("marl_minari.adapters.buffer", None, "_open_source", "open the source"),
    ("marl_minari.sources.folders", "FolderSource", "_stored_lengths", "episode lengths"),
    ("marl_minari.storage.episode_reader", "EpisodeReader", "read", "read chunks"),
    ("marl_minari.storage.episode_reader", "EpisodeReader", "_trusted", "  trust index entries"),
    ("marl_minari.storage.episode_reader", "EpisodeReader", "_leaves", "  find leaves"),
    ("marl_minari.storage.episode_reader", None, "index_entries", "  plan ranges"),
    ("marl_minari.storage.episode_reader", None, "plan_entries", "  plan ranges"),
    ("marl_minari.storage.range_reader", "RangePlanner", "plan", "  plan ranges"),
    ("marl_minari.storage.episode_reader", None, "read_plan_from_fd", "  preadv"),
    ("marl_minari.adapters.buffer", None, "_device_ready_empty", "allocate the buffer"),
    ("marl_minari.adapters.buffer", None, "view_rows", "view rows into the buffer"),
    ("marl_minari.adapters.sampling", None, "start_table", "start table"),
)


def stage_timers() -> dict[str, float]:
    """Wrap each function of :data:`STAGES` (those that exist) to add its wall time to the
    returned dict under its stage."""
    import importlib

    spent: dict[str, float] = {}
    for module_name, owner_name, name, stage in STAGES:
        module = importlib.import_module(module_name)
        owner = getattr(module, owner_name) if owner_name else module
        inner = getattr(owner, name, None)
        if inner is None:
            continue

        def timed(*args: Any, inner: Any = inner, stage: str = stage, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                spent[stage] = spent.get(stage, 0.0) + time.perf_counter() - start

        setattr(owner, name, timed)
    return spent


def print_stages(name: str, call: Callable[[], Any], repeats: int,
                 spent: dict[str, float]) -> None:
    runs = []
    for _ in range(repeats):
        spent.clear()
        start = time.perf_counter()
        call()
        runs.append((time.perf_counter() - start, dict(spent)))
    total, stages = min(runs, key=lambda run: run[0])
    print(f"--- {name}: make_buffer {total * 1e3:.1f} ms (fastest of {repeats})")
    for stage, seconds in stages.items():
        print(f"  {stage:<28} {seconds * 1e3:7.1f} ms")
    print(f"  {'the rest':<28} "
          f"{(total - sum(v for k, v in stages.items() if not k.startswith(' '))) * 1e3:7.1f} ms")


def best(call: Callable[[], Any], repeats: int, cold: bool) -> float:
    times = []
    for _ in range(repeats):
        if cold:
            drop_caches()
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=None)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--fresh-memory", action="store_true",
                        help="every large array a fresh mapping (pages faulted in per call)")
    parser.add_argument("--profile", choices=("to_arrays", "make_buffer", "episode"))
    parser.add_argument("--only", choices=("short", "long"))
    parser.add_argument("--sort", default="tottime", help="cProfile order (--profile)")
    parser.add_argument("--stages", action="store_true",
                        help="where make_buffer's wall time goes, stage by stage")
    args = parser.parse_args()
    if args.fresh_memory:
        fresh_memory()
    root = args.root or tempfile.mkdtemp(prefix="bench-bulk-")
    os.environ["MINARI_DATASETS_PATH"] = root
    warnings.simplefilter("ignore")

    import jax
    from marl_minari.adapters import make_buffer
    from marl_minari.collectors.collect import collect

    import marl_minari as mm
    from marl_minari.format import layout

    for episodes, steps in SHAPES:
        name = dataset_id(episodes, steps)
        if not (Path(root) / name / "data" / layout.MAIN_FILE_NAME).exists():
            start = time.perf_counter()
            collect("mpe2/simple_spread_v3", episodes, dataset_id=name,
                    env_kwargs={"max_cycles": steps})
            print(f"recorded {name} in {time.perf_counter() - start:.1f} s")

    spent = stage_timers() if args.stages else {}
    # Warm-up: imports, JAX's first device_put, the index checks of this process.
    warm = mm.load_dataset(dataset_id(*SHAPES[1]))
    make_buffer([warm.subset(np.arange(4))], sample_batch_size=2, sample_sequence_length=2)

    print(f"device {jax.devices()[0]}; root {root}, {'cold' if args.cold else 'warm'} page "
          f"cache, best of {args.repeats}"
          f"{', fresh memory' if args.fresh_memory else ''}")
    print(f"{'dataset':>14} {'file MB':>8} {'read file':>10} {'fresh':>10} {'to_arrays':>16} "
          f"{'make_buffer':>16} {'one episode':>12}")
    for episodes, steps in SHAPES:
        if args.only and (steps == 25) != (args.only == "short"):
            continue
        name = dataset_id(episodes, steps)
        dataset = mm.load_dataset(name)
        path = dataset.data_path / layout.MAIN_FILE_NAME
        middle = [episodes // 2]
        calls: dict[str, Callable[[], Any]] = {
            "to_arrays": dataset.to_arrays,
            # Until the buffer is on its device (an accelerator's copy is asynchronous).
            "make_buffer": lambda dataset=dataset: jax.block_until_ready(make_buffer(
                [dataset], sample_batch_size=256, sample_sequence_length=10)[1]),
            "episode": lambda dataset=dataset, middle=middle: dataset.to_arrays(middle),
        }
        if args.stages:
            print_stages(name, calls["make_buffer"], args.repeats, spent)
            continue
        if args.profile:
            calls[args.profile]()
            profile = cProfile.Profile()
            profile.enable()
            calls[args.profile]()
            profile.disable()
            print(f"--- {name}: {args.profile}")
            pstats.Stats(profile).sort_stats(args.sort).print_stats(18)
            continue
        # Interleaved rounds: the floor and each call see the same load on a shared machine.
        touched = touched_buffer(path)
        rounds = [{"floor": best(
            lambda path=path, touched=touched: read_file(path, touched), 1, args.cold),
                   "fresh": best(lambda path=path: read_file(path), 1, args.cold),
                   "to_arrays": best(calls["to_arrays"], 1, args.cold),
                   "make_buffer": best(calls["make_buffer"], 1, args.cold),
                   "episode": best(calls["episode"], 1 if args.cold else 5, args.cold)}
                  for _ in range(args.repeats)]
        del touched
        floor, fresh, arrays, buffer, one = (min(r[k] for r in rounds) for k in (
            "floor", "fresh", "to_arrays", "make_buffer", "episode"))
        def median_ratio(key: str, rounds: list[dict[str, float]] = rounds) -> float:
            return float(np.median([r["floor"] / r[key] for r in rounds]))

        print(f"{episodes:>6} x {steps:<5} {path.stat().st_size / 1e6:8.1f} "
              f"{floor * 1e3:7.1f} ms {fresh * 1e3:7.1f} ms "
              f"{arrays * 1e3:7.1f} ms ({floor / arrays:4.2f}) "
              f"{buffer * 1e3:7.1f} ms ({floor / buffer:4.2f}) {one * 1e3:9.2f} ms   "
              f"median of per-round ratios: {median_ratio('to_arrays'):4.2f}, "
              f"{median_ratio('make_buffer'):4.2f}")


if __name__ == "__main__":
    main()
