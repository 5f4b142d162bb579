"""Whole datasets: created in a staging folder and committed with one rename, or appended to
all or nothing. The only code that commits a dataset (episodes go through
:mod:`marl_minari.storage.episode_writer`).

Datasets are created in a hidden staging folder under the datasets root and moved into place
with one ``rename`` after the data and metadata are complete, so a crash never leaves a
half-written dataset where Minari looks for datasets. An append commits when its new
``metadata.json`` replaces the old one: ``episode_*`` groups past ``total_episodes`` are
leftovers of an interrupted append, ignored by readers and dropped by the next append.
Every writer of a dataset holds its lock (:mod:`marl_minari.storage.locking`) across its
read-modify-write, and files are ``fsync``-ed before success is reported
(:mod:`marl_minari.storage.durable`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import stat
import sys
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import h5py
import numpy as np
from gymnasium import spaces
from tqdm.auto import tqdm

from marl_minari.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    LayoutError,
)
from marl_minari.format import layout, offset_index
from marl_minari.format.digests import remember_digests
from marl_minari.format.ids import dataset_dir, datasets_root, parse_dataset_id
from marl_minari.format.metadata import (
    check_minari_metadata,
    dataset_metadata,
    metadata_count,
    read_metadata,
)
from marl_minari.format.space_json import space_to_json
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.compatible import check_compatible
from marl_minari.storage.dataset import read_spec
from marl_minari.storage.durable import sync_file, sync_folder, sync_tree
from marl_minari.storage.episode_writer import AnyEpisode, EpisodeFileWriter, LeafEpisode
from marl_minari.storage.locking import (
    dataset_lock,
    lock_timeout,
    not_writable,
    remove_stale_staging,
    staging_folder,
    staging_root,
)
from marl_minari.storage.space import claim

JournalMark = tuple[str, int]
"""``(journal id, records)``: the first ``records`` records of a journal are being stored."""


def write_dataset(
    dataset_id: str,
    episodes: Iterable[AnyEpisode],
    spec: MultiAgentSpec,
    *,
    jpeg_encoding: bool = True,
    progress: bool | str = False,
    total: int | None = None,
    fsync: bool = True,
    journal: JournalMark | None = None,
    size_hint: int | None = None,
    **metadata: Any,
) -> Path:
    """Write a new dataset from ``episodes`` and move it into place atomically.

    Args:
        dataset_id: ``(namespace/)name-vN``; must not exist yet.
        episodes: the episodes, in order (any iterable: consumed once, streaming).
        spec: agents and spaces of the dataset.
        jpeg_encoding: JPEG-encode image-like leaves, as Minari does.
        progress: show a progress bar (a string is used as its label).
        total: number of episodes, for the progress bar.
        fsync: flush the dataset's files and folders to stable storage before returning.
        journal: the recording journal records the episodes come from (noted in the
            metadata so that recovering the journal never stores them twice).
        size_hint: an upper estimate of the data file's size; that much room is claimed
            before HDF5 writes anything (:mod:`marl_minari.storage.space`).
        **metadata: Minari metadata (``algorithm_name``, ``author``, ``author_email``,
            ``code_permalink``, ``description``, ``requirements``, ``ref_min_score``,
            ``ref_max_score``) and ``extra`` (more top-level keys).

    Returns:
        The dataset's folder.

    Raises:
        InvalidDatasetIdError: malformed id.
        DatasetExistsError: a dataset with this id exists.
        LockedError: another writer held the dataset's lock too long.
        StorageFullError: no room for ``size_hint`` bytes (nothing was written).
        InvalidOptionError: unknown metadata, or a value of the wrong kind (nothing was
            written; :func:`marl_minari.format.metadata.check_minari_metadata`).
    """
    check_new_dataset(dataset_id)
    check_minari_metadata(metadata)
    lock_timeout()  # a bad setting is reported before the work, not after
    root = staging_root()
    remove_stale_staging(root)
    with staging_folder(root, "dataset") as work:
        data = work / "data"
        data.mkdir()
        if size_hint is not None:
            claim(data, size_hint, f"dataset {dataset_id!r}")
        steps = 0
        notes: list[dict[str, Any] | None] = []
        with EpisodeFileWriter(data / layout.MAIN_FILE_NAME, spec,
                               jpeg_encoding=jpeg_encoding,
                               shown_as=f"new dataset {dataset_id!r}") as writer:
            label = progress if isinstance(progress, str) else f"writing {dataset_id}"
            for episode in tqdm(episodes, total=total, desc=label, unit="ep",
                                disable=not progress):
                writer.write(episode)
                steps += episode.total_steps
                notes.append(_note(episode))
            count = writer.total_episodes
        extra = dict(metadata.pop("extra", None) or {})
        if any(note is not None for note in notes):
            extra["episode_metadata"] = notes
        _check_episode_metadata(extra.get("episode_metadata"), count, dataset_id)
        if journal is not None:
            extra[layout.JOURNALS_KEY] = {journal[0]: journal[1]}
        meta = dataset_metadata(dataset_id, spec, total_episodes=count, total_steps=steps,
                                jpeg_encoding=jpeg_encoding, extra=extra, **metadata)
        _write_metadata(data, meta, _size_mb(p for p in data.iterdir() if p.is_file()))
        _remember_digests(work)
        if fsync:
            sync_tree(work)
        with dataset_lock(dataset_id):
            target = check_new_dataset(dataset_id)
            _move_into_place(work, target, dataset_id)
            if fsync:
                sync_folder(target.parent)
                sync_folder(target.parent.parent)
    return target


def append_to_dataset(
    dataset_id: str,
    episodes: Iterable[AnyEpisode],
    spec: MultiAgentSpec,
    *,
    progress: bool = False,
    fsync: bool = True,
    journal: JournalMark | None = None,
    size_hint: int | None = None,
) -> Path:
    """Append ``episodes`` to an existing dataset, all or nothing.

    The data file is copied, appended to and swapped in; the append commits when the new
    ``metadata.json`` replaces the old one, so a crash at any moment leaves the dataset as it
    was or with every new episode. The dataset's lock is held throughout, so concurrent
    appenders take turns. Episode metadata carried by the episodes (journal records) is
    appended to ``episode_metadata``, which stays one entry (or ``null``) per episode.

    Raises:
        DatasetNotFoundError: no dataset with this id.
        IncompatibleSourcesError: the new episodes may not share the dataset
            (:func:`check_appendable`: API, agents, spaces, state, reward aggregation,
            environment); nothing is written.
        LockedError: another writer held the dataset's lock too long.
        StorageFullError: no room for ``size_hint`` bytes (nothing was written).
        NotWritableError: this user may not write the dataset's folder or files, or the
            lock (the dataset is unchanged).
    """
    data = dataset_dir(dataset_id) / "data"
    root = staging_root()
    remove_stale_staging(root)
    with dataset_lock(dataset_id), staging_folder(root, "append") as work:
        if not (data / layout.METADATA_FILE_NAME).exists():
            raise DatasetNotFoundError(
                f"no dataset {dataset_id!r} at {data.parent} to add episodes to")
        metadata = read_metadata(data)
        stored = check_appendable(data, spec, dataset_id)
        committed = metadata_count(metadata, "total_episodes", data)
        stored_steps = metadata_count(metadata, "total_steps", data)
        scratch = work / layout.MAIN_FILE_NAME
        _check_writable(data, dataset_id)
        if size_hint is not None:  # the copy of the data file, then the new episodes
            claim(work, (data / layout.MAIN_FILE_NAME).stat().st_size + size_hint,
                  f"the episodes added to {dataset_id!r}")
        clone_or_copy(data / layout.MAIN_FILE_NAME, scratch)
        generation = uuid.uuid4().hex
        # Before the episodes: the file is not written after its offset index is.
        _drop_uncommitted(scratch, committed, generation)
        steps = 0
        notes: list[dict[str, Any] | None] = []
        with EpisodeFileWriter(scratch, stored, jpeg_encoding=bool(
                metadata.get("jpeg_encoding", True)),
                index=offset_index.read(data), first_id=committed,
                shown_as=str(data / layout.MAIN_FILE_NAME)) as writer:
            for episode in tqdm(episodes, desc=f"adding to {dataset_id}", unit="ep",
                                disable=not progress):
                writer.write(episode)
                steps += episode.total_steps
                notes.append(_note(episode))
            count = writer.total_episodes
        metadata[layout.GENERATION_KEY] = generation
        _extend_episode_metadata(metadata, committed, notes)
        if journal is not None:
            metadata.setdefault(layout.JOURNALS_KEY, {})[journal[0]] = journal[1]
        metadata.update(total_episodes=count, total_steps=stored_steps + steps)
        kept = (p for p in data.iterdir() if p.is_file() and p.name not in (
            layout.MAIN_FILE_NAME, layout.METADATA_FILE_NAME, layout.INDEX_FILE_NAME))
        _write_metadata(work, metadata, _size_mb([scratch, *kept]))
        index = work / layout.INDEX_FILE_NAME
        if fsync:
            sync_file(scratch)
            sync_file(work / layout.METADATA_FILE_NAME)
            if index.exists():
                sync_file(index)
        try:
            _replace_files(work, data)
        except OSError as exc:
            raise not_writable(exc, data, f"add episodes to dataset {dataset_id!r}") from exc
        if fsync:
            sync_folder(data)
        # Not the data file: hashing it would make every append cost a pass over the whole
        # dataset; publishing hashes it when asked (its remembered digests are dropped here).
        _remember_digests(data.parent, data_file=False)
    return data.parent


_REPLACED: Final = (layout.INDEX_FILE_NAME, layout.MAIN_FILE_NAME, layout.METADATA_FILE_NAME)
"""The files an append replaces, in the order it replaces them (``metadata.json`` last: the
commit point)."""


def _check_writable(data: Path, dataset_id: str) -> None:
    """Refuse, before anything is copied, an append whose renames would be refused: the data
    folder and the files it replaces must be writable by this user."""
    for path in (data, *(data / name for name in _REPLACED)):
        if path.exists() and not os.access(path, os.W_OK):
            raise not_writable(PermissionError(errno.EACCES, "not writable by this user"),
                               path, f"add episodes to dataset {dataset_id!r}")


def _replace_files(work: Path, data: Path) -> None:
    """Move the append's files from ``work`` over the dataset's, each keeping the permission
    bits of the file it replaces.

    The index is bound to its data file by the seal attribute in the file, so readers ignore
    it whenever a kill leaves the new index beside the old file or the reverse; until
    ``metadata.json`` is replaced, readers see the old episode count.
    """
    for name in _REPLACED:
        new, old = work / name, data / name
        if not new.exists():
            old.unlink(missing_ok=True)
            continue
        with contextlib.suppress(FileNotFoundError):
            os.chmod(new, stat.S_IMODE(os.stat(old).st_mode))
        os.replace(new, old)


FICLONE = 0x40049409
"""Linux's ioctl that makes a file share another's blocks (btrfs, XFS, bcachefs, ZFS 2.2+)."""

_NO_CLONE = (errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EINVAL, errno.ENOTTY,
             errno.ENOSYS, errno.EBADF)


def clone_or_copy(source: Path, target: Path) -> bool:
    """Make ``target`` a copy of ``source``; True where the filesystem cloned it.

    An append rewrites a copy of the data file so that it is all or nothing. On a filesystem
    with reflinks the copy shares the original's blocks: no bytes are copied, the later
    ``fsync`` flushes only the new episodes, and unlinking the old file frees nothing shared,
    so the append's cost no longer grows with the episodes already stored. Elsewhere (ext4,
    tmpfs, across filesystems) the bytes are copied by the kernel.
    """
    if sys.platform == "linux":
        import fcntl

        with open(source, "rb") as src, open(target, "wb") as dst:
            try:
                fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
                return True
            except OSError as exc:
                if exc.errno not in _NO_CLONE:
                    raise
    shutil.copyfile(source, target)
    return False


def _note(episode: AnyEpisode) -> dict[str, Any] | None:
    """The episode metadata an episode carries (journal records keep the callback's dict)."""
    return episode.metadata if isinstance(episode, LeafEpisode) else None


def _check_episode_metadata(notes: Any, count: int, dataset_id: str) -> None:
    if notes is not None and (not isinstance(notes, list) or len(notes) != count):
        size = len(notes) if isinstance(notes, list) else type(notes).__name__
        raise LayoutError(
            f"dataset {dataset_id!r}: episode_metadata must be a list with one dict (or None) "
            f"per episode, got {size} for {count} episodes"
        )


def _extend_episode_metadata(metadata: dict[str, Any], committed: int,
                             notes: list[dict[str, Any] | None]) -> None:
    """Keep ``episode_metadata`` one entry per episode (``None`` where there is none)."""
    before = metadata.get("episode_metadata")
    if before is None and all(note is None for note in notes):
        return
    before = list(before) if isinstance(before, list) else []
    before = (before + [None] * committed)[:committed]
    metadata["episode_metadata"] = before + notes


def _drop_uncommitted(path: Path, committed: int, generation: str) -> None:
    """Delete ``episode_k`` groups with ``k >= committed`` (left by an interrupted append)
    and stamp the file with the append's ``generation``."""
    with h5py.File(path, "a") as file:
        # An interrupted append leaves episode_{committed}, episode_{committed + 1}, ... (it
        # writes them in order), so probing by name finds them all without listing the M
        # stored episodes; a group that a later write would collide with makes it fail.
        number = committed
        while f"episode_{number}" in file:
            del file[f"episode_{number}"]
            number += 1
        file.attrs[layout.GENERATION_KEY] = generation


def check_appendable(data: Path, new: MultiAgentSpec, dataset_id: str) -> MultiAgentSpec:
    """The spec of the dataset ``dataset_id`` (whose ``data/`` folder is ``data``), checked
    to accept episodes recorded as ``new``: the rule combine asks too
    (:func:`marl_minari.storage.compatible.check_compatible`; new episodes are written in the
    current layout).

    Raises:
        IncompatibleSourcesError: the first way they differ (API, agents, spaces, state,
            reward aggregation, layout, environment), and what to do instead.
    """
    stored = read_spec(data)
    check_compatible(stored, new, first_name=f"dataset {dataset_id!r}",
                     other_name="the new episodes",
                     fix="record them as the dataset was (same env, api, agents and "
                         "record_state=), or write them as a new dataset",
                     first_layout=read_metadata(data)[layout.METADATA_KEY].get(
                         layout.META_LAYOUT_VERSION))
    return stored


def check_new_dataset(dataset_id: str, *, or_else: str = "") -> Path:
    """The folder a new dataset ``dataset_id`` goes to, checked to be free (before any work):
    the one id rule of every door that creates a dataset.

    Args:
        dataset_id: the new dataset's id.
        or_else: another way out the caller offers (``"add the episodes to it with
            append=True"``), ending the message.

    Raises:
        InvalidDatasetIdError: malformed id.
        DatasetExistsError: a dataset with this id exists.
    """
    parse_dataset_id(dataset_id)
    target = dataset_dir(dataset_id)
    if target.exists():
        raise DatasetExistsError(
            f"dataset {dataset_id!r} already exists at {target}; datasets are immutable: pick a "
            "new version (-vN+1) or delete it with minari.delete_dataset"
            + (f", or {or_else}." if or_else else ".")
        )
    return target


def _write_metadata(folder: Path, metadata: dict[str, Any], size_mb: float) -> None:
    metadata["dataset_size"] = size_mb
    temporary = folder / f"{layout.METADATA_FILE_NAME}.{uuid.uuid4().hex}.tmp"
    temporary.write_text(json.dumps(metadata, default=_json_default))
    os.replace(temporary, folder / layout.METADATA_FILE_NAME)


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, spaces.Space):
        return space_to_json(value)
    raise TypeError(f"metadata value of type {type(value).__name__} is not JSON serializable")


def _remember_digests(folder: Path, *, data_file: bool = True) -> None:
    """Hash the new files while they are in the page cache, so publishing need not
    (``data_file=False``: all but ``main_data.hdf5``, whose remembered digests go)."""
    names = ((layout.MAIN_FILE_NAME,) if data_file else ()) + (
        layout.METADATA_FILE_NAME, layout.INDEX_FILE_NAME)
    remember_digests(folder, [f"data/{name}" for name in names
                              if (folder / "data" / name).is_file()])


def _size_mb(files: Iterable[Path]) -> float:
    return round(sum(p.stat().st_size for p in files) / 1e6, 1)


def _move_into_place(work: Path, target: Path, dataset_id: str) -> None:
    namespace = parse_dataset_id(dataset_id)[0]
    if namespace is not None:
        _ensure_namespaces(namespace)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(work, target)
    except OSError as exc:
        if target.exists():
            raise DatasetExistsError(f"dataset {dataset_id!r} appeared while writing it") from exc
        raise


def _ensure_namespaces(namespace: str) -> None:
    """Give every namespace level its ``namespace_metadata.json``, as Minari does."""
    parts = namespace.split("/")
    for depth in range(1, len(parts) + 1):
        folder = datasets_root().joinpath(*parts[:depth])
        folder.mkdir(parents=True, exist_ok=True)
        meta = folder / "namespace_metadata.json"
        if not meta.exists():
            meta.write_text("{}")

