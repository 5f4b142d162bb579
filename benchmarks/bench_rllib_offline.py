"""RLlib offline input throughput: env steps per second into the learner, multi-agent episodes
versus the single-agent per-agent-row path, with 1 and 2 read tasks.

Writes the dataset of ``bench_ray.py`` (3 agents, 18-float observations, Discrete(5) actions;
``--episodes`` x ``--steps``, default 2,000 x 100 = 200k steps), then streams all of it through
RLlib's own offline input pipeline, as ``OfflineData.sample`` builds it (read, then
``map_batches(<pre-learner class>, batch_size=train_batch_size_per_learner)``), counting the
learner-ready rows inside the cluster:

* multi-agent: ``multi_agent_offline(BCConfig(), ...)`` (one module per agent): read episode
  rows with :class:`MultiAgentOfflineData`'s datasource, ``MultiAgentPreLearner`` builds
  ``MultiAgentEpisode``\\ s and runs BC's learner connectors; rows counted by ``loss_mask``
  (padding excluded);
* single-agent rows: ``export_rllib`` (pooled, Parquet; export time reported apart), then
  ``read_parquet`` and RLlib's ``OfflinePreLearner`` with a single-agent BC config.

Then two ``train()`` iterations of the multi-agent config (time per iteration, first one
included: BC maps all data in its first iteration).

    python benchmarks/bench_rllib_offline.py [--episodes 2000] [--steps 100] [--tasks 1 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ray import AGENTS, _episodes, spread_spec  # noqa: E402


def _real_rows(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # Padded multi-agent batches mark real rows in loss_mask; single-agent ones have none.
    masks = [np.asarray(v) for k, v in batch.items() if k.endswith("/loss_mask")]
    rows = (sum(int(m.sum()) for m in masks) if masks
            else sum(len(v) for k, v in batch.items() if k.endswith("/obs")))
    return {"rows": np.asarray([rows], dtype=np.int64)}


def _stream(dataset: Any, prelearner: type, config: Any, batch: int) -> int:
    """Rows the learner would get from all of ``dataset`` (OfflineData's map_batches)."""
    spaces = (config.observation_space, config.action_space)
    mapped = dataset.map_batches(
        prelearner, batch_size=batch, concurrency=2, num_cpus=0.5, zero_copy_batch=True,
        fn_constructor_kwargs={"config": config, "spaces": spaces,
                               "module_spec": config.get_multi_rl_module_spec()})
    counted = mapped.map_batches(_real_rows, batch_size=None, batch_format="numpy")
    return sum(int(r["rows"]) for r in counted.take_all())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=2_000)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256,
                        help="train_batch_size_per_learner (episodes per pre-learner call "
                             "for the multi-agent path, rows for the single-agent one)")
    parser.add_argument("--tasks", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-rllib-"))
    os.environ["MINARI_DATASETS_PATH"] = str(root / "datasets")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    warnings.simplefilter("ignore")

    import ray
    from ray.data import DataContext
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.offline.offline_prelearner import OfflinePreLearner

    import marl_minari.ray as R
    from marl_minari.storage.writer import write_dataset

    spec = spread_spec()
    write_dataset("bench/rllib-v0", _episodes(args.episodes, args.steps, 0), spec,
                  algorithm_name="random", author="bench", author_email="bench@example.com",
                  code_permalink="https://example.com/bench", description="bench")
    steps = args.episodes * args.steps
    print(f"{args.episodes} episodes x {args.steps} steps = {steps:,} env steps, "
          f"{steps * len(AGENTS):,} agent-steps; batch {args.batch}; {os.cpu_count()} CPUs")

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    tiny = DefaultModelConfig(fcnet_hiddens=[32])

    multi = R.multi_agent_offline(BCConfig(), "bench/rllib-v0").training(
        train_batch_size_per_learner=args.batch).rl_module(model_config=tiny)
    for tasks in args.tasks:
        start = time.perf_counter()
        data = R.read_dataset("bench/rllib-v0", "episodes", override_num_blocks=tasks)
        rows = _stream(data, R.MultiAgentPreLearner, multi, args.batch)
        seconds = time.perf_counter() - start
        print(f"multi-agent episodes -> MultiAgentPreLearner  {tasks} task(s)  {seconds:7.1f} s"
              f"  {steps / seconds:9,.0f} env steps/s  ({rows:,} agent-step rows)")

    start = time.perf_counter()
    export = R.export_rllib("bench/rllib-v0", root / "rllib", override_num_blocks=2)
    module = export.modules[R.DEFAULT_MODULE_ID]
    print(f"export_rllib (pooled Parquet, 2 tasks)               "
          f"{time.perf_counter() - start:7.1f} s")
    single = module.configure(BCConfig()).training(
        train_batch_size_per_learner=args.batch).rl_module(model_config=tiny)
    for tasks in args.tasks:
        start = time.perf_counter()
        data = ray.data.read_parquet(str(module.path), override_num_blocks=tasks)
        rows = _stream(data, OfflinePreLearner, single, args.batch)
        seconds = time.perf_counter() - start
        print(f"agent-step rows -> OfflinePreLearner          {tasks} task(s)  {seconds:7.1f} s"
              f"  {steps / seconds:9,.0f} env steps/s  ({rows:,} agent-step rows)")

    algo = multi.build_algo()
    for i in range(2):
        start = time.perf_counter()
        algo.train()
        print(f"multi-agent BC train() iteration {i}                   "
              f"{time.perf_counter() - start:7.1f} s")
    algo.stop()
    ray.shutdown()


if __name__ == "__main__":
    main()
