"""No episode lost or stored twice: concurrent writers, kills at every commit point, leftovers.

Children are real processes recording mpe2 simple_spread (``durability_child.py``); kills are
SIGKILLs at the exact commit points of append, create and recovery.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import h5py
import minari
import pytest
from filelock import FileLock

import marl_minari as mm
from marl_minari.errors import CorruptedDataError, DatasetNotFoundError, LockedError
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir
from marl_minari.storage.journal import read_journal
from marl_minari.storage.locking import (
    claim_recording,
    dataset_lock,
    recording_in_use,
    remove_stale_staging,
    staging_root,
)
from marl_minari.storage.recording import (
    JOURNAL_NAME,
    Recording,
    discard_recording,
    list_recordings,
    recordings_root,
)

CHILD = Path(__file__).resolve().parents[1] / "support" / "durability_child.py"


def _start(mode: str, dataset_id: str, path: Path, seed: int, kill_at: str = "",
           **env: str) -> subprocess.Popen[str]:
    args = [sys.executable, str(CHILD), mode, dataset_id, str(path), str(seed)]
    return subprocess.Popen(args + ([kill_at] if kill_at else []), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **env})


def _run(mode: str, dataset_id: str, path: Path, seed: int, kill_at: str = "") -> int:
    process = _start(mode, dataset_id, path, seed, kill_at)
    out, err = process.communicate(timeout=300)
    if kill_at:
        assert process.returncode == -9, err
    else:
        assert process.returncode == 0, err
    return process.returncode


def _seeds(dataset_id: str) -> list[int]:
    """Seeds of the stored episodes, checked against the HDF5 groups and episode metadata."""
    dataset = mm.load_dataset(dataset_id)
    seeds = dataset.episode_seeds()
    metadata = dataset.minari.storage.metadata
    assert minari.load_dataset(dataset_id).total_episodes == len(seeds)
    notes = metadata.get("episode_metadata")
    if notes is not None:
        assert len(notes) == len(seeds)
        assert [n["seed"] for n in notes if n is not None] == [
            s for s, n in zip(seeds, notes, strict=True) if n is not None]
    return seeds


def _groups(dataset_id: str) -> int:
    path = dataset_dir(dataset_id) / "data" / layout.MAIN_FILE_NAME
    with h5py.File(path, "r") as file:
        return len(file)


def _created(tmp_path: Path, dataset_id: str, seed: int) -> None:
    _run("create", dataset_id, tmp_path / f"create-{seed}", seed)


# --- two writers at once --------------------------------------------------------------------


def test_two_concurrent_appenders_store_every_episode_once(tmp_path: Path) -> None:
    _created(tmp_path, "race/append-v0", 0)
    children = [_start("append", "race/append-v0", tmp_path / f"rec{k}", 1000 * (k + 1))
                for k in range(2)]
    for child in children:
        _, err = child.communicate(timeout=600)
        assert child.returncode == 0, err
    seeds = _seeds("race/append-v0")
    expected = [*range(5), *range(1000, 1050), *range(2000, 2050)]
    assert sorted(seeds) == expected  # 105 episodes, each once
    assert _groups("race/append-v0") == 105
    assert list_recordings() == []


def test_create_racing_add_stores_every_episode_once(tmp_path: Path) -> None:
    chaser = _start("chase", "race/create-v0", tmp_path / "chase", 100)
    _run("create", "race/create-v0", tmp_path / "create", 0)
    _, err = chaser.communicate(timeout=300)
    assert chaser.returncode == 0, err
    assert sorted(_seeds("race/create-v0")) == [*range(5), *range(100, 105)]


def test_two_creates_of_one_id_end_with_one_dataset_and_the_losers_episodes_kept(
        tmp_path: Path) -> None:
    children = [_start("create", "race/twice-v0", recordings_root() / f"rec{k}", 100 * k)
                for k in (1, 2)]
    errors = []
    for child in children:
        _, err = child.communicate(timeout=300)
        errors.append(err if child.returncode else "")
    [lost] = [k for k, err in zip((1, 2), errors, strict=True) if err]
    assert "DatasetExistsError" in errors[lost - 1]
    won = 3 - lost
    assert _seeds("race/twice-v0") == list(range(100 * won, 100 * won + 5))
    [unsaved] = list_recordings()
    assert (unsaved.path, unsaved.episodes) == (recordings_root() / f"rec{lost}", 5)
    mm.recover_recording(unsaved.path, "race/loser-v0")
    assert _seeds("race/loser-v0") == list(range(100 * lost, 100 * lost + 5))


def test_a_writer_that_cannot_get_the_lock_gets_a_typed_error_and_keeps_its_episodes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _created(tmp_path, "race/locked-v0", 0)
    holder = _start("hold-lock", "race/locked-v0", tmp_path / "unused", 0)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        monkeypatch.setenv("MARL_MINARI_LOCK_TIMEOUT", "0.2")
        collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3),
                                             recording_path=tmp_path / "late")
        collector.reset(seed=7)
        while collector.agents:
            collector.step({a: 0 for a in collector.agents})
        with pytest.raises(LockedError, match="race/locked-v0.*MARL_MINARI_LOCK_TIMEOUT.*"
                                              "episodes stay in the recording"):
            collector.add_to_dataset("race/locked-v0")
        journal = collector.recording_path / JOURNAL_NAME
        assert [e.seed for e in read_journal(journal)] == [7]  # still in the journal
    finally:
        holder.kill()
        holder.wait(timeout=30)
    collector.add_to_dataset("race/locked-v0")  # the lock died with its holder
    collector.close()
    assert sorted(_seeds("race/locked-v0")) == [*range(5), 7]


# --- kills at the commit points ----------------------------------------------------------------


def test_kill_between_appended_data_and_its_metadata_loses_and_duplicates_nothing(
        tmp_path: Path) -> None:
    rec = recordings_root() / "rec"
    _created(tmp_path, "kill/append-v0", 0)
    _run("add-once", "kill/append-v0", rec, 100, kill_at="append-data")
    # Not committed: readers see the old dataset, the data file holds uncommitted groups.
    assert _seeds("kill/append-v0") == list(range(5))
    assert _groups("kill/append-v0") == 10
    [unsaved] = list_recordings()
    assert (unsaved.path, unsaved.episodes, unsaved.in_use) == (rec, 5, False)
    recording = Recording.open(rec)
    recording.add_to_dataset("kill/append-v0")
    recording.close(keep=False)
    assert _seeds("kill/append-v0") == [*range(5), *range(100, 105)]
    assert _groups("kill/append-v0") == 10
    assert not rec.exists()


@pytest.mark.parametrize("mode", ["add-once", "create"])
def test_kill_after_the_dataset_holds_the_episodes_does_not_duplicate_them(
        tmp_path: Path, mode: str) -> None:
    rec = recordings_root() / "rec"
    if mode == "add-once":
        _created(tmp_path, "kill/stored-v0", 0)
    _run(mode, "kill/stored-v0", rec, 100, kill_at="stored")
    expected = [*range(5), *range(100, 105)] if mode == "add-once" else list(range(100, 105))
    assert _seeds("kill/stored-v0") == expected
    with pytest.raises(CorruptedDataError, match="no complete episode"):
        mm.recover_recording(rec, "kill/again-v0")
    assert "kill/again-v0" not in minari.list_local_datasets()
    assert list_recordings() == []  # nothing unsaved; the dead, empty recording is removed
    assert not rec.exists()
    assert _seeds("kill/stored-v0") == expected


def test_kill_during_recovery_after_the_dataset_exists_does_not_duplicate(
        tmp_path: Path) -> None:
    rec = recordings_root() / "rec"
    _run("create", "kill/first-v0", rec, 100, kill_at="create-rename")
    assert "kill/first-v0" not in minari.list_local_datasets()
    [unsaved] = list_recordings()
    assert unsaved.episodes == 5
    _run("recover", "kill/recovered-v0", rec, 0, kill_at="stored")
    assert _seeds("kill/recovered-v0") == list(range(100, 105))
    with pytest.raises(CorruptedDataError, match="no complete episode"):
        mm.recover_recording(rec, "kill/twice-v0")
    assert list_recordings() == []
    assert not rec.exists()


def test_kill_before_create_renames_keeps_the_episodes_and_the_leftover_is_cleaned(
        tmp_path: Path) -> None:
    rec = recordings_root() / "rec"
    _run("create", "kill/create-v0", rec, 100, kill_at="create-rename")
    leftovers = list(staging_root().glob("dataset-*"))
    assert [p for p in leftovers if p.is_dir()]
    mm.recover_recording(rec, "kill/create-v0")
    assert _seeds("kill/create-v0") == list(range(100, 105))
    assert not [p for p in staging_root().glob("dataset-*") if p.is_dir()]


# --- leftovers -----------------------------------------------------------------------------


def test_stale_staging_folders_are_removed_but_never_a_live_writers(tmp_path: Path) -> None:
    live = _start("hold-staging", "unused/x-v0", tmp_path / "unused", 0)
    try:
        assert live.stdout is not None
        live_folder = Path(live.stdout.readline().strip())
        assert live_folder.is_dir()
        dead = [staging_root() / f"{kind}-{uuid.uuid4().hex}"
                for kind in ("dataset", "append", "download")]
        for folder in dead:
            (folder / "data").mkdir(parents=True)
        keep = staging_root() / "recordings"
        keep.mkdir(exist_ok=True)
        assert sorted(remove_stale_staging(staging_root())) == sorted(dead)
        assert live_folder.is_dir() and keep.is_dir()
        assert not any(folder.exists() for folder in dead)
    finally:
        live.kill()
        live.wait(timeout=30)
    assert remove_stale_staging(staging_root()) == [live_folder]


def test_discard_removes_a_dead_recording_and_refuses_a_live_one(tmp_path: Path) -> None:
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=2),
                                         recording_path=tmp_path / "rec")
    collector.reset(seed=0)
    while collector.agents:
        collector.step({a: 0 for a in collector.agents})
    with pytest.raises(LockedError, match="in use"):
        discard_recording(tmp_path / "rec")
    with pytest.raises(LockedError, match="in use"):
        mm.recover_recording(tmp_path / "rec", "live/x-v0")
    with pytest.raises(LockedError, match="in use"):
        Recording.open(tmp_path / "rec")
    with pytest.warns(UserWarning, match="1 recorded episode"):
        collector.close()
    assert discard_recording(tmp_path / "rec") == 1
    assert not (tmp_path / "rec").exists()
    with pytest.raises(DatasetNotFoundError, match="not a recording folder"):
        discard_recording(tmp_path)


def test_a_recording_claimed_in_one_thread_is_let_go_by_another(tmp_path: Path) -> None:
    # A recorder stepped in a worker thread claims its recording there; the main thread closes
    # it. The release must free the recording while the lock object is still referenced.
    claimed: list[FileLock] = []
    worker = threading.Thread(target=lambda: claimed.append(claim_recording(tmp_path)))
    worker.start()
    worker.join()
    assert recording_in_use(tmp_path)
    claimed[0].release()
    assert not recording_in_use(tmp_path)


def test_two_threads_of_one_process_exclude_each_other_from_a_dataset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MARL_MINARI_LOCK_TIMEOUT", "0.2")
    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with dataset_lock("threads/x-v0"):
            inside.set()
            leave.wait(30)

    worker = threading.Thread(target=hold)
    worker.start()
    try:
        assert inside.wait(30)
        with pytest.raises(LockedError, match="threads/x-v0"), dataset_lock("threads/x-v0"):
            pass
    finally:
        leave.set()
        worker.join()
    with dataset_lock("threads/x-v0"):
        pass


def test_live_recordings_are_listed_as_in_use(datasets_root: Path) -> None:
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=2))
    collector.reset(seed=0)
    while collector.agents:
        collector.step({a: 0 for a in collector.agents})
    [info] = list_recordings()
    assert info.in_use and info.episodes == 1
    collector.create_dataset("listed/x-v0")
    assert list_recordings() == []
    collector.close()


# --- episode metadata stays aligned ----------------------------------------------------------


def _collector(path: Path, callback: bool) -> mm.ParallelDataCollector:
    return mm.ParallelDataCollector(
        mm.make_env("mpe2/simple_spread_v3", max_cycles=2), recording_path=path,
        episode_metadata_callback=(lambda e: {"seed": e.seed}) if callback else None)


def _play(collector: mm.ParallelDataCollector, seeds: range) -> None:
    for seed in seeds:
        collector.reset(seed=seed)
        while collector.agents:
            collector.step({a: 0 for a in collector.agents})


@pytest.mark.parametrize("first, second", [(True, False), (False, True)])
def test_episode_metadata_has_one_entry_per_episode_in_every_write_path(
        tmp_path: Path, first: bool, second: bool) -> None:
    one = _collector(tmp_path / "one", first)
    _play(one, range(2))
    one.create_dataset("meta/aligned-v0")
    one.close()
    two = _collector(tmp_path / "two", second)
    _play(two, range(10, 13))
    two.add_to_dataset("meta/aligned-v0")
    two.close()
    notes = mm.load_dataset("meta/aligned-v0").minari.storage.metadata["episode_metadata"]
    expected = [{"seed": s} if on else None
                for s, on in [(0, first), (1, first), (10, second), (11, second),
                              (12, second)]]
    assert notes == expected


def test_episode_metadata_survives_a_kill_in_the_journal(tmp_path: Path) -> None:
    _run("create", "meta/killed-v0", tmp_path / "rec", 40, kill_at="create-rename")
    mm.recover_recording(tmp_path / "rec", "meta/killed-v0")
    notes = mm.load_dataset("meta/killed-v0").minari.storage.metadata["episode_metadata"]
    assert notes == [{"seed": s} for s in range(40, 45)]


def test_the_dataset_names_the_journal_records_it_holds(tmp_path: Path) -> None:
    collector = _collector(tmp_path / "rec", False)
    _play(collector, range(3))
    collector.create_dataset("meta/journals-v0")
    collector.close()
    metadata = json.loads((dataset_dir("meta/journals-v0") / "data" /
                           layout.METADATA_FILE_NAME).read_text())
    [(journal, records)] = metadata[layout.JOURNALS_KEY].items()
    assert len(journal) == 32 and records == 3
    assert collections.Counter(_seeds("meta/journals-v0")) == collections.Counter(range(3))


def test_cli_discards_a_recording(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from marl_minari.cli import app

    collector = _collector(recordings_root() / "unwanted", False)
    _play(collector, range(2))
    with pytest.warns(UserWarning, match="2 recorded episode"):
        collector.close()
    assert [r.episodes for r in list_recordings()] == [2]
    result = CliRunner().invoke(app, ["recover", "--discard", str(recordings_root() / "unwanted")])
    assert result.exit_code == 0, result.output
    assert "2 unsaved episodes" in result.output
    assert list_recordings() == [] and not (recordings_root() / "unwanted").exists()
    assert CliRunner().invoke(app, ["recover", "--discard"]).exit_code != 0


# --- flushing to stable storage --------------------------------------------------------------


def _synced(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Paths flushed with fsync/fdatasync from now on (the real calls still happen)."""
    synced: list[str] = []
    for name in ("fsync", "fdatasync"):
        real = getattr(os, name)

        def spy(fd: int, real=real) -> None:  # type: ignore[no-untyped-def]
            synced.append(os.readlink(f"/proc/self/fd/{fd}"))
            real(fd)

        monkeypatch.setattr(os, name, spy)
    return synced


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc to name fds")
@pytest.mark.parametrize("durability", ["episode", "none"])
def test_journal_and_datasets_are_flushed_unless_relaxed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str) -> None:
    synced = _synced(monkeypatch)
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=2),
                                         recording_path=tmp_path / "rec",
                                         durability=durability)  # type: ignore[arg-type]
    _play(collector, range(3))
    collector.flush()  # the background writer's episodes are durable once flushed
    journal = str(tmp_path / "rec" / JOURNAL_NAME)
    assert synced.count(journal) == (3 if durability == "episode" else 0)
    collector.create_dataset("sync/created-v0")
    _play(collector, range(3, 5))
    collector.add_to_dataset("sync/created-v0")
    collector.close()
    folder = dataset_dir("sync/created-v0")
    main = str(folder / "data" / layout.MAIN_FILE_NAME)
    flushed = {Path(p).name for p in synced}
    if durability == "episode":
        for stage in ("dataset", "append"):  # the created and the appended data, in staging
            for name in (layout.MAIN_FILE_NAME, layout.METADATA_FILE_NAME):
                assert [p for p in synced if f"/{stage}-" in p and p.endswith(f"/{name}")]
        # the renamed dataset's parent, and the data folder after the append's renames
        assert str(folder.parent) in synced and str(folder / "data") in synced
    else:
        assert main not in synced and not flushed & {layout.MAIN_FILE_NAME, "data"}


def test_unknown_durability_is_refused() -> None:
    from marl_minari.errors import ConfigurationError

    spec = _collector(Path("unused"), False).spec
    with pytest.raises(ConfigurationError, match="durability='always'"):
        Recording(spec, durability="always")  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_lock_timeout_is_refused_before_any_write(
        monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    from marl_minari.errors import ConfigurationError

    collector = _collector(Path("unused"), False)
    monkeypatch.setenv("MARL_MINARI_LOCK_TIMEOUT", value)
    with pytest.raises(ConfigurationError, match="MARL_MINARI_LOCK_TIMEOUT"):
        mm.write_dataset("timeout/x-v0", [], collector.spec)
    assert "timeout/x-v0" not in minari.list_local_datasets()


def test_temporary_files_of_a_killed_journal_rewrite_are_removed_on_reopen(
        tmp_path: Path) -> None:
    collector = _collector(tmp_path / "rec", False)
    _play(collector, range(1))
    with pytest.warns(UserWarning):
        collector.close()
    leftover = tmp_path / "rec" / f"{JOURNAL_NAME}.{uuid.uuid4().hex}.tmp"
    leftover.write_bytes(b"half a journal")
    reopened = Recording.open(tmp_path / "rec")
    assert not leftover.exists() and reopened.episodes == 1
    reopened.close(keep=True)
