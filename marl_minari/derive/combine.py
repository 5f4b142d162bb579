"""Combine multi-agent datasets into one, as ``minari.combine_datasets`` does for plain ones.

Minari's own ``combine_datasets`` drops the ``marl_minari`` metadata (the result reads as one
agent with Dict actions) and the episodes' reset seeds and options; this one checks that the
parts agree, keeps both, and writes through :func:`marl_minari.storage.writer.write_dataset`
(staged, indexed, digests remembered, moved into place in one rename).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

from marl_minari.errors import IncompatibleSourcesError, InvalidOptionError
from marl_minari.format import layout
from marl_minari.sources import DatasetSource, load_dataset, open_source
from marl_minari.storage.compatible import check_compatible
from marl_minari.storage.dataset import MultiAgentDataset
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.writer import write_dataset

COMBINED_KEY = "combined_datasets"
"""Top-level metadata key listing the parts' ids, as Minari names it."""


def combine_datasets(datasets: Sequence[Any], new_dataset_id: str, *,
                     progress: bool = False) -> MultiAgentDataset:
    """Write the episodes of ``datasets``, in order, into a new dataset ``new_dataset_id``.

    Args:
        datasets: anything :func:`marl_minari.sources.open_source` opens (local ids, dataset
            folders, remote datasets' URLs such as ``http://host/registry/<id>``,
            ``MinariDataset`` or ``MultiAgentDataset`` objects), all multi-agent.
        new_dataset_id: the new dataset's id; its namespace folders are created as needed.
        progress: show a progress bar.

    Returns:
        The new dataset. Its ``metadata.json`` lists the parts' ids in ``combined_datasets``;
        every episode keeps its reset seed and options; images are stored as the parts hand
        them out (not JPEG-encoded again).

    Raises:
        InvalidOptionError: no datasets.
        IncompatibleSourcesError: a part is not multi-agent, or differs from the first in
            agents, API, spaces, state space, reward aggregation, layout version or
            environment (the first difference is named).
        DatasetExistsError: ``new_dataset_id`` exists.
    """
    if not datasets:
        raise InvalidOptionError("combine_datasets needs at least one dataset")
    sources = [open_source(d) for d in datasets]
    for index, source in enumerate(sources):
        if not source.multi_agent:
            raise IncompatibleSourcesError(
                f"dataset {index} ({source.dataset_id!r}) is a plain single-agent Minari "
                "dataset; combine plain datasets with minari.combine_datasets")
        if index:
            check_combinable(sources[0], source, index)
    first = sources[0]
    spec = dataclasses.replace(first.spec, extra={})
    total = sum(s.total_episodes for s in sources)
    write_dataset(new_dataset_id, _episodes(sources), spec, jpeg_encoding=False,
                  progress=progress, total=total,
                  extra={COMBINED_KEY: [s.dataset_id for s in sources],
                         **_episode_metadata(sources)})
    return load_dataset(new_dataset_id)


def check_combinable(first: DatasetSource, other: DatasetSource, index: int) -> None:
    """Raise :class:`IncompatibleSourcesError` naming the first way ``other`` differs
    (the rule every door that mixes episodes asks: :mod:`marl_minari.storage.compatible`)."""
    check_compatible(first.spec, other.spec,
                     first_name=f"dataset 0 ({first.dataset_id!r})",
                     other_name=f"dataset {index} ({other.dataset_id!r})",
                     fix="combine datasets of one environment and layout",
                     first_layout=_layout_version(first), other_layout=_layout_version(other))


def _layout_version(source: DatasetSource) -> Any:
    return (source.metadata.get(layout.METADATA_KEY) or {}).get(layout.META_LAYOUT_VERSION)


def _episodes(sources: list[DatasetSource]) -> Iterator[MultiAgentEpisode]:
    for source in sources:
        yield from source.episodes()


def _episode_metadata(sources: list[DatasetSource]) -> dict[str, Any]:
    """The parts' per-episode metadata lists, concatenated (when any part has one)."""
    parts = [s.metadata.get("episode_metadata") for s in sources]
    if not any(isinstance(p, list) for p in parts):
        return {}
    combined: list[Any] = []
    for source, part in zip(sources, parts, strict=True):
        if isinstance(part, list):
            combined += [part[int(i)] if int(i) < len(part) else None
                         for i in source.episode_indices]
        else:
            combined += [None] * source.total_episodes
    return {"episode_metadata": combined}
