"""The one writer of the multi-agent layout into Minari's HDF5 files.

Episodes are appended to a ``main_data.hdf5`` with h5py's low-level API (contiguous datasets:
Minari's reader slices whole datasets, so ``chunks``/``maxshape`` buy nothing but size). The
byte offset of every contiguous dataset goes into a sidecar index for fast bulk reads.

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

import functools
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import minari
import numpy as np
from gymnasium import spaces
from tqdm.auto import tqdm

from marl_minari.errors import DatasetExistsError, DatasetNotFoundError, LayoutError, StepDataError
from marl_minari.format import layout, offset_index
from marl_minari.format.digests import remember_digests
from marl_minari.format.ids import dataset_dir, datasets_root, parse_dataset_id
from marl_minari.format.jpeg import FrameRows, JpegFrames, encode, jpeg_paths
from marl_minari.format.space_json import space_to_json
from marl_minari.format.spaces import leaves
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.durable import sync_file, sync_folder, sync_tree
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.locking import (
    dataset_lock,
    lock_timeout,
    remove_stale_staging,
    staging_folder,
)
from marl_minari.storage.locking import staging_root as staging_root

STATE_PATH = layout.STATE_PATH

JournalMark = tuple[str, int]
"""``(journal id, records)``: the first ``records`` records of a journal are being stored."""


Leaf = np.ndarray | JpegFrames | FrameRows
"""An HDF5 leaf's rows: an array, frames a recording journal holds JPEG-encoded, or a
recorder's image rows not stacked yet."""


class LeafEpisode(NamedTuple):
    """An episode already flattened into HDF5 leaves (as a recording journal holds it)."""

    leaves: list[tuple[str, Leaf]]
    total_steps: int
    seed: int | None = None
    options: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


AnyEpisode = MultiAgentEpisode | LeafEpisode


class EpisodeFileWriter:
    """Appends :class:`MultiAgentEpisode` objects to one HDF5 file in the layout.

    Args:
        path: the ``main_data.hdf5`` to write (created if missing, appended to otherwise).
        spec: the dataset's spec (spaces decide which leaves are JPEG-encoded).
        jpeg_encoding: JPEG-encode image-like uint8 Box leaves, as Minari does by default.
    """

    def __init__(self, path: Path, spec: MultiAgentSpec, *, jpeg_encoding: bool = True) -> None:
        self._path = Path(path)
        self._file = h5py.File(self._path, "a")
        if layout.AGENTS_ATTRIBUTE not in self._file.attrs:  # the column order, for readers
            self._file.attrs[layout.AGENTS_ATTRIBUTE] = json.dumps(list(spec.possible_agents))
        self._next_id = len(self._file)
        self._first_id = self._next_id
        self._spec = spec
        self._images = jpeg_paths(spec, jpeg_encoding)
        self._compressed = {STATE_PATH: spec.state_encoding} if spec.state_encoding in (
            "gzip", "lzf") else {}
        self._offsets: dict[str, list[int]] = {}
        self._steps: list[int] = []

    @property
    def total_episodes(self) -> int:
        """Episodes in the file, including those written by this writer."""
        return self._next_id

    def write(self, episode: AnyEpisode) -> int:
        """Append ``episode`` as ``episode_{id}`` and return its id."""
        if isinstance(episode, LeafEpisode):
            return self.write_leaves(episode.leaves, episode.total_steps, seed=episode.seed,
                                     options=episode.options)
        return self.write_leaves(episode_leaves(episode), episode.total_steps,
                                 seed=episode.seed, options=episode.options)

    def write_leaves(self, items: Iterable[tuple[str, Leaf]], total_steps: int, *,
                     seed: int | None = None, options: dict[str, Any] | None = None) -> int:
        """Append one episode given as ``(path, array)`` pairs (see :func:`episode_leaves`)."""
        episode_id = self._next_id
        group = h5py.h5g.create(self._file.id, f"episode_{episode_id}".encode())
        _set_attr(group, "id", np.int64(episode_id))
        _set_attr(group, "total_steps", np.int64(total_steps))
        if seed is not None:
            _set_attr(group, "seed", np.uint64(seed) if seed >= 2**63 else np.int64(seed))
        if options:
            h5py.Group(group).attrs.update(_flatten_options(options, "options"))
        groups: dict[str, h5py.h5g.GroupID] = {"": group}
        written: dict[str, int] = {}
        for path, array in items:
            written[path] = self._put(groups, path, array)
        for path in written.keys() - self._offsets.keys():
            self._offsets[path] = [-1] * (episode_id - self._first_id)
        for path, offsets in self._offsets.items():
            offsets.append(written.get(path, -1))
        self._steps.append(total_steps)
        self._next_id += 1
        return episode_id

    def flush(self) -> None:
        """Push everything written so far to the operating system."""
        self._file.flush()

    def close(self) -> None:
        """Close the file and write the offset index beside it."""
        if not self._file.id.valid:
            return
        if self._first_id == 0:
            offset_index.seal(self._file, self._offsets, self._steps)
        self._file.close()
        if self._first_id == 0:
            offset_index.write(self._path, self._offsets, self._steps)
        else:
            (self._path.parent / layout.INDEX_FILE_NAME).unlink(missing_ok=True)

    def __enter__(self) -> EpisodeFileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, groups: dict[str, h5py.h5g.GroupID], path: str, leaf: Leaf) -> int:
        parent_path, _, name = path.rpartition("/")
        parent = _group(groups, parent_path)
        if path in self._images:
            frames = leaf if isinstance(leaf, JpegFrames) else encode(leaf)
            _put_frames(h5py.Group(parent), name, frames.frames)
            return -1
        # Frames encoded for a dataset that stores this leaf otherwise (appending a JPEG
        # recording to an exact one) are stored as decoded: they were recorded lossy.
        array = leaf if isinstance(leaf, np.ndarray) else (
            leaf.decode() if isinstance(leaf, JpegFrames) else leaf.stack())
        if array.dtype == object:
            h5py.Group(parent).create_dataset(name, data=array.astype(str).tolist(),
                                              dtype=h5py.string_dtype("utf-8"))
            return -1
        if path in self._compressed:
            # Chunked, so it has no byte offset: readers go through h5py, which decompresses.
            h5py.Group(parent).create_dataset(name, data=array, chunks=_row_chunks(array),
                                              compression=self._compressed[path])
            return -1
        array = np.ascontiguousarray(array)
        space_id = h5py.h5s.create_simple(array.shape) if array.shape else h5py.h5s.create(
            h5py.h5s.SCALAR)
        dataset = h5py.h5d.create(parent, name.encode(), _type_id(array.dtype), space_id)
        if array.size:
            dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, array)
        offset = dataset.get_offset()
        return -1 if offset is None else int(offset)



def _put_frames(parent: h5py.Group, name: str, frames: Sequence[np.ndarray]) -> None:
    """JPEG frames as Minari stores them: one row each, variable-length unless all alike."""
    lengths = {len(f) for f in frames}
    dtype = None if len(lengths) == 1 else h5py.vlen_dtype(np.uint8)
    parent.create_dataset(name, data=list(frames) if dtype else np.stack(frames), dtype=dtype)


def _row_chunks(array: np.ndarray) -> tuple[int, ...] | None:
    """Chunks of whole rows, about 1 MiB each (``None``: an empty array, stored unchunked)."""
    if not array.size:
        return None
    row_bytes = max(1, array[0].nbytes)
    return (max(1, min(len(array), 2**20 // row_bytes)), *array.shape[1:])


@functools.lru_cache(maxsize=64)
def _type_id(dtype: np.dtype) -> h5py.h5t.TypeID:
    return h5py.h5t.py_create(dtype, logical=True)


def _group(groups: dict[str, h5py.h5g.GroupID], path: str) -> h5py.h5g.GroupID:
    found = groups.get(path)
    if found is None:
        parent_path, _, name = path.rpartition("/")
        found = h5py.h5g.create(_group(groups, parent_path), name.encode())
        groups[path] = found
    return found


def _set_attr(target: h5py.h5g.GroupID, name: str, value: np.generic) -> None:
    attr = h5py.h5a.create(target, name.encode(), _type_id(value.dtype),
                           h5py.h5s.create(h5py.h5s.SCALAR))
    attr.write(np.asarray(value))


def episode_leaves(episode: MultiAgentEpisode) -> Iterable[tuple[str, np.ndarray | FrameRows]]:
    """Every HDF5 dataset of ``episode`` as ``(path inside episode group, array)``."""
    for agent in episode.possible_agents:
        yield from leaves(episode.observations[agent], f"observations/{agent}")
        yield from leaves(episode.actions[agent], f"actions/{agent}")
    yield "rewards", np.asarray(episode.team_rewards, dtype=np.float64)
    yield "terminations", np.asarray(episode.episode_terminations, dtype=bool)
    yield "truncations", np.asarray(episode.episode_truncations, dtype=bool)
    base = f"infos/{layout.INFOS_GROUP}"
    n = len(episode.possible_agents)
    yield f"{base}/{layout.AGENT_REWARDS}", _after_reset(episode.rewards, np.float64)
    yield f"{base}/{layout.AGENT_TERMINATIONS}", _after_reset(episode.terminations, bool)
    yield f"{base}/{layout.AGENT_TRUNCATIONS}", _after_reset(episode.truncations, bool)
    yield f"{base}/{layout.ACTIVE}", np.asarray(episode.active, dtype=bool)
    acted = np.zeros((episode.total_steps + 1, n), dtype=bool)
    acted[:-1] = episode.acted
    yield f"{base}/{layout.ACTED}", acted
    if isinstance(episode.state, FrameRows):
        yield STATE_PATH, episode.state
    elif episode.state is not None:
        yield STATE_PATH, np.asarray(episode.state)
    if episode.agent_infos:
        for agent, tree in episode.agent_infos.items():
            yield from leaves(tree, f"{base}/{layout.AGENT_INFOS}/{agent}")
    for name, array in episode.extras.items():
        yield f"{base}/{layout.EXTRAS}/{name}", np.asarray(array)


def _after_reset(array: np.ndarray, dtype: Any) -> np.ndarray:
    out = np.zeros((len(array) + 1, *np.shape(array)[1:]), dtype=dtype)
    out[1:] = array
    return out


def check_options(options: Any, where: str = "options") -> None:
    """Raise :class:`StepDataError` unless ``options`` can be stored as Minari stores them.

    Minari keeps reset options as (flattened) HDF5 attributes: nested dicts with string keys
    of numbers, booleans, strings, or lists/arrays of numbers. ``None``, lists of strings and
    arbitrary objects cannot be stored, and would make writing the dataset fail later.
    """
    if options is None:
        return
    if not isinstance(options, dict):
        raise StepDataError(f"reset {where} must be a dict, got {type(options).__name__}")
    for key, value in options.items():
        name = f"{where}[{key!r}]"
        if not isinstance(key, str) or not key or "/" in key:
            raise StepDataError(f"reset {name}: option keys must be non-empty strings without '/'")
        if isinstance(value, dict):
            check_options(value, name)
        elif not isinstance(value, (str, bytes)) and (
                value is None or np.asarray(value).dtype.kind not in "biufc"):
            raise StepDataError(
                f"reset {name} = {value!r} cannot be stored: Minari keeps reset options as HDF5 "
                "attributes (numbers, booleans, strings, lists of numbers, nested dicts)."
            )


def _flatten_options(options: dict[str, Any], prefix: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, dict):
            flat.update(_flatten_options(value, f"{prefix}/{key}"))
        else:
            flat[f"{prefix}/{key}"] = value
    return flat




def dataset_metadata(
    dataset_id: str,
    spec: MultiAgentSpec,
    *,
    total_episodes: int,
    total_steps: int,
    jpeg_encoding: bool,
    algorithm_name: str | None = None,
    author: str | Iterable[str] | None = None,
    author_email: str | Iterable[str] | None = None,
    code_permalink: str | None = None,
    description: str | None = None,
    requirements: list[str] | None = None,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``metadata.json`` of a dataset: Minari's keys plus ``marl_minari``."""
    metadata: dict[str, Any] = {
        "dataset_id": dataset_id,
        "total_episodes": total_episodes,
        "total_steps": total_steps,
        "data_format": "hdf5",
        "jpeg_encoding": jpeg_encoding,
        "observation_space": space_to_json(spec.observation_space),
        "action_space": space_to_json(spec.action_space),
        "minari_version": minari.__version__,
    }
    env_spec = spec.joint_env_spec()
    if env_spec is not None:
        metadata["env_spec"] = env_spec.to_json()
    optional: dict[str, Any] = {
        "algorithm_name": algorithm_name,
        "author": [author] if isinstance(author, str) else author,
        "author_email": [author_email] if isinstance(author_email, str) else author_email,
        "code_permalink": code_permalink,
        "description": description,
        "requirements": requirements,
        "ref_min_score": ref_min_score,
        "ref_max_score": ref_max_score,
    }
    for key, value in optional.items():
        if value is not None:
            metadata[key] = sorted(value) if key in ("author", "author_email") else value
    metadata.update(extra or {})
    metadata[layout.METADATA_KEY] = spec.to_metadata()
    return metadata


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
        **metadata: Minari metadata (``algorithm_name``, ``author``, ``author_email``,
            ``code_permalink``, ``description``, ``requirements``, ``ref_min_score``,
            ``ref_max_score``) and ``extra`` (more top-level keys).

    Returns:
        The dataset's folder.

    Raises:
        InvalidDatasetIdError: malformed id.
        DatasetExistsError: a dataset with this id exists.
        LockedError: another writer held the dataset's lock too long.
    """
    _check_new(dataset_id)
    lock_timeout()  # a bad setting is reported before the work, not after
    root = staging_root()
    remove_stale_staging(root)
    with staging_folder(root, "dataset") as work:
        data = work / "data"
        data.mkdir()
        steps = 0
        notes: list[dict[str, Any] | None] = []
        with EpisodeFileWriter(data / layout.MAIN_FILE_NAME, spec,
                               jpeg_encoding=jpeg_encoding) as writer:
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
            target = _check_new(dataset_id)
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
) -> Path:
    """Append ``episodes`` to an existing dataset, all or nothing.

    The data file is copied, appended to and swapped in; the append commits when the new
    ``metadata.json`` replaces the old one, so a crash at any moment leaves the dataset as it
    was or with every new episode. The dataset's lock is held throughout, so concurrent
    appenders take turns. Episode metadata carried by the episodes (journal records) is
    appended to ``episode_metadata``, which stays one entry (or ``null``) per episode.

    Raises:
        DatasetNotFoundError: no dataset with this id.
        IncompatibleSourcesError: the dataset's agents or spaces differ from ``spec``.
        LockedError: another writer held the dataset's lock too long.
    """
    from marl_minari.storage.reader import read_spec

    data = dataset_dir(dataset_id) / "data"
    root = staging_root()
    remove_stale_staging(root)
    with dataset_lock(dataset_id), staging_folder(root, "append") as work:
        if not (data / layout.METADATA_FILE_NAME).exists():
            raise DatasetNotFoundError(
                f"no dataset {dataset_id!r} at {data.parent} to add episodes to")
        metadata = json.loads((data / layout.METADATA_FILE_NAME).read_text())
        stored = read_spec(data)
        _check_same_spaces(stored, spec, dataset_id)
        committed = int(metadata["total_episodes"])
        scratch = work / layout.MAIN_FILE_NAME
        shutil.copyfile(data / layout.MAIN_FILE_NAME, scratch)
        _drop_uncommitted(scratch, committed)
        steps = 0
        notes: list[dict[str, Any] | None] = []
        with EpisodeFileWriter(scratch, stored, jpeg_encoding=bool(
                metadata.get("jpeg_encoding", True))) as writer:
            for episode in tqdm(episodes, desc=f"adding to {dataset_id}", unit="ep",
                                disable=not progress):
                writer.write(episode)
                steps += episode.total_steps
                notes.append(_note(episode))
            count = writer.total_episodes
        generation = uuid.uuid4().hex
        with h5py.File(scratch, "r+") as file:
            file.attrs[layout.GENERATION_KEY] = generation
        metadata[layout.GENERATION_KEY] = generation
        _extend_episode_metadata(metadata, committed, notes)
        if journal is not None:
            metadata.setdefault(layout.JOURNALS_KEY, {})[journal[0]] = journal[1]
        metadata.update(total_episodes=count, total_steps=metadata["total_steps"] + steps)
        kept = (p for p in data.iterdir() if p.is_file() and p.name not in (
            layout.MAIN_FILE_NAME, layout.METADATA_FILE_NAME, layout.INDEX_FILE_NAME))
        _write_metadata(work, metadata, _size_mb([scratch, *kept]))
        if fsync:
            sync_file(scratch)
            sync_file(work / layout.METADATA_FILE_NAME)
        (data / layout.INDEX_FILE_NAME).unlink(missing_ok=True)
        os.replace(scratch, data / layout.MAIN_FILE_NAME)
        # The commit point: until this rename, readers see the old episode count.
        os.replace(work / layout.METADATA_FILE_NAME, data / layout.METADATA_FILE_NAME)
        if fsync:
            sync_folder(data)
        _remember_digests(data.parent)
    return data.parent


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


def _drop_uncommitted(path: Path, committed: int) -> None:
    """Delete ``episode_k`` groups with ``k >= committed`` (left by an interrupted append)."""
    with h5py.File(path, "a") as file:
        for name in list(file):
            number = name.removeprefix("episode_")
            if number.isdigit() and int(number) >= committed:
                del file[name]


def _check_same_spaces(stored: MultiAgentSpec, new: MultiAgentSpec, dataset_id: str) -> None:
    from marl_minari.errors import IncompatibleSourcesError

    if stored.possible_agents != new.possible_agents:
        raise IncompatibleSourcesError(
            f"dataset {dataset_id!r} has agents {list(stored.possible_agents)}, the new episodes "
            f"{list(new.possible_agents)}"
        )
    for agent in stored.possible_agents:
        for kind, a, b in (("observation", stored.observation_spaces, new.observation_spaces),
                           ("action", stored.action_spaces, new.action_spaces)):
            if a[agent] != b[agent]:
                raise IncompatibleSourcesError(
                    f"dataset {dataset_id!r}: {kind} space of {agent!r} is {a[agent]}, the new "
                    f"episodes' is {b[agent]}"
                )


def _check_new(dataset_id: str) -> Path:
    parse_dataset_id(dataset_id)
    target = dataset_dir(dataset_id)
    if target.exists():
        raise DatasetExistsError(
            f"dataset {dataset_id!r} already exists at {target}; datasets are immutable: pick a "
            "new version (-vN+1) or delete it with minari.delete_dataset."
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


def _remember_digests(folder: Path) -> None:
    """Hash the new files while they are in the page cache, so publishing need not."""
    names = (layout.MAIN_FILE_NAME, layout.METADATA_FILE_NAME, layout.INDEX_FILE_NAME)
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

