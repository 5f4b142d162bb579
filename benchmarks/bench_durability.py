"""What flushing to stable storage costs: ``durability="episode"`` versus ``"none"``.

Records the same random actions on mpe2 ``simple_spread_v3`` (25-step episodes) with each
setting, in alternating rounds, and reports the time per episode of recording (journal
``fdatasync`` per finished episode) and of ``create_dataset`` (``fsync`` of the dataset's
files and folders), best of ``--repeats``. On a loaded machine the env's own time swamps the
difference, so the journal append of one recorded episode is also timed alone (median of
``--appends`` appends with each setting).

    python benchmarks/bench_durability.py [--episodes 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np


def record(durability: str, episodes: int, seed: int, dataset_id: str) -> tuple[float, float]:
    """Seconds spent recording ``episodes`` episodes, and creating the dataset."""
    import marl_minari as mm

    env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3"),
                                   durability=durability)  # type: ignore[arg-type]
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    for episode in range(episodes):
        env.reset(seed=episode)
        while env.agents:
            env.step({a: int(rng.integers(5)) for a in env.agents})
    recorded = time.perf_counter()
    env.create_dataset(dataset_id)
    created = time.perf_counter()
    env.close()
    return recorded - start, created - recorded


def time_appends(root: str, appends: int) -> dict[str, tuple[float, float]]:
    """Median and mean milliseconds of one journal append of a recorded episode."""
    import marl_minari as mm
    from marl_minari.storage.recording import Recording

    record("none", 1, 0, "bench/sample-v0")
    dataset = mm.load_dataset("bench/sample-v0")
    episode = dataset.episode(0)
    medians = {}
    for durability in ("none", "episode"):
        recording = Recording(dataset.spec, path=Path(root) / f"append-{durability}",
                              durability=durability)  # type: ignore[arg-type]
        times = []
        for _ in range(appends):
            start = time.perf_counter()
            recording.append(episode)
            times.append(time.perf_counter() - start)
        recording.close(keep=False)
        medians[durability] = (float(np.median(times)) * 1e3, float(np.mean(times)) * 1e3)
    return medians


def time_dataset_flush(episodes: int) -> float:
    """Milliseconds to fsync a just-created dataset (created with ``durability="none"``)."""
    from marl_minari.format.ids import dataset_dir
    from marl_minari.storage.durable import sync_tree

    record("none", episodes, 99, "bench/flush-v0")
    start = time.perf_counter()
    sync_tree(dataset_dir("bench/flush-v0"))
    return (time.perf_counter() - start) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--appends", type=int, default=200)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    with tempfile.TemporaryDirectory() as root:
        os.environ["MINARI_DATASETS_PATH"] = root
        best: dict[str, list[float]] = {"episode": [np.inf, np.inf], "none": [np.inf, np.inf]}
        for repeat in range(args.repeats):
            for durability in ("none", "episode"):
                times = record(durability, args.episodes, repeat,
                               f"bench/{durability}-v{repeat}")
                best[durability] = [min(a, b) for a, b in zip(best[durability], times,
                                                              strict=True)]
        appends = time_appends(root, args.appends)
        flush = time_dataset_flush(args.episodes)
    per = {k: [v / args.episodes * 1e3 for v in values] for k, values in best.items()}
    print(f"{args.episodes} episodes of 25 steps, best of {args.repeats}")
    for name, (rec, create) in per.items():
        print(f"durability={name:<8} recording {rec:7.3f} ms/episode   "
              f"create_dataset {create:7.3f} ms/episode ({create * args.episodes:.1f} ms)")
    extra = per["episode"][0] - per["none"][0]
    print(f"journal fdatasync        {extra:7.3f} ms/episode ({extra / 25 * 1e3:.1f} us/step)")
    for stat, i in (("median", 0), ("mean", 1)):
        print(f"one journal append       {appends['none'][i]:7.3f} ms without, "
              f"{appends['episode'][i]:7.3f} ms with fdatasync ({stat} of {args.appends})")
    print(f"dataset fsync            {flush:7.1f} ms for a fresh {args.episodes}-episode dataset"
          f" (sync_tree right after create_dataset without it)")


if __name__ == "__main__":
    main()
