"""What reading a whole dataset costs when its offset index is trusted entry by entry.

Run by hand (not part of the test suite)::

    python benchmarks/bench_index_trust.py                   # 2,000 episodes of 10 steps
    python benchmarks/bench_index_trust.py --episodes 1000   # quick run

A dataset of many short episodes is written, then copied (new inodes and times: the digests its
writer remembered no longer describe the copy). Each case reads every episode with
``to_arrays()`` in a fresh process, so nothing is remembered between cases:

* ``written``: the dataset as its writer left it: its remembered digest vouches for the whole
  index at once;
* ``copy``: the copy: each index entry is compared with HDF5 once before its bytes are read
  (a digest the reader computes is never compared with the index's own header);
* ``copy, checked``: another copy after one ``check_dataset`` (which compared every entry and
  remembered the file, as its writer would have);
* ``downloaded``: the dataset published to a ``file://`` registry and downloaded into another
  datasets root (the download compared every entry and remembered the file);
* ``copy, no index``: the copy with its index deleted: every dataset read through h5py.

The cases run ``--repeat`` times, interleaved; the figure is each case's median wall time and
its ratio to ``written`` in the same run. The one-off costs of ``check`` and of the download
(transfer and verification included) are printed too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

READ = """
import sys, time
import marl_minari as mm
dataset = mm.load_dataset(sys.argv[1])
start = time.perf_counter()
arrays = dataset.to_arrays()
print(time.perf_counter() - start, int(arrays.episode_lengths.sum()))
"""


def _write(episodes: int, steps: int) -> None:
    import numpy as np
    from gymnasium import spaces

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
    from marl_strategies import random_episode

    from marl_minari.format.spec import MultiAgentSpec
    from marl_minari.storage.writer import write_dataset

    agents = [f"agent_{i}" for i in range(3)]
    obs = {a: spaces.Box(-1, 1, (30,), dtype=np.float32) for a in agents}
    act = {a: spaces.Discrete(9) for a in agents}
    spec = MultiAgentSpec(api="parallel", possible_agents=tuple(agents),
                          observation_spaces=obs, action_spaces=act)
    write_dataset("bench/trust-v0", (random_episode(agents, obs, act, steps, seed)
                                     for seed in range(episodes)), spec)


def _read(root: Path, dataset_id: str) -> float:
    env = {**os.environ, "MINARI_DATASETS_PATH": str(root)}
    done = subprocess.run([sys.executable, "-c", READ, dataset_id], check=True,
                          capture_output=True, text=True, env=env)
    return float(done.stdout.split()[0])


def _timed(action: Callable[[], object]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _download(root: Path, registry: Path, downloads: Path) -> float:
    """Publish ``bench/trust-v0`` to ``registry``, download it under ``downloads``; the
    download's seconds."""
    from marl_minari import registry as registries

    registries.publish("bench/trust-v0", str(registry))
    os.environ["MINARI_DATASETS_PATH"] = str(downloads)
    try:
        return _timed(lambda: registries.download("bench/trust-v0", str(registry)))
    finally:
        os.environ["MINARI_DATASETS_PATH"] = str(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-index-trust-"))
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        _write(args.episodes, args.steps)
        import marl_minari as mm

        for name in ("copy-v0", "checked-v0", "plain-v0"):
            shutil.copytree(root / "bench" / "trust-v0", root / "bench" / name)
        (root / "bench" / "plain-v0" / "data" / "marl_minari_index.npz").unlink()
        from clock import after_last_change  # tests/support, on the path since _write

        # A digest taken in the clock tick of the copy's last write is never trusted.
        after_last_change(root / "bench" / "checked-v0" / "data" / "main_data.hdf5")
        start = time.perf_counter()
        remembered = mm.check_dataset("bench/checked-v0").index_remembered
        check_seconds = time.perf_counter() - start
        assert remembered, "check did not remember the copy"
        downloads = root / "downloads"
        download_seconds = _download(root, root / "registry", downloads)
        cases = {"written": (root, "bench/trust-v0"), "copy": (root, "bench/copy-v0"),
                 "copy, checked": (root, "bench/checked-v0"),
                 "downloaded": (downloads, "bench/trust-v0"),
                 "copy, no index": (root, "bench/plain-v0")}
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(args.repeat):
            for name, (where, dataset_id) in cases.items():
                times[name].append(_read(where, dataset_id))
        size = (root / "bench" / "trust-v0" / "data" / "main_data.hdf5").stat().st_size
        print(f"{args.episodes} episodes of {args.steps} steps, 3 agents, "
              f"{size / 1e6:.1f} MB data file; median of {args.repeat} fresh-process reads")
        print(f"  one check of the copy {check_seconds:.2f} s; "
              f"the download {download_seconds:.2f} s")
        base = statistics.median(times["written"])
        for name, found in times.items():
            wall = statistics.median(found)
            print(f"  {name:<16} {wall:7.3f} s  {wall / base:5.2f}x written")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    start = time.perf_counter()
    main()
    print(f"({time.perf_counter() - start:.0f} s in all)")
