"""Datasets as chunked sources of per-agent arrays: multi-agent ones and plain Minari ones.

Multi-agent datasets are read through :mod:`marl_minari.reader` (the one reader); a plain
single-agent Minari dataset is read through Minari's own storage API and presented as one
agent, ``agent_0``. Either way a source yields :class:`Chunk` objects of whole episodes, about
``chunk_steps`` steps each, so memory stays flat however large the dataset is.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
from gymnasium import spaces
from minari.dataset.minari_dataset import MinariDataset
from minari.dataset.minari_storage import MinariStorage

from marl_minari import layout
from marl_minari.errors import DatasetNotFoundError, LayoutError
from marl_minari.ids import dataset_dir
from marl_minari.metadata import open_minari_dataset
from marl_minari.reader import MultiAgentArrays, MultiAgentDataset, episode_attributes
from marl_minari.reader import load_dataset as load_multi_agent
from marl_minari.self_contained import check_path
from marl_minari.spaces import leaf_dtype, leaf_shape, map_tree
from marl_minari.spec import MultiAgentSpec

from ._exact import EpisodeInfo

SINGLE_AGENT: Final = "agent_0"
"""Name of the one agent of a plain single-agent Minari dataset."""
SINGLE_AGENT_KEY: Final = "single_agent_source"
"""``MultiAgentSpec.extra`` key recording what a plain dataset's own metadata said."""
_MOVED_KEYS: Final = ("env_spec", "eval_env_spec", "observation_space", "action_space")


@dataclass(frozen=True)
class Chunk:
    """Whole episodes of a dataset, as contiguous arrays.

    Attributes:
        arrays: the episodes' per-agent arrays.
        info: their seeds, reset options and streams.
    """

    arrays: MultiAgentArrays
    info: EpisodeInfo


@dataclass(frozen=True)
class DatasetSource:
    """A dataset read in chunks of whole episodes.

    Attributes:
        name: the dataset id (for messages).
        spec: agents and spaces (a plain dataset's are wrapped as ``agent_0``).
        metadata: the dataset's ``metadata.json``.
        episode_indices: the episodes to read, in order.
        multi_agent: the dataset is in the multi-agent layout.
        dataset: the reader (multi-agent) or Minari dataset (plain).
    """

    name: str
    spec: MultiAgentSpec
    metadata: dict[str, Any]
    episode_indices: np.ndarray
    multi_agent: bool
    dataset: Any = field(repr=False)

    @property
    def total_episodes(self) -> int:
        """Episodes to read."""
        return len(self.episode_indices)

    @property
    def total_steps(self) -> int:
        """Steps over those episodes (from the metadata when all are read)."""
        return int(self.metadata.get("total_steps", 0))

    @property
    def storage(self) -> MinariStorage:
        """Minari's storage of the dataset (episode attributes, raw episodes)."""
        minari_dataset = self.dataset.minari if self.multi_agent else self.dataset
        storage: MinariStorage = minari_dataset.storage
        return storage

    def chunks(self, chunk_steps: int, streams: Iterable[int] | None = None, *,
               attributes: bool = True) -> Iterator[Chunk]:
        """Yield chunks of whole episodes, about ``chunk_steps`` steps each (by the dataset's
        mean episode length; at least one episode each), with their seeds and options.

        Args:
            chunk_steps: target steps per chunk.
            streams: the stream of every episode, in order (``0`` for all by default).
            attributes: read each episode's seed and options (HDF5 attributes, a few us per
                episode); ``False`` gives ``None`` for all.
        """
        stream_iter = iter(streams) if streams is not None else None
        for batch in self._batches(chunk_steps):
            # Attributes are read per chunk, not in one pass kept open across chunks: an HDF5
            # file grows in memory while its episodes are visited (about 5 KB per episode).
            metadata = self._attributes(batch) if attributes else [{} for _ in batch]
            yield self._chunk(list(zip(batch, metadata, strict=True)), stream_iter)

    def _attributes(self, batch: list[int]) -> list[dict[str, Any]]:
        if self.storage.FORMAT != "hdf5":
            return list(self.storage.get_episode_metadata(batch))
        path = Path(self.storage.data_path) / layout.MAIN_FILE_NAME
        return [{"seed": seed, "options": options}
                for seed, options in episode_attributes(path, batch)]

    def array_chunks(self, chunk_steps: int) -> Iterator[MultiAgentArrays]:
        """Yield the episodes' arrays only (no seeds or options: no per-episode attribute
        reads), about ``chunk_steps`` steps at a time."""
        for batch in self._batches(chunk_steps):
            yield (self.dataset.to_arrays(batch) if self.multi_agent
                   else _single_agent_arrays(self.storage, self.spec, batch))

    def _batches(self, chunk_steps: int) -> Iterator[list[int]]:
        total_episodes = int(self.metadata.get("total_episodes") or 1)
        mean_length = max(1.0, int(self.metadata.get("total_steps") or 0) / total_episodes)
        count = max(1, int(chunk_steps // mean_length))
        indices = self.episode_indices.tolist()
        for start in range(0, len(indices), count):
            yield indices[start:start + count]

    def _chunk(self, batch: list[tuple[int, dict[str, Any]]],
               stream_iter: Iterator[int] | None) -> Chunk:
        indices = [index for index, _ in batch]
        if self.multi_agent:
            arrays = self.dataset.to_arrays(indices)
        else:
            arrays = _single_agent_arrays(self.storage, self.spec, indices)
        seeds = [None if meta.get("seed") is None else int(meta["seed"]) for _, meta in batch]
        options = [meta.get("options") or None for _, meta in batch]
        streams = np.zeros(len(batch), dtype=np.int32) if stream_iter is None else np.asarray(
            [next(stream_iter) for _ in batch], dtype=np.int32)
        return Chunk(arrays, EpisodeInfo(seeds, options, streams))


def open_dataset(source: Any, *, download: bool = True) -> DatasetSource:
    """Resolve a dataset id, ``MinariDataset`` or ``MultiAgentDataset`` into a source.

    A local id is opened where it is; an id that is not local is fetched with
    ``minari.load_dataset(id, download=True)`` when ``download`` is on.

    Raises:
        DatasetNotFoundError: no such dataset (locally, and remotely with ``download``).
        LayoutError: the Minari dataset is neither multi-agent nor readable as single-agent.
    """
    if isinstance(source, MultiAgentDataset):
        return _multi_agent_source(source, np.arange(source.total_episodes))
    if isinstance(source, MinariDataset):
        minari_dataset = source
    elif isinstance(source, (str, os.PathLike)):
        dataset_id = str(source)
        local = (dataset_dir(dataset_id) / "data" / layout.METADATA_FILE_NAME).exists()
        if not local and not download:
            raise DatasetNotFoundError(f"no local dataset {dataset_id!r}")
        minari_dataset = open_minari_dataset(dataset_id, download=not local)
    else:
        raise TypeError(f"not a dataset: {source!r} (give an id, a MinariDataset or a "
                        "MultiAgentDataset)")
    metadata = MinariStorage.read_raw_metadata(minari_dataset.storage.data_path)
    indices = np.asarray(minari_dataset.episode_indices, dtype=np.int64)
    if layout.METADATA_KEY in metadata:
        return _multi_agent_source(load_multi_agent(minari_dataset), indices)
    return _single_agent_source(minari_dataset, metadata, indices)


def _multi_agent_source(dataset: MultiAgentDataset, indices: np.ndarray) -> DatasetSource:
    metadata = dataset.metadata
    return DatasetSource(name=str(metadata.get("dataset_id")), spec=dataset.spec,
                         metadata=metadata, episode_indices=indices, multi_agent=True,
                         dataset=dataset)


def _single_agent_source(dataset: MinariDataset, metadata: dict[str, Any],
                         indices: np.ndarray) -> DatasetSource:
    spec = single_agent_spec(dataset.observation_space, dataset.action_space, metadata)
    return DatasetSource(name=str(metadata.get("dataset_id")), spec=spec, metadata=metadata,
                         episode_indices=indices, multi_agent=False, dataset=dataset)


def single_agent_spec(observation_space: spaces.Space, action_space: spaces.Space,
                      metadata: dict[str, Any]) -> MultiAgentSpec:
    """The spec of a plain Minari dataset seen as one agent, ``agent_0``.

    The plain dataset's env specs and spaces go to ``spec.extra["single_agent_source"]``.
    """
    return MultiAgentSpec(
        api="parallel", possible_agents=(SINGLE_AGENT,),
        observation_spaces={SINGLE_AGENT: observation_space},
        action_spaces={SINGLE_AGENT: action_space},
        record_infos=True,
        extra={SINGLE_AGENT_KEY: {k: metadata[k] for k in _MOVED_KEYS if k in metadata}},
    )


def spec_of(metadata: dict[str, Any], multi_agent: bool) -> MultiAgentSpec:
    """The spec of a dataset from its ``metadata.json`` (as :func:`open_dataset` builds it)."""
    from minari.serialization import deserialize_space

    observation_space = deserialize_space(metadata["observation_space"])
    action_space = deserialize_space(metadata["action_space"])
    if multi_agent:
        return MultiAgentSpec.from_metadata(metadata, observation_space, action_space)
    return single_agent_spec(observation_space, action_space, metadata)


def _single_agent_arrays(storage: MinariStorage, spec: MultiAgentSpec,
                         indices: list[int]) -> MultiAgentArrays:
    """Plain Minari episodes as the arrays of one agent, always present and acting."""
    if storage.FORMAT == "hdf5":  # Minari's reader would follow links out of the file
        check_path(Path(storage.data_path) / layout.MAIN_FILE_NAME)
    episodes = list(storage.get_episodes(indices))
    lengths = np.asarray([len(ep["rewards"]) for ep in episodes], dtype=np.int64)
    obs_space = spec.observation_spaces[SINGLE_AGENT]
    act_space = spec.action_spaces[SINGLE_AGENT]
    observations = _concat_trees([_as_tree(ep["observations"], obs_space) for ep in episodes])
    actions = _concat_trees([_as_tree(ep["actions"], act_space) for ep in episodes])
    rewards = np.concatenate([np.asarray(ep["rewards"], dtype=np.float64) for ep in episodes])
    terms = np.concatenate([np.asarray(ep["terminations"], dtype=bool) for ep in episodes])
    truncs = np.concatenate([np.asarray(ep["truncations"], dtype=bool) for ep in episodes])
    infos = [ep["infos"] or {} for ep in episodes]
    agent_infos = _concat_trees([map_tree(_decode_info_leaf, _plain(i)) for i in infos]) \
        if infos and infos[0] else None
    steps = int(lengths.sum())
    return MultiAgentArrays(
        possible_agents=spec.possible_agents,
        episode_ids=np.asarray(indices, dtype=np.int64),
        episode_lengths=lengths,
        observations={SINGLE_AGENT: observations},
        actions={SINGLE_AGENT: actions},
        rewards=rewards[:, None], terminations=terms[:, None], truncations=truncs[:, None],
        active=np.ones((steps + len(indices), 1), dtype=bool),
        acted=np.ones((steps, 1), dtype=bool),
        team_rewards=rewards, episode_terminations=terms, episode_truncations=truncs,
        agent_infos=None if agent_infos is None else {SINGLE_AGENT: agent_infos},
    )


def _plain(tree: Any) -> Any:
    if isinstance(tree, dict):
        return {k: _plain(v) for k, v in tree.items()}
    return np.asarray(tree)


def _decode_info_leaf(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind in "SO":
        return np.asarray([v.decode("utf-8") if isinstance(v, bytes) else str(v)
                           for v in values.ravel()], dtype=object).reshape(values.shape)
    return values


def _as_tree(value: Any, space: spaces.Space) -> Any:
    """An episode's decoded field shaped like ``space`` (Minari decodes Tuples as tuples,
    Dicts as dicts and Text as lists of str)."""
    if isinstance(space, spaces.Dict):
        return {k: _as_tree(value[k], sub) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_as_tree(value[i], sub) for i, sub in enumerate(space.spaces))
    if isinstance(space, spaces.Text):
        return np.asarray(list(value), dtype=object)
    array = np.asarray(value, dtype=leaf_dtype(space))
    return array.reshape((len(array), *leaf_shape(space)))


def _concat_trees(trees: list[Any]) -> Any:
    first = trees[0]
    if isinstance(first, dict):
        return {k: _concat_trees([t[k] for t in trees]) for k in first}
    if isinstance(first, tuple):
        return tuple(_concat_trees([t[i] for t in trees]) for i in range(len(first)))
    return np.concatenate(trees)


def writer_metadata(metadata: dict[str, Any], spec_extra: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for :func:`marl_minari.writer.write_dataset` that reproduce the
    top-level keys of ``metadata`` (a dataset's ``metadata.json``).

    Keys the writer computes itself (ids, counts, spaces, version, size) are left out; a plain
    dataset's env specs were moved into the spec (``spec_extra``) and are left out too.
    """
    managed = {"dataset_id", "total_episodes", "total_steps", "data_format", "jpeg_encoding",
               "observation_space", "action_space", "minari_version", "dataset_size",
               layout.METADATA_KEY}
    if SINGLE_AGENT_KEY in spec_extra:
        managed |= set(_MOVED_KEYS)
    return {"extra": {k: v for k, v in metadata.items() if k not in managed}}


def require_layout(source: DatasetSource) -> None:
    """Raise :class:`LayoutError` unless the source has at least one episode."""
    if source.total_episodes == 0:
        raise LayoutError(f"dataset {source.name!r} has no episodes to convert")
