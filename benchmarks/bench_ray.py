"""Ray Data reads and RLlib export: rows per second, 1 versus 2 (or more) read tasks.

Writes a dataset shaped like mpe2 simple_spread (3 agents, 18-float observations, Discrete(5)
actions, 54-float global state; 10,000 episodes x 100 steps = 1M steps by default) with the
library's writer from random values, then measures, each best of ``--repeats`` runs after a
warm-up:

* the local baseline: ``to_arrays`` + ``agent_step_rows`` in one process, 1,000 episodes at a
  time;
* ``read_dataset(..., rows=...)`` with 1, 2, ... read tasks, every block counted inside the
  cluster (``map_batches`` on the Arrow block returning its row count, collected with
  ``take_all``), so only the counts reach the driver;
* ``map_pattern(..., "n_step")`` on top of the read;
* ``export_rllib`` to Parquet.

    python benchmarks/bench_ray.py [--episodes 10000] [--steps 100] [--tasks 1 2]
                                   [--no-reservation]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

AGENTS = ("agent_0", "agent_1", "agent_2")


def spread_spec() -> Any:
    """The spec of :func:`_episodes`' data: simple_spread-shaped, 3 agents."""
    from gymnasium import spaces

    from marl_minari.format.spec import MultiAgentSpec

    return MultiAgentSpec(
        api="parallel", possible_agents=AGENTS,
        observation_spaces={a: spaces.Box(-np.inf, np.inf, (18,), np.float32) for a in AGENTS},
        action_spaces={a: spaces.Discrete(5) for a in AGENTS},
        state_space=spaces.Box(-np.inf, np.inf, (54,), np.float32))


def _episodes(count: int, steps: int, seed: int) -> Iterator[Any]:
    from marl_minari.storage.episode import MultiAgentEpisode

    rng = np.random.default_rng(seed)
    n = len(AGENTS)
    for _ in range(count):
        rewards = rng.normal(size=(steps, n))
        ends = np.zeros(steps, dtype=bool)
        ends[-1] = True
        truncations = np.zeros((steps, n), dtype=bool)
        truncations[-1] = True
        yield MultiAgentEpisode(
            possible_agents=AGENTS,
            observations={a: rng.normal(size=(steps + 1, 18)).astype(np.float32)
                          for a in AGENTS},
            actions={a: rng.integers(0, 5, size=steps) for a in AGENTS},
            rewards=rewards, terminations=np.zeros((steps, n), dtype=bool),
            truncations=truncations, active=np.ones((steps + 1, n), dtype=bool),
            acted=np.ones((steps, n), dtype=bool), team_rewards=rewards.sum(axis=1),
            episode_terminations=np.zeros(steps, dtype=bool), episode_truncations=ends,
            state=rng.normal(size=(steps + 1, 54)).astype(np.float32))


def _count(table: Any) -> dict[str, np.ndarray]:
    return {"rows": np.asarray([table.num_rows], dtype=np.int64)}


def _remote_cpu(stats: str) -> float:
    """Seconds of CPU the operators' tasks used (sum of Ray's "Remote cpu time" totals)."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
    total = 0.0
    for match in re.finditer(r"Remote cpu time: .*?([0-9.]+)(us|ms|s) total", stats):
        total += float(match.group(1)) * units[match.group(2)]
    return total


def _best(repeats: int, fn: Any) -> tuple[float, Any]:
    best, value = np.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return best, value


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--num-cpus", type=int, default=None)
    parser.add_argument("--no-reservation", action="store_true",
                        help="DataContext.op_resource_reservation_enabled = False: Ray Data "
                             "otherwise keeps one operator at half the CPUs (one task at a "
                             "time on 2 CPUs)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
    warnings.simplefilter("ignore")

    import ray
    from ray.data import DataContext

    import marl_minari as mm
    import marl_minari.ray as R
    from marl_minari.rows import patterns as P
    from marl_minari.storage.writer import write_dataset

    spec = spread_spec()
    start = time.perf_counter()
    path = write_dataset("bench/ray-v0", _episodes(args.episodes, args.steps, 0), spec,
                         algorithm_name="random", author="bench",
                         author_email="bench@example.com",
                         code_permalink="https://example.com/bench", description="bench")
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    dataset = mm.load_dataset("bench/ray-v0")
    steps = dataset.total_steps
    print(f"wrote {args.episodes} episodes x {args.steps} steps ({steps:,} steps, "
          f"{size / 2**20:.0f} MiB) in {time.perf_counter() - start:.1f} s; "
          f"{os.cpu_count()} CPUs")

    def local() -> int:
        rows = 0
        for first in range(0, dataset.total_episodes, 1000):
            arrays = dataset.to_arrays(range(first, min(first + 1000,
                                                        dataset.total_episodes)))
            rows += len(P.agent_step_rows(arrays, dataset.spec)["t"])
        return rows

    local()
    seconds, rows = _best(args.repeats, local)
    print(f"local to_arrays + agent_step_rows, 1 process     {seconds:6.2f} s  "
          f"{rows / seconds / 1e6:5.2f} M rows/s  ({rows:,} agent-step rows)")

    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    context = DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    if args.no_reservation:
        context.op_resource_reservation_enabled = False
    print(f"Ray {ray.__version__}, {int(ray.cluster_resources()['CPU'])} CPUs, operator "
          f"resource reservation {'off' if args.no_reservation else 'on (default)'}")

    def read(kind: str, tasks: int) -> tuple[int, float]:
        counted = R.read_dataset("bench/ray-v0", kind, override_num_blocks=tasks).map_batches(
            _count, batch_size=None, batch_format="pyarrow")
        rows = sum(int(r["rows"]) for r in counted.take_all())
        return rows, _remote_cpu(counted.stats())

    read("agent_steps", max(args.tasks))
    results: dict[tuple[str, int], float] = {}
    for kind in ("agent_steps", "steps", "episodes"):
        for tasks in args.tasks:
            seconds, (rows, cpu) = _best(args.repeats, lambda k=kind, n=tasks: read(k, n))
            results[kind, tasks] = seconds
            base = results[kind, args.tasks[0]]
            print(f"read_dataset rows={kind:<11} {tasks} task(s)        {seconds:6.2f} s  "
                  f"{rows / seconds / 1e6:5.2f} M rows/s  {steps / seconds / 1e6:5.2f} M steps/s"
                  f"  x{base / seconds:.2f}  (task CPU {cpu:.2f} s)")

    for tasks in args.tasks:
        def pattern(n: int = tasks) -> int:
            ds = R.read_dataset("bench/ray-v0", override_num_blocks=n)
            counted = R.map_pattern(ds, "n_step", n=3, gamma=0.99).map_batches(
                _count, batch_size=None, batch_format="pyarrow")
            return sum(int(r["rows"]) for r in counted.take_all())

        seconds, rows = _best(args.repeats, pattern)
        print(f"read + map_pattern n_step (n=3)  {tasks} task(s)        {seconds:6.2f} s  "
              f"{rows / seconds / 1e6:5.2f} M rows/s")

    for tasks in args.tasks:
        out = root / f"rllib-{tasks}"

        def export(n: int = tasks, target: Path = out) -> Any:
            shutil.rmtree(target, ignore_errors=True)
            return R.export_rllib("bench/ray-v0", target, override_num_blocks=n)

        seconds, result = _best(args.repeats, export)
        rows = sum(m.rows for m in result.modules.values())
        written = sum(f.stat().st_size for f in out.rglob("*.parquet"))
        print(f"export_rllib to Parquet          {tasks} task(s)        {seconds:6.2f} s  "
              f"{rows / seconds / 1e6:5.2f} M rows/s  ({written / 2**20:.0f} MiB Parquet)")
    ray.shutdown()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
