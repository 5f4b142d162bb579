"""The :func:`describe` entry point: stream a source through the statistics accumulator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from marl_minari.describe._sources import _open_source, _Source
from marl_minari.describe.coverage import CoverageAccumulator
from marl_minari.describe.results import DatasetDescription, Summary
from marl_minari.describe.stats import _Accumulator
from marl_minari.errors import InvalidOptionError
from marl_minari.sources import check_chunk_steps
from marl_minari.storage.arrays import MultiAgentArrays


def describe(source: Any, *, statistics: bool = True, coverage: bool = False,
             chunk_steps: int | None = None, progress: bool = False,
             vault_options: dict[str, Any] | None = None) -> DatasetDescription:
    """Describe a dataset or vault, reading it in chunks of whole episodes.

    Args:
        source: what :func:`marl_minari.sources.open_source` opens (a local dataset id, a
            dataset folder, a ``minari.MinariDataset``, a
            :class:`~marl_minari.storage.reader.MultiAgentDataset`; multi-agent layout or plain
            single-agent Minari, seen as one agent ``agent_0``), or the folder of a Flashbax
            vault (``rel_dir/vault_name/vault_uid``, OG-MARL conventions), or a streaming
            source (``open_source(url, streaming=True)``). A dataset id that is not local is
            not downloaded.
        statistics: read the episodes for returns, actions, agents and episode ends
            (default). ``False``: a metadata-only description (``statistics`` is ``False`` on
            it): agents, spaces, env, size, episode and step counts and episode lengths, from
            the metadata and the offset index alone; no episode is read, so a streaming
            source fetches nothing beyond what opening it fetched.
        coverage: also measure SACo and OACo (:class:`~marl_minari.describe.Coverage`, as
            OG-MARL defines them); reads the observations too, and keeps 24 bytes per
            distinct pair.
        chunk_steps: about how many steps are read at a time (at least one episode); memory
            is proportional to it, plus a few numbers per episode.
        progress: show a progress bar.
        vault_options: keyword arguments for :func:`marl_minari.adapters.from_vault` (agent
            names, spaces, ``cut_on``, ``infer_dead``, ``reward_aggregation``...); the vault is
            read in place, nothing is copied.

    Returns:
        The :class:`DatasetDescription`.

    Raises:
        DatasetNotFoundError: no such dataset or vault.
        LayoutError: the source cannot be read as a dataset.
        InvalidOptionError: ``chunk_steps`` < 1, or ``coverage`` without ``statistics``
            (a ``ValueError``).
    """
    check_chunk_steps(chunk_steps)
    if coverage and not statistics:
        raise InvalidOptionError("coverage reads every episode's observations and actions: "
                                 "describe with statistics (the default) to measure it")
    with _open_source(source, chunk_steps, progress, dict(vault_options or {}),
                      observations=coverage) as resolved:
        if not statistics:
            return _metadata_only(resolved)
        stats = _Accumulator(resolved.possible_agents, resolved.action_spaces)
        if not coverage:
            _stream(resolved, [stats.add], progress)
            return stats.result(resolved.name, resolved.kind, _provenance(resolved))
        with CoverageAccumulator(resolved.possible_agents, state=resolved.has_state,
                                 name=resolved.name) as pairs:
            # the next chunk is read while threads hash this one (see CoverageAccumulator)
            _stream(resolved, [pairs.add, stats.add], progress)
            measured = pairs.result()
        description = stats.result(resolved.name, resolved.kind, _provenance(resolved))
        return replace(description, coverage=measured)


def _stream(source: _Source, consumers: list[Callable[[MultiAgentArrays], None]],
            progress: bool) -> None:
    """Hand every chunk of ``source`` to ``consumers``, in order."""
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=source.metadata.get("total_steps"), unit="step",
                   desc=f"describe {source.name}")
    for arrays in source.chunks():
        for consume in consumers:
            consume(arrays)
        if bar is not None:
            bar.update(int(arrays.episode_lengths.sum()))
    if bar is not None:
        bar.close()


def _metadata_only(source: _Source) -> DatasetDescription:
    """What the metadata and the episode lengths say, without reading any episode."""
    lengths = np.asarray(source.episode_lengths(), dtype=np.int64)
    return DatasetDescription(
        name=source.name, kind=source.kind, possible_agents=source.possible_agents,
        total_episodes=len(lengths), total_steps=int(lengths.sum()),
        episode_lengths=Summary.of(lengths), team_returns=Summary(count=0), agents=(),
        terminated_episodes=0, truncated_episodes=0, unfinished_episodes=0,
        inactive_share=0.0, metadata=_provenance(source),
        episode_returns=np.zeros((0, len(source.possible_agents))),
        episode_length_values=lengths, statistics=False)


def _provenance(source: _Source) -> dict[str, Any]:
    return {**source.metadata, "source_kind": source.kind}
