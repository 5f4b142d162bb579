"""Two datasets side by side: return distributions on shared bins, and which episodes of one
are byte-for-byte episodes of the other (an "expert" set equal to a "mixed" one shows)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from marl_minari.describe import ks_two_sample
from marl_minari.format.spaces import leaves
from marl_minari.sources import DatasetSource
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.view.summary import histograms, shared_edges


def comparison(first: dict[str, Any], second: dict[str, Any], first_source: DatasetSource,
               second_source: DatasetSource) -> dict[str, Any]:
    """What the page's comparison section draws.

    Args:
        first, second: the two datasets' summaries (:func:`~marl_minari.view.summary.
            dataset_summary`).
        first_source, second_source: the open sources they describe (read once more, with
            observations, to find identical episodes).
    """
    team = [np.asarray(first["episodes"]["team_return"], dtype=np.float64),
            np.asarray(second["episodes"]["team_return"], dtype=np.float64)]
    statistic, p_value = ks_two_sample(team[0], team[1])
    shared = [agent for agent in first["agents"] if agent in second["agents"]]
    per_agent = {}
    for agent in shared:
        pair = [np.asarray(summary["episodes"]["returns"][summary["agents"].index(agent)],
                           dtype=np.float64) for summary in (first, second)]
        per_agent[agent] = histograms(pair, edges=shared_edges(pair))
    matches = identical_episodes(first_source, second_source)
    return {
        "names": labels(first_source, second_source),
        "team_returns": histograms(team, edges=shared_edges(team)),
        "ks": {"statistic": statistic, "p_value": p_value},
        "agent_returns": per_agent,
        "identical": [[a, b] for a, b in matches],
        "episodes": [first["counts"]["episodes"], second["counts"]["episodes"]],
    }


def labels(first: DatasetSource, second: DatasetSource) -> list[str]:
    """What the page calls the two datasets: their ids, or what the user named when the ids
    are the same (a copy, or two versions in different folders)."""
    if first.dataset_id != second.dataset_id:
        return [first.dataset_id, second.dataset_id]
    return [first.name, second.name] if first.name != second.name else ["first", "second"]


def identical_episodes(first: DatasetSource, second: DatasetSource) -> list[tuple[int, int]]:
    """``(episode of first, episode of second)`` for every episode of ``first`` whose every
    array (observations, actions, rewards, flags, presence, state) equals one of ``second``'s,
    by BLAKE2b digests of their bytes; each episode of ``first`` paired with the first match."""
    if first.spec.possible_agents != second.spec.possible_agents:
        return []
    seen: dict[bytes, int] = {}
    for episode_id, digest in episode_digests(second):
        seen.setdefault(digest, episode_id)
    return [(episode_id, seen[digest]) for episode_id, digest in episode_digests(first)
            if digest in seen]


def episode_digests(source: DatasetSource) -> Iterator[tuple[int, bytes]]:
    """``(stored episode id, digest of its arrays)`` of every episode, in order."""
    for arrays in source.chunks():
        starts = arrays.step_starts.tolist()
        for position, (start, length) in enumerate(
                zip(starts, arrays.episode_lengths.tolist(), strict=True)):
            yield int(arrays.episode_ids[position]), _digest(arrays, start, length, position)


def _digest(arrays: MultiAgentArrays, start: int, length: int, position: int) -> bytes:
    steps = slice(start, start + length)
    rows = slice(start + position, start + position + length + 1)
    digest = hashlib.blake2b(digest_size=16)
    step_parts = [arrays.rewards, arrays.terminations, arrays.truncations, arrays.acted]
    row_parts = [arrays.active] + ([] if arrays.state is None else [arrays.state])
    for agent in arrays.possible_agents:
        step_parts += [leaf for _, leaf in leaves(arrays.actions[agent])]
        row_parts += [leaf for _, leaf in leaves(arrays.observations[agent])]
    for part, cut in [(p, steps) for p in step_parts] + [(p, rows) for p in row_parts]:
        piece = np.ascontiguousarray(np.asarray(part)[cut])
        digest.update(str((piece.dtype.str, piece.shape)).encode())
        digest.update(piece.tobytes())
    return digest.digest()
