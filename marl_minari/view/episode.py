"""One episode as the page draws it: per agent on the environment's step axis, its reward and
return, actions, presence, ends, legal-action mask and image frames; the global state; whose
turn each step was in a turn-based game."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from gymnasium import spaces

from marl_minari.errors import InvalidOptionError
from marl_minari.format.spaces import is_image_space, leaf_spaces, leaves
from marl_minari.sources import DatasetSource
from marl_minari.storage.arrays import MultiAgentArrays, recorded_mask
from marl_minari.view.frames import FRAMES_PER_EPISODE, MAX_FRAMES, frame_rows, frames

MAX_COLUMNS: Final = 64
"""Most columns of a continuous action, a mask or a flattened state the page draws (every
``k``-th column beyond that, the page says which)."""


def episode_payload(source: DatasetSource, episode_id: int, *,
                    max_frames: int = MAX_FRAMES) -> dict[str, Any]:
    """What the page draws for the stored episode ``episode_id`` of ``source``.

    Args:
        source: an open source (the caller owns it).
        episode_id: a stored episode this source reads.
        max_frames: most image frames kept per agent (evenly spaced; 0 keeps none); fewer
            when the episode's image streams would pass :data:`FRAMES_PER_EPISODE`.

    Raises:
        InvalidOptionError: ``episode_id`` is not one of the source's episodes.
    """
    known = source.episode_indices
    if episode_id not in set(known.tolist()):
        raise InvalidOptionError(
            f"episode {episode_id} is not in {source.dataset_id} (it holds "
            f"{len(known)} episodes, ids {int(known.min()) if len(known) else 0} to "
            f"{int(known.max()) if len(known) else -1}): pick one of the episode table's ids")
    arrays = source.read([episode_id])
    spec = source.spec
    agents = list(spec.possible_agents)
    steps = int(arrays.episode_lengths[0])
    streams = image_streams(spec.observation_spaces, spec.state_space)
    kept_rows = frame_rows(steps + 1, min(max_frames, FRAMES_PER_EPISODE // max(streams, 1)))
    per_agent = []
    for column, agent in enumerate(agents):
        per_agent.append({
            "name": agent,
            "reward": arrays.rewards[:, column].tolist(),
            "return": np.cumsum(arrays.rewards[:, column]).tolist(),
            "acted": arrays.acted[:, column].astype(np.int8).tolist(),
            "active": arrays.active[:, column].astype(np.int8).tolist(),
            "terminated": np.flatnonzero(arrays.terminations[:, column]).tolist(),
            "truncated": np.flatnonzero(arrays.truncations[:, column]).tolist(),
            "action": action_track(arrays.actions[agent], spec.action_spaces[agent],
                                   arrays.acted[:, column]),
            "mask": _mask(arrays, agent),
            "frames": _agent_frames(arrays.observations[agent],
                                    spec.observation_spaces[agent], kept_rows),
        })
    turns = arrays.extras.get("agent_selection")
    return {
        "id": int(episode_id),
        "steps": steps,
        "team_reward": arrays.team_rewards.tolist(),
        "terminated": bool(steps and arrays.episode_terminations[-1]),
        "truncated": bool(steps and arrays.episode_truncations[-1]),
        "agents": per_agent,
        "turns": None if turns is None else np.asarray(turns).astype(np.int64).tolist(),
        "state": _state(arrays, spec.state_space, kept_rows),
        "frame_rows": kept_rows.tolist(),
    }


def image_streams(observation_spaces: dict[str, spaces.Space],
                  state_space: spaces.Space | None) -> int:
    """How many image streams an episode shows: agents with an image observation leaf, and
    an image state."""
    agents = sum(any(is_image_space(leaf) for _, leaf in leaf_spaces(space))
                 for space in observation_spaces.values())
    return agents + int(state_space is not None and is_image_space(state_space))


def action_track(actions: Any, space: spaces.Space, acted: np.ndarray) -> dict[str, Any]:
    """An agent's actions for the page: ``{"kind": "discrete", "values": [...],
    "labels": n}`` (``None`` where it did not act) for a ``Discrete`` space; ``{"kind":
    "continuous", "columns": [...], "values": [[...], ...]}`` (one list per column) for
    anything else made of numbers, its leaves flattened."""
    if isinstance(space, spaces.Discrete) and isinstance(actions, np.ndarray):
        values = (actions.astype(np.int64) - int(space.start)).tolist()
        return {"kind": "discrete", "labels": int(space.n), "start": int(space.start),
                "values": [v if did else None for v, did in zip(values, acted.tolist(),
                                                                  strict=True)]}
    columns: list[str] = []
    parts: list[np.ndarray] = []
    for (path, leaf), (_, _leaf_space) in zip(leaves(actions), leaf_spaces(space), strict=True):
        if leaf.dtype.kind not in "biuf":
            continue
        flat = leaf.reshape(len(leaf), -1).astype(np.float64)
        parts.append(flat)
        columns += [f"{path}[{i}]" if path else f"[{i}]" for i in range(flat.shape[1])] \
            if flat.shape[1] > 1 else [path or "action"]
    if not parts:
        return {"kind": "none", "columns": [], "values": []}
    joined = np.concatenate(parts, axis=1)
    picked = _columns(joined.shape[1])
    joined = joined[:, picked]
    joined[~acted.astype(bool)] = np.nan
    return {"kind": "continuous", "columns": [columns[i] for i in picked],
            "of": len(columns), "values": [_finite(col) for col in joined.T]}


def _mask(arrays: MultiAgentArrays, agent: str) -> dict[str, Any] | None:
    mask = recorded_mask(arrays, agent)
    if mask is None:
        return None
    flat = np.asarray(mask).reshape(len(mask), -1)
    picked = _columns(flat.shape[1])
    return {"actions": picked.tolist(), "of": flat.shape[1],
            "rows": flat[:, picked].astype(np.int8).tolist()}


def _agent_frames(observation: Any, space: spaces.Space, rows: np.ndarray) -> dict[str, Any]:
    """The first image leaf of an agent's observations as frames (``{}`` when none)."""
    for (path, leaf), (_, leaf_space) in zip(leaves(observation), leaf_spaces(space),
                                             strict=True):
        if is_image_space(leaf_space) and len(rows):
            return {"leaf": path, "images": frames(leaf, rows)}
    return {}


def _state(arrays: MultiAgentArrays, space: spaces.Space | None, rows: np.ndarray
           ) -> dict[str, Any] | None:
    """The global state: image frames for an image state, else a heatmap (rows x columns,
    each column scaled to its own range over the episode)."""
    if arrays.state is None or space is None:
        return None
    state = np.asarray(arrays.state)
    if is_image_space(space):
        return {"kind": "frames", "images": frames(state, rows) if len(rows) else []}
    flat = state.reshape(len(state), -1).astype(np.float64)
    picked = _columns(flat.shape[1])
    flat = flat[:, picked]
    low, high = np.nanmin(flat, axis=0), np.nanmax(flat, axis=0)
    scaled = (flat - low) / np.where(high > low, high - low, 1.0)
    return {"kind": "heatmap", "columns": picked.tolist(), "of": int(state[0].size),
            "low": _finite(low), "high": _finite(high),
            "rows": np.round(np.nan_to_num(scaled) * 255).astype(np.uint8).tolist()}


def _columns(width: int) -> np.ndarray:
    """The columns drawn out of ``width``: all up to :data:`MAX_COLUMNS`, else evenly spaced."""
    if width <= MAX_COLUMNS:
        return np.arange(width)
    return np.unique(np.linspace(0, width - 1, MAX_COLUMNS).round().astype(np.int64))


def _finite(values: np.ndarray) -> list[float | None]:
    """A list of floats with ``None`` for NaN and infinities (JSON has neither)."""
    values = np.asarray(values, dtype=np.float64)
    return [float(v) if np.isfinite(v) else None for v in values.tolist()]
