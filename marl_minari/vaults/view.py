"""The rows of the OG-MARL view, built from a chunk of episodes as a :class:`ViewPlan` says.

Pure numpy, shared by :func:`to_vault` and :func:`make_buffer`: each leaf is written by one
vectorised copy into the caller's arrays (a buffer's windows) or into new ones.
"""

from __future__ import annotations

import numpy as np

from marl_minari.errors import LayoutError, StepDataError
from marl_minari.format.spaces import leaves
from marl_minari.storage.arrays import MultiAgentArrays

from .step_rows import StepRows, integers_fit
from .view_plan import (
    ACTIONS,
    LEGALS,
    OBSERVATIONS,
    REWARDS,
    STATE,
    TERMINALS,
    TRUNCATIONS,
    AgentFlat,
    LegalsPlan,
    ViewPlan,
)


def _flat_rows(plan: AgentFlat, tree_leaves: dict[str, np.ndarray], rows: StepRows | None,
               out: np.ndarray) -> None:
    """Write the flattened leaves (their step rows ``rows``, all if ``None``) into ``out``."""
    for leaf in plan.leaves:
        target = out[:, leaf.offset:leaf.offset + leaf.size]
        if rows is None:
            target[...] = tree_leaves[leaf.path].reshape(len(out), leaf.size)
        else:
            rows.copy(tree_leaves[leaf.path], target)


def view_rows(plan: ViewPlan, arrays: MultiAgentArrays,
              out: dict[tuple[str, ...], np.ndarray] | None = None, *,
              written: frozenset[tuple[str, ...]] = frozenset()
              ) -> dict[tuple[str, ...], np.ndarray]:
    """The view rows (``S`` of them, one per step) of a chunk of episodes.

    Args:
        plan: the view.
        arrays: the chunk.
        out: ``{key: (S, ...) array}`` (C-contiguous, every key of ``plan.keys()``) to write
            the rows into, in place of new arrays: a buffer's windows, each written by one
            vectorised copy per leaf (no rows made in between). Returned.
        written: keys of ``out`` already holding their rows (read into a buffer): kept.

    Raises:
        StepDataError: a discrete action does not fit int32.
    """
    steps = int(arrays.episode_lengths.sum())
    step_rows = StepRows(arrays.episode_lengths, arrays.obs_rows)
    n = plan.num_agents
    rows: dict[tuple[str, ...], np.ndarray] = {} if out is None else out
    keys = plan.keys()

    def put(key: tuple[str, ...], values: np.ndarray) -> None:
        _put(rows, key, values, keys[key][1])

    def target(key: tuple[str, ...]) -> np.ndarray:
        """The rows of ``key`` to fill: the caller's window, or a new array."""
        if out is None:
            rows[key] = np.empty((steps, *keys[key][0]), dtype=keys[key][1])
        return _rows_view(rows[key], (steps, *keys[key][0]))

    width = int(np.prod(plan.obs_shape[1:], dtype=np.int64))
    obs_flat = _rows_view(target(OBSERVATIONS), (steps, n, width))
    for i, agent_plan in enumerate(plan.observations):
        obs_flat[:, i, agent_plan.size:] = plan.pad_value
    obs_leaves = {agent: dict(leaves(arrays.observations[agent])) for agent in plan.agents}
    for i, agent in enumerate(plan.agents):
        _flat_rows(plan.observations[i], obs_leaves[agent], step_rows, obs_flat[:, i])
    idle = ~arrays.acted
    if plan.zero_idle_observations and idle.any():
        obs_flat[idle] = 0.0
    _actions(plan, arrays, target(ACTIONS))
    put(REWARDS, arrays.rewards)
    if plan.dones == "team":
        terms = arrays.episode_terminations[:, None]
        truncs = arrays.episode_truncations[:, None]
    else:
        terms, truncs = arrays.terminations, arrays.truncations
    np.copyto(target(TERMINALS), terms | truncs if plan.terminals == "end" else terms,
              casting="unsafe")
    if plan.truncations:
        np.copyto(target(TRUNCATIONS), truncs, casting="unsafe")
    if plan.legals is not None:
        _legals(plan.legals, plan.agents, arrays, obs_leaves, step_rows, target(LEGALS))
    if plan.state == "env" and STATE not in written:
        if arrays.state is None:
            raise LayoutError("the plan needs the recorded global state, the data has none")
        step_rows.copy(arrays.state, _rows_view(target(STATE), (steps, -1)))
    elif plan.state == "observations":
        np.copyto(_rows_view(target(STATE), (steps, -1)), obs_flat.reshape(steps, -1),
                  casting="unsafe")
    for path, name, _, _ in plan.extras:
        step_rows.copy(arrays.extras[name], _rows_view(target(path), (steps, -1)))
    return rows


def _rows_view(target: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``target`` (C-contiguous) seen as ``shape``: a view, never a copy (writes must land)."""
    if not target.flags.c_contiguous:
        raise ValueError("view_rows writes into C-contiguous arrays only")
    return target.reshape(shape)


def _put(rows: dict[tuple[str, ...], np.ndarray], key: tuple[str, ...],
         values: np.ndarray, dtype: str) -> None:
    """``values`` as ``rows[key]``: copied (cast) into it if there, else cast to ``dtype``."""
    target = rows.get(key)
    if target is None:
        rows[key] = values.astype(dtype, copy=False)
    else:
        np.copyto(target, values.reshape(target.shape), casting="unsafe")


def _actions(plan: ViewPlan, arrays: MultiAgentArrays, out: np.ndarray) -> None:
    """Write the view's actions into ``out`` (``(S, *action_shape)``)."""
    if plan.actions is None:
        idle = None if arrays.acted.all() else ~arrays.acted
        for i, agent in enumerate(plan.agents):
            values = np.asarray(arrays.actions[agent])
            out[:, i] = values
            if not (integers_fit(values, out.dtype) or np.array_equal(out[:, i], values)):
                raise StepDataError(
                    f"actions of {agent!r} do not fit the vault's {plan.action_dtype} actions "
                    f"(values from {values.min()} to {values.max()})")
            if idle is not None and values[idle[:, i]].any():
                # The view gives an agent that did not act action 0 (legal under its mask)
                # and restores actions from the view: anything else would be lost.
                step = int(np.flatnonzero(idle[:, i] & (values != 0))[0])
                raise StepDataError(
                    f"agent {agent!r} did not act at step row {step} but its action there is "
                    f"{values[step]}, not the fill value 0 (docs/format.md, *Agents that leave "
                    "or join*); fix the dataset's actions")
        return
    flat = _rows_view(out, (len(out), plan.num_agents, -1))
    for i, agent in enumerate(plan.agents):
        flat[:, i, plan.actions[i].size:] = plan.pad_value
        _flat_rows(plan.actions[i], dict(leaves(arrays.actions[agent])), None, flat[:, i])


def _legals(plan: LegalsPlan, agents: tuple[str, ...], arrays: MultiAgentArrays,
            obs_leaves: dict[str, dict[str, np.ndarray]], step_rows: StepRows,
            out: np.ndarray) -> None:
    """Write every agent's legal-action mask into ``out`` (``(S, N, A)`` float32)."""
    # OG-MARL's convention for an agent that does not act (gone, or not its turn): only
    # action 0 is legal, so the logged action 0 is legal too.
    idle = ~step_rows.take(arrays.active) | ~arrays.acted
    unmasked = all(source is None for source in plan.sources) and min(plan.counts) == plan.width
    if unmasked:
        out.fill(1.0)  # every action legal: one contiguous write, not a strided one per agent
    for i, agent in enumerate(agents):
        source, count = plan.sources[i], plan.counts[i]
        if not unmasked:
            out[:, i, count:] = 0.0
        if source is None and not unmasked:
            out[:, i, :count] = 1.0
        elif source is not None:
            kind, path = source
            tree = (obs_leaves[agent] if kind == "observations" else dict(
                leaves((arrays.agent_infos or {}).get(agent, {}))))
            if path not in tree:
                raise LayoutError(f"agent {agent!r} has no {kind} leaf {path!r} for its legal "
                                  "actions")
            mask = tree[path]
            width = int(np.prod(mask.shape[1:], dtype=np.int64))
            out[:, i, width:count] = 0.0
            step_rows.copy(mask, out[:, i, :width])
        if idle[:, i].any():
            out[idle[:, i], i, :] = 0.0
            out[idle[:, i], i, 0] = 1.0
