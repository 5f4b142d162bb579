"""Time coverage (``describe(..., coverage=True)``) against one reading pass and against
OG-MARL's whole-in-memory formulas on the same data.

Builds, in a temporary datasets root, a dataset of ``--agents`` agents (``Box(16)`` float32
observations drawn from a pool of rows so that pairs repeat, ``Discrete(5)`` actions, a
``(16 * agents,)`` global state, 100-step episodes) written with ``marl_minari.write_dataset``,
then times (best of ``--repeats``):

* ``to_arrays``: the whole dataset read once into memory (the baseline);
* ``chunks``: one streaming pass, ``source.chunks()`` with observations (what describe reads);
* ``describe``: statistics only; ``describe+coverage``: statistics, SACo and OACo;
* OG-MARL in memory: ``np.unique(..., axis=0)`` on the (state rounded to 4 decimals, joint
  action) rows and on each agent's (observation, action) rows, as ``get_saco`` and
  ``get_average_oaco`` do, on arrays already in memory (reading not counted), and checks that
  both give the same numbers.

Peak memory: the coverage digest tables (24 bytes per distinct pair) against the rows OG-MARL
keeps in memory. Writes ``--out`` (JSON) and ``--figure`` (PNG).

    python benchmarks/bench_coverage.py [--steps 200000] [--agents 10] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

OBS = 16
ACTIONS = 5
LENGTH = 100


def episodes(count: int, agents: tuple[str, ...], seed: int) -> Iterator[Any]:
    from marl_minari.storage.episode import MultiAgentEpisode

    rng = np.random.default_rng(seed)
    pool = rng.normal(size=(4096, OBS)).astype(np.float32)  # pairs repeat, as in real data
    n, t = len(agents), LENGTH
    for index in range(count):
        rows = {a: pool[rng.integers(0, len(pool), t + 1)] for a in agents}
        rewards = rng.normal(size=(t, n))
        ends = np.zeros(t, dtype=bool)
        ends[-1] = True
        yield MultiAgentEpisode(
            possible_agents=agents, observations=rows,
            actions={a: rng.integers(0, ACTIONS, t) for a in agents}, rewards=rewards,
            terminations=np.zeros((t, n), dtype=bool),
            truncations=np.repeat(ends[:, None], n, axis=1),
            active=np.ones((t + 1, n), dtype=bool), acted=np.ones((t, n), dtype=bool),
            team_rewards=rewards.sum(axis=1), episode_terminations=np.zeros(t, dtype=bool),
            episode_truncations=ends,
            state=np.concatenate([rows[a] for a in agents], axis=1), seed=index)


def best(function: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = function()
        times.append(time.perf_counter() - start)
    return min(times), result


def ogmarl_in_memory(arrays: Any) -> tuple[float, float, int]:
    """SACo, average OACo and the bytes of the rows, by OG-MARL's formulas on whole arrays."""
    rows = arrays.obs_rows
    agents = arrays.possible_agents
    joint = np.stack([arrays.actions[a] for a in agents], axis=1)
    table = np.concatenate([arrays.state[rows], joint], axis=1).round(4)
    saco = len(np.unique(table, axis=0)) / len(rows)
    kept = table.nbytes
    shares = []
    for a in agents:
        pairs = np.concatenate([arrays.observations[a][rows], arrays.actions[a][:, None]], axis=1)
        kept += pairs.nbytes
        shares.append(len(np.unique(pairs, axis=0)) / len(rows))
    return saco, float(np.mean(shares)), kept


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="bench_coverage.json")
    parser.add_argument("--figure", default="docs/images/bench_coverage.png")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-coverage-")
    os.environ["MINARI_DATASETS_PATH"] = root

    import marl_minari as mm
    from marl_minari.describe.coverage import CoverageAccumulator
    from marl_minari.format.spec import MultiAgentSpec

    agents = tuple(f"agent_{i}" for i in range(args.agents))
    spec = MultiAgentSpec(
        api="parallel", possible_agents=agents,
        observation_spaces={a: spaces.Box(-np.inf, np.inf, (OBS,), np.float32) for a in agents},
        action_spaces={a: spaces.Discrete(ACTIONS) for a in agents},
        state_space=spaces.Box(-np.inf, np.inf, (OBS * args.agents,), np.float32))
    count = args.steps // LENGTH
    start = time.perf_counter()
    mm.write_dataset("bench/coverage-v0", episodes(count, agents, 0), spec, fsync=False)
    print(f"wrote {count * LENGTH:,} steps, {args.agents} agents in "
          f"{time.perf_counter() - start:.1f} s")
    dataset = mm.load_dataset("bench/coverage-v0")
    source = mm.open_source("bench/coverage-v0")

    results: dict[str, Any] = {"steps": count * LENGTH, "agents": args.agents,
                               "cpus": os.cpu_count()}
    results["to_arrays"], arrays = best(dataset.to_arrays, args.repeats)
    results["chunks"], _ = best(lambda: sum(1 for _ in source.chunks()), args.repeats)
    results["describe"], _ = best(lambda: mm.describe("bench/coverage-v0"), args.repeats)
    results["describe+coverage"], described = best(
        lambda: mm.describe("bench/coverage-v0", coverage=True), args.repeats)
    results["ogmarl_in_memory"], (saco, oaco, kept) = best(lambda: ogmarl_in_memory(arrays),
                                                           args.repeats)
    coverage = described.coverage
    assert abs(coverage.saco - saco) < 1e-12 and abs(coverage.oaco - oaco) < 1e-12, (
        coverage, saco, oaco)
    with CoverageAccumulator(agents) as pairs:
        for chunk in source.chunks():
            pairs.add(chunk)
        results["digest_bytes"] = pairs.table_bytes
    results.update(saco=saco, oaco=oaco, ogmarl_row_bytes=kept,
                   coverage_over_to_arrays=results["describe+coverage"] / results["to_arrays"])
    print(json.dumps(results, indent=2))
    Path(args.out).write_text(json.dumps(results, indent=2))
    draw(results, Path(args.figure))


def draw(results: dict[str, Any], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels = ["to_arrays\n(read once)", "chunks\n(stream once)", "describe", "describe\n+coverage",
              "OG-MARL formulas\n(in memory)"]
    keys = ["to_arrays", "chunks", "describe", "describe+coverage", "ogmarl_in_memory"]
    figure = Figure(figsize=(11, 4), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot(1, 2, 1)
    bars = ax.bar(range(len(keys)), [results[k] for k in keys],
                  color=["0.6", "0.6", "C0", "C1", "C3"])
    ax.bar_label(bars, fmt="%.1f s", fontsize=8)
    ax.set_xticks(range(len(keys)), labels, fontsize=8)
    ax.set_ylabel("seconds (best of runs)")
    ax.set_title(f"{results['steps']:,} steps, {results['agents']} agents", fontsize=10)
    ax = figure.add_subplot(1, 2, 2)
    sizes = [results["digest_bytes"] / 2**20, results["ogmarl_row_bytes"] / 2**20]
    bars = ax.bar([0, 1], sizes, color=["C1", "C3"])
    ax.bar_label(bars, fmt="%.0f MiB", fontsize=8)
    ax.set_xticks([0, 1], ["coverage digests\n(24 B per distinct pair)",
                           "OG-MARL rows\n(whole dataset)"], fontsize=8)
    ax.set_ylabel("MiB held for counting")
    ax.set_title("Memory of the pair tables", fontsize=10)
    figure.suptitle("Coverage (SACo + OACo): time and memory", fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)


if __name__ == "__main__":
    main()
