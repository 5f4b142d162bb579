"""Row tables of multi-agent data, and transition patterns over them (pure numpy).

Everything here works on a *batch*: a ``dict`` of numpy columns with the same number of rows,
which is both what :meth:`MultiAgentDataset.to_arrays` turns into through the row builders
below and what ``ray.data.Dataset.map_batches(..., batch_format="numpy")`` hands a function.
The same calls therefore run on local bulk arrays and on Ray Data and give identical rows
(``docs/ray.md``).

Row builders (one batch from :class:`~marl_minari.reader.MultiAgentArrays`):

* :func:`agent_step_rows`: one row per agent and step (by default only where the agent
  acted), ordered by episode, then agent, then step.
* :func:`step_rows`: one row per environment step, per-agent columns side by side.
* :func:`episode_rows`: one row per episode, every column a whole episode.

Patterns (on agent-step batches; each (dataset, episode, agent) trajectory must be whole in
the batch, which is checked):

* :func:`transitions`: ``(obs, action, reward, next_obs, discount)`` one step at a time.
* :func:`n_step`: n-step returns with a discount, cut at the end of the agent's trajectory.
* :func:`sequences`: fixed-length windows with a stride, padded at the end, with a mask.

Column naming: a space's leaves are flattened into columns ``<prefix>`` (a leaf space) or
``<prefix>.<key>[.<key>...]`` (Dict keys; Tuple positions are named ``_index_<i>`` as Minari
names them). In step and episode rows the agent name comes first: ``obs.<agent>.<key>``.
:func:`unflatten` rebuilds the tree of a space from such columns. No ray import here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari import layout
from marl_minari.errors import IncompatibleSourcesError, MarlMinariError
from marl_minari.reader import MultiAgentArrays
from marl_minari.spaces import Tree, build_tree, leaf_spaces, leaves
from marl_minari.spec import MultiAgentSpec

Batch = dict[str, np.ndarray]
"""Columns of equal length (the first axis is the row)."""

ROW_KINDS = ("steps", "agent_steps", "episodes")

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


class IncompleteTrajectoryError(MarlMinariError, ValueError):
    """A batch given to a pattern holds only part of an agent's trajectory."""


# --------------------------------------------------------------------------- column names


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


# --------------------------------------------------------------------------- row builders


def legal_masks(arrays: MultiAgentArrays, spec: MultiAgentSpec) -> dict[str, np.ndarray | None]:
    """``{agent: (S + E, A) bool}``: legal actions at every observation row.

    Taken from the observation's ``action_mask`` key (classic envs), else from the recorded
    ``info["action_mask"]``, else all True for a ``Discrete`` action space. ``None`` for an
    agent whose action space is not ``Discrete`` and that has no recorded mask.
    """
    out: dict[str, np.ndarray | None] = {}
    rows = len(arrays.active)
    for agent in spec.possible_agents:
        obs = arrays.observations[agent]
        infos = (arrays.agent_infos or {}).get(agent)
        mask: np.ndarray | None = None
        if isinstance(obs, dict) and isinstance(obs.get(layout.ACTION_MASK_KEY), np.ndarray):
            mask = obs[layout.ACTION_MASK_KEY]
        elif isinstance(infos, dict) and isinstance(infos.get(layout.ACTION_MASK_KEY),
                                                    np.ndarray):
            mask = infos[layout.ACTION_MASK_KEY]
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
        raise ValueError(f"unknown agents {unknown}; the dataset has {spec.possible_agents}")
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
    credited to it until then, exactly as :func:`marl_minari.turns.agent_transitions`.

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

    group_start = _group_starts(episode_pos, agent_col)
    starts_of_row = group_start[np.cumsum(_is_start(episode_pos, agent_col)) - 1] if rows else (
        np.zeros(0, dtype=np.int64))
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
    the flags there, as :func:`marl_minari.turns.agent_transitions` defines them.
    """
    selection = arrays.extras.get(layout.AGENT_SELECTION)
    if selection is None:
        return obs_rows + 1, arrays.rewards[step_col, agent_col].astype(np.float64), step_col
    if not only_acted:
        raise ValueError("only_acted=False has no meaning for a turn-based (AEC) dataset: an "
                         "agent's transitions go from turn to turn")
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


def _is_start(*keys: np.ndarray) -> np.ndarray:
    rows = len(keys[0])
    start = np.zeros(rows, dtype=bool)
    if rows:
        start[0] = True
        for key in keys:
            start[1:] |= key[1:] != key[:-1]
    return start


def _group_starts(*keys: np.ndarray) -> np.ndarray:
    return np.flatnonzero(_is_start(*keys)).astype(np.int64)


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
    ``(T + 1, ...)`` when present.
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
    return out


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
    raise ValueError(f"rows must be one of {ROW_KINDS}, got {kind!r}")


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
    codes = [_codes(np.asarray(batch[k])) for k in reversed(present)]
    order = np.lexsort(codes)
    return {k: np.asarray(v)[order] for k, v in batch.items()}


def _codes(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind in "OUS":
        _, inverse = np.unique(values.astype(str), return_inverse=True)
        return inverse.reshape(-1)
    return values


# --------------------------------------------------------------------------- patterns


def _trajectories(batch: Mapping[str, np.ndarray]) -> tuple[Batch, np.ndarray, np.ndarray]:
    """Sort ``batch`` by trajectory and step; return it with every row's group start/end.

    Raises:
        IncompleteTrajectoryError: some trajectory is not whole in the batch.
    """
    missing = [k for k in (EPISODE_ID, AGENT_INDEX, T, AGENT_T, TRAJ_LEN) if k not in batch]
    if missing:
        raise ValueError(f"patterns need agent-step rows (rows='agent_steps'); missing "
                         f"columns {missing}")
    sorted_batch = sort_rows(batch, (DATASET, EPISODE_ID, AGENT_INDEX, AGENT_T))
    rows = len(sorted_batch[T])
    keys = [_codes(np.asarray(sorted_batch[k])) for k in (DATASET, EPISODE_ID, AGENT_INDEX)
            if k in sorted_batch]
    starts = _group_starts(*keys) if rows else np.zeros(0, dtype=np.int64)
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
            "Ray Data, apply them with marl_minari.ray_data.map_pattern (whole blocks as "
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
        raise ValueError(f"n must be >= 1, got {n}")
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
        raise ValueError(f"length and stride must be >= 1, got {length}, {stride}")
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
