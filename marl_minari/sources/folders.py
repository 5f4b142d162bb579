"""Sources of Minari datasets on disk: the multi-agent layout, and plain datasets as one agent."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from minari.dataset.minari_dataset import MinariDataset

from marl_minari.format import layout
from marl_minari.format.metadata import metadata_count, metadata_space, read_metadata
from marl_minari.format.spaces import leaf_spaces
from marl_minari.sources.base import DatasetSource, EpisodeAttributes
from marl_minari.sources.plain import (
    SINGLE_AGENT,
    plain_columns,
    plain_episodes,
    spec_of,
)
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.datafile import (
    cross_check,
    episode_attributes,
    episode_steps,
    hdf5_errors,
    open_data_file,
)
from marl_minari.storage.dataset import MultiAgentDataset, minari_dataset_at
from marl_minari.storage.reader_state import ReadScratch


class FolderSource(DatasetSource):
    """A Minari dataset in a ``data/`` folder (the multi-agent layout, or a plain dataset).

    Args:
        name: what the caller named.
        data_path: the dataset's ``data/`` folder.
        episode_indices: the stored episodes to read (all by default).
        opened: the dataset object the caller gave (a ``MultiAgentDataset`` or
            ``MinariDataset``), behind :attr:`dataset` instead of opening one.

    Raises:
        DatasetNotFoundError: no ``metadata.json`` in ``data_path``.
        CorruptedDataError: it is damaged.
        LayoutError: it is not a Minari dataset's metadata.
    """

    def __init__(self, name: str | None, data_path: Path,
                 episode_indices: np.ndarray | None = None, *, opened: Any = None) -> None:
        data_path = Path(data_path).resolve()
        if isinstance(opened, MultiAgentDataset):
            # As that object opened it: the metadata, spec and spaces it read, parsed and
            # cross-checked with the data file, which its reads go by; not read, parsed and
            # checked a second time (about 2 ms of every make_buffer call on it).
            metadata, spec, multi_agent = opened.checked_metadata, opened.spec, True
            total_episodes = metadata_count(metadata, "total_episodes", data_path)
            self.joint_spaces = (opened.observation_space, opened.action_space)
        else:
            metadata = read_metadata(data_path)
            total_episodes = metadata_count(metadata, "total_episodes", data_path)
            metadata_count(metadata, "total_steps", data_path)
            multi_agent = layout.METADATA_KEY in metadata
            # Parsed once for the spec and the Minari dataset: an image env's spaces are
            # megabytes of JSON.
            self.joint_spaces = (metadata_space(metadata, "observation_space", data_path),
                                 metadata_space(metadata, "action_space", data_path))
            spec = spec_of(metadata, multi_agent, self.joint_spaces)
            if metadata.get("data_format", "hdf5") == "hdf5":
                h5_path = data_path / layout.MAIN_FILE_NAME
                with open_data_file(h5_path) as file, hdf5_errors(h5_path):
                    cross_check(file, metadata, spec if multi_agent else None, h5_path)
        super().__init__(
            name or str(metadata.get("dataset_id")), "multi_agent" if multi_agent
            else "single_agent", spec, metadata,
            np.arange(total_episodes) if episode_indices is None else episode_indices)
        self.data_path = data_path
        self._opened = opened

    @property
    def dataset(self) -> Any:
        """The :class:`MultiAgentDataset` (multi-agent layout) or ``MinariDataset`` (plain),
        opened once per process."""
        if self._opened is None:
            minari_dataset = minari_dataset_at(self.data_path, self.metadata, self.joint_spaces)
            if not self.reads_all_episodes:
                minari_dataset = MinariDataset(minari_dataset.storage,
                                               episode_indices=self._ids)
            self._opened = minari_dataset
        if self.multi_agent and isinstance(self._opened, MinariDataset):
            self._opened = MultiAgentDataset(self._opened)
        return self._opened

    def _transient(self) -> tuple[str, ...]:
        return ("_opened",)

    def _stored_lengths(self, ids: np.ndarray) -> np.ndarray:
        if self._reads_data_file() and isinstance(self._opened, MultiAgentDataset):
            # The offset index its reads loaded and checked, not loaded again.
            return np.asarray(self._opened.episode_steps(ids), dtype=np.int64)
        if self.metadata.get("data_format", "hdf5") != "hdf5":
            metas = self._minari_storage().get_episode_metadata(ids.tolist())
            return np.asarray([int(m["total_steps"]) for m in metas], dtype=np.int64)
        return episode_steps(self.data_path, self.metadata, ids)

    def episode_attributes(self, ids: Sequence[int] | np.ndarray) -> list[EpisodeAttributes]:
        ids = self.stored_ids(ids).tolist()
        if self.metadata.get("data_format", "hdf5") != "hdf5":
            metas = self._minari_storage().get_episode_metadata(ids)
            return [(None if m.get("seed") is None else int(m["seed"]), m.get("options") or None)
                    for m in metas]
        return episode_attributes(self.data_path / layout.MAIN_FILE_NAME, ids)

    def read_batches(self, batches: Iterable[np.ndarray], *, observations: bool = True,
                     reuse_arrays: bool = False,
                     scratch: ReadScratch | None = None) -> Iterator[MultiAgentArrays]:
        if self._reads_data_file():
            # One open reader for the whole pass (every bulk consumer's common path).
            yield from self.dataset.arrays_in_batches(batches, observations=observations,
                                                      reuse_arrays=reuse_arrays,
                                                      scratch=scratch)
            return
        yield from super().read_batches(batches, observations=observations)

    def _reads_data_file(self) -> bool:
        """The episodes are read from ``main_data.hdf5`` by the multi-agent reader."""
        return self.multi_agent and self.metadata.get("data_format", "hdf5") == "hdf5"

    def read(self, ids: Sequence[int] | np.ndarray, *,
             observations: bool = True) -> MultiAgentArrays:
        episode_ids = [int(i) for i in np.asarray(ids, dtype=np.int64).reshape(-1)]
        if self.multi_agent:
            arrays: MultiAgentArrays = self.dataset.to_arrays(episode_ids)
            return arrays
        action_space = self.spec.action_spaces[SINGLE_AGENT]
        if not observations and self.metadata.get("data_format", "hdf5") == "hdf5" and not any(
                isinstance(leaf, spaces.Text) for _, leaf in leaf_spaces(action_space)):
            return plain_columns(self.data_path, episode_ids, action_space)
        return plain_episodes(self._minari_storage(), self.spec, episode_ids)

    def _minari_storage(self) -> Any:
        minari_dataset = self.dataset.minari if self.multi_agent else self.dataset
        return minari_dataset.storage


def object_source(dataset: Any) -> FolderSource | None:
    """The source of a dataset object (``MultiAgentDataset`` or ``MinariDataset``), reading
    the episodes it holds; ``None`` for anything else."""
    if isinstance(dataset, MultiAgentDataset):
        return FolderSource(None, dataset.data_path, dataset.episode_indices, opened=dataset)
    if isinstance(dataset, MinariDataset):
        return FolderSource(None, Path(dataset.storage.data_path),
                            np.asarray(dataset.episode_indices, dtype=np.int64), opened=dataset)
    return None
