"""Whole chunks of episodes turned into the writer's :class:`LeafEpisode` objects at once.

:func:`marl_minari.storage.writer.episode_leaves` flattens one :class:`MultiAgentEpisode` at a time,
allocating its after-reset columns per episode. Converting tens of thousands of short episodes,
that per-episode work dominates; here the same leaves (same paths, dtypes, order and rows) are
built once per chunk with vectorised numpy, and each episode gets views into them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np

from marl_minari.format import layout
from marl_minari.format.spaces import leaves
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.episode_writer import LeafEpisode

Rows = Literal["obs", "step"]


def chunk_leaves(arrays: MultiAgentArrays) -> list[tuple[str, np.ndarray, Rows]]:
    """Every HDF5 dataset of the chunk's episodes as ``(path, rows of all episodes, kind)``.

    ``obs`` leaves have ``T + 1`` rows per episode, ``step`` leaves ``T``; the order and dtypes
    are those of :func:`marl_minari.storage.writer.episode_leaves`.
    """
    out: list[tuple[str, np.ndarray, Rows]] = []
    for agent in arrays.possible_agents:
        out += [(p, v, "obs") for p, v in leaves(arrays.observations[agent],
                                                   f"observations/{agent}")]
        out += [(p, v, "step") for p, v in leaves(arrays.actions[agent], f"actions/{agent}")]
    out.append(("rewards", np.asarray(arrays.team_rewards, dtype=np.float64), "step"))
    out.append(("terminations", np.asarray(arrays.episode_terminations, dtype=bool), "step"))
    out.append(("truncations", np.asarray(arrays.episode_truncations, dtype=bool), "step"))
    base = f"infos/{layout.INFOS_GROUP}"
    obs_rows = arrays.obs_rows
    rows = len(obs_rows) + len(arrays.episode_lengths)

    def after_reset(values: np.ndarray, dtype: Any) -> np.ndarray:
        column = np.zeros((rows, *values.shape[1:]), dtype=dtype)
        column[obs_rows + 1] = values
        return column

    out.append((f"{base}/{layout.AGENT_REWARDS}", after_reset(arrays.rewards, np.float64), "obs"))
    out.append((f"{base}/{layout.AGENT_TERMINATIONS}", after_reset(arrays.terminations, bool),
                "obs"))
    out.append((f"{base}/{layout.AGENT_TRUNCATIONS}", after_reset(arrays.truncations, bool),
                "obs"))
    out.append((f"{base}/{layout.ACTIVE}", np.asarray(arrays.active, dtype=bool), "obs"))
    acted = np.zeros((rows, len(arrays.possible_agents)), dtype=bool)
    acted[obs_rows] = arrays.acted
    out.append((f"{base}/{layout.ACTED}", acted, "obs"))
    if arrays.state is not None:
        out.append((f"{base}/{layout.STATE}", np.asarray(arrays.state), "obs"))
    for agent, tree in (arrays.agent_infos or {}).items():
        out += [(p, v, "obs") for p, v in leaves(tree, f"{base}/{layout.AGENT_INFOS}/{agent}")]
    for name, values in arrays.extras.items():
        out.append((f"{base}/{layout.EXTRAS}/{name}", np.asarray(values), "obs"))
    return out


def leaf_episodes(arrays: MultiAgentArrays, seeds: Sequence[int | None],
                  options: Sequence[dict[str, Any] | None]) -> Iterator[LeafEpisode]:
    """The chunk's episodes, in order, as :class:`LeafEpisode` objects (views, no copies)."""
    columns = chunk_leaves(arrays)
    lengths = arrays.episode_lengths.tolist()
    step = 0
    for position, length in enumerate(lengths):
        obs = step + position
        yield LeafEpisode(
            leaves=[(path, values[obs:obs + length + 1] if kind == "obs"
                     else values[step:step + length]) for path, values, kind in columns],
            total_steps=length, seed=seeds[position], options=options[position])
        step += length
