"""file:// registries end to end, through this package and through Minari's own functions."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import minari
import numpy as np
import pytest

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import DatasetExistsError, LayoutError, RemoteError
from marl_minari.format.ids import dataset_dir


def _episode_arrays(dataset_id: str) -> list[np.ndarray]:
    dataset = mm.load_dataset(dataset_id)
    arrays = []
    for episode in dataset:
        arrays.append(episode.rewards)
        arrays.extend(np.asarray(episode.observations[agent]) for agent in episode.possible_agents)
    return arrays


def _published_files(folder: Path) -> list[Path]:
    """What publishing copies: every file but hidden ones (the remembered-digests sidecar)."""
    return [p for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.relative_to(folder).as_posix().startswith(".")]


def _tree_digest(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in _published_files(folder)}


def test_registering_adds_kinds_and_keeps_minari_kinds(minari_kinds: None) -> None:
    from minari.storage.remotes import _registry

    for kind in ("file", "s3", "http", "https", "hf", "gcp"):
        assert kind in _registry
    assert _registry["hf"].__module__.startswith("minari")
    remote = registry.open_remote("file:///tmp/x")
    assert isinstance(remote, registry.MinariRemote) and remote.kind == "file"


def test_publish_to_default_registry_and_download(registry_dir: Path,
                                                  small_dataset: Callable[..., str]) -> None:
    dataset_id = small_dataset()
    before = _episode_arrays(dataset_id)
    local = dataset_dir(dataset_id)
    digests = _tree_digest(local)

    result = registry.publish(dataset_id)
    assert result.outcomes == {dataset_id: "published"}
    assert result.remote == f"file://{registry_dir}"
    remote_folder = registry_dir / "mpe2" / "spread" / "random-v0"
    manifest = json.loads((remote_folder / "manifest.json").read_text())
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == digests
    for level in ("mpe2", "mpe2/spread"):
        assert (registry_dir / level / "namespace_metadata.json").exists()

    listed = registry.list_datasets()
    assert [d.dataset_id for d in listed] == [dataset_id]
    assert listed[0].total_size == sum(p.stat().st_size for p in _published_files(local))

    shutil.rmtree(local.parent.parent)  # the whole local mpe2 namespace
    path = registry.download(dataset_id)
    assert path == local
    assert _tree_digest(local) == digests
    for got, want in zip(_episode_arrays(dataset_id), before, strict=True):
        np.testing.assert_array_equal(got, want)
    assert (local.parent / "namespace_metadata.json").exists()
    assert dataset_id in minari.list_local_datasets()


def test_minari_functions_use_file_remote(datasets_root: Path, registry_dir: Path,
                                          small_dataset: Callable[..., str],
                                          monkeypatch: pytest.MonkeyPatch,
                                          minari_kinds: None) -> None:
    minari.namespace.create_namespace("mpe2/spread", description="random play")
    dataset_id = small_dataset()
    remote = f"file://{registry_dir}"
    monkeypatch.setenv("MINARI_REMOTE", remote)

    minari.upload_dataset(dataset_id, token="unused")
    assert (registry_dir / dataset_id / "manifest.json").exists()
    assert set(minari.list_remote_datasets(remote_path=remote)) == {dataset_id}
    assert minari.namespace.list_remote_namespaces() == ["mpe2", "mpe2/spread"]

    shutil.rmtree(datasets_root / "mpe2")  # namespaces too: Minari fetches their metadata
    dataset = minari.load_dataset(dataset_id, download=True)
    assert dataset.total_episodes == 2
    assert minari.namespace.get_namespace_metadata("mpe2/spread") == {
        "description": "random play"}
    assert mm.load_dataset(dataset_id).possible_agents == ("agent_0", "agent_1", "agent_2")

    minari.delete_dataset(dataset_id)
    minari.download_dataset(dataset_id)
    assert (dataset_dir(dataset_id) / "data" / "main_data.hdf5").exists()
    minari.download_dataset(dataset_id, force_download=True)  # replaces the local copy
    assert mm.load_dataset(dataset_id).total_episodes == 2


def test_minari_full_remote_path_form(tmp_path: Path, small_dataset: Callable[..., str],
                                      monkeypatch: pytest.MonkeyPatch,
                                      minari_kinds: None) -> None:
    # download_dataset("file://name/id") passes only "name": a folder relative to the cwd.
    dataset_id = small_dataset("flat-v0")
    monkeypatch.chdir(tmp_path)
    registry.publish(dataset_id, "file://shared")
    assert (tmp_path / "shared" / "flat-v0" / "manifest.json").exists()
    minari.delete_dataset(dataset_id)
    minari.download_dataset("file://shared/flat-v0")
    assert mm.load_dataset(dataset_id).total_episodes == 2


def test_listing_reads_only_the_index(registry_dir: Path, small_dataset: Callable[..., str],
                                      minari_kinds: None) -> None:
    ids = [small_dataset(f"tests/listing-v{v}") for v in range(3)]
    for dataset_id in ids:
        registry.publish(dataset_id)
    for dataset_id in ids:  # listing must not need the datasets' own files
        (registry_dir / dataset_id / "data" / "metadata.json").unlink()
    listed = minari.list_remote_datasets(remote_path=f"file://{registry_dir}")
    assert set(listed) == set(ids)
    assert listed[ids[0]]["total_episodes"] == 2
    latest = minari.list_remote_datasets(remote_path=f"file://{registry_dir}",
                                         latest_version=True)
    assert set(latest) == {"tests/listing-v2"}


def test_readme_card_is_published_and_downloaded(registry_dir: Path,
                                                 small_dataset: Callable[..., str]) -> None:
    dataset_id = small_dataset()
    card = "# random play on simple_spread\n"
    (dataset_dir(dataset_id) / "README.md").write_text(card)
    (dataset_dir(dataset_id) / ".DS_Store").write_text("hidden files are not published")
    result = registry.publish(dataset_id)
    assert "README.md" in {f.path for f in result.manifest.files}
    assert ".DS_Store" not in {f.path for f in result.manifest.files}
    shutil.rmtree(dataset_dir(dataset_id))
    registry.download(dataset_id)
    assert (dataset_dir(dataset_id) / "README.md").read_text() == card


def test_combined_datasets_are_published_and_downloaded(
        registry_dir: Path, small_dataset: Callable[..., str]) -> None:
    parts = [small_dataset("mpe2/parts/a-v0"), small_dataset("mpe2/parts/b-v0")]
    combined_id = "mpe2/combined/all-v0"
    minari.namespace.create_namespace("mpe2/combined", description="combined datasets")
    minari.combine_datasets([minari.load_dataset(p) for p in parts], combined_id)
    result = registry.publish(combined_id, allow_single_agent=True)
    assert list(result.outcomes) == [*parts, combined_id]  # parts first, combiner last
    for dataset_id in [*parts, combined_id]:
        minari.delete_dataset(dataset_id)
    registry.download(combined_id)
    for dataset_id in [*parts, combined_id]:
        assert minari.load_dataset(dataset_id).total_episodes in (2, 4)
    # Publishing another dataset that combines already-published parts skips them.
    minari.combine_datasets([minari.load_dataset(p) for p in parts], "mpe2/combined/all-v1")
    again = registry.publish("mpe2/combined/all-v1", allow_single_agent=True)
    assert again.outcomes == {parts[0]: "unchanged", parts[1]: "unchanged",
                              "mpe2/combined/all-v1": "published"}


def test_single_agent_dataset_needs_the_flag(registry_dir: Path) -> None:
    import gymnasium as gym
    from minari import DataCollector

    env = DataCollector(gym.make("CartPole-v1"))
    env.reset(seed=0)
    for _ in range(30):
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            env.reset()
    env.create_dataset("single/cartpole-v0", algorithm_name="random")
    with pytest.raises(LayoutError, match="allow_single_agent"):
        registry.publish("single/cartpole-v0")
    assert not (registry_dir / "single" / "cartpole-v0").exists()
    registry.publish("single/cartpole-v0", allow_single_agent=True)
    minari.delete_dataset("single/cartpole-v0")
    registry.download("single/cartpole-v0")
    assert minari.load_dataset("single/cartpole-v0").total_steps == 30


def test_download_refuses_existing_local_dataset_unless_forced(
        registry_dir: Path, small_dataset: Callable[..., str]) -> None:
    dataset_id = small_dataset()
    registry.publish(dataset_id)
    with pytest.raises(DatasetExistsError, match="force=True"):
        registry.download(dataset_id)
    (dataset_dir(dataset_id) / "data" / "extra.txt").write_text("local only")
    registry.download(dataset_id, force=True)
    assert not (dataset_dir(dataset_id) / "data" / "extra.txt").exists()


def test_hf_kind_is_left_to_minari(registry_dir: Path) -> None:
    with pytest.raises(RemoteError, match="minari.download_dataset"):
        registry.download("some/dataset-v0", remote="hf://farama-minari")
    with pytest.raises(RemoteError, match="read in place through its https://huggingface.co/"
                                          "datasets/ORG/REPO/resolve/main URL"):
        mm.open_source("hf://farama-minari/mpe2/spread/random-v0", streaming=True)
    with pytest.raises(RemoteError, match="unknown remote kind"):
        registry.download("some/dataset-v0", remote="ftp://example")


def test_missing_registry_folder_is_an_error_not_an_empty_registry(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-registry"
    for call in (lambda: registry.list_datasets(str(missing)),
                 lambda: registry.download("mpe2/spread/random-v0", f"file://{missing}")):
        with pytest.raises(RemoteError, match=r"no-such-registry does not exist \(no such"):
            call()
    assert not missing.exists()  # reading never creates it
    missing.mkdir()
    assert registry.list_datasets(str(missing)) == []


def test_a_bare_path_registry_is_the_folder_named_as_written(
        tmp_path: Path, small_dataset: Callable[..., str]) -> None:
    """``reg%41b`` was read as a URL's path and published to ``regAb``."""
    dataset_id = small_dataset()
    folder = tmp_path / "registries" / "reg%41b #1"
    folder.mkdir(parents=True)
    assert registry.publish(dataset_id, str(folder)).outcomes == {dataset_id: "published"}
    assert (folder / dataset_id / "manifest.json").is_file()
    assert [p.name for p in folder.parent.iterdir()] == ["reg%41b #1"]
    assert [d.dataset_id for d in registry.list_datasets(str(folder))] == [dataset_id]
    shutil.rmtree(dataset_dir(dataset_id))
    assert registry.download(dataset_id, str(folder)) == dataset_dir(dataset_id)
    assert registry.publish(dataset_id, str(folder)).outcomes == {dataset_id: "unchanged"}


def test_a_scheme_is_read_in_any_case(tmp_path: Path, small_dataset: Callable[..., str]
                                      ) -> None:
    """``FILE://`` was an "unknown remote kind" (schemes are case-insensitive: RFC 3986)."""
    dataset_id = small_dataset()
    folder = tmp_path / "registry"
    folder.mkdir()
    assert registry.publish(dataset_id, f"FILE://{folder}").outcomes == {dataset_id: "published"}
    assert [d.dataset_id for d in registry.list_datasets(f"File://{folder}")] == [dataset_id]
    streamed = mm.load_dataset(f"FILE://{folder}/{dataset_id}", streaming=True)
    assert streamed.total_episodes == mm.load_dataset(dataset_id).total_episodes
