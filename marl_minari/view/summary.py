"""The dataset at a glance, as the page shows it: the card, per-agent distributions and one
row per episode (how long, what each agent earned, how it ended)."""

from __future__ import annotations

import json
from typing import Any, Final

import numpy as np

from marl_minari.describe import describe
from marl_minari.sources import DatasetSource

HISTOGRAM_BINS: Final = 20
"""Bars of each distribution on the page (edges shared by every agent of a dataset, and by
both datasets of a comparison, so bars line up)."""
CARD_KEYS: Final = ("dataset_id", "env", "api", "possible_agents", "observation_spaces",
                    "action_spaces", "state_space", "total_episodes", "total_steps",
                    "reward_aggregation", "algorithm_name", "author", "code_permalink",
                    "description", "layout_version", "library_version", "minari_version")
"""Metadata shown first on the card, in this order (the rest follows, folded)."""


def dataset_summary(source: DatasetSource, *, coverage: bool = False) -> dict[str, Any]:
    """Everything the page draws before an episode is opened.

    Args:
        source: an open source (the caller owns it).
        coverage: also measure SACo and OACo (reads the observations).

    Returns:
        A JSON-ready dict: ``name``, ``agents``, ``api``, ``card`` (metadata shown first),
        ``metadata`` (the rest), ``counts``, ``coverage`` (one line, or ``None``), ``episodes``
        (columns of the episode table) and ``histograms``.
    """
    description = describe(source, coverage=coverage)
    agents = list(source.spec.possible_agents)
    table = episode_table(source)
    returns = np.asarray(description.episode_returns, dtype=np.float64).reshape(-1, len(agents))
    table["returns"] = returns.T.tolist()
    table["team_return"] = np.asarray(description.episode_team_returns).tolist()
    metadata = json_safe(description.metadata)
    card = {key: metadata.pop(key) for key in CARD_KEYS if key in metadata}
    measured = description.coverage
    return {
        "name": source.dataset_id,
        "kind": source.kind,
        "agents": agents,
        "api": str(source.metadata.get("api") or card.get("api") or "parallel"),
        "card": card,
        "metadata": metadata,
        "counts": {"episodes": description.total_episodes, "steps": description.total_steps,
                   "terminated": description.terminated_episodes,
                   "truncated": description.truncated_episodes,
                   "unfinished": description.unfinished_episodes,
                   "inactive_share": description.inactive_share},
        "coverage": None if measured is None else measured.brief(),
        "episodes": table,
        "histograms": {
            "returns": histograms(list(returns.T)),
            "agent_steps": histograms([np.asarray(column) for column in table["agent_steps"]]),
            "lengths": histograms([np.asarray(table["length"])]),
        },
    }


def episode_table(source: DatasetSource) -> dict[str, Any]:
    """Columns of the episode table: ``id``, ``length``, ``end`` (``terminated``,
    ``truncated`` or ``unfinished``), ``deaths`` (agents that ended while others went on),
    ``agent_steps`` (per agent, its actions in each episode); read without observations."""
    ids: list[np.ndarray] = []
    lengths: list[np.ndarray] = []
    ends: list[str] = []
    deaths: list[int] = []
    agent_steps: list[np.ndarray] = []
    for arrays in source.chunks(observations=False):
        starts = arrays.step_starts
        ids.append(arrays.episode_ids)
        lengths.append(arrays.episode_lengths)
        if len(arrays.episode_lengths):
            agent_steps.append(np.add.reduceat(arrays.acted.astype(np.int64), starts, axis=0)
                               * (arrays.episode_lengths > 0)[:, None])
        for start, length in zip(starts.tolist(), arrays.episode_lengths.tolist(), strict=True):
            stop = start + length
            ends.append(_end(arrays.episode_terminations[start:stop],
                             arrays.episode_truncations[start:stop]))
            deaths.append(agent_deaths(arrays.terminations[start:stop],
                                       arrays.acted[start:stop]))
    width = len(source.spec.possible_agents)
    steps = np.concatenate(agent_steps) if agent_steps else np.zeros((0, width), np.int64)
    return {"id": np.concatenate(ids).tolist() if ids else [],
            "length": np.concatenate(lengths).tolist() if lengths else [],
            "end": ends, "deaths": deaths, "agent_steps": steps.T.tolist()}


def _end(terminations: np.ndarray, truncations: np.ndarray) -> str:
    if len(terminations) and terminations[-1]:
        return "terminated"
    if len(truncations) and truncations[-1]:
        return "truncated"
    return "unfinished"


def agent_deaths(terminations: np.ndarray, acted: np.ndarray) -> int:
    """Agents of one episode that terminated before the last step at which any agent acted:
    they left while others played on (a turn-based game's last move ends both players at
    once, which is no death)."""
    acting = np.flatnonzero(acted.any(axis=1))
    if not len(acting):
        return 0
    ended = terminations[: int(acting[-1])].any(axis=0)
    return int(ended.sum())


def histograms(samples: list[np.ndarray], bins: int = HISTOGRAM_BINS,
               edges: np.ndarray | None = None) -> dict[str, Any]:
    """Counts of each sample over shared ``edges`` (by default ``bins`` equal bins over
    every sample's finite range): ``{"edges": [...], "counts": [[...], ...]}``."""
    if edges is None:
        edges = shared_edges(samples, bins)
    counts = [np.histogram(np.asarray(s, dtype=np.float64)[np.isfinite(s)], bins=edges)[0]
              .tolist() for s in samples]
    return {"edges": edges.tolist(), "counts": counts}


def shared_edges(samples: list[np.ndarray], bins: int = HISTOGRAM_BINS) -> np.ndarray:
    """``bins + 1`` equal-width edges over the finite values of every sample (a unit range
    around a single value)."""
    finite = [np.asarray(s, dtype=np.float64) for s in samples]
    values = np.concatenate([s[np.isfinite(s)] for s in finite]) if finite else np.zeros(0)
    low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
    if high <= low:
        low, high = low - 0.5, high + 0.5
    return np.linspace(low, high, bins + 1)


def json_safe(value: Any) -> Any:
    """``value`` with everything JSON cannot hold as text (numpy scalars as numbers)."""
    return json.loads(json.dumps(value, default=_plain))


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
