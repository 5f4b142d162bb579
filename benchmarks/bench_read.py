"""Bulk reads: ``MultiAgentDataset.to_arrays()`` versus iterating Minari's episodes.

Records a real dataset (mpe2 simple_spread, 1,000 episodes x 100 steps by default), then
reads all of it both ways in the same run; then once more with ``to_arrays()`` after the
writer's offset index is moved away, which is how datasets written by other tools are read
(through h5py's low-level API).

    python benchmarks/bench_read.py [--episodes 1000] [--steps 100]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["MINARI_DATASETS_PATH"] = tempfile.mkdtemp(prefix="bench-read-")
    warnings.simplefilter("ignore")

    import minari
    from marl_minari.collectors.collect import collect

    import marl_minari as mm

    start = time.perf_counter()
    collect("mpe2/simple_spread_v3", args.episodes, dataset_id="bench/read-v0",
            env_kwargs={"max_cycles": args.steps})
    print(f"recorded {args.episodes} x {args.steps} steps in {time.perf_counter() - start:.1f} s")

    dataset = mm.load_dataset("bench/read-v0")
    plain = minari.load_dataset("bench/read-v0")
    best_ours = best_minari = np.inf
    for _ in range(args.repeats):
        start = time.perf_counter()
        arrays = dataset.to_arrays()
        best_ours = min(best_ours, time.perf_counter() - start)
        start = time.perf_counter()
        returns = [float(episode.rewards.sum()) for episode in plain.iterate_episodes()]
        best_minari = min(best_minari, time.perf_counter() - start)
    assert np.allclose(arrays.team_rewards.sum(), sum(returns))
    steps = dataset.total_steps

    from marl_minari.format import layout

    index = dataset.data_path / layout.INDEX_FILE_NAME
    index.rename(index.with_name(index.name + ".moved"))
    unindexed = mm.load_dataset("bench/read-v0")
    best_unindexed = np.inf
    for _ in range(args.repeats):
        start = time.perf_counter()
        without = unindexed.to_arrays()
        best_unindexed = min(best_unindexed, time.perf_counter() - start)
    assert np.array_equal(without.team_rewards, arrays.team_rewards)
    print(f"to_arrays()                  {best_ours:7.3f} s  "
          f"({steps / best_ours / 1e6:.2f} M steps/s)")
    print(f"minari iterate_episodes()    {best_minari:7.3f} s  "
          f"({steps / best_minari / 1e6:.2f} M steps/s)")
    print(f"speed-up                     {best_minari / best_ours:7.1f}x  (target >= 10x)")
    print(f"to_arrays() without the index {best_unindexed:6.3f} s  "
          f"({steps / best_unindexed / 1e6:.2f} M steps/s, "
          f"{best_minari / best_unindexed:.1f}x Minari's iterate_episodes)")


if __name__ == "__main__":
    main()
