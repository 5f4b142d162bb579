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

from marl_minari.envs.make import effective_kwargs
from marl_minari.errors import IncompatibleSourcesError, InvalidOptionError
from marl_minari.format import layout
from marl_minari.sources import DatasetSource, load_dataset, open_source
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
    """Raise :class:`IncompatibleSourcesError` naming the first way ``other`` differs."""
    a, b = first.spec, other.spec
    checks: list[tuple[str, Any, Any]] = [
        ("agents", list(a.possible_agents), list(b.possible_agents)),
        ("api", a.api, b.api),
    ]
    checks += [(f"observation space of {agent!r}", a.observation_spaces[agent],
                b.observation_spaces.get(agent)) for agent in a.possible_agents]
    checks += [(f"action space of {agent!r}", a.action_spaces[agent],
                b.action_spaces.get(agent)) for agent in a.possible_agents]
    checks += [
        ("state space", a.state_space, b.state_space),
        ("reward aggregation", a.reward_aggregation, b.reward_aggregation),
        ("layout version", _layout_version(first), _layout_version(other)),
        ("environment", _comparable_env(a), _comparable_env(b)),
    ]
    for what, mine, theirs in checks:
        if mine != theirs:
            raise IncompatibleSourcesError(
                f"dataset {index} ({other.dataset_id!r}) and dataset 0 ({first.dataset_id!r}) "
                f"differ in {what}: {theirs!r} vs {mine!r}; combine datasets of one "
                "environment and layout")


def _comparable_env(spec: Any) -> dict[str, Any] | None:
    """The env descriptor with default constructor arguments filled in (from trusted
    packages only), so ``{}`` and ``{"max_cycles": 25}`` name the same env."""
    if spec.env is None:
        return None
    described = spec.env.to_dict()
    described["kwargs"] = effective_kwargs(spec.env.entry_point, spec.env.kwargs)
    return described


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
