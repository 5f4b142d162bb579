"""The one writer of the multi-agent layout into Minari's HDF5 files.

Episodes are appended to a ``main_data.hdf5`` with h5py's low-level API (contiguous datasets:
Minari's reader slices whole datasets, so ``chunks``/``maxshape`` buy nothing but size). The
byte offset of every contiguous dataset goes into a sidecar index for fast bulk reads.

Datasets are created in a hidden staging folder under the datasets root and moved into place
with one ``rename`` after the data and metadata are complete, so a crash never leaves a
half-written dataset where Minari looks for datasets.
"""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import minari
import numpy as np
from gymnasium import spaces
from minari.serialization import serialize_space
from tqdm.auto import tqdm

from marl_minari import layout, offset_index
from marl_minari.digests import remember_digests
from marl_minari.episode import MultiAgentEpisode
from marl_minari.errors import DatasetExistsError, DatasetNotFoundError, StepDataError
from marl_minari.ids import dataset_dir, datasets_root, parse_dataset_id
from marl_minari.spaces import is_image_space, leaf_spaces, leaves
from marl_minari.spec import MultiAgentSpec

_STAGING = ".marl_minari"


class LeafEpisode(NamedTuple):
    """An episode already flattened into HDF5 leaves (as a recording journal holds it)."""

    leaves: list[tuple[str, np.ndarray]]
    total_steps: int
    seed: int | None = None
    options: dict[str, Any] | None = None


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
        self._images = _image_paths(spec) if jpeg_encoding else frozenset()
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

    def write_leaves(self, items: Iterable[tuple[str, np.ndarray]], total_steps: int, *,
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

    def _put(self, groups: dict[str, h5py.h5g.GroupID], path: str, array: np.ndarray) -> int:
        parent_path, _, name = path.rpartition("/")
        parent = _group(groups, parent_path)
        if path in self._images or array.dtype == object:
            self._put_special(h5py.Group(parent), path, name, array)
            return -1
        array = np.ascontiguousarray(array)
        space_id = h5py.h5s.create_simple(array.shape) if array.shape else h5py.h5s.create(
            h5py.h5s.SCALAR)
        dataset = h5py.h5d.create(parent, name.encode(), _type_id(array.dtype), space_id)
        if array.size:
            dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, array)
        offset = dataset.get_offset()
        return -1 if offset is None else int(offset)

    def _put_special(self, parent: h5py.Group, path: str, name: str, array: np.ndarray) -> None:
        if path in self._images:
            frames = [_encode_jpeg(frame) for frame in array]
            lengths = {len(f) for f in frames}
            dtype = None if len(lengths) == 1 else h5py.vlen_dtype(np.uint8)
            parent.create_dataset(name, data=frames if dtype else np.stack(frames), dtype=dtype)
        else:
            parent.create_dataset(name, data=array.astype(str).tolist(),
                                  dtype=h5py.string_dtype("utf-8"))


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


def episode_leaves(episode: MultiAgentEpisode) -> Iterable[tuple[str, np.ndarray]]:
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
    if episode.state is not None:
        yield f"{base}/{layout.STATE}", np.asarray(episode.state)
    if episode.agent_infos:
        for agent, tree in episode.agent_infos.items():
            yield from leaves(tree, f"{base}/{layout.AGENT_INFOS}/{agent}")
    for name, array in episode.extras.items():
        yield f"{base}/{layout.EXTRAS}/{name}", np.asarray(array)


def _after_reset(array: np.ndarray, dtype: Any) -> np.ndarray:
    out = np.zeros((len(array) + 1, *np.shape(array)[1:]), dtype=dtype)
    out[1:] = array
    return out


def _image_paths(spec: MultiAgentSpec) -> frozenset[str]:
    paths = set()
    for field, by_agent in (("observations", spec.observation_spaces),
                            ("actions", spec.action_spaces)):
        for agent, space in by_agent.items():
            for path, leaf in leaf_spaces(space, f"{field}/{agent}"):
                if is_image_space(leaf):
                    paths.add(path)
    return frozenset(paths)


def _encode_jpeg(frame: np.ndarray) -> np.ndarray:
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(frame).save(buffer, format="JPEG")
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


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


def staging_root() -> Path:
    """Hidden folder under the datasets root for datasets being written and recordings.

    Minari skips hidden folders when listing datasets.
    """
    path = datasets_root() / _STAGING
    path.mkdir(parents=True, exist_ok=True)
    return path


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
        "observation_space": serialize_space(spec.observation_space),
        "action_space": serialize_space(spec.action_space),
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
        **metadata: Minari metadata (``algorithm_name``, ``author``, ``author_email``,
            ``code_permalink``, ``description``, ``requirements``, ``ref_min_score``,
            ``ref_max_score``) and ``extra`` (more top-level keys).

    Returns:
        The dataset's folder.

    Raises:
        InvalidDatasetIdError: malformed id.
        DatasetExistsError: a dataset with this id exists.
    """
    target = _check_new(dataset_id)
    work = staging_root() / f"dataset-{uuid.uuid4().hex}"
    data = work / "data"
    data.mkdir(parents=True)
    try:
        steps = 0
        with EpisodeFileWriter(data / layout.MAIN_FILE_NAME, spec,
                               jpeg_encoding=jpeg_encoding) as writer:
            label = progress if isinstance(progress, str) else f"writing {dataset_id}"
            for episode in tqdm(episodes, total=total, desc=label, unit="ep",
                                disable=not progress):
                writer.write(episode)
                steps += episode.total_steps
            count = writer.total_episodes
        meta = dataset_metadata(dataset_id, spec, total_episodes=count, total_steps=steps,
                                jpeg_encoding=jpeg_encoding, **metadata)
        _write_metadata(data, meta)
        _remember_digests(work)
        _move_into_place(work, target, dataset_id)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return target


def append_to_dataset(
    dataset_id: str,
    episodes: Iterable[AnyEpisode],
    spec: MultiAgentSpec,
    *,
    progress: bool = False,
    episode_metadata: list[dict[str, Any]] | None = None,
) -> Path:
    """Append ``episodes`` to an existing dataset, all or nothing.

    ``episode_metadata`` (one dict per new episode, from an episode-metadata callback) is
    appended to the dataset's ``episode_metadata`` list.

    The data file is copied, appended to and swapped in with ``rename`` after the metadata is
    ready, so a crash leaves the dataset as it was.

    Raises:
        DatasetNotFoundError: no dataset with this id.
        IncompatibleSourcesError: the dataset's agents or spaces differ from ``spec``.
    """
    from marl_minari.reader import read_spec

    target = dataset_dir(dataset_id)
    data = target / "data"
    if not (data / layout.METADATA_FILE_NAME).exists():
        raise DatasetNotFoundError(f"no dataset {dataset_id!r} at {target} to add episodes to")
    metadata = json.loads((data / layout.METADATA_FILE_NAME).read_text())
    stored = read_spec(data)
    _check_same_spaces(stored, spec, dataset_id)
    work = staging_root() / f"append-{uuid.uuid4().hex}"
    work.mkdir()
    try:
        scratch = work / layout.MAIN_FILE_NAME
        shutil.copyfile(data / layout.MAIN_FILE_NAME, scratch)
        steps = 0
        with EpisodeFileWriter(scratch, stored, jpeg_encoding=bool(
                metadata.get("jpeg_encoding", True))) as writer:
            for episode in tqdm(episodes, desc=f"adding to {dataset_id}", unit="ep",
                                disable=not progress):
                writer.write(episode)
                steps += episode.total_steps
            count = writer.total_episodes
        if episode_metadata:
            before = metadata.get("episode_metadata")
            if not isinstance(before, list):
                before = [None] * int(metadata["total_episodes"])
            metadata["episode_metadata"] = before + list(episode_metadata)
        metadata.update(total_episodes=count, total_steps=metadata["total_steps"] + steps)
        (data / layout.INDEX_FILE_NAME).unlink(missing_ok=True)
        os.replace(scratch, data / layout.MAIN_FILE_NAME)
        _write_metadata(data, metadata)
        _remember_digests(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


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


def _write_metadata(data: Path, metadata: dict[str, Any]) -> None:
    metadata["dataset_size"] = _size_mb(data)
    temporary = data / (layout.METADATA_FILE_NAME + ".tmp")
    temporary.write_text(json.dumps(metadata, default=_json_default))
    os.replace(temporary, data / layout.METADATA_FILE_NAME)


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return sorted(value) if isinstance(value, (set, frozenset)) else list(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, spaces.Space):
        return serialize_space(value)
    raise TypeError(f"metadata value of type {type(value).__name__} is not JSON serializable")


def _remember_digests(folder: Path) -> None:
    """Hash the new files while they are in the page cache, so publishing need not."""
    names = (layout.MAIN_FILE_NAME, layout.METADATA_FILE_NAME, layout.INDEX_FILE_NAME)
    remember_digests(folder, [f"data/{name}" for name in names
                              if (folder / "data" / name).is_file()])


def _size_mb(data: Path) -> float:
    return round(sum(p.stat().st_size for p in data.rglob("*") if p.is_file()) / 1e6, 1)


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

