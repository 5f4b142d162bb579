"""Rows of a foreign vault's (or a Flashbax buffer's) episodes as dataset arrays.

The rows of whole episodes, found by :mod:`marl_minari.vaults.episodes`, become
:class:`~marl_minari.storage.arrays.MultiAgentArrays` as its key layout and import options
say: a final observation row is added per episode (vaults have none), legal masks become the
agents' ``action_mask`` infos, agents stored as OG-MARL stores dead agents are inactive, and
an episode ends terminated unless a truncation flag is set at its end or it was cut at the end
of the data. A ``dones`` flag (Mava's ``done``, no terminated/truncated split) counts as
terminated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.errors import StepDataError
from marl_minari.format import layout
from marl_minari.format.returns import team_rewards
from marl_minari.format.spaces import build_tree, cast_leaf, concat_trees, map_tree, rows_outside
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.arrays import MultiAgentArrays

from .layout import ImportLayout, ImportOptions
from .view_plan import AgentFlat

Rows = dict[tuple[str, ...], np.ndarray]


def arrays_from_rows(layout_: ImportLayout, options: ImportOptions, spec: MultiAgentSpec,
                     rows: Rows, lengths: np.ndarray, first_id: int,
                     where: str) -> MultiAgentArrays:
    """Whole episodes (``S`` step rows of every leaf, by leaf path, episode after episode) as
    the arrays of the layout.

    An episode whose last step has no done flag (an unfinished episode kept with
    ``trailing="truncate"``) ends truncated.
    """
    keys = layout_.keys

    def role(name: str) -> np.ndarray:
        return rows[keys.paths[name]]

    steps, count = int(lengths.sum()), len(lengths)
    step_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    obs_rows = np.arange(steps, dtype=np.int64) + np.repeat(np.arange(count), lengths)
    final_rows = step_starts + np.arange(count) + lengths
    last_steps = step_starts + lengths - 1

    def with_final(values: np.ndarray) -> np.ndarray:
        out = np.zeros((steps + count, *values.shape[1:]), dtype=values.dtype)
        out[obs_rows] = values
        if options.final_observation == "repeat":
            out[final_rows] = values[last_steps]
        return out

    n = len(layout_.agents)
    obs = role("observations")
    dead = np.zeros((steps, n), dtype=bool)
    masks = None
    if layout_.has("legals"):
        legals = role("legals")
        masks = legals.astype(np.int8)
        if options.infer_dead:
            noop = np.zeros(legals.shape[-1], dtype=legals.dtype)
            noop[0] = 1
            dead = (legals == noop).all(axis=-1) & (obs.reshape(steps, n, -1) == 0).all(axis=-1)
            masks[dead] = 0
    observations = {}
    flat_obs = obs.reshape(steps, n, -1)
    for i, agent in enumerate(layout_.agents):
        observations[agent] = unflatten(spec.observation_spaces[agent], layout_.obs_flat[i],
                                         flat_obs[:, i], with_final,
                                         f"{where}: observations of {agent!r}")
    actions = {}
    for i, agent in enumerate(layout_.agents):
        if layout_.act_flat is None:
            actions[agent] = cast_leaf(role("actions")[:, i], np.dtype(np.int64),
                                       f"{where}: actions of {agent!r}")
        else:
            actions[agent] = unflatten(spec.action_spaces[agent], layout_.act_flat[i],
                                        role("actions").reshape(steps, n, -1)[:, i], None,
                                        f"{where}: actions of {agent!r}")
    check_actions(spec, actions, np.ones((steps, n), dtype=bool), first_id, lengths,
                   where)
    rewards = role("rewards").astype(np.float64)
    terms = role(keys.done_role) != 0
    truncs = role("truncations") != 0 if keys.has("truncations") else np.zeros_like(terms)
    episode_terms = np.zeros(steps, dtype=bool)
    episode_truncs = np.zeros(steps, dtype=bool)
    # OG-MARL sets terminals at every episode end and truncations beside it at a time limit:
    # an end with a truncation flag is a truncation (as docs/format.md ranks the two).
    ended_terminated = terms[last_steps].any(axis=1) & ~truncs[last_steps].any(axis=1)
    episode_terms[last_steps] = ended_terminated
    episode_truncs[last_steps] = ~ended_terminated
    active = with_final(~dead)
    agent_infos = None
    if masks is not None:
        agent_infos = {agent: {layout.ACTION_MASK_KEY: with_final(masks[:, i])}
                       for i, agent in enumerate(layout_.agents)}
    return MultiAgentArrays(
        possible_agents=layout_.agents,
        episode_ids=np.arange(first_id, first_id + count, dtype=np.int64),
        episode_lengths=lengths,
        observations=observations,
        actions=actions,
        rewards=rewards, terminations=terms, truncations=truncs,
        active=active, acted=np.ones((steps, n), dtype=bool),
        team_rewards=team_rewards(rewards, np.ones(rewards.shape, dtype=bool),
                                  options.reward_aggregation),
        episode_terminations=episode_terms, episode_truncations=episode_truncs,
        state=with_final(role("state")) if keys.has("state") else None,
        agent_infos=agent_infos,
        extras={name: with_final(rows[path]) for path, name in layout_.extras},
    )


def check_actions(spec: MultiAgentSpec, actions: dict[str, Any], acted: np.ndarray,
                   first_id: int, lengths: np.ndarray, where: str) -> None:
    """Refuse actions outside their agent's action space (a vault holds bare numbers)."""
    for i, agent in enumerate(spec.possible_agents):
        bad = np.flatnonzero(rows_outside(spec.action_spaces[agent], actions[agent])
                             & acted[:, i])
        if bad.size:
            row = int(bad[0])
            episode = int(np.searchsorted(np.cumsum(lengths), row, side="right"))
            step = row - int(np.concatenate([[0], np.cumsum(lengths)])[episode])
            value = map_tree(lambda a, r=row: np.asarray(a[r]).tolist(), actions[agent])
            raise StepDataError(
                f"{where}: the action of {agent!r} at step {step} of episode "
                f"{first_id + episode} is {value!r}, outside its action space "
                f"{spec.action_spaces[agent]}; pass the right action_spaces= or fix the vault.")


def unflatten(space: spaces.Space, flat: AgentFlat, values: np.ndarray,
               with_final: Callable[[np.ndarray], np.ndarray] | None, where: str) -> Any:
    """An agent's tree from its flattened rows (observations get their final rows added),
    each leaf cast to its space's dtype (:func:`~marl_minari.format.spaces.cast_leaf`: the
    rows named in an error are the step rows of the episodes imported together)."""
    by_path = {}
    for leaf in flat.leaves:
        stored = values[:, leaf.offset:leaf.offset + leaf.size].reshape(len(values), *leaf.shape)
        part = cast_leaf(stored, np.dtype(leaf.dtype),
                         f"{where}/{leaf.path}" if leaf.path else where)
        by_path[leaf.path] = part if with_final is None else with_final(part)
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return build_tree(space, by_path)
    return by_path[""]


def concat_arrays(parts: list[MultiAgentArrays]) -> MultiAgentArrays:
    """The episodes of ``parts`` (one structure), one after another, as one arrays object."""
    first = parts[0]

    def column(name: str) -> Any:
        values = [getattr(p, name) for p in parts]
        if values[0] is None:
            return None
        if isinstance(values[0], np.ndarray):
            return np.concatenate(values)
        return concat_trees(values)

    return MultiAgentArrays(
        possible_agents=first.possible_agents,
        **{name: column(name) for name in (
            "episode_ids", "episode_lengths", "observations", "actions", "rewards",
            "terminations", "truncations", "active", "acted", "team_rewards",
            "episode_terminations", "episode_truncations", "state", "agent_infos",
            "extras")})
