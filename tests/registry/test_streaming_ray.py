"""Ray across machines: ``marl_minari.ray.read_dataset`` of a streaming source sends the
source, not the data, to its read tasks, which fetch their own ranges on the node they run on.

A real two-node cluster (``ray.cluster_utils.Cluster``) runs in a child process, with an empty
datasets root and its own block cache; the registry is served over HTTP by this process,
which counts the bytes each request moved."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from range_servers import range_handler

import marl_minari as mm
from marl_minari import registry
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir

DATASET = "mpe2/spread/streamed-v0"
CHILD = Path(__file__).with_name("ray_cluster_child.py")


def test_read_tasks_on_another_node_fetch_their_own_ranges(
        record_parallel: Callable[..., Any], registry_dir: Path, tmp_path: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    pytest.importorskip("ray")
    record_parallel("mpe2/simple_spread_v3", 80, max_cycles=25, dataset_id=DATASET)
    registry.publish(DATASET)
    local = mm.load_dataset(DATASET)
    expected = sorted([int(e), t] for e, steps in zip(
        local.episode_indices.tolist(), local.to_arrays().episode_lengths.tolist(), strict=True)
        for t in range(steps))
    size = (dataset_dir(DATASET) / "data" / layout.MAIN_FILE_NAME).stat().st_size
    shutil.rmtree(dataset_dir(DATASET))
    handler = range_handler("ClusterRanges")
    url = thread_server(registry_dir, handler)
    empty_root = tmp_path / "empty-root"
    empty_root.mkdir()
    out = tmp_path / "result.json"
    environment = {"MINARI_DATASETS_PATH": str(empty_root),
                   "MARL_MINARI_CACHE": str(tmp_path / "child-cache" / "blocks"),
                   "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([sys.executable, str(CHILD), f"{url}/{DATASET}", str(out)], check=True,
                   timeout=300, env={**os.environ, **environment})
    result = json.loads(out.read_text())
    assert result["rows"] == expected  # every row read once
    assert result["task_node"] == result["worker_node"] != result["driver_node"]
    served = sum(length for path, _, length in handler.served if path.endswith("hdf5"))
    assert result["driver_bytes"] < size / 2  # the driver never fetched the file
    assert served > result["driver_bytes"]  # the worker node fetched what it read
    assert list(empty_root.iterdir()) == []  # nothing was downloaded as a dataset
