"""The in-memory form of one multi-agent episode, shared by the writer and the reader."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.errors import StepDataError
from marl_minari.format.jpeg import FrameRows
from marl_minari.format.returns import episode_returns
from marl_minari.format.spaces import Tree, cast_leaf, leaf_dtype, leaf_shape, leaves, tree_rows
from marl_minari.format.spec import MultiAgentSpec


@dataclass(frozen=True)
class MultiAgentEpisode:
    """One episode of ``T`` steps, per-agent data aligned on the step index.

    Per-agent columns (the last axis of the 2-D arrays) follow ``possible_agents``. Rows of an
    agent that is not present hold fill values and are flagged by ``active`` / ``acted``.

    Attributes:
        possible_agents: agent names, in the environment's order.
        observations: ``{agent: tree}`` with ``T + 1`` rows (reset observation first).
        actions: ``{agent: tree}`` with ``T`` rows; row ``t`` was taken from observation ``t``.
        rewards: ``(T, N)`` float64, what each agent earned at step ``t``.
        terminations: ``(T, N)`` bool, the agent terminated at step ``t``.
        truncations: ``(T, N)`` bool, the agent was truncated at step ``t``.
        active: ``(T + 1, N)`` bool, the agent was present in the dicts of observation row.
        acted: ``(T, N)`` bool, the agent took an action at step ``t``.
        team_rewards: ``(T,)`` float64, the aggregate stored as Minari's ``rewards``.
        episode_terminations: ``(T,)`` bool, Minari's ``terminations``.
        episode_truncations: ``(T,)`` bool, Minari's ``truncations``.
        state: ``(T + 1, ...)`` global state, or ``None``. (Inside a recorder, an image
            state or image observations on their way to the journal writer may be
            :class:`~marl_minari.format.jpeg.FrameRows`; episodes handed to users are stacked.)
        agent_infos: ``{agent: tree}`` with ``T + 1`` rows of the env's info dicts, or ``None``.
        extras: api-specific ``{name: array}`` with ``T + 1`` rows (e.g. AEC agent selection).
        seed: the seed the episode's reset was called with, if any.
        options: the options the episode's reset was called with, if any.
        id: the episode's index in its dataset, once stored.
    """

    possible_agents: tuple[str, ...]
    observations: dict[str, Tree]
    actions: dict[str, Tree]
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    active: np.ndarray
    acted: np.ndarray
    team_rewards: np.ndarray
    episode_terminations: np.ndarray
    episode_truncations: np.ndarray
    state: Any = None
    agent_infos: dict[str, Tree] | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)
    seed: int | None = None
    options: dict[str, Any] | None = None
    id: int | None = None

    @property
    def total_steps(self) -> int:
        """Number of environment steps ``T``."""
        return len(self.team_rewards)

    @property
    def returns(self) -> dict[str, float]:
        """Undiscounted return of every agent (summed in the order of `format.returns`)."""
        sums = episode_returns(self.rewards, [self.total_steps])[0]
        return {agent: float(sums[i]) for i, agent in enumerate(self.possible_agents)}

    @property
    def agent_steps(self) -> dict[str, int]:
        """Number of actions each agent took."""
        counts = self.acted.sum(axis=0)
        return {agent: int(counts[i]) for i, agent in enumerate(self.possible_agents)}

    def agent_index(self, agent: str) -> int:
        """Column of ``agent`` in the per-agent arrays."""
        return self.possible_agents.index(agent)

    def check_shapes(self, where: str = "episode") -> None:
        """Raise :class:`StepDataError` if the rows of the fields disagree with ``T``, the
        length of ``team_rewards`` (:func:`conform` also checks them against a dataset's
        spaces); messages start with ``where``."""
        steps, n = self.total_steps, len(self.possible_agents)
        expected = {
            "rewards": (self.rewards, (steps, n)),
            "terminations": (self.terminations, (steps, n)),
            "truncations": (self.truncations, (steps, n)),
            "active": (self.active, (steps + 1, n)),
            "acted": (self.acted, (steps, n)),
            "episode_terminations": (self.episode_terminations, (steps,)),
            "episode_truncations": (self.episode_truncations, (steps,)),
        }
        for name, (array, shape) in expected.items():
            if np.shape(array) != shape:
                raise StepDataError(f"{where}: field {name} has shape {np.shape(array)}, "
                                    f"expected {shape} for {steps} steps (the length of "
                                    f"team_rewards) and {n} agents")
        for agent in self.possible_agents:
            if tree_rows(self.observations[agent]) != steps + 1:
                raise StepDataError(f"{where}: observations of {agent!r} need {steps + 1} rows")
            if tree_rows(self.actions[agent]) != steps:
                raise StepDataError(f"{where}: actions of {agent!r} need {steps} rows")


def conform(episode: MultiAgentEpisode, spec: MultiAgentSpec, where: str) -> MultiAgentEpisode:
    """``episode`` as a dataset of ``spec`` stores it, checked before anything is written.

    Observations, actions and the state are cast to their spaces' dtypes (see
    :func:`~marl_minari.format.spaces.cast_leaf`); nothing else is changed.

    Raises:
        StepDataError: the episode's agents are not the spec's, in the spec's order; a field
            has rows other than its steps; an observation, action or state does not have its
            space's structure or shape, or holds a value its space's dtype cannot hold; an
            info is not of a possible agent. The message starts with ``where`` and names the
            agent and leaf.
    """
    agents = spec.possible_agents
    if tuple(episode.possible_agents) != agents:
        raise StepDataError(
            f"{where}: possible_agents {list(episode.possible_agents)} are not the dataset's "
            f"{list(agents)}; per-agent columns follow the dataset's order, so give every "
            "episode the dataset's possible_agents")
    for name, trees in (("observations", episode.observations), ("actions", episode.actions)):
        if not isinstance(trees, dict) or set(trees) != set(agents):
            found = sorted(map(str, trees)) if isinstance(trees, dict) else type(trees).__name__
            raise StepDataError(
                f"{where}: {name} has entries for {found}, not for the possible agents "
                f"{list(agents)}; every agent has rows in every episode (the rows of an "
                "absent agent hold fill values, and active/acted say so)")
    episode.check_shapes(where)
    steps = episode.total_steps
    observations = {agent: conform_tree(spec.observation_spaces[agent], tree, steps + 1,
                                        f"{where}: observations of {agent!r}")
                    for agent, tree in episode.observations.items()}
    actions = {agent: conform_tree(spec.action_spaces[agent], tree, steps,
                                   f"{where}: actions of {agent!r}")
               for agent, tree in episode.actions.items()}
    state = episode.state
    if state is not None and spec.state_space is not None:
        state = conform_tree(spec.state_space, state, steps + 1, f"{where}: state")
    for agent, tree in (episode.agent_infos or {}).items():
        if agent not in agents:
            raise StepDataError(f"{where}: agent_infos has an entry for {agent!r}, which is not "
                                f"one of the possible agents {list(agents)}")
        _check_rows(leaves(tree, f"agent_infos of {agent!r}"), steps + 1, where)
    _check_rows(((f"extras[{name!r}]", array) for name, array in episode.extras.items()),
                steps + 1, where)
    return replace(episode, observations=observations, actions=actions, state=state)


def _check_rows(named: Iterable[tuple[str, Any]], rows: int, where: str) -> None:
    for name, array in named:
        shape = np.shape(array)
        if not shape or shape[0] != rows:
            raise StepDataError(f"{where}: {name} has shape {shape}, expected {rows} rows, one "
                                "per observation")


def conform_tree(space: spaces.Space, tree: Tree, rows: int, where: str) -> Tree:
    """``tree`` (``rows`` rows of samples of ``space``) with its leaves cast to the space's
    dtypes; :class:`StepDataError` naming the leaf if its structure or shape is not the
    space's (see :func:`conform`)."""
    if isinstance(space, spaces.Dict):
        if not isinstance(tree, dict) or set(tree) != set(space.spaces):
            found = sorted(map(str, tree)) if isinstance(tree, dict) else type(tree).__name__
            raise StepDataError(f"{where}: has {found} where its Dict space has keys "
                                f"{sorted(space.spaces)}")
        return {key: conform_tree(sub, tree[key], rows, f"{where}[{key!r}]")
                for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        if not isinstance(tree, tuple) or len(tree) != len(space.spaces):
            raise StepDataError(f"{where}: has {type(tree).__name__} where its Tuple space has "
                                f"{len(space.spaces)} entries (pass a tuple)")
        return tuple(conform_tree(sub, tree[i], rows, f"{where}[{i}]")
                     for i, sub in enumerate(space.spaces))
    if isinstance(space, spaces.Text):
        _check_shape(np.shape(np.asarray(tree, dtype=object)), (rows,), where)
        return tree
    expected = (rows, *leaf_shape(space))
    if isinstance(tree, FrameRows):  # a recorder's image rows on their way to JPEG
        _check_shape(tree.shape, expected, where)
        return tree
    array = np.asarray(tree)
    _check_shape(array.shape, expected, where)
    return cast_leaf(array, leaf_dtype(space), where)


def _check_shape(shape: tuple[int, ...], expected: tuple[int, ...], where: str) -> None:
    if tuple(shape) != expected:
        raise StepDataError(f"{where}: shape {tuple(shape)}, expected {expected} "
                            f"({expected[0]} rows of the space's {expected[1:]})")
