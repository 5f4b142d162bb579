"""Streaming statistics: per-leaf action counters and the accumulator that combines chunks of
whole episodes into a :class:`~marl_minari.describe.results.DatasetDescription`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.describe._metadata import _space_text
from marl_minari.describe.results import (
    ActionKind,
    ActionSummary,
    AgentDescription,
    DatasetDescription,
    Outcome,
    SourceKind,
    Summary,
)
from marl_minari.errors import LayoutError
from marl_minari.format.returns import sequential_sums
from marl_minari.format.spaces import leaf_spaces, leaves, rows_outside
from marl_minari.storage.arrays import MultiAgentArrays


class _ActionStats:
    """Running statistics of one action leaf of one agent."""

    def __init__(self, path: str, space: spaces.Space) -> None:
        self.path = path
        self.space = space
        self.samples = 0
        self.out_of_space = 0
        self.kind: ActionKind
        if isinstance(space, spaces.Discrete):
            self.kind = "discrete"
            self.counts = np.zeros(int(space.n), dtype=np.int64)
        elif isinstance(space, spaces.MultiDiscrete):
            self.kind = "multi_discrete"
            self.nvec = np.asarray(space.nvec, dtype=np.int64).reshape(-1)
            self.offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]]).astype(np.int64)
            self.counts = np.zeros(int(self.nvec.sum()), dtype=np.int64)
        elif isinstance(space, spaces.MultiBinary):
            self.kind = "binary"
            self.counts = np.zeros(int(np.prod(space.shape)), dtype=np.int64)
        elif isinstance(space, spaces.Box):
            self.kind = "continuous"
            dims = int(np.prod(space.shape))
            self.minimum = np.full(dims, np.inf)
            self.maximum = np.full(dims, -np.inf)
            self.mean = np.zeros(dims)
            self.m2 = np.zeros(dims)
        else:
            self.kind = "text"

    def add(self, values: np.ndarray) -> None:
        """Count the actions ``values`` (rows: the steps at which the agent acted)."""
        n = len(values)
        if n == 0:
            return
        self.samples += n
        values = np.asarray(values)
        outside = rows_outside(self.space, values)
        self.out_of_space += int(outside.sum())
        if self.kind == "discrete":
            assert isinstance(self.space, spaces.Discrete)
            shifted = values.astype(np.int64).reshape(-1) - int(self.space.start)
            self.counts += np.bincount(shifted[~outside], minlength=len(self.counts))
        elif self.kind == "multi_discrete":
            assert isinstance(self.space, spaces.MultiDiscrete)
            start = np.asarray(getattr(self.space, "start", 0), dtype=np.int64).reshape(-1)
            shifted = values.astype(np.int64).reshape(n, -1) - start
            flat = (shifted + self.offsets)[~outside].reshape(-1)  # out-of-space rows: uncounted
            self.counts += np.bincount(flat, minlength=len(self.counts))
        elif self.kind == "binary":
            bits = values.reshape(n, -1)
            self.counts += (bits[~outside] == 1).sum(axis=0).astype(np.int64)
        elif self.kind == "continuous":
            rows = values.astype(np.float64).reshape(n, -1)
            self.minimum = np.minimum(self.minimum, rows.min(axis=0))
            self.maximum = np.maximum(self.maximum, rows.max(axis=0))
            mean = rows.mean(axis=0)
            m2 = ((rows - mean) ** 2).sum(axis=0)
            before = self.samples - n
            delta = mean - self.mean
            self.mean = self.mean + delta * (n / self.samples)
            self.m2 = self.m2 + m2 + delta ** 2 * (before * n / self.samples)

    def result(self) -> ActionSummary:
        """The summary so far."""
        path, kind, space = self.path, self.kind, _space_text(self.space)
        samples, outside = self.samples, self.out_of_space
        labels: tuple[str, ...] = ()
        if kind == "discrete":
            assert isinstance(self.space, spaces.Discrete)
            first = int(self.space.start)
            labels = tuple(str(first + i) for i in range(len(self.counts)))
        elif kind == "multi_discrete":
            starts = np.broadcast_to(np.asarray(getattr(self.space, "start", 0),
                                                dtype=np.int64).reshape(-1), self.nvec.shape)
            labels = tuple(f"c{c}={int(starts[c]) + v}" for c, n in enumerate(self.nvec)
                           for v in range(int(n)))
        elif kind == "binary":
            labels = tuple(f"b{i}" for i in range(len(self.counts)))
        if kind in ("discrete", "multi_discrete", "binary"):
            return ActionSummary(path, kind, space, samples, labels, _ints(self.counts),
                                 out_of_space=outside)
        if kind == "continuous":
            labels = tuple(f"d{i}" for i in range(len(self.mean)))
            if samples == 0:
                return ActionSummary(path, kind, space, samples, labels)
            return ActionSummary(
                path, kind, space, samples, labels, minimum=_floats(self.minimum),
                maximum=_floats(self.maximum), mean=_floats(self.mean),
                std=_floats(np.sqrt(self.m2 / samples)), out_of_space=outside)
        return ActionSummary(path, kind, space, samples)


class _Accumulator:
    """Combines the statistics of chunks of episodes."""

    def __init__(self, agents: tuple[str, ...], action_spaces: dict[str, spaces.Space]) -> None:
        self.agents = agents
        self.returns: list[np.ndarray] = []
        self.team_returns: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.final_rewards: list[np.ndarray] = []
        self.terminated: list[np.ndarray] = []
        self.ends = np.zeros(3, dtype=np.int64)  # terminated, truncated, unfinished
        n = len(agents)
        self.active = np.zeros(n, dtype=np.int64)
        self.acted = np.zeros(n, dtype=np.int64)
        self.terminations = np.zeros(n, dtype=np.int64)
        self.truncations = np.zeros(n, dtype=np.int64)
        self.actions = {a: [_ActionStats(path, space) for path, space in
                            leaf_spaces(action_spaces[a])] for a in agents}

    def add(self, arrays: MultiAgentArrays) -> None:
        """Add the statistics of a chunk of whole episodes."""
        lengths = np.asarray(arrays.episode_lengths, dtype=np.int64)
        if len(lengths) == 0:
            return
        if tuple(arrays.possible_agents) != self.agents:
            raise LayoutError(f"chunk agents {arrays.possible_agents} differ from {self.agents}")
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        ends = starts + lengths - 1
        self.lengths.append(lengths)
        self.returns.append(_segment_sums(arrays.rewards, starts, lengths))
        self.team_returns.append(_segment_sums(arrays.team_rewards, starts, lengths))
        nonempty = lengths > 0
        last = ends[nonempty]
        terminated = np.asarray(arrays.episode_terminations, dtype=bool)[last]
        truncated = np.asarray(arrays.episode_truncations, dtype=bool)[last] & ~terminated
        self.final_rewards.append(_final_rewards(arrays.rewards, starts, lengths))
        ended = np.zeros(len(lengths), dtype=bool)
        ended[nonempty] = terminated
        self.terminated.append(ended)
        self.ends += [int(terminated.sum()), int(truncated.sum()),
                      int(len(lengths) - terminated.sum() - truncated.sum())]
        steps = int(lengths.sum())
        obs_rows = np.arange(steps, dtype=np.int64) + np.repeat(
            np.arange(len(lengths), dtype=np.int64), lengths)
        self.active += np.asarray(arrays.active, dtype=bool)[obs_rows].sum(axis=0)
        acted = np.asarray(arrays.acted, dtype=bool)
        self.acted += acted.sum(axis=0)
        self.terminations += np.asarray(arrays.terminations, dtype=bool).sum(axis=0)
        self.truncations += np.asarray(arrays.truncations, dtype=bool).sum(axis=0)
        for column, agent in enumerate(self.agents):
            rows = np.flatnonzero(acted[:, column])
            for stats, (_, values) in zip(self.actions[agent], leaves(arrays.actions[agent]),
                                          strict=True):
                stats.add(values[rows] if len(rows) < len(values) else values)

    def result(self, name: str, kind: SourceKind, metadata: dict[str, Any]
               ) -> DatasetDescription:
        """The description of everything added."""
        n = len(self.agents)
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, dtype=np.int64)
        returns = np.concatenate(self.returns) if self.returns else np.zeros((0, n))
        team = np.concatenate(self.team_returns) if self.team_returns else np.zeros(0)
        steps = int(lengths.sum())
        outcomes: list[Outcome | None] = [None] * n
        if metadata.get("api") == "aec":
            finals = np.concatenate(self.final_rewards) if self.final_rewards else np.zeros((0, n))
            ended = np.concatenate(self.terminated) if self.terminated else np.zeros(0, bool)
            outcomes = list(_outcomes(finals[ended]))
        agents = tuple(
            AgentDescription(
                name=agent, returns=Summary.of(returns[:, i]),
                active_steps=int(self.active[i]), acted_steps=int(self.acted[i]),
                inactive_share=_share(steps - int(self.active[i]), steps),
                terminations=int(self.terminations[i]), truncations=int(self.truncations[i]),
                actions=tuple(s.result() for s in self.actions[agent]), outcome=outcomes[i])
            for i, agent in enumerate(self.agents))
        return DatasetDescription(
            name=name, kind=kind, possible_agents=self.agents, total_episodes=len(lengths),
            total_steps=steps, episode_lengths=Summary.of(lengths),
            team_returns=Summary.of(team), agents=agents,
            terminated_episodes=int(self.ends[0]), truncated_episodes=int(self.ends[1]),
            unfinished_episodes=int(self.ends[2]),
            inactive_share=_share(steps * n - int(self.active.sum()), steps * n),
            metadata=metadata, episode_returns=returns, episode_team_returns=team,
            episode_length_values=lengths, zero_sum=_zero_sum(returns))


def _final_rewards(rewards: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per episode, the agents' rewards at its last step at which any agent was rewarded
    (zeros when none was): where turn-based games hand out their result."""
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.zeros((len(lengths), rewards.shape[1]))
    rewarded = np.flatnonzero((rewards != 0).any(axis=1))
    ends = starts + lengths
    # the last rewarded row before each episode's end, if it lies inside the episode
    last = np.searchsorted(rewarded, ends, side="left") - 1
    inside = (last >= 0) & (lengths > 0)
    inside[inside] = rewarded[last[inside]] >= starts[inside]
    out[inside] = rewards[rewarded[last[inside]]]
    return out


def _outcomes(final_rewards: np.ndarray) -> Iterator[Outcome]:
    """Win (positive), draw (zero) and loss (negative) counts per agent column."""
    for column in np.asarray(final_rewards).T:
        yield Outcome(wins=int((column > 0).sum()), draws=int((column == 0).sum()),
                      losses=int((column < 0).sum()))


def _zero_sum(returns: np.ndarray) -> bool:
    """Two or more agents whose returns add up to zero in every episode, not all zero."""
    if returns.ndim != 2 or returns.shape[1] < 2 or not len(returns):
        return False
    scale = float(np.abs(returns).max())
    return scale > 0 and bool((np.abs(returns.sum(axis=1)) <= 1e-9 * scale).all())


def _segment_sums(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per-episode sums of step rows (zero for empty episodes), in float64."""
    return sequential_sums(values, starts, np.asarray(starts) + np.asarray(lengths))


def _share(part: int, whole: int) -> float:
    return float(part / whole) if whole else 0.0


def _ints(values: np.ndarray) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _floats(values: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in values)

