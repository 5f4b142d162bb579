"""What :func:`~marl_minari.describe.describe` reads: a source opened by
:func:`marl_minari.sources.open_source` (the one door), with describe's provenance metadata."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.describe._metadata import _dataset_metadata, _json_safe, _space_text
from marl_minari.describe.results import SourceKind
from marl_minari.format import layout
from marl_minari.sources import SINGLE_AGENT, DatasetSource, VaultSource, open_source
from marl_minari.storage.arrays import MultiAgentArrays

__all__ = ["SINGLE_AGENT", "_Source", "_open_source"]

_VAULT_DROPPED_KEYS = ("dataset_id", "dataset_size", "data_format", "minari_version",
                       "total_episodes", "total_steps", "layout_version", "library_version")
"""Dataset provenance a vault read as a dataset does not have (its ids, sizes and versions are
placeholders); the vault's own record is shown instead."""


@dataclass(frozen=True)
class _Source:
    name: str
    kind: SourceKind
    possible_agents: tuple[str, ...]
    action_spaces: dict[str, spaces.Space]
    metadata: dict[str, Any]
    chunks: Callable[[], Iterator[MultiAgentArrays]]
    episode_lengths: Callable[[], np.ndarray]
    """Steps of every episode, from what the source knows without reading episodes (its
    offset index or HDF5 metadata; a streaming source fetches nothing for them)."""
    has_state: bool | None = None
    """Whether the dataset's metadata records a global state (``None``: its chunks say; a
    vault's state is all or nothing)."""


@contextmanager
def _open_source(source: Any, chunk_steps: int | None, progress: bool,
                 vault_options: dict[str, Any], observations: bool = False
                 ) -> Iterator[_Source]:
    """Open ``source`` (never downloading) for the ``with`` block; ``observations``: its
    chunks hold the observations (coverage needs them)."""
    opened = open_source(source, vault_options=vault_options)
    try:
        yield _described(opened, chunk_steps, observations)
    finally:
        if opened is not source:
            opened.close()


def _described(source: DatasetSource, chunk_steps: int | None, observations: bool) -> _Source:
    spec = source.spec
    # Statistics need actions and rewards only: without coverage, a plain dataset's
    # observations stay unread.
    chunks = partial(source.chunks, chunk_steps, observations=observations)
    if isinstance(source, VaultSource):
        return _Source(name=str(source.vault_path), kind="vault",
                       possible_agents=spec.possible_agents,
                       action_spaces=dict(spec.action_spaces),
                       metadata=_vault_metadata(source), chunks=chunks,
                       episode_lengths=source.episode_lengths)
    if source.multi_agent:
        metadata = _dataset_metadata(source.metadata, spec)
    else:
        metadata = _dataset_metadata(source.metadata, None)
        metadata.update(
            possible_agents=[SINGLE_AGENT],
            observation_spaces={SINGLE_AGENT: _space_text(spec.observation_spaces[SINGLE_AGENT])},
            action_spaces={SINGLE_AGENT: _space_text(spec.action_spaces[SINGLE_AGENT])})
    return _Source(name=source.dataset_id, kind=source.kind,
                   possible_agents=spec.possible_agents, action_spaces=dict(spec.action_spaces),
                   metadata=metadata, chunks=chunks, episode_lengths=source.episode_lengths,
                   has_state=spec.state_space is not None if source.multi_agent else None)


def _vault_metadata(source: VaultSource) -> dict[str, Any]:
    """The imported dataset's provenance, with the vault's own record instead of its ids."""
    metadata = _dataset_metadata(source.metadata, source.spec)
    for key in _VAULT_DROPPED_KEYS:
        metadata.pop(key, None)
    record = source.metadata.get(layout.METADATA_KEY, {}).get("vault") or {}
    path = source.vault_path
    metadata.update(vault_path=str(path), vault_name=path.parent.name, vault_uid=path.name,
                    vault_version=record.get("version"), vault_streams=record.get("streams"),
                    vault_length=record.get("length"),
                    vault_trailing_steps=record.get("trailing_steps"),
                    vault_metadata=_json_safe(record.get("user_metadata") or {}))
    return metadata
