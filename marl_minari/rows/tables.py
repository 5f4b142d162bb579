"""Row tables of multi-agent data (pure numpy): one batch of columns from per-agent arrays.

A *batch* is a ``dict`` of numpy columns with the same number of rows: what the row builders
make of :class:`~marl_minari.storage.reader.MultiAgentArrays` and what
``ray.data.Dataset.map_batches(..., batch_format="numpy")`` hands a function, so the same
calls run on local bulk arrays and on Ray Data and give identical rows (``docs/ray.md``).
The transition patterns over these rows live in :mod:`marl_minari.rows.patterns`.

* :func:`agent_step_rows`: one row per agent and step (by default only where the agent
  acted), ordered by episode, then agent, then step.
* :func:`step_rows`: one row per environment step, per-agent columns side by side.
* :func:`episode_rows`: one row per episode, every column a whole episode.

Columns are named as :mod:`marl_minari.rows.columns` says; in step and episode rows the agent
name comes first: ``obs.<agent>.<key>``. Column names are singular
(``action``, ``reward``, ``terminated``): a row is one sample, as in RLlib's and Ray's
single-row schemas, while :class:`~marl_minari.storage.reader.MultiAgentArrays` fields (and Minari's
episode fields) are plural because each holds every step. No ray import here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from gymnasium import spaces

from marl_minari.errors import IncompatibleSourcesError, InvalidOptionError
from marl_minari.format import layout
from marl_minari.format.spaces import Tree, build_tree, leaf_spaces
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.rows.columns import (
    ACTED,
    ACTION,
    ACTIVE,
    AGENT_ID,
    AGENT_INDEX,
    AGENT_T,
    DATASET,
    EPISODE_ID,
    EPISODE_TERMINATED,
    EPISODE_TRUNCATED,
    EXTRAS,
    INFO,
    LEGAL_MASK,
    LENGTH,
    NEXT_ACTIVE,
    NEXT_INFO,
    NEXT_LEGAL_MASK,
    NEXT_OBS,
    NEXT_STATE,
    OBS,
    REWARD,
    STATE,
    TEAM_REWARD,
    TERMINATED,
    TRAJ_LEN,
    TRUNCATED,
    Batch,
    T,
    column,
    flatten,
    group_starts,
    row_starts_mask,
)
from marl_minari.storage.arrays import MultiAgentArrays, recorded_mask

ROW_KINDS = ("steps", "agent_steps", "episodes")


def legal_masks(arrays: MultiAgentArrays, spec: MultiAgentSpec) -> dict[str, np.ndarray | None]:
    """``{agent: (S + E, A) bool}``: legal actions at every observation row.

    The recorded mask (:func:`marl_minari.format.legal_actions.recorded_mask`: the observation's
    ``action_mask`` first, then ``info["action_mask"]``), else all True for a ``Discrete``
    action space. ``None`` for an agent whose action space is not ``Discrete`` and that has
    no recorded mask.
    """
    out: dict[str, np.ndarray | None] = {}
    rows = len(arrays.active)
    for agent in spec.possible_agents:
        mask = recorded_mask(arrays, agent)
        space = spec.action_spaces[agent]
        if mask is None and isinstance(space, spaces.Discrete):
            mask = np.ones((rows, int(space.n)), dtype=bool)
        out[agent] = None if mask is None else mask.astype(bool, copy=False)
    return out


def _agent_info_columns(arrays: MultiAgentArrays, agent: str) -> Batch:
    infos = (arrays.agent_infos or {}).get(agent)
    return {} if not infos else flatten("", infos)


def _leaf_signature(batch: Mapping[str, np.ndarray]) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {k: (np.asarray(v).dtype.str, np.asarray(v).shape[1:]) for k, v in batch.items()}


def select_agents(spec: MultiAgentSpec, agents: Sequence[str] | None) -> tuple[str, ...]:
    """``agents`` in ``possible_agents`` order (all when ``None``); unknown names raise."""
    if agents is None:
        return spec.possible_agents
    unknown = [a for a in agents if a not in spec.possible_agents]
    if unknown:
        raise InvalidOptionError(f"unknown agents {unknown}; the dataset has "
                                 f"{spec.possible_agents}")
    return tuple(a for a in spec.possible_agents if a in set(agents))


def check_uniform_agents(spec: MultiAgentSpec, agents: Sequence[str]) -> None:
    """Raise unless ``agents`` share observation and action spaces (one row schema).

    Raises:
        IncompatibleSourcesError: names the first agent that differs.
    """
    first = agents[0]
    for agent in agents[1:]:
        for what, by_agent in (("observation", spec.observation_spaces),
                               ("action", spec.action_spaces)):
            if by_agent[agent] != by_agent[first]:
                raise IncompatibleSourcesError(
                    f"agent {agent!r} has {what} space {by_agent[agent]}, agent {first!r} has "
                    f"{by_agent[first]}: agent-step rows need one schema. Pass agents=[...] "
                    "with agents of equal spaces (e.g. one team at a time).")


def agent_step_rows(arrays: MultiAgentArrays, spec: MultiAgentSpec, *, dataset: str = "",
                    agents: Sequence[str] | None = None, only_acted: bool = True) -> Batch:
    """One row per (step, agent): the agent's transition at that step.

    Rows are ordered by episode, then agent (``possible_agents`` order), then step.

    Columns (``K`` rows):

    - ``dataset`` (str): the source name given.
    - ``episode_id`` (int64): the dataset's episode index.
    - ``agent_id`` (str), ``agent_index`` (int64): the agent, its position in
      ``possible_agents``.
    - ``t`` (int64): environment step of the action within the episode.
    - ``agent_t``, ``traj_len`` (int64): row within this agent's trajectory in the episode,
      and the trajectory's row count (patterns use them to check they see whole
      trajectories).
    - ``obs[.key...]``: observation the action was taken from (leaves flattened, see
      :func:`flatten`); ``next_obs[.key...]``: the next observation (below).
    - ``action[.key...]``: the action.
    - ``reward`` (float64): the agent's reward up to the next observation.
    - ``terminated`` (bool): the agent terminated at the next observation.
    - ``truncated`` (bool): the agent was truncated there, or the next observation is the
      episode's last row and it did not terminate (a cut episode ends every trajectory).
    - ``active``, ``next_active`` (bool): the agent was present at ``obs`` / ``next_obs``.
    - ``acted`` (bool): the agent acted at this step.
    - ``legal_mask``, ``next_legal_mask`` (bool ``(A,)``): legal actions at ``obs`` /
      ``next_obs`` (see :func:`legal_masks`; absent when the action space is not Discrete
      and no mask was recorded).
    - ``state``, ``next_state``: global state, when the dataset has one.
    - ``info.<path>``, ``next_info.<path>``: the agent's recorded info leaves, when infos
      were recorded and all selected agents have the same info structure.

    "Next observation": in a parallel dataset, the observation after the step (row
    ``t + 1``) with that step's reward and flags. In a turn-based (AEC) dataset, the agent's
    observation at its next turn (or the episode's last row if it has none), with the rewards
    credited to it until then, exactly as :func:`marl_minari.rows.turns.agent_transitions`.

    Args:
        arrays: episodes read with :meth:`MultiAgentDataset.to_arrays`.
        spec: the dataset's spec.
        dataset: value of the ``dataset`` column.
        agents: agents to emit (default all); they must share their spaces.
        only_acted: keep only rows where the agent acted (else every agent at every step,
            absent ones with fill values and ``acted`` false).

    Raises:
        IncompatibleSourcesError: the selected agents have different spaces.
    """
    selected = select_agents(spec, agents)
    check_uniform_agents(spec, selected)
    positions = np.asarray([spec.possible_agents.index(a) for a in selected], dtype=np.int64)
    steps = len(arrays.rewards)
    step_episode = arrays.step_episode
    agent_col = np.repeat(positions, steps)
    step_col = np.tile(np.arange(steps, dtype=np.int64), len(positions))
    if only_acted:
        keep = arrays.acted[step_col, agent_col]
        agent_col, step_col = agent_col[keep], step_col[keep]
    order = np.lexsort((step_col, agent_col, step_episode[step_col]))
    agent_col, step_col = agent_col[order], step_col[order]
    episode_pos = step_episode[step_col]
    rows = len(step_col)
    obs_rows = arrays.obs_rows[step_col]
    next_rows, reward, flag_steps = _turn_bounds(arrays, step_col, agent_col, obs_rows,
                                                 episode_pos, only_acted)
    terminated = arrays.terminations[flag_steps, agent_col].astype(bool)
    final_rows = (arrays.obs_starts + arrays.episode_lengths)[episode_pos]
    truncated = arrays.truncations[flag_steps, agent_col].astype(bool) | (
        (next_rows == final_rows) & ~terminated)

    group_start = group_starts(episode_pos, agent_col)
    starts_of_row = (group_start[np.cumsum(row_starts_mask(episode_pos, agent_col)) - 1]
                     if rows else np.zeros(0, dtype=np.int64))
    sizes = np.diff(np.append(group_start, rows))
    traj_len = np.repeat(sizes, sizes).astype(np.int64)

    names = np.asarray(spec.possible_agents, dtype=object)
    out: Batch = {
        DATASET: np.full(rows, dataset, dtype=object),
        EPISODE_ID: arrays.episode_ids[episode_pos].astype(np.int64),
        AGENT_ID: names[agent_col],
        AGENT_INDEX: agent_col.astype(np.int64),
        T: (step_col - arrays.step_starts[episode_pos]).astype(np.int64),
        AGENT_T: (np.arange(rows, dtype=np.int64) - starts_of_row).astype(np.int64),
        TRAJ_LEN: traj_len,
    }
    masks = legal_masks(arrays, spec)
    per_agent: list[tuple[str, dict[str, Batch], np.ndarray]] = [
        (OBS, {a: flatten(OBS, arrays.observations[a]) for a in selected}, obs_rows),
        (NEXT_OBS, {a: flatten(NEXT_OBS, arrays.observations[a]) for a in selected}, next_rows),
        (ACTION, {a: flatten(ACTION, arrays.actions[a]) for a in selected}, step_col),
    ]
    present = {a: m for a in selected if (m := masks[a]) is not None}
    if len(present) == len(selected):
        per_agent.append((LEGAL_MASK, {a: {LEGAL_MASK: present[a]} for a in selected},
                          obs_rows))
        per_agent.append((NEXT_LEGAL_MASK, {a: {NEXT_LEGAL_MASK: present[a]}
                                            for a in selected}, next_rows))
    infos = {a: _agent_info_columns(arrays, a) for a in selected}
    signatures = [_leaf_signature(infos[a]) for a in selected]
    if infos[selected[0]] and all(s == signatures[0] for s in signatures):
        per_agent.append((INFO, {a: {column(INFO, k): v for k, v in infos[a].items()}
                                 for a in selected}, obs_rows))
        per_agent.append((NEXT_INFO, {a: {column(NEXT_INFO, k): v for k, v in infos[a].items()}
                                      for a in selected}, next_rows))
    for _, by_agent, source_rows in per_agent:
        for name in by_agent[selected[0]]:
            out[name] = _gather(by_agent, selected, positions, agent_col, source_rows, name)
    out[REWARD] = reward
    out[TERMINATED] = terminated
    out[TRUNCATED] = truncated
    out[ACTIVE] = arrays.active[obs_rows, agent_col]
    out[NEXT_ACTIVE] = arrays.active[next_rows, agent_col]
    out[ACTED] = arrays.acted[step_col, agent_col]
    if arrays.state is not None:
        out[STATE] = arrays.state[obs_rows]
        out[NEXT_STATE] = arrays.state[next_rows]
    return out


def _turn_bounds(arrays: MultiAgentArrays, step_col: np.ndarray, agent_col: np.ndarray,
                 obs_rows: np.ndarray, episode_pos: np.ndarray, only_acted: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Next observation row, reward and flag step of every (step, agent) row.

    Parallel datasets: the next row, that step's reward and flags. Turn-based (AEC) datasets
    (``extras/agent_selection`` present): the agent's next turn (or the episode's last row),
    the rewards credited up to it (summed in step order, as ``last()`` accumulates them) and
    the flags there, as :func:`marl_minari.rows.turns.agent_transitions` defines them.
    """
    selection = arrays.extras.get(layout.AGENT_SELECTION)
    if selection is None:
        return obs_rows + 1, arrays.rewards[step_col, agent_col].astype(np.float64), step_col
    if not only_acted:
        raise InvalidOptionError("only_acted=False has no meaning for a turn-based (AEC) "
                                 "dataset: an agent's transitions go from turn to turn")
    final_rows = arrays.obs_starts + arrays.episode_lengths
    selection = np.asarray(selection).reshape(-1)
    next_rows = np.empty_like(obs_rows)
    for position in np.unique(agent_col).tolist():
        where = agent_col == position
        boundaries = np.union1d(np.flatnonzero(selection == position), final_rows)
        next_rows[where] = boundaries[np.searchsorted(boundaries, obs_rows[where],
                                                      side="right")]
    end_steps = next_rows - episode_pos
    reward = np.zeros(len(step_col), dtype=np.float64)
    counts = end_steps - step_col
    live = np.flatnonzero(counts > 0)
    offset = 0
    while live.size:
        values = arrays.rewards[step_col[live] + offset, agent_col[live]]
        reward[live] = reward[live] + values.astype(np.float64)
        offset += 1
        live = live[counts[live] > offset]
    return next_rows, reward, end_steps - 1


def _gather(by_agent: dict[str, Batch], selected: Sequence[str], positions: np.ndarray,
            agent_col: np.ndarray, source_rows: np.ndarray, name: str) -> np.ndarray:
    first = by_agent[selected[0]][name]
    out = np.empty((len(agent_col), *first.shape[1:]), dtype=first.dtype)
    for agent, position in zip(selected, positions.tolist(), strict=True):
        where = agent_col == position
        out[where] = by_agent[agent][name][source_rows[where]]
    return out


def step_rows(arrays: MultiAgentArrays, spec: MultiAgentSpec, *, dataset: str = "") -> Batch:
    """One row per environment step, per-agent columns side by side.

    Columns (``S`` rows): ``dataset``, ``episode_id``, ``t``; per agent ``obs.<agent>[.key]``,
    ``next_obs.<agent>[.key]``, ``action.<agent>[.key]``, ``legal_mask.<agent>``,
    ``next_legal_mask.<agent>`` (see :func:`legal_masks`), ``info.<agent>.<path>`` and
    ``next_info.<agent>.<path>`` (recorded infos); ``(N,)`` vectors in ``possible_agents``
    order: ``reward``, ``terminated``, ``truncated``, ``acted``, ``active``, ``next_active``;
    scalars ``team_reward``, ``episode_terminated``, ``episode_truncated``; ``state`` and
    ``next_state`` when the dataset has a global state.
    """
    step_episode = arrays.step_episode
    obs_rows, next_rows = arrays.obs_rows, arrays.next_obs_rows
    steps = len(obs_rows)
    out: Batch = {
        DATASET: np.full(steps, dataset, dtype=object),
        EPISODE_ID: arrays.episode_ids[step_episode].astype(np.int64),
        T: (np.arange(steps, dtype=np.int64) - arrays.step_starts[step_episode]),
    }
    masks = legal_masks(arrays, spec)
    for agent in spec.possible_agents:
        for name, value in flatten(column(OBS, agent), arrays.observations[agent]).items():
            out[name] = value[obs_rows]
        for name, value in flatten(column(NEXT_OBS, agent), arrays.observations[agent]).items():
            out[name] = value[next_rows]
        out.update(flatten(column(ACTION, agent), arrays.actions[agent]))
        mask = masks[agent]
        if mask is not None:
            out[column(LEGAL_MASK, agent)] = mask[obs_rows]
            out[column(NEXT_LEGAL_MASK, agent)] = mask[next_rows]
        for path, value in _agent_info_columns(arrays, agent).items():
            out[column(INFO, agent, path)] = value[obs_rows]
            out[column(NEXT_INFO, agent, path)] = value[next_rows]
    out.update({REWARD: arrays.rewards, TERMINATED: arrays.terminations,
                TRUNCATED: arrays.truncations, ACTED: arrays.acted,
                ACTIVE: arrays.active[obs_rows], NEXT_ACTIVE: arrays.active[next_rows],
                TEAM_REWARD: arrays.team_rewards, EPISODE_TERMINATED: arrays.episode_terminations,
                EPISODE_TRUNCATED: arrays.episode_truncations})
    if arrays.state is not None:
        out[STATE] = arrays.state[obs_rows]
        out[NEXT_STATE] = arrays.state[next_rows]
    return out


def episode_rows(arrays: MultiAgentArrays, spec: MultiAgentSpec, *, dataset: str = "") -> Batch:
    """One row per episode; every other column holds a whole episode (object arrays).

    Columns (``E`` rows): ``dataset``, ``episode_id``, ``length`` (``T``); per agent
    ``obs.<agent>[.key]`` ``(T + 1, ...)``, ``action.<agent>[.key]`` ``(T, ...)``,
    ``legal_mask.<agent>`` ``(T + 1, A)``, ``info.<agent>.<path>`` ``(T + 1, ...)``;
    ``reward``, ``terminated``, ``truncated``, ``acted`` ``(T, N)``; ``active`` ``(T + 1, N)``;
    ``team_reward``, ``episode_terminated``, ``episode_truncated`` ``(T,)``; ``state``
    ``(T + 1, ...)`` when present; ``extras.<name>`` ``(T + 1, ...)`` (e.g.
    ``extras.agent_selection`` of turn-based datasets). :func:`episode_arrays` inverts it.
    """
    lengths = arrays.episode_lengths
    step_bounds = np.append(arrays.step_starts, lengths.sum()).astype(np.int64)
    obs_bounds = step_bounds + np.arange(len(step_bounds), dtype=np.int64)
    out: Batch = {
        DATASET: np.full(len(lengths), dataset, dtype=object),
        EPISODE_ID: arrays.episode_ids.astype(np.int64),
        LENGTH: lengths.astype(np.int64),
    }

    def split(value: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        pieces = np.empty(len(lengths), dtype=object)
        for i in range(len(lengths)):
            pieces[i] = value[bounds[i]:bounds[i + 1]]
        return pieces

    masks = legal_masks(arrays, spec)
    for agent in spec.possible_agents:
        for name, value in flatten(column(OBS, agent), arrays.observations[agent]).items():
            out[name] = split(value, obs_bounds)
        for name, value in flatten(column(ACTION, agent), arrays.actions[agent]).items():
            out[name] = split(value, step_bounds)
        mask = masks[agent]
        if mask is not None:
            out[column(LEGAL_MASK, agent)] = split(mask, obs_bounds)
        for path, value in _agent_info_columns(arrays, agent).items():
            out[column(INFO, agent, path)] = split(value, obs_bounds)
    for name, value in ((REWARD, arrays.rewards), (TERMINATED, arrays.terminations),
                        (TRUNCATED, arrays.truncations), (ACTED, arrays.acted),
                        (TEAM_REWARD, arrays.team_rewards),
                        (EPISODE_TERMINATED, arrays.episode_terminations),
                        (EPISODE_TRUNCATED, arrays.episode_truncations)):
        out[name] = split(value, step_bounds)
    out[ACTIVE] = split(arrays.active, obs_bounds)
    if arrays.state is not None:
        out[STATE] = split(arrays.state, obs_bounds)
    for name, value in arrays.extras.items():
        out[column(EXTRAS, name)] = split(np.asarray(value), obs_bounds)
    return out


def episode_arrays(batch: Mapping[str, np.ndarray], spec: MultiAgentSpec) -> MultiAgentArrays:
    """Inverse of :func:`episode_rows`: the episodes of one dataset's rows as arrays.

    ``batch`` holds episode rows of one dataset (as :func:`episode_rows` makes them, or as
    Ray Data hands them back: object columns, or tensor columns when all episodes have one
    length). Recorded infos come back as nested dicts keyed by their column paths.
    """

    def joined(name: str) -> np.ndarray:
        return np.concatenate([np.asarray(piece) for piece in batch[name]])

    def tree(prefix: str, space: spaces.Space) -> Tree:
        return build_tree(space, {path: joined(column(prefix, path.replace("/", ".")))
                                  for path, _ in leaf_spaces(space)})

    agent_infos: dict[str, Tree] = {}
    for agent in spec.possible_agents:
        prefix = column(INFO, agent) + "."
        for name in batch:
            if name.startswith(prefix):
                node = agent_infos.setdefault(agent, {})
                *parents, leaf = name[len(prefix):].split(".")
                for key in parents:
                    node = node.setdefault(key, {})
                node[leaf] = joined(name)
    extras = {name[len(EXTRAS) + 1:]: joined(name) for name in batch
              if name.startswith(EXTRAS + ".")}
    return MultiAgentArrays(
        possible_agents=spec.possible_agents,
        episode_ids=np.asarray(batch[EPISODE_ID], dtype=np.int64),
        episode_lengths=np.asarray(batch[LENGTH], dtype=np.int64),
        observations={a: tree(column(OBS, a), spec.observation_spaces[a])
                      for a in spec.possible_agents},
        actions={a: tree(column(ACTION, a), spec.action_spaces[a])
                 for a in spec.possible_agents},
        rewards=joined(REWARD), terminations=joined(TERMINATED), truncations=joined(TRUNCATED),
        active=joined(ACTIVE), acted=joined(ACTED), team_rewards=joined(TEAM_REWARD),
        episode_terminations=joined(EPISODE_TERMINATED),
        episode_truncations=joined(EPISODE_TRUNCATED),
        state=joined(STATE) if STATE in batch else None,
        agent_infos=agent_infos or None, extras=extras)


def build_rows(kind: str, arrays: MultiAgentArrays, spec: MultiAgentSpec, *, dataset: str = "",
               agents: Sequence[str] | None = None, only_acted: bool = True) -> Batch:
    """Dispatch to :func:`step_rows`, :func:`agent_step_rows` or :func:`episode_rows`."""
    if kind == "agent_steps":
        return agent_step_rows(arrays, spec, dataset=dataset, agents=agents,
                               only_acted=only_acted)
    if kind == "steps":
        return step_rows(arrays, spec, dataset=dataset)
    if kind == "episodes":
        return episode_rows(arrays, spec, dataset=dataset)
    raise InvalidOptionError(f"rows must be one of {ROW_KINDS}, got {kind!r}")
