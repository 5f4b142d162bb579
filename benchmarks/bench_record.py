"""Recording overhead per env step: ParallelDataCollector versus Minari's DataCollector.

Both record the same random actions on the same env in one run: ours wraps the PettingZoo
parallel env, Minari's wraps its Gymnasium joint view (``marl_minari.JointEnv``). Overhead is
(time with recorder - time of the same env unrecorded) / steps, dataset creation included:
the parallel env for ours, the joint view for Minari's. The headline compares like with like:
our default ``record_state=True`` against Minari's ``DataCollector`` given a
``StepDataCallback`` that records the same ``env.state()`` in its infos; Minari's defaults
(no state) and our ``record_state=False`` are printed beside it.

    python benchmarks/bench_record.py [--episodes 400] [--env mpe2/simple_spread_v3]
                                      [--clock wall|cpu]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import numpy as np


def actions_for(env, episodes: int, seed: int) -> list[list[dict]]:
    rng = np.random.default_rng(seed)
    plan = []
    for _ in range(episodes):
        steps = []
        for _ in range(env.unwrapped.max_cycles if hasattr(env.unwrapped, "max_cycles") else 25):
            steps.append({a: int(rng.integers(env.action_space(a).n))
                          for a in env.possible_agents})
        plan.append(steps)
    return plan


def run_parallel(env, plan) -> int:
    steps = 0
    for episode, actions in enumerate(plan):
        env.reset(seed=episode)
        for step in actions:
            if not env.agents:
                break
            env.step({a: step[a] for a in env.agents})
            steps += 1
    return steps


def run_joint(env, plan) -> int:
    steps = 0
    for episode, actions in enumerate(plan):
        env.reset(seed=episode)
        for step in actions:
            _, _, terminated, truncated, _ = env.step(step)
            steps += 1
            if terminated or truncated:
                break
    return steps


def state_callback():
    """Minari's ``StepDataCallback`` recording the global state in the infos, as ours does."""
    import minari

    class RecordState(minari.StepDataCallback):
        def __call__(self, env, **kwargs):
            step_data = super().__call__(env, **kwargs)
            step_data["info"] = {**step_data["info"],
                                 "state": env.unwrapped.parallel_env.state()}
            return step_data

    return RecordState


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="mpe2/simple_spread_v3")
    parser.add_argument("--episodes", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: this process's CPU time (time.process_time), which other "
                             "jobs competing for the cores inflate less than wall-clock time")
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    os.environ["MINARI_DATASETS_PATH"] = tempfile.mkdtemp(prefix="bench-record-")
    warnings.simplefilter("ignore")

    import minari

    import marl_minari as mm

    plan = actions_for(mm.make_env(args.env), args.episodes, 0)
    labels = ("bare", "bare joint", "marl-minari", "marl-minari+state", "marl-minari+bg",
              "marl-minari+nosync", "create_dataset", "minari", "minari+state")
    best = dict.fromkeys(labels, np.inf)
    steps = 0
    for repeat in range(args.repeats):
        env = mm.make_env(args.env)
        start = clock()
        steps = run_parallel(env, plan)
        best["bare"] = min(best["bare"], clock() - start)

        for label, kwargs in (("marl-minari", {"record_state": False}),
                              ("marl-minari+state", {}),
                              ("marl-minari+bg", {"background_writing": True}),
                              ("marl-minari+nosync", {"durability": "none"})):
            collector = mm.ParallelDataCollector(mm.make_env(args.env), **kwargs)
            start = clock()
            run_parallel(collector, plan)
            saving = clock()
            collector.create_dataset(f"bench/ours-{label.replace('+', '-')}-{repeat}-v0")
            best[label] = min(best[label], clock() - start)
            if label == "marl-minari+nosync":  # its writes without the flushes
                best["create_dataset"] = min(best["create_dataset"], clock() - saving)
            collector.close()

        bare_joint = mm.JointEnv(mm.make_env(args.env))
        start = clock()
        run_joint(bare_joint, plan)
        best["bare joint"] = min(best["bare joint"], clock() - start)

        for label, kwargs in (("minari", {}),
                              ("minari+state", {"step_data_callback": state_callback()})):
            joint = minari.DataCollector(mm.JointEnv(mm.make_env(args.env)), **kwargs)
            start = clock()
            run_joint(joint, plan)
            joint.create_dataset(f"bench/{label.replace('+', '-')}-{repeat}-v0")
            best[label] = min(best[label], clock() - start)
            joint.close()

    bare_us = best["bare"] / steps * 1e6
    default = (best["marl-minari+state"] - best["bare"]) / steps * 1e6
    no_state = (best["marl-minari"] - best["bare"]) / steps * 1e6
    background = (best["marl-minari+bg"] - best["bare"]) / steps * 1e6
    theirs = (best["minari+state"] - best["bare joint"]) / steps * 1e6
    theirs_plain = (best["minari"] - best["bare joint"]) / steps * 1e6
    print(f"env {args.env}: {args.episodes} episodes, {steps} steps, best of {args.repeats}, "
          f"{args.clock} time")
    print(f"bare env step                   {bare_us:8.1f} us/step")
    print(f"bare joint view step            {best['bare joint'] / steps * 1e6:8.1f} us/step")
    print(f"minari.DataCollector overhead   {theirs:8.1f} us/step (joint view, same actions, "
          "a StepDataCallback recording env.state() in the infos)")
    print(f"  minari defaults (no state)    {theirs_plain:8.1f} us/step")
    print(f"ParallelDataCollector overhead  {default:8.1f} us/step (default record_state=True,"
          " dataset creation included)")
    print(f"ratio ours / minari (default)   {default / theirs:8.3f}  (target <= 0.1; both "
          "record the state)")
    print(f"  ratio ours / minari defaults  {default / theirs_plain:8.3f}  (ours records the "
          "state, Minari's defaults do not)")
    print(f"  record_state=False overhead   {no_state:8.1f} us/step (no env.state(), which"
          " Minari does not record)")
    print(f"  ratio with record_state=False {no_state / theirs_plain:8.3f}  (vs Minari's "
          "defaults: neither records the state)")
    print(f"  background_writing=True       {background:8.1f} us/step (episodes written by a"
          " thread)")
    print(f"  ratio with background_writing=True {background / theirs:8.3f}")
    # Where the default's overhead goes, each part once: as a share of Minari's overhead,
    # the budget the target allows being 0.1. durability="none" drops both flushes (the
    # journal's per episode, the dataset's once), so create_dataset is timed there.
    flushes = default - (best["marl-minari+nosync"] - best["bare"]) / steps * 1e6
    saving = best["create_dataset"] / steps * 1e6
    state = default - no_state
    print("default's overhead by part (us/step, share of Minari's overhead):")
    for part, cost in (("create_dataset's HDF5 writes", saving),
                       ("env.state() and its row", state),
                       ("flushes: journal per episode, dataset", flushes),
                       ("the rest: copying rows, journal records",
                        default - saving - state - flushes)):
        print(f"  {part:40s}{cost:8.1f}  {cost / theirs:6.3f}")

if __name__ == "__main__":
    main()
