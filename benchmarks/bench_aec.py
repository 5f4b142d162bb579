"""Recording overhead per AEC step: AECDataCollector versus the bare turn-based env.

Both runs play the same random legal games (the policy draws from the observation's action
mask with a generator seeded per episode, so identical observations give identical moves):
once on the bare env, then through ``AECDataCollector`` observing every agent at every row
(the default) and observing only the agent whose turn it is (``observe_every_agent=False``).
One AEC step is one ``env.step`` call, dead-agent steps included; the loop calls ``last()``
before every step, as a policy does. The recorded time includes writing the journal;
dataset creation is timed apart.

    python benchmarks/bench_aec.py [--env classic/chess-v6] [--episodes 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
import warnings
from typing import Any

import numpy as np


def play(env: Any, episodes: int, max_steps: int) -> int:
    """Play ``episodes`` random legal games (at most ``max_steps`` steps each)."""
    steps = 0
    for episode in range(episodes):
        env.reset(seed=episode)
        rng = np.random.default_rng(episode)
        for number, agent in enumerate(env.agent_iter()):
            if number >= max_steps:
                break
            observation, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                action = None
            else:
                mask = observation["action_mask"] if isinstance(observation, dict) else \
                    info.get("action_mask")
                action = int(rng.choice(np.flatnonzero(mask))) if mask is not None else \
                    int(rng.integers(env.action_space(agent).n))
            env.step(action)
            steps += 1
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="classic/chess-v6")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--max-steps", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    os.environ["MINARI_DATASETS_PATH"] = tempfile.mkdtemp(prefix="bench-aec-")
    warnings.simplefilter("ignore")

    import marl_minari as mm

    modes = {"every agent observed": True, "turn agent observed": False}
    best = {name: np.inf for name in ("bare", *modes, *(f"create {m}" for m in modes))}
    steps = 0
    for repeat in range(args.repeats):
        env = mm.make_env(args.env, api="aec")
        start = time.perf_counter()
        steps = play(env, args.episodes, args.max_steps)
        best["bare"] = min(best["bare"], time.perf_counter() - start)
        env.close()

        for mode, every_agent in modes.items():
            collector = mm.AECDataCollector(mm.make_env(args.env, api="aec"),
                                            observe_every_agent=every_agent)
            start = time.perf_counter()
            recorded_steps = play(collector, args.episodes, args.max_steps)
            best[mode] = min(best[mode], time.perf_counter() - start)
            assert recorded_steps == steps, "the recorded run played different games"
            start = time.perf_counter()
            dataset = collector.create_dataset(f"bench/aec-{every_agent}-{repeat}-v0")
            best[f"create {mode}"] = min(best[f"create {mode}"], time.perf_counter() - start)
            collector.close()
            assert dataset.total_steps == steps

    def per_step(name: str) -> float:
        return best[name] / steps * 1e6

    bare = per_step("bare")
    print(f"{args.env}: {args.episodes} episodes, {steps} AEC steps, best of {args.repeats} "
          f"({platform.system()}, {os.cpu_count()} cores)")
    print(f"  bare env                          {bare:8.1f} us/step")
    for mode in modes:
        recorded, create = per_step(mode), per_step(f"create {mode}")
        print(f"  AECDataCollector, {mode:<20} {recorded:8.1f} us/step   overhead "
              f"{recorded - bare:6.1f} us/step   ratio {recorded / bare:.2f}x")
        print(f"    + create_dataset                {create:8.1f} us/step   ratio with it "
              f"{(recorded + create) / bare:.2f}x")

if __name__ == "__main__":
    main()
