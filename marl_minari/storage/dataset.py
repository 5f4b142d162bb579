"""``MultiAgentDataset``: a multi-agent dataset on disk, with Minari's names and semantics.

A :class:`MultiAgentDataset` is a view over a ``minari.MinariDataset`` in the layout of
``docs/format.md``: per-agent episodes (``dataset[i]``, ``iterate_episodes``), bulk arrays
(``to_arrays``), and Minari's selection API (``sample_episodes``, ``filter_episodes``,
:func:`split_dataset`) on multi-agent episodes. A selection is a dataset over some stored
episodes (its ``episode_indices``), reading the same files. Opening a dataset by whatever a
user names is :func:`marl_minari.load_dataset`'s job (the one door, :mod:`marl_minari.sources`);
this module opens a ``data/`` folder it is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from minari.dataset.minari_dataset import MinariDataset

from marl_minari.envs.make import check_recreated, recreate_env
from marl_minari.errors import (
    CorruptedDataError,
    EnvDescriptorError,
    InvalidOptionError,
    MarlMinariError,
)
from marl_minari.format import layout
from marl_minari.format.env_descriptor import Api, EnvDescriptor
from marl_minari.format.metadata import (
    eval_env_descriptor,
    metadata_count,
    metadata_space,
    read_metadata,
)
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.minari_compat import storage_class
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.datafile import (
    cross_check,
    episode_attributes,
    episode_steps,
    hdf5_errors,
    open_data_file,
)
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.episode_ids import episode_count, episode_ids, episode_position
from marl_minari.storage.episode_reader import EpisodeReader
from marl_minari.storage.reader_state import IndexCache, ReadScratch, cached_steps


class MultiAgentDataset:
    """A multi-agent view over a :class:`minari.MinariDataset` in the marl-minari layout.

    Args:
        dataset: the Minari dataset (``minari.load_dataset(...)``), possibly a filtered or
            split one (only its ``episode_indices`` are seen).

    Raises:
        LayoutError: the dataset is not in the multi-agent layout.
        CorruptedDataError: its metadata and file disagree.
    """

    def __init__(self, dataset: MinariDataset) -> None:
        self._minari = dataset
        self._data_path = Path(dataset.storage.data_path)
        # Read once: the metadata of image datasets holds megabytes of space bounds.
        self._metadata = read_metadata(self._data_path)
        self._stored_episodes = metadata_count(self._metadata, "total_episodes",
                                               self._data_path)
        metadata_count(self._metadata, "total_steps", self._data_path)
        self._spec = MultiAgentSpec.from_metadata(self._metadata, dataset.observation_space,
                                                  dataset.action_space)
        h5_path = self._data_path / layout.MAIN_FILE_NAME
        with open_data_file(h5_path) as file, hdf5_errors(h5_path):
            cross_check(file, self._metadata, self._spec, h5_path)
        self._ids = np.asarray(dataset.episode_indices, dtype=np.int64)
        # The offset index is read and checked once, not on every to_arrays() call.
        self._index_cache = IndexCache()
        self._generator = np.random.default_rng()

    @property
    def minari(self) -> MinariDataset:
        """The underlying Minari dataset (everything Minari offers works on it)."""
        return self._minari

    @property
    def spec(self) -> MultiAgentSpec:
        """Agents, per-agent spaces and env descriptor."""
        return self._spec

    # What a MinariDataset answers, with its names and meaning.

    @property
    def id(self) -> str:
        """The dataset id (``MinariDataset.id``)."""
        return str(self._minari.id)

    @property
    def observation_space(self) -> spaces.Space:
        """The joint observation space, ``Dict({agent: space})`` (``MinariDataset``'s)."""
        return self._minari.observation_space

    @property
    def action_space(self) -> spaces.Space:
        """The joint action space, ``Dict({agent: space})`` (``MinariDataset``'s)."""
        return self._minari.action_space

    @property
    def env_spec(self) -> Any:
        """Gymnasium ``EnvSpec`` of the joint view of the recorded env (``MinariDataset``'s;
        ``gymnasium.make`` of it gives :class:`marl_minari.envs.joint.JointEnv`)."""
        return self._minari.env_spec

    @property
    def storage(self) -> Any:
        """Minari's storage of the dataset's files (``MinariDataset.storage``)."""
        return self._minari.storage

    @property
    def minari_version(self) -> str:
        """The Minari version the dataset was written for (``MinariDataset``'s)."""
        return str(self._minari.minari_version)

    @property
    def combined_datasets(self) -> list[str]:
        """Ids of the datasets this one was combined from (``MinariDataset``'s)."""
        return list(self._minari.combined_datasets)

    def include_new_episodes(self, first_id: int) -> None:
        """Take in episodes appended to the files since this object was opened: the stored
        ids from ``first_id`` on join :attr:`episode_indices` (as Minari's
        ``add_to_dataset`` extends the dataset it is given).

        Raises:
            CorruptedDataError: the files no longer agree with their metadata.
        """
        self._metadata = read_metadata(self._data_path)
        stored = metadata_count(self._metadata, "total_episodes", self._data_path)
        added = np.arange(int(first_id), stored, dtype=np.int64)
        self._stored_episodes = stored
        self._ids = np.append(self._ids, added)
        self._minari.episode_indices = np.append(self._minari.episode_indices, added)
        self._index_cache = IndexCache()

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
        """The dataset's ``metadata.json`` (read again: it changes when episodes are added)."""
        return read_metadata(self._data_path)

    @property
    def checked_metadata(self) -> dict[str, Any]:
        """The ``metadata.json`` this object read and cross-checked with the data file when it
        was opened (or when it last took in appended episodes): the one its reads go by.
        Not to be modified."""
        return self._metadata

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

    # ------------------------------------------------------------------ episodes

    def __getitem__(self, index: int) -> MultiAgentEpisode:
        return self.episode(index)

    def __iter__(self) -> Iterator[MultiAgentEpisode]:
        return self.iterate_episodes()

    def episode(self, index: int, *, with_seed: bool = True) -> MultiAgentEpisode:
        """The ``index``-th episode of this dataset with per-agent arrays, seed and options.

        As ``MinariDataset[index]``: of a filtered or split dataset, the ``index``-th episode
        it holds (its ``id`` is the stored episode's); a negative index counts from the end.

        Raises:
            EpisodeIndexError: ``index`` is outside ``-len(dataset)..len(dataset) - 1``.
            InvalidOptionError: ``index`` is not an integer.
        """
        episode_id = int(self._ids[episode_position(index, self.total_episodes)])
        episode = self.to_arrays([episode_id]).episode(0)
        if not with_seed:
            return episode
        seed, options = self.episode_attributes([episode_id])[0]
        return replace(episode, seed=seed, options=options)

    def iterate_episodes(self, episode_indices: Iterable[int] | None = None,
                         *, batch_size: int = 256) -> Iterator[MultiAgentEpisode]:
        """Yield episodes in order, reading ``batch_size`` episodes at a time.

        ``episode_indices`` are stored episode ids, as for ``MinariDataset.iterate_episodes``;
        by default every episode of this dataset.
        """
        indices = self._checked_ids(episode_indices).tolist()
        for start in range(0, len(indices), batch_size):
            chunk = indices[start:start + batch_size]
            arrays = self.to_arrays(chunk)
            for position, (seed, options) in enumerate(self.episode_attributes(chunk)):
                yield replace(arrays.episode(position), seed=seed, options=options)

    def to_arrays(self, episode_indices: Sequence[int] | None = None) -> MultiAgentArrays:
        """Read episodes (stored ids; every episode of this dataset by default) into arrays.

        Raises:
            EpisodeIndexError: an id outside the stored episodes.
        """
        indices = self._checked_ids(episode_indices)
        with EpisodeReader(self._data_path, self._spec, self._metadata,
                           self._index_cache) as reader:
            return reader.read(indices)

    def episode_steps(self, episode_indices: Sequence[int] | np.ndarray | None = None
                      ) -> np.ndarray:
        """``(E,)`` steps of episodes (stored ids; every episode of this dataset by default):
        from the offset index this dataset's reads checked and kept, while the files are the
        ones it was checked on, else read from the file.

        Raises:
            EpisodeIndexError: an id outside the stored episodes.
        """
        indices = self._checked_ids(episode_indices)
        kept = cached_steps(self._data_path, self._index_cache, indices)
        return kept if kept is not None else episode_steps(self._data_path, self._metadata,
                                                           indices)

    def arrays_in_batches(self, batches: Iterable[Sequence[int] | np.ndarray], *,
                          observations: bool = True, reuse_arrays: bool = False,
                          scratch: ReadScratch | None = None) -> Iterator[MultiAgentArrays]:
        """``to_arrays(batch)`` for every batch of stored ids, in order, with the data file
        opened once for all of them (what a pass in chunks reads: a chunk then costs its
        bytes, not a file open and its leaves found again). ``observations=False`` leaves
        the observations unread (every agent's tree is ``{}``). ``reuse_arrays`` reads every
        batch into the memory of the one before (:class:`~marl_minari.storage.episode_reader.
        ReadScratch`): each batch's arrays are valid only until the next one is asked for.
        ``scratch`` is that memory, given by the caller (with its own arrays for leaves it
        keeps as stored); it implies ``reuse_arrays``.

        Raises:
            EpisodeIndexError: an id outside the stored episodes.
        """
        reader: EpisodeReader | None = None
        if scratch is None and reuse_arrays:
            scratch = ReadScratch()
        try:
            for batch in batches:
                if reader is None:
                    reader = EpisodeReader(self._data_path, self._spec, self._metadata,
                                           self._index_cache)
                yield reader.read(self._checked_ids(batch), observations=observations,
                                  scratch=scratch)
                if not reader.indexed:
                    # Read through HDF5, whose open file grows in memory with every episode
                    # visited (about 5 KB each): a new file per batch keeps a pass bounded.
                    reader.close()
                    reader = None
        finally:
            if reader is not None:
                reader.close()

    def _checked_ids(self, episode_indices: Iterable[int] | np.ndarray | None) -> np.ndarray:
        return self._ids if episode_indices is None else episode_ids(episode_indices,
                                                                     self._stored_episodes)

    def episode_seeds(self) -> list[int | None]:
        """The reset seed of every episode (``None`` where none was given)."""
        return [seed for seed, _ in self.episode_attributes()]

    def episode_attributes(self, episode_indices: Iterable[int] | None = None
                           ) -> list[tuple[int | None, dict[str, Any] | None]]:
        """``(seed, options)`` of episodes (stored ids; all episodes by default)."""
        ids = self._checked_ids(episode_indices).tolist()
        return episode_attributes(self._data_path / layout.MAIN_FILE_NAME, ids)

    # ------------------------------------------------------------------ selection

    def set_seed(self, seed: int) -> None:
        """Seed :meth:`sample_episodes` (as ``MinariDataset.set_seed``)."""
        self._generator = np.random.default_rng(seed)

    def sample_episodes(self, n_episodes: int) -> list[MultiAgentEpisode]:
        """``n_episodes`` distinct episodes drawn at random (as Minari's ``sample_episodes``).

        Raises:
            InvalidOptionError: more than the dataset holds.
        """
        if episode_count(n_episodes, "sample_episodes' n_episodes") > self.total_episodes:
            raise InvalidOptionError(
                f"cannot sample {n_episodes} episodes from a dataset of {self.total_episodes}; "
                "ask for at most that many")
        ids = self._generator.choice(self._ids, size=n_episodes, replace=False)
        return list(self.iterate_episodes(np.asarray(ids, dtype=np.int64)))

    def filter_episodes(self, condition: Callable[[MultiAgentEpisode], bool]
                        ) -> MultiAgentDataset:
        """The dataset of the episodes for which ``condition(episode)`` is true (as Minari's
        ``filter_episodes``, called on each :class:`MultiAgentEpisode`)."""
        kept = [episode.id for episode in self.iterate_episodes() if condition(episode)]
        return self.subset(np.asarray(kept, dtype=np.int64))

    def subset(self, episode_ids: Sequence[int] | np.ndarray) -> MultiAgentDataset:
        """The dataset over the stored episodes ``episode_ids`` of the same files."""
        return MultiAgentDataset(MinariDataset(
            self._minari.storage, episode_indices=np.asarray(episode_ids, np.int64)))

    # ------------------------------------------------------------------ environment

    def recover_environment(self, eval_env: bool = False, api: Api | None = None, *,
                            trust_remote_code: bool = False, **overrides: Any) -> Any:
        """Re-create the PettingZoo environment the data was recorded from.

        Args:
            eval_env: as Minari's: the env given as ``eval_env`` when the dataset was
                created (its ``eval_env_spec``), or the recorded env when none was given.
            api: ``"parallel"`` or ``"aec"``; by default the recorded one.
            trust_remote_code: make an env of a package outside the trusted ones (see
                :func:`marl_minari.trusted_env_packages`); only for authors you trust.
            overrides: constructor arguments replacing the recorded ones.

        Raises:
            EnvDescriptorError: the dataset does not say how to make its environment, names
                one outside the trusted packages, or the env made has other agents or spaces
                than the data (recorded from an env made with other arguments).
            InvalidOptionError: ``eval_env`` is not a bool (e.g. an API name passed first).
        """
        if not isinstance(eval_env, (bool, np.bool_)):
            raise InvalidOptionError(
                f"recover_environment's first argument is eval_env (a bool, as Minari's), got "
                f"{eval_env!r}; pass the PettingZoo API as api={eval_env!r}")
        descriptor = self._eval_descriptor() if eval_env else None
        descriptor = descriptor or self._spec.env
        if descriptor is None:
            raise EnvDescriptorError(
                f"dataset {self._metadata.get('dataset_id')!r} records no environment "
                "descriptor, so its environment cannot be re-created; make it yourself")
        env = recreate_env(descriptor, api, trust_remote_code=trust_remote_code, **overrides)
        spec = self._spec
        check_recreated(env, descriptor, spec.possible_agents,
                        lambda agent: (spec.observation_spaces[agent], spec.action_spaces[agent]))
        return env

    def _eval_descriptor(self) -> EnvDescriptor | None:
        """The env descriptor inside ``eval_env_spec`` (``None`` when there is none)."""
        return eval_env_descriptor(self._metadata, self._data_path)


def split_dataset(dataset: MultiAgentDataset, sizes: Sequence[int],
                  seed: int | None = None) -> list[MultiAgentDataset]:
    """Split ``dataset`` into datasets of ``sizes`` episodes with disjoint random episodes,
    as ``minari.split_dataset`` does (the same ``seed`` gives the same split).

    Raises:
        InvalidOptionError: a negative size, or sizes summing to more than the dataset holds.
    """
    sizes = [episode_count(size, "each split size") for size in sizes]
    if sum(sizes) > dataset.total_episodes:
        raise InvalidOptionError(
            f"split sizes {list(sizes)} must be non-negative and sum to at most the dataset's "
            f"{dataset.total_episodes} episodes")
    order = np.random.default_rng(seed).permutation(dataset.episode_indices)
    ends = np.cumsum(sizes)
    return [dataset.subset(order[end - size:end]) for size, end in zip(sizes, ends,
                                                                       strict=True)]


def minari_dataset_at(data_path: Path, metadata: dict[str, Any],
                      joint_spaces: tuple[spaces.Space, spaces.Space] | None = None
                      ) -> MinariDataset:
    """``MinariDataset(data_path)``, its spaces parsed by this library's space reader.

    Minari's own parser makes a Python object of every element-wise Box bound: seconds for an
    image env's ``metadata.json`` (pistonball: 24 MB, 3 s), where ours reads them with numpy.
    Datasets without both spaces in their metadata are left to Minari (it makes the env).

    Args:
        data_path: the dataset's ``data/`` folder.
        metadata: its ``metadata.json``.
        joint_spaces: the observation and action spaces of ``metadata``, if the caller has
            parsed them already.

    Raises:
        CorruptedDataError: Minari cannot open it.
    """
    try:
        if not {"observation_space", "action_space"} <= metadata.keys():
            return MinariDataset(data_path)
        observation_space, action_space = joint_spaces or (
            metadata_space(metadata, "observation_space", data_path),
            metadata_space(metadata, "action_space", data_path))
        storage = storage_class(str(metadata.get("data_format", "hdf5")))(
            Path(data_path), observation_space, action_space,
            jpeg_encoding=bool(metadata.get("jpeg_encoding", True)))
        return MinariDataset(storage)
    except MarlMinariError:
        raise
    except Exception as exc:  # Minari raises whatever a damaged file makes its parser hit
        raise CorruptedDataError(
            f"Minari cannot open the dataset at {data_path}: {type(exc).__name__}: {exc}. "
            "Run marl-minari check on it for details; restore it from a copy or download it "
            "again.") from exc


def open_dataset(data_path: Path) -> MultiAgentDataset:
    """The multi-agent dataset whose ``data/`` folder is ``data_path``.

    Raises:
        DatasetNotFoundError: no metadata there.
        LayoutError: not a multi-agent dataset.
        CorruptedDataError: damaged.
    """
    return MultiAgentDataset(minari_dataset_at(data_path, read_metadata(data_path)))


def open_written(data_path: Path, spec: MultiAgentSpec, *,
                 jpeg_encoding: bool) -> MultiAgentDataset:
    """The dataset just written from ``spec`` at ``data_path``, opened without parsing its
    spaces back (the writer knows them; image envs' bounds take seconds to parse)."""
    storage = storage_class("hdf5")(Path(data_path), spec.observation_space,
                                    spec.action_space, jpeg_encoding=jpeg_encoding)
    return MultiAgentDataset(MinariDataset(storage))


def read_spec(data_path: Path) -> MultiAgentSpec:
    """The :class:`MultiAgentSpec` of the dataset whose ``data/`` folder is ``data_path``."""
    metadata = read_metadata(Path(data_path))
    return MultiAgentSpec.from_metadata(
        metadata, metadata_space(metadata, "observation_space", Path(data_path)),
        metadata_space(metadata, "action_space", Path(data_path)))
