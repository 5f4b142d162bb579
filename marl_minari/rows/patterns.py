"""Transition patterns over agent-step rows (pure numpy), and the row tables they take.

Patterns work on agent-step batches of :mod:`marl_minari.rows.tables` (each (dataset, episode,
agent) trajectory must be whole in the batch, which is checked):

* :func:`transitions`: ``(obs, action, reward, next_obs, discount)`` one step at a time.
* :func:`n_step`: n-step returns with a discount, cut at the end of the agent's trajectory.
* :func:`sequences`: fixed-length windows with a stride, padded at the end, with a mask.

The row builders of :mod:`marl_minari.rows.tables` and the column names of
:mod:`marl_minari.rows.columns` are importable from here too
(``marl_minari.rows.patterns.agent_step_rows``...). No ray import here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from marl_minari.errors import IncompleteTrajectoryError, InvalidOptionError
from marl_minari.rows.columns import (
    ACTED,
    ACTION,
    ACTIVE,
    AGENT_ID,
    AGENT_INDEX,
    AGENT_T,
    DATASET,
    DISCOUNT,
    EPISODE_ID,
    EPISODE_TERMINATED,
    EPISODE_TRUNCATED,
    INFO,
    LEGAL_MASK,
    LENGTH,
    MASK,
    N_STEPS,
    NEXT_ACTIVE,
    NEXT_INFO,
    NEXT_LEGAL_MASK,
    NEXT_OBS,
    NEXT_STATE,
    OBS,
    REWARD,
    START_T,
    STATE,
    TEAM_REWARD,
    TERMINATED,
    TRAJ_LEN,
    TRAJECTORY_KEYS,
    TRUNCATED,
    Batch,
    T,
    column,
    concat,
    flatten,
    group_starts,
    sort_codes,
    sort_rows,
    unflatten,
)
from marl_minari.rows.tables import (
    ROW_KINDS,
    agent_step_rows,
    build_rows,
    check_uniform_agents,
    episode_arrays,
    episode_rows,
    legal_masks,
    select_agents,
    step_rows,
)


def _trajectories(batch: Mapping[str, np.ndarray]) -> tuple[Batch, np.ndarray, np.ndarray]:
    """Sort ``batch`` by trajectory and step; return it with every row's group start/end.

    Raises:
        IncompleteTrajectoryError: some trajectory is not whole in the batch.
    """
    missing = [k for k in (EPISODE_ID, AGENT_INDEX, T, AGENT_T, TRAJ_LEN) if k not in batch]
    if missing:
        raise InvalidOptionError(f"patterns need agent-step rows (rows='agent_steps'); missing "
                                 f"columns {missing}")
    sorted_batch = sort_rows(batch, (DATASET, EPISODE_ID, AGENT_INDEX, AGENT_T))
    rows = len(sorted_batch[T])
    keys = [sort_codes(np.asarray(sorted_batch[k])) for k in (DATASET, EPISODE_ID, AGENT_INDEX)
            if k in sorted_batch]
    starts = group_starts(*keys) if rows else np.zeros(0, dtype=np.int64)
    ends = np.append(starts[1:], rows)[:len(starts)]
    sizes = ends - starts
    row_start = np.repeat(starts, sizes)
    row_end = np.repeat(ends, sizes)
    agent_t = np.asarray(sorted_batch[AGENT_T])
    traj_len = np.asarray(sorted_batch[TRAJ_LEN])
    expected = np.arange(rows, dtype=np.int64) - row_start
    if rows and (not np.array_equal(agent_t, expected)
                 or not np.array_equal(traj_len, row_end - row_start)):
        bad = int(np.flatnonzero((agent_t != expected) | (traj_len != row_end - row_start))[0])
        raise IncompleteTrajectoryError(
            f"the batch holds part of a trajectory (episode {sorted_batch[EPISODE_ID][bad]}, "
            f"agent {sorted_batch[AGENT_INDEX][bad]}): patterns need whole trajectories. On "
            "Ray Data, apply them with marl_minari.ray.map_pattern (whole blocks as "
            "batches); locally, pass whole episodes.")
    return sorted_batch, row_start, row_end


def n_step(batch: Mapping[str, np.ndarray], n: int = 1, gamma: float = 1.0) -> Batch:
    """n-step transitions of every agent-step row, cut at the end of its trajectory.

    For the row at trajectory position ``p`` with ``m = min(n, rows left in the trajectory)``:
    ``reward`` is ``sum(gamma**k * reward[p + k] for k < m)``; ``next_*`` columns,
    ``terminated`` and ``truncated`` come from row ``p + m - 1``; ``discount`` is
    ``gamma**m`` (0 when that row terminated), the factor for bootstrapping from
    ``next_obs``; ``n_steps`` is ``m``. Every other column is row ``p``'s. Rows come out sorted
    by (dataset, episode, agent, step).

    Raises:
        IncompleteTrajectoryError: a trajectory is not whole in the batch.
    """
    if n < 1:
        raise InvalidOptionError(f"n must be >= 1, got {n}")
    sorted_batch, _, row_end = _trajectories(batch)
    rows = len(row_end)
    position = np.arange(rows, dtype=np.int64)
    m = np.minimum(n, row_end - position)
    last = position + m - 1
    rewards = np.asarray(sorted_batch[REWARD], dtype=np.float64)
    total = np.zeros(rows, dtype=np.float64)
    for k in range(n):
        index = np.minimum(position + k, max(rows - 1, 0))
        total += np.where(k < m, float(gamma) ** k * rewards[index], 0.0)
    out: Batch = {}
    for name, value in sorted_batch.items():
        value = np.asarray(value)
        if name == REWARD:
            out[name] = total
        elif name in (TERMINATED, TRUNCATED) or name.startswith("next_"):
            out[name] = value[last]
        else:
            out[name] = value
    terminated = np.asarray(sorted_batch[TERMINATED], dtype=bool)[last]
    out[DISCOUNT] = np.where(terminated, 0.0, np.float64(gamma) ** m.astype(np.float64))
    out[N_STEPS] = m.astype(np.int64)
    return out


def transitions(batch: Mapping[str, np.ndarray], gamma: float = 1.0) -> Batch:
    """One-step transitions: :func:`n_step` with ``n=1`` (``discount = gamma * (1 - done)``)."""
    return n_step(batch, 1, gamma)


def window_offsets(rows: int, length: int, stride: int, pad: bool) -> np.ndarray:
    """Start offsets of the windows over a trajectory of ``rows`` rows.

    Without padding: every full window ``0, stride, 2 * stride, ...``. With padding: the same,
    plus the further windows needed until every row is in some window (the last ones padded);
    a trajectory shorter than ``length`` gives one padded window.
    """
    if pad:
        starts = np.arange(0, rows, stride, dtype=np.int64)
        keep = (starts == 0) | (starts - stride + length < rows)
        return starts[keep]
    return np.arange(0, max(rows - length, -1) + 1, stride, dtype=np.int64)


def sequences(batch: Mapping[str, np.ndarray], length: int, stride: int | None = None,
              pad: bool = True) -> Batch:
    """Fixed-length windows of each agent's trajectory, with a padding mask.

    Windows start every ``stride`` rows (default ``length``: no overlap) and never cross a
    trajectory (an episode of one agent). Output rows are windows: ``dataset``,
    ``episode_id``, ``agent_id``, ``agent_index``, ``traj_len`` are scalars; ``start_t`` is the
    step of the first row; ``mask`` ``(length,)`` is True at real rows; every other column is
    stacked to ``(length, ...)`` with fill values (0, False, "") where ``mask`` is False.

    Args:
        batch: agent-step rows holding whole trajectories.
        length: rows per window.
        stride: rows between window starts (``>= 1``).
        pad: emit padded windows at trajectory ends (see :func:`window_offsets`).

    Raises:
        IncompleteTrajectoryError: a trajectory is not whole in the batch.
    """
    stride = length if stride is None else stride
    if length < 1 or stride < 1:
        raise InvalidOptionError(f"length and stride must be >= 1, got {length}, {stride}")
    sorted_batch, row_start, row_end = _trajectories(batch)
    group_starts = np.unique(row_start) if len(row_start) else np.zeros(0, dtype=np.int64)
    first_rows: list[np.ndarray] = []
    for start in group_starts.tolist():
        size = int(row_end[start] - start)
        first_rows.append(start + window_offsets(size, length, stride, pad))
    first = np.concatenate(first_rows) if first_rows else np.zeros(0, dtype=np.int64)
    index = first[:, None] + np.arange(length, dtype=np.int64)[None, :]
    ends = row_end[first] if len(first) else np.zeros(0, dtype=np.int64)
    mask = index < ends[:, None]
    safe = np.where(mask, index, first[:, None]) if len(first) else index
    out: Batch = {}
    for name, value in sorted_batch.items():
        value = np.asarray(value)
        if name in TRAJECTORY_KEYS or name == TRAJ_LEN:
            out[name] = value[first]
            continue
        stacked = value[safe]
        fill = "" if value.dtype.kind in "OUS" else 0
        stacked[~mask] = fill
        out[name] = stacked
    out[START_T] = np.asarray(sorted_batch[T])[first].astype(np.int64)
    out[MASK] = mask
    return out


PATTERNS: dict[str, Any] = {"transitions": transitions, "n_step": n_step,
                            "sequences": sequences}
"""Pattern functions by name (used by the Ray helpers and the CLI)."""

__all__ = [
    "ACTED",
    "ACTION",
    "ACTIVE",
    "AGENT_ID",
    "AGENT_INDEX",
    "AGENT_T",
    "Batch",
    "DATASET",
    "DISCOUNT",
    "EPISODE_ID",
    "EPISODE_TERMINATED",
    "EPISODE_TRUNCATED",
    "INFO",
    "IncompleteTrajectoryError",
    "LEGAL_MASK",
    "LENGTH",
    "MASK",
    "NEXT_ACTIVE",
    "NEXT_INFO",
    "NEXT_LEGAL_MASK",
    "NEXT_OBS",
    "NEXT_STATE",
    "N_STEPS",
    "OBS",
    "PATTERNS",
    "REWARD",
    "ROW_KINDS",
    "START_T",
    "STATE",
    "T",
    "TEAM_REWARD",
    "TERMINATED",
    "TRAJECTORY_KEYS",
    "TRAJ_LEN",
    "TRUNCATED",
    "agent_step_rows",
    "build_rows",
    "check_uniform_agents",
    "column",
    "concat",
    "episode_arrays",
    "episode_rows",
    "flatten",
    "group_starts",
    "legal_masks",
    "n_step",
    "select_agents",
    "sequences",
    "sort_codes",
    "sort_rows",
    "step_rows",
    "transitions",
    "unflatten",
    "window_offsets",
]
