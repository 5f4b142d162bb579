"""Recording overhead per AEC step: AECDataCollector versus the bare turn-based env.

Both runs play the same random legal games (the policy draws from the observation's action
mask with a generator seeded per episode, so identical observations give identical moves):
once on the bare env, then through ``AECDataCollector`` observing every agent at every row
(the default) and observing only the agent whose turn it is (``observe_every_agent=False``).
One AEC step is one ``env.step`` call, dead-agent steps included; the loop calls ``last()``
before every step, as a policy does. The headline ratio includes writing the journal and
``create_dataset``, as ``bench_record.py`` does for parallel envs; the share of
``create_dataset`` is printed beside it. Times are this process's CPU time (``time.process_time``,
which other processes competing for the cores do not inflate) and wall-clock time, best of
``--repeats`` interleaved runs.

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
    names = ("bare", *modes, *(f"create {m}" for m in modes))
    best = {clock: {name: np.inf for name in names} for clock in ("cpu", "wall")}
    steps = 0

    def timed(name: str, run: Any) -> Any:
        cpu, wall = time.process_time(), time.perf_counter()
        result = run()
        best["cpu"][name] = min(best["cpu"][name], time.process_time() - cpu)
        best["wall"][name] = min(best["wall"][name], time.perf_counter() - wall)
        return result

    for repeat in range(args.repeats):
        env = mm.make_env(args.env, api="aec")
        steps = timed("bare", lambda env=env: play(env, args.episodes, args.max_steps))
        env.close()

        for mode, every_agent in modes.items():
            collector = mm.AECDataCollector(mm.make_env(args.env, api="aec"),
                                            observe_every_agent=every_agent)
            recorded_steps = timed(mode, lambda c=collector: play(c, args.episodes,
                                                                  args.max_steps))
            assert recorded_steps == steps, "the recorded run played different games"
            dataset = timed(f"create {mode}", lambda c=collector, r=repeat, e=every_agent:
                            c.create_dataset(f"bench/aec-{e}-{r}-v0"))
            collector.close()
            assert dataset.total_steps == steps

    print(f"{args.env}: {args.episodes} episodes, {steps} AEC steps, best of {args.repeats} "
          f"({platform.system()}, {os.cpu_count()} cores)")
    for clock in ("cpu", "wall"):
        def per_step(name: str, clock: str = clock) -> float:
            return float(best[clock][name] / steps * 1e6)

        bare = per_step("bare")
        print(f" {clock} time")
        print(f"  bare env                              {bare:8.1f} us/step")
        for mode in modes:
            recorded, create = per_step(mode), per_step(f"create {mode}")
            total = recorded + create
            print(f"  AECDataCollector, {mode:<20} {total:8.1f} us/step   overhead "
                  f"{total - bare:6.1f} us/step   ratio {total / bare:.2f}x "
                  "(create_dataset included, as bench_record.py)")
            print(f"    of which create_dataset             {create:8.1f} us/step   ratio "
                  f"without it {recorded / bare:.2f}x")


if __name__ == "__main__":
    main()
