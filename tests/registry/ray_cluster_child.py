"""Run by ``test_streaming_ray.py`` in its own process: a two-node Ray cluster on this machine
(``ray.cluster_utils.Cluster``, as Ray's own tests use) whose head has no CPU, so every read
task runs on the worker node, whose processes keep their blocks in their own cache
(``WORKER_CACHE``): the driver's cache (``$MARL_MINARI_CACHE``) holds only what the driver
fetched. Reads a bare registry URL and writes what it saw as JSON.

Usage: ``python ray_cluster_child.py URL WORKER_CACHE OUT.json``.
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


def main(url: str, worker_cache: str, out: str) -> None:
    import ray
    from ray.cluster_utils import Cluster
    from ray.data import DataContext

    import marl_minari.ray as R

    cluster = Cluster(initialize_head=True, connect=True,
                      head_node_args={"num_cpus": 0, "include_dashboard": False})
    try:
        worker = cluster.add_node(num_cpus=2, env_vars={"MARL_MINARI_CACHE": worker_cache})
        cluster.wait_for_nodes()
        context = DataContext.get_current()
        context.enable_progress_bars = False
        context.print_on_execution_start = False
        rows = R.read_dataset(url, "steps", override_num_blocks=2).select_columns(
            ["episode_id", "t"]).take_all()

        @ray.remote(num_cpus=1)
        def node_of_tasks() -> str:
            return str(ray.get_runtime_context().get_node_id())

        result = {
            "rows": sorted([int(r["episode_id"]), int(r["t"])] for r in rows),
            "driver_node": ray.get_runtime_context().get_node_id(),
            "task_node": ray.get(node_of_tasks.remote()),
            "worker_node": worker.node_id,
        }
    finally:
        ray.shutdown()
        cluster.shutdown()
    with open(out, "w") as handle:
        json.dump(result, handle)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
