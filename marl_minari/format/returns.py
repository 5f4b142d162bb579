"""Sums of rewards over steps, in the one order ``docs/format.md`` defines.

A return (of an episode, or of the steps between two turns of an AEC agent) is its rewards
added in row order, left to right, starting from ``0.0``, in float64: the order in which an
environment accumulates them, so the result is bit for bit what the env handed out. numpy's
``sum`` adds pairwise (and ``reduceat`` may too), which can differ in the last bits; every
reader, ``describe`` and the adapters compute returns here instead.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from marl_minari.errors import LayoutError

REWARD_AGGREGATIONS = ("sum", "mean", "max", "min")
"""How a team reward is made from the agents' rewards (``reward_aggregation``)."""


def sequential_sums(values: ArrayLike, starts: ArrayLike, ends: ArrayLike) -> np.ndarray:
    """``values[s:e]`` summed over rows for every ``(s, e)`` pair, left to right from ``0.0``.

    Args:
        values: ``(S, ...)`` rows (converted to float64).
        starts: ``(K,)`` first row of each segment.
        ends: ``(K,)`` row after the last of each segment (``end <= start``: an empty
            segment, whose sum is ``0.0``).

    Returns:
        ``(K, ...)`` float64 sums.
    """
    values = np.asarray(values, dtype=np.float64)
    starts = np.asarray(starts, dtype=np.int64)
    counts = np.maximum(np.asarray(ends, dtype=np.int64) - starts, 0)
    totals = np.zeros((len(starts), *values.shape[1:]), dtype=np.float64)
    live = np.flatnonzero(counts > 0)
    if not live.size:
        return totals
    # Segments of one length are gathered into a (segments, length, ...) block and summed by
    # one sequential accumulation along the length: one numpy call per distinct length.
    live = live[np.argsort(counts[live], kind="stable")]
    lengths, firsts = np.unique(counts[live], return_index=True)
    for length, group in zip(lengths.tolist(), np.split(live, firsts[1:]), strict=True):
        first = int(starts[group[0]])
        if np.array_equal(starts[group], first + length * np.arange(len(group))):
            block = values[first:first + length * len(group)].reshape(
                len(group), length, *values.shape[1:])  # back to back already: a view
        else:
            block = values[starts[group][:, None] + np.arange(length)]
        # 0.0 + (a + b + ...) has the bits of ((0.0 + a) + b) + ...: only a -0.0 differs.
        totals[group] = np.add.accumulate(block, axis=1)[:, -1] + 0.0
    return totals


def episode_returns(rewards: ArrayLike, lengths: ArrayLike) -> np.ndarray:
    """``(E, ...)`` return of each of ``E`` episodes stored back to back in ``rewards``.

    Args:
        rewards: ``(sum(lengths), ...)`` step rows, episode after episode.
        lengths: ``(E,)`` steps per episode.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    return sequential_sums(rewards, ends - lengths, ends)


def team_rewards(rewards: ArrayLike, rewarded: ArrayLike, how: str) -> np.ndarray:
    """``(T,)`` team reward of each step from ``(T, N)`` per-agent rewards.

    Only the agents ``rewarded`` at a step (those in its reward dict) count; a step with none
    gets ``0.0``. ``how`` is the dataset's ``reward_aggregation``: ``"sum"`` (added in
    ``possible_agents`` order from ``0.0``), ``"mean"`` (that sum over the number rewarded),
    ``"max"`` or ``"min"``.
    """
    values = np.asarray(rewards, dtype=np.float64)
    mask = np.asarray(rewarded, dtype=bool)
    if how in ("sum", "mean"):
        total = np.zeros(len(values), dtype=np.float64)
        for column in range(values.shape[1]):  # numpy's sum adds many columns pairwise
            total += np.where(mask[:, column], values[:, column], 0.0)
        return total if how == "sum" else total / np.maximum(mask.sum(axis=1), 1)
    if how == "max":
        return np.where(mask.any(axis=1), np.where(mask, values, -np.inf).max(axis=1), 0.0)
    if how == "min":
        return np.where(mask.any(axis=1), np.where(mask, values, np.inf).min(axis=1), 0.0)
    raise LayoutError(f"reward_aggregation must be 'sum', 'mean', 'max' or 'min', got {how!r}")
