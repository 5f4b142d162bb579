"""Episodes into one ``main_data.hdf5``: the only code that writes an episode's groups.

Episodes are appended with h5py's low-level API as contiguous datasets (Minari's reader
slices whole datasets, so ``chunks``/``maxshape`` buy nothing but size); the byte offset of
every contiguous dataset goes into the offset index (:mod:`marl_minari.format.offset_index`)
for fast bulk reads. Whole datasets, their staging and their commit are
:mod:`marl_minari.storage.writer`'s.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import h5py
import numpy as np

from marl_minari.errors import CorruptedDataError, IncompatibleSourcesError, StepDataError
from marl_minari.format import layout, offset_index
from marl_minari.format.jpeg import FrameRows, JpegFrames, encode, jpeg_paths
from marl_minari.format.spaces import leaves
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.episode import MultiAgentEpisode, conform
from marl_minari.storage.reader_state import spec_leaves

STATE_PATH = layout.STATE_PATH

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
        index: the offset index of the dataset being appended to; extended on close if it
            was written with this file (:func:`~marl_minari.format.offset_index.extendable`).
        first_id: the id of the first episode to write, where the caller knows how many the
            file holds (counting the groups of a large file walks all of them); by default
            the file's groups are counted.
        shown_as: how errors name the file (the dataset it becomes, where ``path`` is a
            staged copy); ``path`` by default.
    """

    def __init__(self, path: Path, spec: MultiAgentSpec, *, jpeg_encoding: bool = True,
                 index: offset_index.OffsetIndex | None = None,
                 first_id: int | None = None, shown_as: str | None = None) -> None:
        self._path = Path(path)
        self._shown_as = str(self._path) if shown_as is None else shown_as
        self._file = h5py.File(self._path, "a")
        if layout.AGENTS_ATTRIBUTE not in self._file.attrs:  # the column order, for readers
            self._file.attrs[layout.AGENTS_ATTRIBUTE] = json.dumps(list(spec.possible_agents))
        self._next_id = len(self._file) if first_id is None else first_id
        self._first_id = self._next_id
        self._spec = spec
        self._images = jpeg_paths(spec, jpeg_encoding)
        self._compressed = {STATE_PATH: spec.state_encoding} if spec.state_encoding in (
            "gzip", "lzf") else {}
        self._offsets: dict[str, list[int]] = {}
        # How readers read each path's entries as bytes: (dtype, row shape, rows past the
        # steps); the spec's leaves as the spec says, any other path as its first entry is
        # written. An entry stored otherwise is left out of the index (read through HDF5).
        self._read_as: dict[str, tuple[np.dtype, tuple[int, ...], int]] = {
            leaf.path: (leaf.dtype, leaf.row_shape, int(leaf.per_obs))
            for leaf in spec_leaves(spec, self._images) if not (leaf.jpeg or leaf.text)}
        self._steps: list[int] = []
        # The index of the episodes already in the file, extended on close; without one, an
        # append leaves no index (building it would read every stored episode).
        self._previous = offset_index.extendable(index, self._file, self._first_id)

    @property
    def total_episodes(self) -> int:
        """Episodes in the file, including those written by this writer."""
        return self._next_id

    def write(self, episode: AnyEpisode) -> int:
        """Append ``episode`` as ``episode_{id}`` and return its id (see
        :meth:`write_leaves`).

        A :class:`MultiAgentEpisode` is first checked against the spec and its observations,
        actions and state cast to their spaces' dtypes (:func:`conform`; a
        :class:`StepDataError` leaves the file as it was).
        """
        if isinstance(episode, LeafEpisode):
            return self.write_leaves(episode.leaves, episode.total_steps, seed=episode.seed,
                                     options=episode.options)
        seed = "" if episode.seed is None else f" (seed {episode.seed})"
        episode = conform(episode, self._spec, f"{self._shown_as}: episode {self._next_id}{seed}")
        return self.write_leaves(episode_leaves(episode), episode.total_steps,
                                 seed=episode.seed, options=episode.options)

    def write_leaves(self, items: Iterable[tuple[str, Leaf]], total_steps: int, *,
                     seed: int | None = None, options: dict[str, Any] | None = None) -> int:
        """Append one episode given as ``(path, array)`` pairs (see :func:`episode_leaves`).

        Raises:
            CorruptedDataError: the file already holds a group of this episode's id.
            IncompatibleSourcesError: the episode has a global state and the spec none, or
                the reverse (a dataset's episodes all have one or none has), or it was
                recorded through the other API than the spec's; the episode's
                group is left in the file, which its caller discards (files are staged).
        """
        episode_id = self._next_id
        name = f"episode_{episode_id}"
        if name in self._file:
            # The writer starts after the episodes the caller counted (an append: the
            # committed ones, an interrupted append's leftovers removed); one already there
            # means a damaged or edited file. The file is a staged copy, discarded with this.
            raise CorruptedDataError(
                f"{self._shown_as} already holds {name}, which the dataset's metadata.json does "
                "not count: the file was damaged or edited; restore the dataset from a copy")
        group = h5py.h5g.create(self._file.id, name.encode())
        _set_attr(group, "id", np.int64(episode_id))
        _set_attr(group, "total_steps", np.int64(total_steps))
        if seed is not None:
            _set_attr(group, "seed", np.uint64(seed) if seed >= 2**63 else np.int64(seed))
        if options:
            h5py.Group(group).attrs.update(_flatten_options(options, "options"))
        groups: dict[str, h5py.h5g.GroupID] = {"": group}
        written: dict[str, int] = {}
        for path, array in items:
            written[path] = self._put(groups, path, array, total_steps)
        has_state = STATE_PATH in written
        if has_state != (self._spec.state_space is not None):
            # the file is a staged copy: the error discards it, and the episode with it
            raise IncompatibleSourcesError(
                f"{self._shown_as}: episode {episode_id} (seed {seed}) "
                f"{'has a global state' if has_state else 'has no global state'} and the "
                f"dataset {'records none' if has_state else 'records one'}; a dataset's "
                "episodes all have one or none has (record_state= of the recorder, "
                "state_space of the spec)")
        turn_based = layout.AGENT_SELECTION_PATH in written
        if turn_based != (self._spec.api == "aec"):
            # the same rule as the conformance check's (storage/check.py): one API a dataset
            raise IncompatibleSourcesError(
                f"{self._shown_as}: episode {episode_id} (seed {seed}) was recorded through "
                f"the {'aec' if turn_based else 'parallel'!r} API and the dataset's api is "
                f"{self._spec.api!r}; a dataset's turn-based and simultaneous episodes are "
                "never mixed: write them as datasets of their own")
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
        indexed = self._first_id == 0 or self._previous is not None
        offsets: dict[str, list[int]] | dict[str, np.ndarray] = self._offsets
        steps: list[int] | np.ndarray = self._steps
        if self._previous is not None:
            offsets, steps = offset_index.joined(self._previous, self._offsets, self._steps)
        if indexed:
            offset_index.seal(self._file, offsets, steps)
        self._file.close()
        if indexed:
            # A new file is hashed (it was just written); an appended one is not, so that
            # the append's cost does not grow with the episodes already stored.
            offset_index.write(self._path, offsets, steps, hashed=self._first_id == 0)
        else:
            (self._path.parent / layout.INDEX_FILE_NAME).unlink(missing_ok=True)

    def __enter__(self) -> EpisodeFileWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, groups: dict[str, h5py.h5g.GroupID], path: str, leaf: Leaf,
             total_steps: int) -> int:
        """Store ``leaf`` at ``path`` of the episode; the offset to index (``-1``: none)."""
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
        return -1 if offset is None or not self._read_as_stored(path, array, total_steps) \
            else int(offset)

    def _read_as_stored(self, path: str, array: np.ndarray, total_steps: int) -> bool:
        """Whether a reader that trusts the whole index reads ``array`` (stored at ``path``)
        as it is stored: its dtype, row shape and rows are the spec's for the spec's leaves,
        the path's first indexed entry's for any other (``docs/format.md``: what a whole
        file must agree with before its index is trusted whole)."""
        stored = (array.dtype, array.shape[1:], array.shape[0] - total_steps if array.shape
                  else -1)
        return self._read_as.setdefault(path, (array.dtype, array.shape[1:], 1)) == stored



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
