"""Columns of row tables (pure numpy): their names, and batches as dicts of them.

A *batch* is a ``dict`` of numpy columns with the same number of rows. The names here are
shared by the row builders (:mod:`marl_minari.rows.tables`), the patterns
(:mod:`marl_minari.rows.patterns`) and the Ray datasource. A space's leaves are flattened into
columns ``<prefix>`` (a leaf space) or ``<prefix>.<key>[.<key>...]`` (Dict keys; Tuple positions
are named ``_index_<i>`` as Minari names them); :func:`unflatten` rebuilds the tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from gymnasium import spaces

from marl_minari.format.spaces import Tree, build_tree, leaf_spaces, leaves

Batch = dict[str, np.ndarray]
"""Columns of equal length (the first axis is the row)."""

# Column names shared by the row builders, the patterns and the Ray datasource.
DATASET = "dataset"
EPISODE_ID = "episode_id"
AGENT_ID = "agent_id"
AGENT_INDEX = "agent_index"
T = "t"
AGENT_T = "agent_t"
TRAJ_LEN = "traj_len"
LENGTH = "length"
OBS = "obs"
NEXT_OBS = "next_obs"
ACTION = "action"
REWARD = "reward"
TERMINATED = "terminated"
TRUNCATED = "truncated"
ACTIVE = "active"
NEXT_ACTIVE = "next_active"
ACTED = "acted"
LEGAL_MASK = "legal_mask"
NEXT_LEGAL_MASK = "next_legal_mask"
STATE = "state"
EXTRAS = "extras"
NEXT_STATE = "next_state"
INFO = "info"
NEXT_INFO = "next_info"
TEAM_REWARD = "team_reward"
EPISODE_TERMINATED = "episode_terminated"
EPISODE_TRUNCATED = "episode_truncated"
DISCOUNT = "discount"
N_STEPS = "n_steps"
MASK = "mask"
START_T = "start_t"

TRAJECTORY_KEYS = (DATASET, EPISODE_ID, AGENT_ID, AGENT_INDEX)
"""Columns constant along one agent's trajectory in an episode."""


def column(*parts: str) -> str:
    """Join name parts into a column name (``column("obs", "agent_0") == "obs.agent_0"``)."""
    return ".".join(p for p in parts if p)


def flatten(prefix: str, tree: Tree) -> Batch:
    """``{column: array}`` for every leaf of ``tree``, named ``prefix[.path]``.

    Tree paths (``a/b``, ``_index_0``) become dotted suffixes (``prefix.a.b``).
    """
    return {column(prefix, path.replace("/", ".")): array for path, array in leaves(tree)}


def unflatten(batch: Mapping[str, np.ndarray], prefix: str, space: spaces.Space) -> Tree:
    """Rebuild the tree of ``space`` from the columns :func:`flatten` named ``prefix...``.

    Example: ``unflatten(rows, "obs", spec.observation_spaces["player_0"])`` returns
    ``{"action_mask": ..., "observation": ...}`` for a classic env.
    """
    by_path = {path: batch[column(prefix, path.replace("/", "."))]
               for path, _ in leaf_spaces(space)}
    return build_tree(space, by_path)


# --------------------------------------------------------------------------- batches


def row_starts_mask(*keys: np.ndarray) -> np.ndarray:
    """True at the first row of every run of equal ``keys`` (rows sorted by them)."""
    rows = len(keys[0])
    start = np.zeros(rows, dtype=bool)
    if rows:
        start[0] = True
        for key in keys:
            start[1:] |= key[1:] != key[:-1]
    return start


def group_starts(*keys: np.ndarray) -> np.ndarray:
    """First row of every run of equal ``keys`` (rows sorted by them)."""
    return np.flatnonzero(row_starts_mask(*keys)).astype(np.int64)


def concat(batches: Sequence[Batch]) -> Batch:
    """Concatenate batches with the same columns."""
    if not batches:
        return {}
    return {name: np.concatenate([b[name] for b in batches]) for name in batches[0]}


def sort_rows(batch: Mapping[str, np.ndarray], keys: Sequence[str] = (
        DATASET, EPISODE_ID, AGENT_INDEX, T)) -> Batch:
    """``batch`` sorted by ``keys`` (the present ones; string keys compare as text)."""
    present = [k for k in keys if k in batch]
    if not present:
        return dict(batch)
    codes = [sort_codes(np.asarray(batch[k])) for k in reversed(present)]
    order = np.lexsort(codes)
    return {k: np.asarray(v)[order] for k, v in batch.items()}


def sort_codes(values: np.ndarray) -> np.ndarray:
    """Sortable integer codes of a column (strings by text order, numbers as they are)."""
    if values.dtype.kind in "OUS":
        _, inverse = np.unique(values.astype(str), return_inverse=True)
        return inverse.reshape(-1)
    return values
