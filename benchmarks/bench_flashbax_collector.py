"""Benchmark of ``FlashbaxDataCollector.write`` against Mava's ``Vault.write``, same buffer states.

Run by hand (not part of the test suite)::

    python benchmarks/bench_flashbax_collector.py               # 8 envs x 12,800 steps
    python benchmarks/bench_flashbax_collector.py --scale 0.1   # quick run

The collector and the floors run ``--repeat`` times, interleaved; ratios are the medians of
the runs' own ratios.

A Mava-style loop (Flashbax flat buffer, ``add_sequences=True, add_batch_size=B``, timesteps
``{done, action, reward, observation, legal_action_mask}``) is made first and every buffer
state kept, so the clocks time only the writers. In the same run, on the same states:

* ``Vault.write(state)`` after every update (what Mava does; gzip, Flashbax's default);
* ``collector.write(state)`` after every update (episodes cut, every finished one durable in
  the journal), then ``create_dataset`` (the Minari dataset, one HDF5 group per episode);
* the floor of Minari's one-group-per-episode layout: a bare h5py loop creating the same
  groups and datasets (names, shapes, dtypes, filters, attributes) of the dataset the
  collector wrote, from arrays already in memory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
warnings.simplefilter("ignore")

from h5_floor import h5_contents, high_level_floor, low_level_floor  # noqa: E402


def _states(envs: int, steps: int, rollout: int) -> tuple[list[Any], int]:
    import jax
    from mava_style import Rollouts, buffer_states

    rollouts = Rollouts(envs=envs, agents=3, obs_dim=30, actions=9, updates=steps // rollout,
                        rollout=rollout, seed=0, min_episode=20, max_episode=60)
    states = list(buffer_states(rollouts, time_axis=2 * rollout))
    jax.block_until_ready(states[-1])
    return states, rollouts.updates * rollout


def _timed(run: Any) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--rollout", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3,
                        help="collector and floor runs, interleaved; the median ratio is given")
    args = parser.parse_args()
    steps = max(args.rollout, int(12_800 * args.scale) // args.rollout * args.rollout)
    work = Path(tempfile.mkdtemp(prefix="bench-fbx-"))
    os.environ["MINARI_DATASETS_PATH"] = str(work / "datasets")
    try:
        from flashbax.vault import Vault
        from marl_minari.collectors import FlashbaxDataCollector

        states, per_stream = _states(args.envs, steps, args.rollout)
        total = per_stream * args.envs
        print(f"{args.envs} streams x {per_stream} timesteps = {total:,} timesteps, "
              f"{len(states)} writes")

        vault = Vault(vault_name="bench", experience_structure=states[0].experience,
                      rel_dir=str(work / "vaults"), vault_uid="u")
        vault_s = _timed(lambda: [vault.write(s) for s in states])
        runs: list[tuple[float, float, float, float]] = []
        episodes = 0
        for run in range(args.repeat):
            # Interleaved, so that a busy moment of the machine hits both sides alike.
            collector = FlashbaxDataCollector(experience_structure=states[0].experience,
                                              recording_path=work / f"recording-{run}")
            write_s = _timed(lambda c=collector: [c.write(s) for s in states])
            dataset_id = f"bench/collected-{run}-v0"
            create_s = _timed(lambda c=collector, d=dataset_id: c.create_dataset(
                d, description="bench"))
            collector.close()
            data = work / "datasets" / "bench" / f"collected-{run}-v0" / "data" / "main_data.hdf5"
            contents = h5_contents(data)
            episodes = len(contents)
            floor_s = _timed(lambda c=contents: high_level_floor(c, work / "floor.hdf5"))
            low_s = _timed(lambda c=contents: low_level_floor(c, work / "low-floor.hdf5"))
            runs.append((write_s, create_s, floor_s, low_s))
            print(f"run {run + 1}: create_dataset {create_s:.2f} s, low-level floor "
                  f"{low_s:.2f} s ({low_s / create_s:.2f}x)")
        write_s, create_s, floor_s, low_s = (float(np.median(c)) for c in zip(*runs, strict=True))
        low_ratio = float(np.median([r[3] / r[1] for r in runs]))
        floor_ratio = float(np.median([r[2] / r[1] for r in runs]))

        def rate(seconds: float) -> str:
            return f"{seconds:7.2f} s  {total / seconds:>11,.0f} timesteps/s"

        print(f"{episodes:,} episodes; medians of {args.repeat} runs")
        print(f"Vault.write (gzip, one run)       {rate(vault_s)}")
        print(f"collector.write                  {rate(write_s)}")
        print(f"collector.write + create_dataset {rate(write_s + create_s)}")
        print(f"bare h5py floor (same objects)   {rate(floor_s)}")
        print(f"low-level h5py floor             {rate(low_s)}")
        print(f"collector.write vs Vault.write: {vault_s / write_s:.2f}x the throughput; "
              f"with create_dataset {vault_s / (write_s + create_s):.2f}x; "
              f"create_dataset vs the h5py floor: {floor_ratio:.2f}x; "
              f"vs the low-level floor: {low_ratio:.2f}x (write + create_dataset: "
              f"{low_s / (write_s + create_s):.2f}x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
