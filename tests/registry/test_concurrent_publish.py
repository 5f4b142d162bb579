"""Two processes publishing one version with different files at the same moment.

Each round ends with exactly one complete, downloadable version (the winner's files) and one
typed "already published" error, on ``file://`` and on ``s3://`` (moto's server, which
implements the conditional ``If-None-Match: *`` put the claim relies on).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import minari
import pytest

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import DatasetExistsError

DATASET = "race/spread-v0"
EPISODES = {"a": 2, "b": 3}

_PUBLISHER = r"""
import sys, time
from pathlib import Path
folder, dataset_id, remotes = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
from marl_minari import registry
from marl_minari.errors import DatasetExistsError
from marl_minari.errors import MarlMinariError
for number, remote in enumerate(remotes):
    (folder / f"ready-{number}").touch()
    while not (folder / f"go-{number}").exists():
        time.sleep(0.0005)
    try:
        outcome = registry.publish(dataset_id, remote).outcomes[dataset_id]
    except MarlMinariError as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    (folder / "result.tmp").write_text(outcome)
    (folder / "result.tmp").rename(folder / f"result-{number}")  # seen whole or not at all
"""


@pytest.fixture
def two_versions(datasets_root: Path, tmp_path: Path,
                 record_parallel: Callable[..., Any]) -> dict[str, Path]:
    """Datasets roots ``a`` and ``b``, each with ``DATASET`` recorded with other episodes."""
    roots = {}
    for name, episodes in EPISODES.items():
        record_parallel("mpe2/simple_spread_v3", episodes, max_cycles=5, dataset_id=DATASET)
        roots[name] = tmp_path / f"root-{name}"
        shutil.move(datasets_root, roots[name])
        datasets_root.mkdir()
    return roots


def _race(roots: dict[str, Path], remotes: list[str], work: Path) -> list[dict[str, str]]:
    """Run both publishers over ``remotes``, starting each round at the same instant."""
    processes, folders = {}, {}
    for name, root in roots.items():
        folders[name] = work / name
        folders[name].mkdir(parents=True)
        env = {**os.environ, "MINARI_DATASETS_PATH": str(root)}
        processes[name] = subprocess.Popen(
            [sys.executable, "-c", _PUBLISHER, str(folders[name]), DATASET, *remotes], env=env)
    rounds = []
    try:
        for number in range(len(remotes)):
            _wait_for([folders[n] / f"ready-{number}" for n in roots], processes)
            for name in roots:
                (folders[name] / f"go-{number}").touch()
            results = [folders[n] / f"result-{number}" for n in roots]
            _wait_for(results, processes)
            rounds.append({n: r.read_text() for n, r in zip(roots, results, strict=True)})
    finally:
        for process in processes.values():
            process.wait(timeout=60)
    return rounds


def _wait_for(paths: list[Path], processes: dict[str, subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 120
    while not all(p.exists() for p in paths):
        failed = [n for n, p in processes.items() if p.poll() not in (None, 0)]
        assert not failed and time.monotonic() < deadline, f"publisher {failed} died"
        time.sleep(0.01)


def _check_round(results: dict[str, str], remote: str) -> None:
    published = [n for n, outcome in results.items() if outcome == "published"]
    refused = [n for n, outcome in results.items()
               if outcome.startswith("DatasetExistsError: ") and "different files" in outcome]
    assert len(published) == 1 and len(refused) == 1, results
    assert [d.dataset_id for d in registry.list_datasets(remote)] == [DATASET]
    registry.download(DATASET, remote, force=True)  # every file checked against the manifest
    assert mm.load_dataset(DATASET).total_episodes == EPISODES[published[0]]
    minari.delete_dataset(DATASET)


def test_concurrent_publish_file(two_versions: dict[str, Path], tmp_path: Path) -> None:
    remotes = [str(tmp_path / f"registry-{number}") for number in range(6)]
    for results, remote in zip(_race(two_versions, remotes, tmp_path / "race"), remotes,
                               strict=True):
        _check_round(results, remote)
        assert list(Path(remote).rglob(".pending-*")) == []


def test_concurrent_publish_s3(two_versions: dict[str, Path], s3_remote: str,
                               s3_client: Any, tmp_path: Path) -> None:
    remotes = [f"{s3_remote}/round-{number}" for number in range(4)]
    for results, remote in zip(_race(two_versions, remotes, tmp_path / "race"), remotes,
                               strict=True):
        _check_round(results, remote)
    bucket = s3_remote.removeprefix("s3://").split("/")[0]
    keys = [item["Key"] for item in s3_client.list_objects_v2(Bucket=bucket)["Contents"]]
    assert not [key for key in keys if "/.pending-" in key]
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_crash_after_the_claim_is_completed_by_republishing(
        registry_dir: Path, small_dataset: Callable[..., str],
        record_parallel: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from marl_minari.registry.backend import Staging
    from marl_minari.registry.file import FileBackend

    dataset_id = small_dataset()

    class Killed(Exception):
        """Stands in for a process killed between claiming the version and moving its files."""

    def killed(self: FileBackend, staging: Staging, files: list[str]) -> None:
        raise Killed

    with monkeypatch.context() as patch:
        patch.setattr(FileBackend, "commit", killed)
        with pytest.raises(Killed):
            registry.publish(dataset_id)
    assert (registry_dir / dataset_id / "manifest.json").exists()  # claimed, not listed
    assert registry.list_datasets() == []
    with pytest.warns(UserWarning, match="publish the same files again"):
        assert registry.reindex() == 0  # files not in place: never listed

    other_root = registry_dir.parent / "other-root"  # other files under the same id: refused
    original_root = os.environ["MINARI_DATASETS_PATH"]
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(other_root))
    record_parallel("mpe2/simple_spread_v3", 3, max_cycles=10, dataset_id=dataset_id)
    with pytest.raises(DatasetExistsError, match="different files"):
        registry.publish(dataset_id)
    monkeypatch.setenv("MINARI_DATASETS_PATH", original_root)

    assert registry.publish(dataset_id).outcomes == {dataset_id: "completed"}
    assert registry.publish(dataset_id).outcomes == {dataset_id: "unchanged"}
    minari.delete_dataset(dataset_id)
    registry.download(dataset_id)
    assert mm.load_dataset(dataset_id).total_episodes == 2
