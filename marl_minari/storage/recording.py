"""Recordings in progress: a durable, append-only journal of finished episodes.

A recorder appends every finished episode to ``episodes.journal`` in its recording folder
(``<datasets root>/.marl_minari/recordings/<name>/``) before control returns to the caller, so
a killed process loses at most the episode it was in. Each journal record is framed and
checksummed: a record cut short by a kill fails its check and is ignored, and everything
before it is intact (the record format is :mod:`marl_minari.storage.journal`'s).
:func:`recover_recording` (``marl-minari recover``) turns the finished episodes of a recording
into a dataset that ``minari.load_dataset`` opens.

Storing a journal's records in a dataset first notes the target in ``commit.json``; the
dataset's metadata names the journal records it holds (``marl_minari_journals``), so whatever
moment a kill strikes, reopening the recording drops exactly the records the dataset holds.
A recording folder is locked by the process using it (:mod:`marl_minari.storage.locking`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from marl_minari.errors import (
    ConfigurationError,
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    LockedError,
    MarlMinariError,
    NotWritableError,
    StorageFullError,
)
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir
from marl_minari.format.jpeg import jpeg_paths
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.durable import DURABILITIES, Durability, sync_folder, sync_handle
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.episode_writer import LeafEpisode
from marl_minari.storage.journal import (
    FRAME,
    headers,
    journal_position,
    read_journal,
    record_id,
    record_leaves,
    record_parts,
    records,
    trim_journal,
    write_all,
)
from marl_minari.storage.locking import claim_recording, recording_in_use, staging_root
from marl_minari.storage.space import dataset_bytes, refusal
from marl_minari.storage.writer import JournalMark, append_to_dataset
from marl_minari.storage.writer import write_dataset as _write_dataset

JOURNAL_NAME = "episodes.journal"
SPEC_NAME = "recording.json"
COMMIT_NAME = "commit.json"


def recordings_root() -> Path:
    """Folder holding all recordings in progress (hidden from Minari's listings)."""
    path = staging_root() / "recordings"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class RecordingInfo:
    """A recording folder and what it holds."""

    path: Path
    episodes: int
    steps: int
    created: float
    env: str
    in_use: bool = False


class Recording:
    """A recording folder: its spec and its episode journal.

    The folder is locked while this object is open: a second recorder, a recovery or a discard
    of the same folder is refused with :class:`~marl_minari.errors.LockedError`.

    Args:
        spec: agents and spaces of the episodes.
        jpeg_encoding: passed on to the dataset created from it.
        path: the folder; a new one under :func:`recordings_root` by default.
        durability: ``"episode"`` (default) flushes the journal to stable storage after every
            episode and datasets before success is reported; ``"none"`` leaves it to the OS.

    Raises:
        LockedError: a live process uses the folder.
        ConfigurationError: unknown ``durability``.
    """

    def __init__(self, spec: MultiAgentSpec, *, jpeg_encoding: bool = True,
                 path: Path | None = None, durability: Durability = "episode") -> None:
        if durability not in DURABILITIES:
            raise ConfigurationError(
                f"durability={durability!r} is not one of {', '.join(DURABILITIES)}")
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.path = Path(path) if path is not None else (
            recordings_root() / f"{stamp}-{uuid.uuid4().hex[:8]}")
        self.path.mkdir(parents=True, exist_ok=True)
        self.spec = spec
        self.jpeg_encoding = jpeg_encoding
        self.durability = durability
        self.jpeg_paths = jpeg_paths(spec, jpeg_encoding)
        """Leaves whose journal records hold JPEG frames."""
        self._lock = claim_recording(self.path)
        try:
            for leftover in self.path.glob("*.tmp"):  # of a writer killed mid-rewrite
                leftover.unlink()
            _atomic_write(self.path / SPEC_NAME, json.dumps({
                "spec": spec.to_json(), "jpeg_encoding": jpeg_encoding,
                "created": _created(self.path)}))
            _settle(self.path)
            self._open_journal()
        except BaseException:
            self._lock.release()
            raise

    @classmethod
    def open(cls, path: Path) -> Recording:
        """Open an existing recording folder (to recover it).

        Raises:
            DatasetNotFoundError: ``path`` is not a recording folder.
            LockedError: a live process uses it.
        """
        path = Path(path)
        try:
            meta = json.loads((path / SPEC_NAME).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise DatasetNotFoundError(f"{path} is not a recording folder ({exc})") from exc
        return cls(MultiAgentSpec.from_json(meta["spec"]), jpeg_encoding=meta["jpeg_encoding"],
                   path=path)

    @property
    def _fsync(self) -> bool:
        return self.durability == "episode"

    def append(self, episode: MultiAgentEpisode,
               metadata: dict[str, Any] | None = None) -> None:
        """Append one finished episode (and its episode metadata); it is in the file (and,
        by default, on stable storage) when this returns.

        A failed append leaves no part of its record behind: records written after a torn one
        could not be read back.

        Raises:
            StorageFullError: the disk (or a quota, or the file-size limit) has no room for
                the record; the episodes before it stay durable.
        """
        parts = record_parts(episode, self._journal_id, self._next_seq, metadata,
                             self.jpeg_paths)
        start = os.fstat(self._journal.fileno()).st_size
        try:
            write_all(self._journal, parts)
            if self._fsync:
                sync_handle(self._journal)
        except OSError as exc:
            os.ftruncate(self._journal.fileno(), start)
            refused = refusal(exc, self.path, "an episode to the recording journal")
            if refused is exc:
                raise
            raise type(refused)(f"{refused} The episode is not recorded; the {self.episodes} "
                                f"before it stay in {self.path}.") from exc
        except BaseException:
            os.ftruncate(self._journal.fileno(), start)
            raise
        self._next_seq += 1
        self.episodes += 1

    def read(self) -> Iterator[LeafEpisode]:
        """Every complete episode in the journal, in order (a torn tail is skipped)."""
        return read_journal(self.path / JOURNAL_NAME)

    def write_dataset(self, dataset_id: str, **metadata: Any) -> Path:
        """Write the journal's episodes as a new dataset, then drop them from the journal."""
        mark = self._mark(dataset_id)
        try:
            return _write_dataset(dataset_id, self.read(), self.spec, total=self.episodes,
                                  jpeg_encoding=self.jpeg_encoding, fsync=self._fsync,
                                  journal=mark, size_hint=self._dataset_bytes(), **metadata)
        except MarlMinariError as exc:
            raise self._still_here(exc, dataset_id, creating=True) from exc
        finally:
            self._drop_stored()

    def add_to_dataset(self, dataset_id: str) -> Path:
        """Append the journal's episodes to an existing dataset, then drop them."""
        mark = self._mark(dataset_id)
        try:
            return append_to_dataset(dataset_id, self.read(), self.spec, fsync=self._fsync,
                                     journal=mark, size_hint=self._dataset_bytes())
        except MarlMinariError as exc:
            raise self._still_here(exc, dataset_id, creating=False) from exc
        finally:
            self._drop_stored()

    def close(self, *, keep: bool) -> None:
        """Close the journal; delete the folder unless ``keep`` or it holds episodes."""
        try:
            self._journal.close()
            if not keep and self.episodes == 0:
                shutil.rmtree(self.path, ignore_errors=True)
        finally:
            self._lock.release()

    def _open_journal(self) -> None:
        journal = self.path / JOURNAL_NAME
        self.episodes = trim_journal(journal)
        self._journal_id, self._next_seq = journal_position(journal)
        self._journal = open(journal, "ab", buffering=0)  # noqa: SIM115

    def _mark(self, dataset_id: str) -> JournalMark:
        """Note which dataset the journal's records go to, before they go (see _settle)."""
        mark = (self._journal_id, self._next_seq)
        _atomic_write(self.path / COMMIT_NAME, json.dumps(
            {"dataset": dataset_id, "journal": mark[0], "records": mark[1]}), sync=self._fsync)
        return mark

    def _still_here(self, error: MarlMinariError, dataset_id: str, *, creating: bool
                   ) -> MarlMinariError:
        """``error`` (same type) ending with where the episodes that were not stored are
        kept and the command that stores them."""
        method = "create_dataset" if creating else "add_to_dataset"
        again = isinstance(error, (LockedError, StorageFullError, NotWritableError))
        if creating and isinstance(error, (DatasetExistsError, InvalidDatasetIdError)):
            retry, target = "call create_dataset with a new id", "NEW_DATASET_ID"
        elif creating:
            retry = f"{'' if again else 'fix the cause and '}call {method} again"
            target = dataset_id
        elif again:
            retry, target = "call add_to_dataset again", f"{dataset_id} --append"
        else:
            retry = "write them as a new dataset with create_dataset"
            target = "NEW_DATASET_ID"
        run = f"marl-minari recover {self.path} {target}"
        if target == "NEW_DATASET_ID":
            run += " (NEW_DATASET_ID: an id no dataset has yet)"
        said = str(error).rstrip()
        said += "" if said.endswith((".", ")")) else "."
        return type(error)(f"{said} The episodes stay in the recording {self.path} "
                           f"({self.episodes} not stored): {retry}, or run: {run}")

    def _dataset_bytes(self) -> int:
        """An upper estimate of the size of the dataset file the journal's episodes make."""
        journal = self.path / JOURNAL_NAME
        payload = journal.stat().st_size if journal.exists() else 0
        return dataset_bytes(payload, self.episodes, record_leaves(journal))

    def _drop_stored(self) -> None:
        """Drop the records the target dataset now holds (none if its write failed)."""
        self._journal.close()
        _settle(self.path)
        self._open_journal()


def _stored_mark(folder: Path) -> JournalMark | None:
    """The records ``commit.json`` says were being stored, if the target dataset holds them."""
    try:
        note = json.loads((folder / COMMIT_NAME).read_text())
        metadata = json.loads((dataset_dir(note["dataset"]) / "data" /
                               layout.METADATA_FILE_NAME).read_text())
        held = int(metadata.get(layout.JOURNALS_KEY, {}).get(note["journal"], 0))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no note, or no dataset holding the records: nothing was stored
    return (note["journal"], int(note["records"])) if held >= int(note["records"]) else None


def _unsaved(header: dict[str, Any], position: int, stored: JournalMark | None) -> bool:
    journal, seq = record_id(header, position)
    return stored is None or journal != stored[0] or seq >= stored[1]


def _settle(folder: Path) -> None:
    """Finish an interrupted hand-over of journal records to a dataset.

    If the dataset named in ``commit.json`` holds the records, they leave the journal (which
    is rewritten, then swapped in with one rename); either way the note is then removed.
    Call only while holding the recording's lock.
    """
    journal = folder / JOURNAL_NAME
    stored = _stored_mark(folder)
    if stored is not None and journal.exists():
        kept = folder / f"{JOURNAL_NAME}.{uuid.uuid4().hex}.tmp"
        with open(journal, "rb") as source, open(kept, "wb") as target:
            for position, (end, body, header_len) in enumerate(records(journal)):
                if _unsaved(json.loads(body[:header_len]), position, stored):
                    source.seek(end - FRAME.size - len(body))
                    target.write(source.read(FRAME.size + len(body)))
            sync_handle(target)
        os.replace(kept, journal)
        sync_folder(folder)
    (folder / COMMIT_NAME).unlink(missing_ok=True)


def list_recordings() -> list[RecordingInfo]:
    """Recordings under :func:`recordings_root` that still hold unsaved finished episodes.

    Episodes a dataset already holds (a recorder killed right after storing them) are not
    counted; recordings of dead processes holding nothing are removed on the way.
    """
    found = []
    for folder in sorted(recordings_root().iterdir()):
        journal = folder / JOURNAL_NAME
        in_use = recording_in_use(folder)
        stored = None if in_use else _stored_mark(folder)
        steps = [header["steps"] for position, header in enumerate(headers(journal))
                 if _unsaved(header, position, stored)]
        if not steps:
            if not in_use:
                _remove_if_empty(folder)
            continue
        try:
            meta = json.loads((folder / SPEC_NAME).read_text())
            env = json.loads(meta["spec"])["marl"].get("env") or {}
        except (OSError, json.JSONDecodeError, KeyError):
            meta, env = {"created": folder.stat().st_mtime}, {}
        found.append(RecordingInfo(folder, len(steps), sum(steps),
                                   meta.get("created", 0.0),
                                   env.get("env_id") or env.get("entry_point") or "unknown",
                                   in_use))
    return found


def _remove_if_empty(folder: Path) -> None:
    """Remove a dead recording holding no unsaved episode (and no damaged tail to inspect)."""
    if (folder / (JOURNAL_NAME + ".damaged")).exists():
        return
    try:
        recording = Recording.open(folder)
    except Exception:  # noqa: BLE001 - a folder that cannot be opened is left for the user
        return
    recording.close(keep=False)


def recover_recording(path: str | Path, dataset_id: str, *, append: bool = False,
                      **metadata: Any) -> Path:
    """Turn the unsaved finished episodes of a (possibly killed) recording into a dataset, or
    with ``append`` add them to an existing one (an interrupted ``add_to_dataset``).

    Episodes the recording already stored in a dataset before it was killed are not stored
    again.

    Args:
        path: the recording folder (see :func:`list_recordings`).
        dataset_id: id of the new dataset (with ``append``: of the existing one).
        append: add to ``dataset_id`` (as ``Recording.open(path).add_to_dataset``) instead of
            creating it.
        **metadata: Minari metadata of a new dataset, as for ``create_dataset``.

    Returns:
        The dataset's folder. The recording folder is removed once the episodes are stored.

    Raises:
        CorruptedDataError: the recording holds no unsaved complete episode.
        LockedError: a live process uses the recording.
        InvalidOptionError: metadata given with ``append`` (an append keeps the dataset's).
    """
    if append and metadata:
        raise ConfigurationError(
            f"metadata {sorted(metadata)} given with append: an append keeps the metadata of "
            f"{dataset_id!r}")
    recording = Recording.open(Path(path))
    try:
        if recording.episodes == 0:
            raise CorruptedDataError(
                f"recording {path} holds no complete episode to recover (episodes already "
                "stored in a dataset are not stored again); remove it with "
                f"marl-minari recover --discard {path}")
        target = (recording.add_to_dataset(dataset_id) if append
                  else recording.write_dataset(dataset_id, **metadata))
    except BaseException:
        recording.close(keep=True)
        raise
    recording.close(keep=False)
    return target


def discard_recording(path: str | Path) -> int:
    """Delete a recording folder and the unsaved episodes in it; return how many there were.

    Raises:
        DatasetNotFoundError: ``path`` is not a recording folder.
        LockedError: a live process uses the recording.
    """
    folder = Path(path)
    if not ((folder / SPEC_NAME).is_file() or (folder / JOURNAL_NAME).is_file()):
        raise DatasetNotFoundError(
            f"{folder} is not a recording folder (no {SPEC_NAME} or {JOURNAL_NAME}); "
            "list recordings with: marl-minari recover")
    lock = claim_recording(folder)
    try:
        stored = _stored_mark(folder)
        count = sum(_unsaved(header, position, stored)
                    for position, header in enumerate(headers(folder / JOURNAL_NAME)))
        shutil.rmtree(folder)
    finally:
        lock.release()
    return count


def _created(folder: Path) -> float:
    """When the recording in ``folder`` was started (now, for a new one)."""
    try:
        return float(json.loads((folder / SPEC_NAME).read_text())["created"])
    except (OSError, ValueError, KeyError, TypeError):
        return time.time()


def _atomic_write(path: Path, text: str, *, sync: bool = False) -> None:
    temporary = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "w") as handle:
        handle.write(text)
        if sync:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(temporary, path)
    if sync:
        sync_folder(path.parent)
