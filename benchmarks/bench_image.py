"""Recording image envs: ParallelDataCollector versus Minari's DataCollector.

Both record the same actions on the same env: ours wraps the PettingZoo parallel env,
Minari's wraps its Gymnasium joint view (``marl_minari.JointEnv``). Each configuration runs
in a fresh process (so that its peak RSS is its own) and reports, per env step: the time
over the bare env while recording, the time of ``create_dataset``, and the dataset's size.

    python benchmarks/bench_image.py [--env butterfly/pistonball_v6 or cooperative_pong_v6]
                                     [--episodes 2] [--max-cycles 25]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from bench_record import run_joint as play_joint  # the same play loops, one copy each
from bench_record import run_parallel as play_parallel

CONFIGS: dict[str, dict[str, Any]] = {
    "minari DataCollector (JointEnv)": {"minari": True},
    "ParallelDataCollector() default": {},
    "  record_state=False": {"record_state": False},
    "  state_encoding='lzf'": {"state_encoding": "lzf"},
    "  background_writing=True": {"background_writing": True},
}


def plan_actions(env: Any, episodes: int, steps: int) -> list[list[dict[str, Any]]]:
    plan = []
    for episode in range(episodes):
        for offset, agent in enumerate(env.possible_agents):
            env.action_space(agent).seed(1000 * episode + offset)
        plan.append([{a: env.action_space(a).sample() for a in env.possible_agents}
                     for _ in range(steps)])
    return plan


def run_config(env_id: str, env_kwargs: dict[str, Any], episodes: int, config: dict[str, Any],
               root: str) -> dict[str, float]:
    """One configuration in this (fresh) process: bare run, recorded run, create_dataset."""
    os.environ["MINARI_DATASETS_PATH"] = root
    warnings.simplefilter("ignore")
    import minari

    import marl_minari as mm

    config = dict(config)
    use_minari = config.pop("minari", False)
    plan = plan_actions(mm.make_env(env_id, **env_kwargs), episodes,
                        int(env_kwargs.get("max_cycles", 125)))
    if use_minari:
        bare, play = mm.JointEnv(mm.make_env(env_id, **env_kwargs)), play_joint
    else:
        bare, play = mm.make_env(env_id, **env_kwargs), play_parallel
    start = time.perf_counter()
    steps = play(bare, plan)
    bare_s = time.perf_counter() - start
    if use_minari:
        recorder = minari.DataCollector(mm.JointEnv(mm.make_env(env_id, **env_kwargs)))
    else:
        recorder = mm.ParallelDataCollector(mm.make_env(env_id, **env_kwargs), **config)
    start = time.perf_counter()
    play(recorder, plan)
    record_s = time.perf_counter() - start
    dataset_id = f"bench/image-{os.getpid()}-v0"
    start = time.perf_counter()
    recorder.create_dataset(dataset_id)
    create_s = time.perf_counter() - start
    recorder.close()
    folder = Path(root) / "bench" / f"image-{os.getpid()}-v0"
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return {"steps": steps, "overhead_ms": (record_s - bare_s) / steps * 1e3,
            "create_ms": create_s / steps * 1e3, "size_mb": size / 1e6,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="butterfly/pistonball_v6")
    parser.add_argument("--episodes", type=int, default=2)
    parser.add_argument("--max-cycles", type=int, default=25)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-image-")
    env_kwargs = {"max_cycles": args.max_cycles}
    context = multiprocessing.get_context("spawn")
    results = {}
    for label, config in CONFIGS.items():
        with context.Pool(1) as pool:
            results[label] = pool.apply(run_config,
                                        (args.env, env_kwargs, args.episodes, config, root))
    steps = next(iter(results.values()))["steps"]
    print(f"env {args.env}: {args.episodes} episodes of max_cycles={args.max_cycles}, "
          f"{steps} steps, one run, each configuration in a fresh process")
    print(f"{'':34}{'overhead/step':>14}{'create/step':>13}{'total/step':>12}"
          f"{'size':>10}{'peak RSS':>10}")
    theirs = results["minari DataCollector (JointEnv)"]
    for label, r in results.items():
        total = r["overhead_ms"] + r["create_ms"]
        print(f"{label:34}{r['overhead_ms']:11.1f} ms{r['create_ms']:10.1f} ms"
              f"{total:9.1f} ms{r['size_mb']:7.1f} MB{r['peak_rss_mb']:7.0f} MB")
    ours = results["ParallelDataCollector() default"]
    total_ratio = (ours["overhead_ms"] + ours["create_ms"]) / (
        theirs["overhead_ms"] + theirs["create_ms"])
    print(f"default / minari: total time {total_ratio:.2f}x (goal <= 0.5), "
          f"size {ours['size_mb'] / theirs['size_mb']:.2f}x (goal <= 1.5)")


if __name__ == "__main__":
    main()
