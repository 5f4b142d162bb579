"""Ray across machines: ``marl_minari.ray.read_dataset`` of a bare registry URL opens it in
place and sends the source, not the data, to its read tasks, which fetch their own ranges on
the node they run on.

A real two-node cluster (``ray.cluster_utils.Cluster``) runs in a child process, with an empty
datasets root; the driver and the worker node each have their own block cache, which holds
every block that process fetched and verified. The registry is served over HTTP by this
process, which counts the bytes each request moved."""

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
from marl_minari.registry.remote_file import StreamSettings, open_remote_file
from range_servers import range_handler
from registry_helpers import cached_block_numbers, entry_of, manifest_document

import marl_minari as mm
from marl_minari import registry
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir

DATASET = "mpe2/spread/streamed-v0"
CHILD = Path(__file__).with_name("ray_cluster_child.py")
MAIN_PATH = f"data/{layout.MAIN_FILE_NAME}"


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
    driver_cache, worker_cache = tmp_path / "driver" / "blocks", tmp_path / "worker" / "blocks"
    environment = {"MINARI_DATASETS_PATH": str(empty_root),
                   "MARL_MINARI_CACHE": str(driver_cache), "RAY_USAGE_STATS_ENABLED": "0"}
    subprocess.run([sys.executable, str(CHILD), f"{url}/{DATASET}", str(worker_cache),
                    str(out)], check=True, timeout=300, env={**os.environ, **environment})
    result = json.loads(out.read_text())
    assert result["rows"] == expected  # every row read once
    assert result["task_node"] == result["worker_node"] != result["driver_node"]
    assert list(empty_root.iterdir()) == []  # nothing was downloaded as a dataset
    data_entry = entry_of(manifest_document(registry_dir, DATASET), MAIN_PATH)
    pinned = open_remote_file(f"file://{registry_dir}", DATASET,
                              settings=StreamSettings(cache_bytes=0)).pinned_digest
    driver_blocks = cached_block_numbers(driver_cache, pinned)
    worker_blocks = cached_block_numbers(worker_cache, pinned)
    # the driver fetched only the blocks that open the file, never an episode's data
    assert driver_blocks <= set(data_entry["open_blocks"]), sorted(driver_blocks)
    assert len(driver_blocks) * data_entry["block_size"] < size / 4
    # the worker node read every episode
    assert worker_blocks == set(range(len(data_entry["block_blake3"])))
    served = sum(length for path, _, length in handler.served if path.endswith("hdf5"))
    assert served >= size  # and fetched it itself, not from the driver


def test_a_url_streams_unless_told_to_download(
        published: str, registry_dir: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    import marl_minari.ray as R

    monkeypatch.setenv("MARL_MINARI_CACHE", str(tmp_path / "cache" / "blocks"))
    url = f"file://{registry_dir}/{published}"
    R.make_datasource(url, "steps")
    assert not dataset_dir(published).exists()  # read in place
    R.make_datasource(url, "steps", streaming=False)
    assert (dataset_dir(published) / "data" / layout.MAIN_FILE_NAME).is_file()  # downloaded
