"""The in-memory form of one multi-agent episode, shared by the writer and the reader."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marl_minari.errors import StepDataError
from marl_minari.format.returns import episode_returns
from marl_minari.format.spaces import Tree, tree_rows


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

    def check_shapes(self) -> None:
        """Raise :class:`StepDataError` if the rows of the fields disagree with ``T``."""
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
                raise StepDataError(f"episode field {name} has shape {np.shape(array)}, "
                                 f"expected {shape} for {steps} steps and {n} agents")
        for agent in self.possible_agents:
            if tree_rows(self.observations[agent]) != steps + 1:
                raise StepDataError(f"observations of {agent!r} need {steps + 1} rows")
            if tree_rows(self.actions[agent]) != steps:
                raise StepDataError(f"actions of {agent!r} need {steps} rows")
