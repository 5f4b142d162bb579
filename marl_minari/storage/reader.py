"""The one reader of the multi-agent layout: per-agent arrays, in bulk or per episode.

``to_arrays`` reads the HDF5 file directly: contiguous datasets are copied straight out of a
memory map at the offsets the writer indexed (checked against the file before use); datasets
without an index entry are read through h5py. Everything else in the library that needs
arrays (adapters, describe, exports) builds on this module.
"""

from __future__ import annotations

import io
import mmap
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from minari.dataset.minari_dataset import MinariDataset

from marl_minari.errors import (
    CorruptedDataError,
    DatasetNotFoundError,
    EpisodeIndexError,
    InvalidOptionError,
    LayoutError,
    hdf5_errors,
)
from marl_minari.format import layout, offset_index
from marl_minari.format.digests import stat_key
from marl_minari.format.ids import dataset_dir
from marl_minari.format.metadata import (
    metadata_count,
    metadata_space,
    open_minari_dataset,
    read_metadata,
)
from marl_minari.format.recovered_layout import with_recovered_layout
from marl_minari.format.spaces import (
    build_tree,
    is_image_space,
    leaf_dtype,
    leaf_shape,
    leaf_spaces,
    nest,
)
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.self_contained import check_dataset, check_links

_MARL = f"infos/{layout.INFOS_GROUP}"
_AGENT_INFOS = f"{_MARL}/{layout.AGENT_INFOS}"


def read_spec(data_path: Path) -> MultiAgentSpec:
    """The :class:`MultiAgentSpec` of the dataset whose ``data/`` folder is ``data_path``."""
    metadata = _read_metadata(Path(data_path))
    return MultiAgentSpec.from_metadata(
        metadata, metadata_space(metadata, "observation_space", Path(data_path)),
        metadata_space(metadata, "action_space", Path(data_path)))


def open_data_file(path: Path) -> h5py.File:
    """Open a dataset's ``main_data.hdf5`` for reading.

    Raises:
        DatasetNotFoundError: the file does not exist.
        CorruptedDataError: HDF5 cannot open it (truncated or overwritten).
    """
    if not path.exists():
        raise DatasetNotFoundError(f"no dataset file at {path}")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise CorruptedDataError(
            f"{path} is damaged and cannot be opened ({exc}); restore it from a copy or "
            "re-create the dataset (a recording's journal can be recovered with "
            "marl-minari recover)."
        ) from exc


def _read_metadata(data_path: Path) -> dict[str, Any]:
    """``metadata.json``, with the multi-agent key recovered for datasets plain Minari combined
    from ours (see :mod:`marl_minari.format.recovered_layout`)."""
    return with_recovered_layout(read_metadata(data_path), data_path)


def episode_attributes(h5_path: Path, episode_ids: Iterable[int]
                       ) -> list[tuple[int | None, dict[str, Any] | None]]:
    """``(seed, options)`` of each episode, read as Minari stores them.

    Uses HDF5's low-level attribute calls (about 10x faster than Minari's
    ``get_episode_metadata``): only episodes carrying more than ``id``, ``total_steps`` and
    ``seed`` are read attribute by attribute for their ``options/...``.
    """
    out: list[tuple[int | None, dict[str, Any] | None]] = []
    with open_data_file(Path(h5_path)) as file, hdf5_errors(Path(h5_path)):
        for episode_id in episode_ids:
            try:
                group = h5py.h5g.open(file.id, f"episode_{episode_id}".encode())
            except KeyError as exc:
                raise CorruptedDataError(f"{h5_path}: episode_{episode_id} is missing") from exc
            seed = None
            if h5py.h5a.exists(group, b"seed"):
                attribute = h5py.h5a.open(group, b"seed")
                value = np.empty((), dtype=attribute.dtype)
                attribute.read(value)
                seed = int(value)
            options = None
            if h5py.h5a.get_num_attrs(group) > 2 + (seed is not None):
                flat = {k[len("options/"):]: v for k, v in h5py.Group(group).attrs.items()
                        if k.startswith("options/")}
                options = nest(flat) if flat else None
            out.append((seed, options))
    return out


class MultiAgentDataset:
    """A multi-agent view over a :class:`minari.MinariDataset` in the marl-minari layout.

    Args:
        dataset: the Minari dataset (``minari.load_dataset(...)``).

    Raises:
        LayoutError: the dataset is not in the multi-agent layout.
    """

    def __init__(self, dataset: MinariDataset) -> None:
        self._minari = dataset
        self._data_path = Path(dataset.storage.data_path)
        # Read once: the metadata of image datasets holds megabytes of space bounds.
        self._metadata = _read_metadata(self._data_path)
        self._stored_episodes = metadata_count(self._metadata, "total_episodes",
                                               self._data_path)
        metadata_count(self._metadata, "total_steps", self._data_path)
        self._spec = MultiAgentSpec.from_metadata(self._metadata, dataset.observation_space,
                                                  dataset.action_space)
        from marl_minari.storage.check import cross_check

        h5_path = self._data_path / layout.MAIN_FILE_NAME
        with open_data_file(h5_path) as file, hdf5_errors(h5_path):
            cross_check(file, self._metadata, self._spec, h5_path)
        # A filtered or split Minari dataset sees only some of the stored episodes.
        self._ids = np.asarray(dataset.episode_indices, dtype=np.int64)
        # The offset index is read and checked once, not on every to_arrays() call.
        self._index_cache = _IndexCache()
        self._generator = np.random.default_rng()

    @property
    def minari(self) -> MinariDataset:
        """The underlying Minari dataset (everything Minari offers works on it)."""
        return self._minari

    @property
    def spec(self) -> MultiAgentSpec:
        """Agents, per-agent spaces and env descriptor."""
        return self._spec

    @property
    def possible_agents(self) -> tuple[str, ...]:
        """Agent names in the environment's order."""
        return self._spec.possible_agents

    @property
    def data_path(self) -> Path:
        """The dataset's ``data/`` folder."""
        return self._data_path

    @property
    def metadata(self) -> dict[str, Any]:
        """The raw ``metadata.json``."""
        return _read_metadata(self._data_path)

    @property
    def total_episodes(self) -> int:
        """Number of episodes."""
        return int(self._minari.total_episodes)

    @property
    def total_steps(self) -> int:
        """Number of environment steps over all episodes."""
        return int(self._minari.total_steps)

    @property
    def episode_indices(self) -> np.ndarray:
        """The stored episode ids this dataset holds, in order (Minari's name)."""
        return self._ids.copy()

    def __len__(self) -> int:
        return self.total_episodes

    def __repr__(self) -> str:
        return (f"MultiAgentDataset({self._metadata.get('dataset_id')!r}, "
                f"{self.total_episodes} episodes, {self.total_steps} steps, "
                f"{self._spec.api}, agents={list(self.possible_agents)})")

    def set_seed(self, seed: int) -> None:
        """Seed :meth:`sample_episodes` (as ``MinariDataset.set_seed``)."""
        self._generator = np.random.default_rng(seed)

    def sample_episodes(self, n_episodes: int) -> list[MultiAgentEpisode]:
        """``n_episodes`` distinct episodes drawn at random (as Minari's ``sample_episodes``).

        Raises:
            InvalidOptionError: more than the dataset holds.
        """
        from marl_minari.storage.selection import sample_ids

        return list(self.iterate_episodes(sample_ids(self, n_episodes, self._generator)))

    def filter_episodes(self, condition: Callable[[MultiAgentEpisode], bool]
                        ) -> MultiAgentDataset:
        """The dataset of the episodes for which ``condition(episode)`` is true (as Minari's
        ``filter_episodes``, called on each :class:`MultiAgentEpisode`)."""
        from marl_minari.storage.selection import filter_ids, subset

        return subset(self, filter_ids(self, condition))

    def __getitem__(self, index: int) -> MultiAgentEpisode:
        return self.episode(index)

    def __iter__(self) -> Iterator[MultiAgentEpisode]:
        return self.iterate_episodes()

    def episode(self, index: int, *, with_seed: bool = True) -> MultiAgentEpisode:
        """The ``index``-th episode of this dataset with per-agent arrays, seed and options.

        As ``MinariDataset[index]``: of a filtered or split dataset, the ``index``-th episode
        it holds (its ``id`` is the stored episode's).
        """
        if not 0 <= index < self.total_episodes:
            raise EpisodeIndexError(
                f"episode {index} out of range (0..{self.total_episodes - 1})")
        episode_id = int(self._ids[index])
        episode = self.to_arrays([episode_id]).episode(0)
        if not with_seed:
            return episode
        seed, options = self._seed_and_options(episode_id)
        return _replace(episode, seed=seed, options=options)

    def iterate_episodes(self, episode_indices: Iterable[int] | None = None,
                         *, batch_size: int = 256) -> Iterator[MultiAgentEpisode]:
        """Yield episodes in order, reading ``batch_size`` episodes at a time.

        ``episode_indices`` are stored episode ids, as for ``MinariDataset.iterate_episodes``;
        by default every episode of this dataset.
        """
        indices = [int(i) for i in (self._ids if episode_indices is None else episode_indices)]
        for start in range(0, len(indices), batch_size):
            chunk = indices[start:start + batch_size]
            arrays = self.to_arrays(chunk)
            for position, (seed, options) in enumerate(self.episode_attributes(chunk)):
                yield _replace(arrays.episode(position), seed=seed, options=options)

    def to_arrays(self, episode_indices: Sequence[int] | None = None) -> MultiAgentArrays:
        """Read episodes (stored ids; every episode of this dataset by default) into arrays."""
        indices = self._ids if episode_indices is None else np.asarray(
            episode_indices, dtype=np.int64)
        if indices.size and (indices.min() < 0 or indices.max() >= self._stored_episodes):
            raise EpisodeIndexError(
                f"episode ids must lie in 0..{self._stored_episodes - 1}, got "
                f"{sorted(set(indices.tolist()))[:5]}")
        with hdf5_errors(self._data_path / layout.MAIN_FILE_NAME), _EpisodeReader(
                self._data_path, self._spec, self._metadata, self._index_cache) as reader:
            return reader.read(indices)

    def episode_seeds(self) -> list[int | None]:
        """The reset seed of every episode (``None`` where none was given)."""
        return [seed for seed, _ in self.episode_attributes()]

    def episode_attributes(self, episode_indices: Iterable[int] | None = None
                           ) -> list[tuple[int | None, dict[str, Any] | None]]:
        """``(seed, options)`` of episodes (stored ids; all episodes by default)."""
        ids = self._ids.tolist() if episode_indices is None else list(episode_indices)
        return episode_attributes(self._data_path / layout.MAIN_FILE_NAME, ids)

    def recover_environment(self, api: str | None = None, *, trust_remote_code: bool = False,
                            **overrides: Any) -> Any:
        """Re-create the PettingZoo environment the data was recorded from.

        Only environments of trusted packages are made (see
        :func:`marl_minari.trusted_env_packages`) unless ``trust_remote_code`` is true.

        Raises:
            EnvDescriptorError: the dataset does not say how to make its environment, or names
                one outside the trusted packages.
        """
        from marl_minari.errors import EnvDescriptorError

        if self._spec.env is None:
            raise EnvDescriptorError("this dataset records no environment descriptor")
        return self._spec.env.make(api, trust_remote_code=trust_remote_code,  # type: ignore[arg-type]
                                   **overrides)

    def _seed_and_options(self, index: int) -> tuple[int | None, dict[str, Any] | None]:
        return self.episode_attributes([index])[0]


def load_dataset(dataset_id: str | MinariDataset, download: bool = False) -> MultiAgentDataset:
    """Load a multi-agent dataset by id (as ``minari.load_dataset`` does) or wrap a loaded one.

    Raises:
        InvalidDatasetIdError: malformed id.
        DatasetNotFoundError: no such local dataset (and ``download`` is off).
        LayoutError: the dataset is not in the multi-agent layout.
    """
    if isinstance(dataset_id, MinariDataset):
        return MultiAgentDataset(dataset_id)
    # What minari.load_dataset does, under this package's datasets root.
    return MultiAgentDataset(open_minari_dataset(dataset_id, download=download))


def open_written(dataset_id: str, spec: MultiAgentSpec, *,
                 jpeg_encoding: bool) -> MultiAgentDataset:
    """The dataset just written from ``spec``, opened without parsing its spaces back.

    ``minari.load_dataset`` re-reads the element-wise Box bounds of every agent from
    ``metadata.json`` (seconds for image envs); the writer knows the spaces already.
    """
    from minari.dataset._storages import get_minari_storage

    data = dataset_dir(dataset_id) / "data"
    storage = get_minari_storage("hdf5")(data, spec.observation_space, spec.action_space,
                                         jpeg_encoding=jpeg_encoding)
    return MultiAgentDataset(MinariDataset(storage))


def _replace(episode: MultiAgentEpisode, **changes: Any) -> MultiAgentEpisode:
    from dataclasses import replace

    return replace(episode, **changes)


@dataclass(frozen=True)
class _Leaf:
    path: str
    dtype: np.dtype
    row_shape: tuple[int, ...]
    per_obs: bool
    jpeg: bool = False
    text: bool = False


@dataclass
class _IndexCache:
    """The last checked offset index and the identity of the files it was checked on."""

    key: tuple[Any, ...] | None = None
    index: offset_index.OffsetIndex | None = None


def _files_key(data_path: Path) -> tuple[Any, ...]:
    key: list[Any] = []
    for name in (layout.MAIN_FILE_NAME, layout.INDEX_FILE_NAME):
        try:
            key.append(stat_key((data_path / name).stat()))
        except FileNotFoundError:
            key.append(None)
    return tuple(key)


class _EpisodeReader:
    """Reads leaves of many episodes out of one ``main_data.hdf5``."""

    def __init__(self, data_path: Path, spec: MultiAgentSpec, metadata: dict[str, Any],
                 cache: _IndexCache | None = None) -> None:
        self._path = data_path / layout.MAIN_FILE_NAME
        self._file = open_data_file(self._path)
        self._spec = spec
        self._jpeg = bool(metadata.get("jpeg_encoding", True))
        cache = cache or _IndexCache()
        key = _files_key(data_path)
        if cache.key != key:
            cache.index = offset_index.load(data_path, self._file,
                                            int(metadata["total_episodes"]),
                                            int(metadata["total_steps"]))
            cache.key = key
        self._index = cache.index
        self._map: np.ndarray | None = None
        self._mmap: mmap.mmap | None = None

    def __enter__(self) -> _EpisodeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()
        self._map = None

    def read(self, indices: np.ndarray) -> MultiAgentArrays:
        lengths = np.asarray([self._steps(int(i)) for i in indices], dtype=np.int64)
        if len(indices) == 0:
            raise InvalidOptionError("to_arrays needs at least one episode index")
        by_path = {leaf.path: self._read_leaf(leaf, indices, lengths)
                   for leaf in self._leaves(indices)}
        return self._assemble(by_path, indices, lengths)

    def _steps(self, index: int) -> int:
        if self._index is not None:
            return int(self._index.steps[index])
        try:
            return int(self._file[f"episode_{index}"].attrs["total_steps"])
        except KeyError as exc:
            raise CorruptedDataError(
                f"{self._path}: episode_{index} is missing or lacks total_steps") from exc

    def _leaves(self, indices: np.ndarray) -> list[_Leaf]:
        first = int(indices[0])
        spec = self._spec
        found: list[_Leaf] = []
        for field_name, by_agent, per_obs in (("observations", spec.observation_spaces, True),
                                              ("actions", spec.action_spaces, False)):
            for agent in spec.possible_agents:
                for path, space in leaf_spaces(by_agent[agent], f"{field_name}/{agent}"):
                    found.append(_Leaf(path, leaf_dtype(space), leaf_shape(space), per_obs,
                                       jpeg=self._jpeg and is_image_space(space),
                                       text=leaf_dtype(space).kind == "O"))
        for name in ("rewards", "terminations", "truncations"):
            found.append(_Leaf(name, np.dtype(np.float64 if name == "rewards" else bool), (),
                               False))
        group = self._file.get(f"episode_{first}/{_MARL}")
        if not isinstance(group, h5py.Group):
            raise LayoutError(f"{self._path}: episode_{first} has no {_MARL} group")

        def visitor(prefix: str) -> Any:
            def visit(name: str, obj: Any) -> None:
                if name == layout.STATE and spec.state_encoding == "jpeg" and (
                        spec.state_space is not None):
                    found.append(_Leaf(f"{prefix}/{name}", np.dtype(np.uint8),
                                       leaf_shape(spec.state_space), True, jpeg=True))
                elif isinstance(obj, h5py.Dataset):
                    text = h5py.check_string_dtype(obj.dtype) is not None
                    found.append(_Leaf(f"{prefix}/{name}", np.dtype(object) if text
                                       else obj.dtype, obj.shape[1:], True, text=text))
            return visit

        check_links(group, self._path)
        group.visititems(visitor(_MARL))
        first_infos = group.get(layout.AGENT_INFOS)
        seen = set(first_infos) if isinstance(first_infos, h5py.Group) else set()
        for agent, index in self._late_info_agents(indices, seen).items():
            self._file[f"episode_{index}/{_AGENT_INFOS}/{agent}"].visititems(
                visitor(f"{_AGENT_INFOS}/{agent}"))
        return found

    def _late_info_agents(self, indices: np.ndarray, seen: set[str]) -> dict[str, int]:
        """Agents with info columns in some requested episode but not the first one.

        An agent that hands out no info in the first episodes of a recording (it joined
        later) has no info datasets there; ``{agent: an episode that has them}``.
        """
        late: dict[str, int] = {}
        if self._index is not None:
            prefix = _AGENT_INFOS + "/"
            for path, offsets in self._index.offsets.items():
                agent = path[len(prefix):].split("/")[0] if path.startswith(prefix) else None
                if agent is None or agent in seen or agent in late:
                    continue
                having = np.flatnonzero(offsets[indices] >= 0)
                if having.size:
                    late[agent] = int(indices[having[0]])
            candidates = {p[len(prefix):].split("/")[0] for p in self._index.offsets
                          if p.startswith(prefix)} - seen - set(late)
            if not candidates:  # only text leaves left to look for (not indexed)
                return late
        else:
            candidates = None
        for index in indices[1:].tolist():
            group = self._file.get(f"episode_{index}/{_AGENT_INFOS}")
            if isinstance(group, h5py.Group):
                for agent in group:
                    if agent not in seen and agent not in late and (
                            candidates is None or agent in candidates):
                        late[agent] = index
        return late

    def _read_leaf(self, leaf: _Leaf, indices: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        rows = lengths + 1 if leaf.per_obs else lengths
        out = np.empty((int(rows.sum()), *leaf.row_shape), dtype=leaf.dtype)
        offsets = None if self._index is None else self._index.offsets.get(leaf.path)
        row_bytes = out.itemsize * int(np.prod(leaf.row_shape, dtype=np.int64))
        if offsets is not None and not leaf.jpeg and not leaf.text and out.size:
            starts = offsets[indices]
            mapped = self._mapped()
            ends = starts + rows * row_bytes
            if bool((starts >= 0).all()) and bool((ends <= len(mapped)).all()):
                np.concatenate([mapped[a:b] for a, b in zip(starts.tolist(), ends.tolist(),
                                                            strict=True)],
                               out=out.reshape(-1).view(np.uint8))
                return out
        start = 0
        for index, count in zip(indices.tolist(), rows.tolist(), strict=True):
            self._read_h5(leaf, index, out[start:start + count])
            start += count
        return out

    def _mapped(self) -> np.ndarray:
        if self._map is None:
            with open(self._path, "rb") as handle:
                self._mmap = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            self._map = np.frombuffer(self._mmap, dtype=np.uint8)
        return self._map

    def _read_h5(self, leaf: _Leaf, index: int, target: np.ndarray) -> None:
        dataset = self._file.get(f"episode_{index}/{leaf.path}")
        if not isinstance(dataset, h5py.Dataset) and self._agent_had_no_infos(leaf, index):
            target[...] = "" if leaf.text else 0  # fill values, as for an absent agent
            return
        if not isinstance(dataset, h5py.Dataset):
            raise CorruptedDataError(f"{self._path}: episode_{index} lacks dataset {leaf.path}")
        check_dataset(dataset.id, self._file.id, self._path, f"episode_{index}/{leaf.path}")
        if leaf.jpeg:
            from PIL import Image

            for row, encoded in enumerate(dataset[()]):
                target[row] = np.asarray(Image.open(io.BytesIO(encoded.tobytes())))
        elif leaf.text:
            target[...] = np.asarray(dataset.asstr()[()], dtype=object)
        elif dataset.shape != target.shape:
            raise CorruptedDataError(
                f"{self._path}: episode_{index}/{leaf.path} has shape {dataset.shape}, "
                f"expected {target.shape}")
        elif target.size:
            dataset.read_direct(target)

    def _agent_had_no_infos(self, leaf: _Leaf, index: int) -> bool:
        prefix = _AGENT_INFOS + "/"
        if not leaf.path.startswith(prefix):
            return False
        agent = leaf.path[len(prefix):].split("/")[0]
        return f"episode_{index}/{_AGENT_INFOS}/{agent}" not in self._file

    def _assemble(self, by_path: dict[str, np.ndarray], indices: np.ndarray,
                  lengths: np.ndarray) -> MultiAgentArrays:
        spec = self._spec
        agents = spec.possible_agents
        first_rows = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
        after_reset = np.ones(int((lengths + 1).sum()), dtype=bool)
        after_reset[first_rows] = False
        before_end = np.ones_like(after_reset)
        before_end[first_rows + lengths] = False

        def marl(name: str) -> np.ndarray:
            return by_path[f"{_MARL}/{name}"]

        def subtree(prefix: str) -> dict[str, np.ndarray]:
            return {p[len(prefix) + 1:]: v for p, v in by_path.items()
                    if p.startswith(prefix + "/")}

        infos_root = f"{_MARL}/{layout.AGENT_INFOS}"
        agent_infos = {a: nest(subtree(f"{infos_root}/{a}")) for a in agents
                       if any(p.startswith(f"{infos_root}/{a}/") for p in by_path)}
        return MultiAgentArrays(
            possible_agents=agents,
            episode_ids=indices.astype(np.int64),
            episode_lengths=lengths,
            observations={a: build_tree(spec.observation_spaces[a],
                                        subtree(f"observations/{a}")) if _is_nested(
                spec.observation_spaces[a]) else by_path[f"observations/{a}"] for a in agents},
            actions={a: build_tree(spec.action_spaces[a], subtree(f"actions/{a}")) if _is_nested(
                spec.action_spaces[a]) else by_path[f"actions/{a}"] for a in agents},
            rewards=marl(layout.AGENT_REWARDS)[after_reset],
            terminations=marl(layout.AGENT_TERMINATIONS)[after_reset],
            truncations=marl(layout.AGENT_TRUNCATIONS)[after_reset],
            active=marl(layout.ACTIVE),
            acted=marl(layout.ACTED)[before_end],
            team_rewards=by_path["rewards"],
            episode_terminations=by_path["terminations"],
            episode_truncations=by_path["truncations"],
            state=by_path.get(f"{_MARL}/{layout.STATE}"),
            agent_infos=agent_infos or None,
            extras=subtree(f"{_MARL}/{layout.EXTRAS}"),
        )


def _is_nested(space: Any) -> bool:
    from gymnasium import spaces

    return isinstance(space, (spaces.Dict, spaces.Tuple))


