"""Every safety guard of the registry has a test here that fails if the guard is removed."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import minari
import numpy as np
import pytest
from forged_index import (
    episode_leaves,
    store_differently_and_reseal,
    swap_episodes_and_forge_index,
)
from index_checks import count_entry_checks
from marl_minari.registry.manifest import Manifest
from registry_helpers import (
    Interrupted,
    as_older_manifest,
    interrupt_after,
    no_partial_dataset,
    replace_published_file,
)

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    RemoteError,
)
from marl_minari.format import index_trust, layout, offset_index
from marl_minari.format.ids import dataset_dir, datasets_root


def _remote_file(registry_dir: Path, dataset_id: str, name: str = "main_data.hdf5") -> Path:
    return registry_dir / dataset_id / "data" / name


@pytest.mark.parametrize("older_manifest", [False, True], ids=["blake3", "sha256-only"])
def test_tampered_file_is_refused(published: str, registry_dir: Path,
                                  older_manifest: bool) -> None:
    if older_manifest:
        manifest = registry_dir / published / "manifest.json"
        manifest.write_bytes(as_older_manifest(manifest.read_bytes()))
    target = _remote_file(registry_dir, published)
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte flipped
    target.write_bytes(bytes(data))
    with pytest.raises(CorruptedDataError, match="SHA-256" if older_manifest else "BLAKE3"):
        registry.download(published)
    no_partial_dataset(published)
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    assert registry.download(published) == dataset_dir(published)


def test_tampered_file_is_refused_through_minari(published: str, registry_dir: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 minari_kinds: None) -> None:
    monkeypatch.setenv("MINARI_REMOTE", f"file://{registry_dir}")
    target = _remote_file(registry_dir, published, "metadata.json")
    target.write_text(target.read_text().replace('"total_episodes": 2', '"total_episodes": 1'))
    with pytest.raises(CorruptedDataError):
        minari.load_dataset(published, download=True)
    no_partial_dataset(published)


def test_truncated_file_is_refused(published: str, registry_dir: Path) -> None:
    target = _remote_file(registry_dir, published)
    target.write_bytes(target.read_bytes()[:-100])
    with pytest.raises(CorruptedDataError, match="bytes"):
        registry.download(published)
    no_partial_dataset(published)


def test_missing_file_is_refused(published: str, registry_dir: Path) -> None:
    _remote_file(registry_dir, published, "marl_minari_index.npz").unlink()
    with pytest.raises(CorruptedDataError, match="missing"):
        registry.download(published)
    no_partial_dataset(published)


def test_grown_file_is_cut_off(published: str, registry_dir: Path) -> None:
    target = _remote_file(registry_dir, published)
    with open(target, "ab") as handle:
        handle.write(b"\0" * (20 << 20))
    with pytest.raises(CorruptedDataError, match="more than"):
        registry.download(published)
    no_partial_dataset(published)


@pytest.mark.parametrize("bad_path", ["../../escaped.txt", "data/../../escaped.txt",
                                      "/tmp/escaped.txt", "data\\..\\x", ".hidden/x"])
def test_manifest_with_path_outside_dataset_is_refused(published: str, registry_dir: Path,
                                                       bad_path: str) -> None:
    manifest_path = registry_dir / published / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    digest = hashlib.sha256(b"test").hexdigest()
    manifest["files"].append({"path": bad_path, "size": 4, "sha256": digest})
    (registry_dir / "escaped.txt").write_text("test")
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptedDataError, match="unsafe path"):
        registry.download(published)
    no_partial_dataset(published)
    assert not (datasets_root().parent / "escaped.txt").exists()
    assert not (datasets_root() / "escaped.txt").exists()


def test_manifest_of_another_dataset_is_refused(published: str, registry_dir: Path) -> None:
    manifest_path = registry_dir / published / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["dataset_id"] = "other/dataset-v0"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(CorruptedDataError, match="describes"):
        registry.download(published)
    no_partial_dataset(published)


@pytest.mark.parametrize("bad_id", ["../escape-v0", "mpe2/../../escape-v0", "/abs/x-v0",
                                    "mpe2/spread/../random-v0", "a\\b-v0", "no-version"])
def test_ids_with_path_traversal_are_refused(registry_dir: Path, bad_id: str) -> None:
    with pytest.raises(InvalidDatasetIdError):
        registry.download(bad_id)
    with pytest.raises(InvalidDatasetIdError):
        registry.publish(bad_id)
    storage = registry.open_remote()
    with pytest.raises(InvalidDatasetIdError):
        storage.download_dataset(bad_id, datasets_root())
    with pytest.raises(InvalidDatasetIdError):
        storage.get_dataset_metadata(bad_id)


def test_index_with_traversal_ids_is_not_trusted(published: str, registry_dir: Path) -> None:
    index_path = registry_dir / "_index.json"
    index = json.loads(index_path.read_text())
    index["datasets"]["../../evil-v0"] = index["datasets"][published]
    index["namespaces"]["../.."] = {}
    index_path.write_text(json.dumps(index))
    with pytest.warns(UserWarning, match="malformed"):
        ids = [d.dataset_id for d in registry.list_datasets()]
    assert ids == [published]
    assert "../.." not in registry.open_remote().list_namespaces()


def test_published_version_is_never_overwritten(registry_dir: Path,
                                                record_parallel: Callable[..., object]) -> None:
    dataset_id = "mpe2/spread/random-v0"
    record_parallel("mpe2/simple_spread_v3", 2, max_cycles=10, dataset_id=dataset_id)
    first = registry.publish(dataset_id).manifest
    remote_bytes = _remote_file(registry_dir, dataset_id).read_bytes()

    again = registry.publish(dataset_id)  # identical content: success, nothing written
    assert again.outcomes == {dataset_id: "unchanged"}
    assert again.manifest == first
    assert _remote_file(registry_dir, dataset_id).read_bytes() == remote_bytes

    minari.delete_dataset(dataset_id)  # different episodes under the same id
    record_parallel("mpe2/simple_spread_v3", 3, max_cycles=10, dataset_id=dataset_id)
    with pytest.raises(DatasetExistsError, match=r"different files.*-vN\+1"):
        registry.publish(dataset_id)
    assert _remote_file(registry_dir, dataset_id).read_bytes() == remote_bytes
    assert registry.published_manifest(dataset_id).same_content(first)
    storage = registry.open_remote()

    with pytest.raises(DatasetExistsError):  # Minari's upload entry point refuses too
        storage.upload_dataset(dataset_id)
    assert _remote_file(registry_dir, dataset_id).read_bytes() == remote_bytes

    # Bumping the version is the way out.
    record_parallel("mpe2/simple_spread_v3", 3, max_cycles=10, dataset_id="mpe2/spread/random-v1")
    registry.publish("mpe2/spread/random-v1")
    assert [d.dataset_id for d in registry.list_datasets()] == [dataset_id,
                                                                "mpe2/spread/random-v1"]


def test_concurrent_manifest_creation_loses_cleanly(registry_dir: Path,
                                                    small_dataset: Callable[..., str]) -> None:
    """Writers released together at one manifest key: exactly one wins, the file holds the
    winner's bytes whole, the losers leave nothing behind."""
    dataset_id = small_dataset()
    backend = registry.open_backend()
    writers, rounds = 8, 25
    for round_ in range(rounds):
        key = f"race-{round_}/manifest.json"
        start = threading.Barrier(writers)

        def write(writer: int, key: str = key, start: threading.Barrier = start) -> bool:
            start.wait()
            payload = f"writer {writer} ".encode() * 4096  # several writes' worth per file
            return backend.write_new(key, payload)

        with ThreadPoolExecutor(writers) as pool:
            won = list(pool.map(write, range(writers)))
        assert won.count(True) == 1, (round_, won)
        winner = won.index(True)
        assert (registry_dir / key).read_bytes() == f"writer {winner} ".encode() * 4096
        assert sorted(p.name for p in (registry_dir / key).parent.iterdir()) == ["manifest.json"]
    registry.publish(dataset_id)
    assert [d.dataset_id for d in registry.list_datasets()] == [dataset_id]


def test_interrupted_publish_never_shows_up(registry_dir: Path,
                                            small_dataset: Callable[..., str],
                                            minari_kinds: None) -> None:
    dataset_id = small_dataset()
    remote = f"file://{registry_dir}"
    with pytest.raises(Interrupted):
        registry.publish(dataset_id, progress=interrupt_after(2))  # during the 2nd file
    assert not (registry_dir / dataset_id / "manifest.json").exists()
    assert registry.list_datasets() == []
    assert minari.list_remote_datasets(remote_path=remote) == {}
    with pytest.raises(DatasetNotFoundError):
        registry.published_manifest(dataset_id)
    assert not list(registry_dir.rglob("*.part"))

    result = registry.publish(dataset_id)  # simply run it again
    assert result.outcomes == {dataset_id: "published"}
    assert [d.dataset_id for d in registry.list_datasets()] == [dataset_id]


def test_publish_interrupted_after_manifest_is_completed(
        registry_dir: Path, small_dataset: Callable[..., str]) -> None:
    dataset_id = small_dataset()
    registry.publish(dataset_id)
    index_path = registry_dir / "_index.json"
    index = json.loads(index_path.read_text())
    del index["datasets"][dataset_id]  # as if the publish stopped before its index entry
    index_path.write_text(json.dumps(index))
    assert registry.list_datasets() == []
    assert registry.publish(dataset_id).outcomes == {dataset_id: "completed"}
    assert [d.dataset_id for d in registry.list_datasets()] == [dataset_id]
    (registry_dir / dataset_id / "data" / "namespace_metadata.json").write_text("{}")
    index_path.unlink()
    assert registry.list_datasets() == []
    assert registry.reindex() == 1
    assert [d.dataset_id for d in registry.list_datasets()] == [dataset_id]
    assert registry.open_remote().list_namespaces() == ["mpe2", "mpe2/spread"]


def test_interrupted_download_leaves_nothing(published: str) -> None:
    with pytest.raises(Interrupted):
        registry.download(published, progress=interrupt_after(2))
    no_partial_dataset(published)
    registry.download(published)
    assert minari.load_dataset(published).total_episodes == 2


def test_interrupted_forced_download_keeps_the_old_copy(published: str) -> None:
    registry.download(published)
    marker = dataset_dir(published) / "data" / "local-note.txt"
    marker.write_text("still here")
    with pytest.raises(Interrupted):
        registry.download(published, force=True, progress=interrupt_after(1))
    assert marker.read_text() == "still here"


def test_dropped_connection_leaves_nothing(published: str, registry_dir: Path,
                                           dropping_http_server: Callable[..., str]) -> None:
    url = dropping_http_server(registry_dir, ("main_data.hdf5",))
    with pytest.raises(RemoteError, match="dropped"):
        registry.download(published, remote=url)
    no_partial_dataset(published)


def test_credentials_never_appear(published: str, registry_dir: Path,
                                  dropping_http_server: Callable[..., str],
                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = dropping_http_server(registry_dir, ("main_data.hdf5",))
    secret_url = url.replace("http://", "http://alice:hunter2-secret@")
    errors = []
    for dataset_id in (published, "missing/dataset-v0"):
        with pytest.raises((RemoteError, DatasetNotFoundError)) as info:
            registry.download(dataset_id, remote=secret_url)
        errors.append(str(info.value))
    closed = secret_url.rsplit(":", 1)[0] + ":1"  # nothing listens on port 1
    with pytest.raises(RemoteError) as info:
        registry.list_datasets(closed)
    errors.append(str(info.value))
    errors.append(registry.open_backend(secret_url, token=None).location)
    for text in [*errors, caplog.text]:
        assert "hunter2-secret" not in text
        assert "alice" not in text
    assert "***@" not in errors[0] and url in errors[0]


def test_manifest_round_trip_rejects_bad_digests() -> None:
    entry = {"path": "data/metadata.json", "size": 1, "sha256": "0" * 64}
    good = {"format": "marl-minari-manifest", "format_version": 1, "dataset_id": "a-v0",
            "files": [entry]}
    assert Manifest.from_json(json.dumps(good).encode(), "a-v0", "test").total_size == 1
    for bad in ({**entry, "sha256": "xyz"}, {**entry, "size": -1}, {**entry, "size": True}):
        with pytest.raises(CorruptedDataError):
            Manifest.from_json(json.dumps({**good, "files": [bad]}).encode(), "a-v0", "test")
    with pytest.raises(CorruptedDataError, match="version"):
        Manifest.from_json(json.dumps({**good, "format_version": 99}).encode(), "a-v0", "t")


def _forge_published_index(registry_dir: Path, dataset_id: str) -> None:
    """Swap episodes 1 and 2 of the published data file, forge its index's header to match,
    and re-sign both manifest entries: every digest the download checks agrees."""
    remote_data = registry_dir / dataset_id / "data"
    swap_episodes_and_forge_index(remote_data)
    for name in (layout.MAIN_FILE_NAME, layout.INDEX_FILE_NAME):
        replace_published_file(registry_dir, dataset_id, f"data/{name}",
                               (remote_data / name).read_bytes())


@pytest.mark.parametrize(("path", "stored_as", "episodes"), [
    ("rewards", lambda stored: stored.astype(np.float32), [1]),  # the spec's leaf's type
    ("rewards", lambda stored: stored.astype(np.float32), [0, 1, 2, 3]),  # alike, not spec's
    ("observations/agent_0", lambda stored: stored[:, :-1].copy(), [1]),  # spec's, narrower
    ("infos/marl/active", lambda stored: stored.astype(np.int64), [1]),  # not episode 0's
], ids=["spec-type", "spec-type-everywhere", "spec-shape", "unlike-the-first"])
def test_download_does_not_vouch_for_an_entry_readers_would_misread(
        registry_dir: Path, small_dataset: Callable[..., str], monkeypatch: pytest.MonkeyPatch,
        path: str, stored_as: Callable[[np.ndarray], np.ndarray], episodes: list[int]) -> None:
    """Datasets stored again as another type or shape, their index entries pointed at them
    and the file resealed, both manifest entries re-signed: every offset agrees with HDF5,
    but a reader trusting the whole index would read those entries as the spec's type and
    shape (or episode 0's). The download drops the index, and reads are what h5py reads, or
    an error naming the dataset."""
    import h5py

    dataset_id = small_dataset("mpe2/spread/retyped-v0", episodes=4)
    registry.publish(dataset_id)
    shutil.rmtree(dataset_dir(dataset_id))
    remote_data = registry_dir / dataset_id / "data"
    with h5py.File(remote_data / layout.MAIN_FILE_NAME, "r") as file:
        stored = file[f"episode_1/{path}"][()]
    for episode_id in episodes:
        with h5py.File(remote_data / layout.MAIN_FILE_NAME, "r") as file:
            original = file[f"episode_{episode_id}/{path}"][()]
        store_differently_and_reseal(remote_data, episode_id, path, stored_as(original))
    for name in (layout.MAIN_FILE_NAME, layout.INDEX_FILE_NAME):
        replace_published_file(registry_dir, dataset_id, f"data/{name}",
                               (remote_data / name).read_bytes())
    registry.download(dataset_id)
    local = dataset_dir(dataset_id) / "data"
    assert not (local / layout.INDEX_FILE_NAME).exists()
    monkeypatch.setattr(offset_index, "_FINGERPRINTS", {})  # as in a fresh process
    monkeypatch.setattr(index_trust, "_BINDINGS", {})
    dataset = mm.load_dataset(dataset_id)
    if path.startswith("observations/"):  # h5py's rows do not fit the spec's
        with pytest.raises(CorruptedDataError, match=f"episode_1/{path} has shape"):
            dataset.to_arrays()
        return
    episode = dataset.to_arrays().episode(1)
    read = episode.team_rewards if path == "rewards" else episode.active
    np.testing.assert_array_equal(read, stored_as(stored))


def test_download_drops_a_forged_offset_index(registry_dir: Path,
                                              small_dataset: Callable[..., str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    dataset_id = small_dataset("mpe2/spread/forged-v0", episodes=6)
    registry.publish(dataset_id)
    shutil.rmtree(dataset_dir(dataset_id))
    _forge_published_index(registry_dir, dataset_id)
    registry.download(dataset_id)
    local = dataset_dir(dataset_id) / "data"
    monkeypatch.setattr(offset_index, "_FINGERPRINTS", {})  # as in a fresh process
    monkeypatch.setattr(index_trust, "_BINDINGS", {})
    arrays = mm.load_dataset(dataset_id).to_arrays()
    for episode_id in range(6):  # what h5py and plain Minari read
        stored = episode_leaves(local / layout.MAIN_FILE_NAME, episode_id)
        np.testing.assert_array_equal(arrays.episode(episode_id).team_rewards,
                                      stored["rewards"])
    assert not (local / layout.INDEX_FILE_NAME).exists()


def test_download_keeps_an_offset_index_that_agrees_and_vouches_for_it(
        published: str, monkeypatch: pytest.MonkeyPatch) -> None:
    registry.download(published)
    local = dataset_dir(published) / "data"
    assert (local / layout.INDEX_FILE_NAME).exists()
    compared = count_entry_checks(monkeypatch, forget=True)
    mm.load_dataset(published).to_arrays()
    assert compared == []  # the downloader compared every entry and remembered the file


def test_download_compares_every_entry_of_a_large_index_and_vouches_for_it(
        registry_dir: Path, small_dataset: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """However many entries an index has, the download compares them all (reporting each
    step of episodes) and remembers the file, so no later reader compares any."""
    from marl_minari.format.digests import remembered_digests

    dataset_id = small_dataset("mpe2/spread/big-v0", episodes=7)
    registry.publish(dataset_id)
    shutil.rmtree(dataset_dir(dataset_id))
    monkeypatch.setattr(offset_index, "VERIFY_STEP_EPISODES", 2)
    reported: list[int] = []
    real = offset_index.verify_or_drop
    monkeypatch.setattr(offset_index, "verify_or_drop",
                        lambda *args, progress: real(*args, progress=reported.append))
    registry.download(dataset_id, progress=lambda count: None)
    local = dataset_dir(dataset_id) / "data"
    assert reported == [2, 2, 2, 1]
    assert f"data/{layout.MAIN_FILE_NAME}" in remembered_digests(local.parent)
    compared = count_entry_checks(monkeypatch, forget=True)
    mm.load_dataset(dataset_id).to_arrays()
    assert compared == []
