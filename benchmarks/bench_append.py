"""What appending N episodes costs as the dataset grows: ``add_to_dataset`` at several sizes M.

Records M episodes of mpe2 ``simple_spread_v3`` (25 steps each) into a dataset for each size,
then times adding ``--new`` more episodes with ``add_to_dataset`` (``--repeats`` times, each
a fresh recording of the same actions; the median is given). An append is all or nothing: it
rewrites a copy of the data file, which on a filesystem with reflinks (btrfs, XFS) shares the
original's blocks, and elsewhere is a copy of every byte. The script says which one it got::

    python benchmarks/bench_append.py                              # under $TMPDIR
    python benchmarks/bench_append.py --root /mnt/btrfs/bench      # on another filesystem
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def _record(env_id: str, episodes: int, seed: int) -> object:
    import marl_minari as mm

    # Default durability: the append flushes what it wrote (the whole copied file where
    # the filesystem copies it), as a user's append does.
    env = mm.ParallelDataCollector(mm.make_env(env_id))
    rng = np.random.default_rng(seed)
    for episode in range(episodes):
        env.reset(seed=seed * 100_000 + episode)
        while env.agents:
            env.step({a: int(rng.integers(5)) for a in env.agents})
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 3000])
    parser.add_argument("--new", type=int, default=20, help="episodes added per append")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--root", type=Path, default=None,
                        help="folder for the datasets (its filesystem decides clone or copy)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    root = Path(tempfile.mkdtemp(prefix="bench-append-", dir=args.root))
    os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
    try:
        from marl_minari.storage.writer import clone_or_copy

        env_id = "mpe2/simple_spread_v3"
        results: dict[int, list[float]] = {}
        for size in args.sizes:
            dataset_id = f"bench/append-{size}-v0"
            _record(env_id, size, 1).create_dataset(dataset_id)  # type: ignore[attr-defined]
            data = root / "datasets" / "bench" / f"append-{size}-v0" / "data" / "main_data.hdf5"
            times = []
            for repeat in range(args.repeats):
                collector = _record(env_id, args.new, 2 + repeat)
                start = time.perf_counter()
                collector.add_to_dataset(dataset_id)  # type: ignore[attr-defined]
                times.append(time.perf_counter() - start)
                collector.close()  # type: ignore[attr-defined]
            results[size] = times
            cloned = clone_or_copy(data, root / "probe.hdf5")
            (root / "probe.hdf5").unlink()
            print(f"M = {size:>6,} episodes ({data.stat().st_size / 1e6:6.1f} MB): adding "
                  f"{args.new} takes {statistics.median(times):.3f} s (median of "
                  f"{len(times)}: {', '.join(f'{t:.3f}' for t in times)}); the data file is "
                  f"{'cloned (reflink)' if cloned else 'copied'}")
        small, large = min(args.sizes), max(args.sizes)
        ratio = statistics.median(results[large]) / statistics.median(results[small])
        print(f"largest / smallest: {ratio:.2f}x for {large / small:.0f}x the episodes")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
