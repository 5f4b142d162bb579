"""Datasets as chunks of whole episodes with their seeds, options and streams.

Opening a dataset is :func:`marl_minari.sources.open_source`'s job (the one door; a plain
single-agent dataset is one agent, ``agent_0``); this module adds what converting to a vault
needs on top of the arrays: every episode's reset seed, options and stream (:func:`chunks`)
and the metadata to write back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from marl_minari.errors import LayoutError
from marl_minari.format import layout
from marl_minari.sources import MOVED_KEYS, SINGLE_AGENT_KEY, DatasetSource
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.vaults.exact import EpisodeInfo


@dataclass(frozen=True)
class Chunk:
    """Whole episodes of a dataset, as contiguous arrays.

    Attributes:
        arrays: the episodes' per-agent arrays.
        info: their seeds, reset options and streams.
    """

    arrays: MultiAgentArrays
    info: EpisodeInfo


def chunks(source: DatasetSource, chunk_steps: int | None, streams: Iterable[int] | None = None, *,
           attributes: bool = True) -> Iterator[Chunk]:
    """Yield chunks of whole episodes, about ``chunk_steps`` steps each, with their seeds and
    options.

    Args:
        source: the dataset.
        chunk_steps: target steps per chunk.
        streams: the stream of every episode, in order (``0`` for all by default).
        attributes: read each episode's seed and options (HDF5 attributes, a few us per
            episode); ``False`` gives ``None`` for all.
    """
    stream_iter = iter(streams) if streams is not None else None
    batches = list(source.batches(chunk_steps))
    for batch, arrays in zip(batches, source.read_batches(batches), strict=True):
        # Attributes are read per chunk, not in one pass kept open across chunks: an HDF5
        # file grows in memory while its episodes are visited (about 5 KB per episode).
        read = (source.episode_attributes(batch) if attributes
                else [(None, None) for _ in batch])
        seeds = [seed for seed, _ in read]
        options = [given or None for _, given in read]
        stream_ids = np.zeros(len(batch), dtype=np.int32) if stream_iter is None else \
            np.asarray([next(stream_iter) for _ in batch], dtype=np.int32)
        yield Chunk(arrays, EpisodeInfo(seeds, options, stream_ids))


def writer_metadata(metadata: dict[str, Any], spec_extra: dict[str, Any]) -> dict[str, Any]:
    """Keyword arguments for :func:`marl_minari.storage.writer.write_dataset` that reproduce the
    top-level keys of ``metadata`` (a dataset's ``metadata.json``).

    Keys the writer computes itself (ids, counts, spaces, version, size) are left out; a plain
    dataset's env specs were moved into the spec (``spec_extra``) and are left out too.
    """
    managed = {"dataset_id", "total_episodes", "total_steps", "data_format", "jpeg_encoding",
               "observation_space", "action_space", "minari_version", "dataset_size",
               layout.METADATA_KEY}
    if SINGLE_AGENT_KEY in spec_extra:
        managed |= set(MOVED_KEYS)
    return {"extra": {k: v for k, v in metadata.items() if k not in managed}}


def require_layout(source: DatasetSource) -> None:
    """Raise :class:`LayoutError` unless the source has at least one episode."""
    if source.total_episodes == 0:
        raise LayoutError(f"dataset {source.name!r} has no episodes to convert; record some "
                          "episodes first")
