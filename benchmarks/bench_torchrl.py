"""Benchmark of the TorchRL export against TorchRL's own Minari loader, on 3m-shaped data.

Run by hand (not part of the test suite)::

    python benchmarks/bench_torchrl.py                 # full size: ~1M steps
    python benchmarks/bench_torchrl.py --scale 0.05    # quick run
    python benchmarks/bench_torchrl.py --torchrl-scale 0.05
        # ours at full size; TorchRL's loader (about 100 steps/s) and ours again on a 5%
        # dataset, for a same-run ratio where TorchRL's full-size load would take hours

Each step runs in its own interpreter (its peak RSS is its own), on the synthetic 3m-shaped
dataset of ``bench_adapters.py`` (3 agents, 30-float observations, 48-float state, action
masks in the infos, agents dying part-way):

* ``make_torchrl_buffer``: build the buffer (read, convert, write the memory-mapped storage),
  then ``sample()`` 256 slices x 20 steps (``batch_size=5120, slice_len=20``);
* ``MinariExperienceReplay(id, batch_size=5120, load_from_local_minari=True)`` (torchrl
  0.14.1) loading the same dataset, and a sample from it; whether what it loaded is all
  zeros is reported beside its time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_adapters import (  # noqa: E402
    DATASET_ID,
    FULL_EPISODES,
    FULL_STEPS,
    episode_lengths,
    make_spec,
    synthetic_episodes,
)

SLICES, SLICE_LEN, SAMPLES = 256, 20, 20


def step_make(work: Path, scale: float) -> dict[str, Any]:
    from marl_minari import write_dataset

    steps = int(FULL_STEPS * scale)
    episodes = max(1, int(FULL_EPISODES * scale))
    start = time.perf_counter()
    write_dataset(DATASET_ID, synthetic_episodes(episode_lengths(episodes, steps)), make_spec(),
                  total=episodes, algorithm_name="synthetic", description="3m-shaped data")
    return {"seconds": time.perf_counter() - start, "steps": steps, "episodes": episodes}


def step_ours(work: Path, scale: float) -> dict[str, Any]:
    from marl_minari.adapters import make_torchrl_buffer

    start = time.perf_counter()
    buffer = make_torchrl_buffer([DATASET_ID], SLICES * SLICE_LEN, slice_len=SLICE_LEN,
                                 scratch_dir=work / "ours")
    built = time.perf_counter() - start
    buffer.sample()
    start = time.perf_counter()
    for _ in range(SAMPLES):
        batch = buffer.sample()
    sample_ms = (time.perf_counter() - start) / SAMPLES * 1e3
    nonzero = bool(batch["agent", "observation"].abs().sum() > 0)
    return {"seconds": built, "sample_ms": sample_ms, "steps": len(buffer),
            "observations_nonzero": nonzero}


def step_torchrl(work: Path, scale: float) -> dict[str, Any]:
    from torchrl.data.datasets import MinariExperienceReplay

    start = time.perf_counter()
    try:
        replay = MinariExperienceReplay(DATASET_ID, batch_size=SLICES * SLICE_LEN,
                                        root=str(work / "torchrl"),
                                        load_from_local_minari=True)
    except Exception as exc:  # report what it raises: that is the finding
        return {"seconds": time.perf_counter() - start, "error": f"{type(exc).__name__}: "
                                                                  f"{exc}"[:200]}
    built = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(SAMPLES):
        batch = replay.sample()
    sample_ms = (time.perf_counter() - start) / SAMPLES * 1e3
    leaves = [v for v in batch.values(include_nested=True, leaves_only=True)
              if v.dtype.is_floating_point]
    nonzero = any(bool(v.abs().sum() > 0) for v in leaves)
    return {"seconds": built, "sample_ms": sample_ms, "steps": len(replay),
            "observations_nonzero": nonzero}


STEPS = {"make": step_make, "ours": step_ours, "torchrl": step_torchrl}


def run_step(name: str, work: Path, scale: float) -> dict[str, Any]:
    command = [sys.executable, __file__, "--work", str(work), "--scale", str(scale),
               "--step", name]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"step {name} failed:\n{done.stdout}\n{done.stderr}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0,
                        help="fraction of 3m Good's size (1.0: 996,366 steps)")
    parser.add_argument("--torchrl-scale", type=float, default=None,
                        help="run TorchRL's loader (and ours again) on a dataset of this "
                             "scale instead (default: --scale)")
    parser.add_argument("--work", type=Path, default=None, help="scratch folder")
    parser.add_argument("--step", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step is not None:
        warnings.simplefilter("ignore")
        os.environ["MINARI_DATASETS_PATH"] = str(args.work / "datasets")
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence library prints
        result = STEPS[args.step](args.work, args.scale)
        result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        sys.stdout = sys.__stdout__
        print(json.dumps(result))
        return
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-torchrl-"))
    plan = [(work / "full", args.scale, ("make", "ours", "torchrl"))]
    if args.torchrl_scale is not None and args.torchrl_scale != args.scale:
        plan = [(work / "full", args.scale, ("make", "ours")),
                (work / "small", args.torchrl_scale, ("make", "ours", "torchrl"))]
    for folder, scale, steps in plan:
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for name in steps:
            result = run_step(name, folder, scale)
            print(f"scale {scale:<5g} {name:8s} {json.dumps(result)}", flush=True)
        shutil.rmtree(folder, ignore_errors=True)
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
