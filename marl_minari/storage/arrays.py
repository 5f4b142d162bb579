"""``MultiAgentArrays``: many episodes of a multi-agent dataset as contiguous per-agent arrays.

What the reader returns in bulk (:meth:`MultiAgentDataset.to_arrays`) and what every source
yields chunk by chunk (:mod:`marl_minari.sources`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from marl_minari.format.legal_actions import find_mask
from marl_minari.format.returns import episode_returns
from marl_minari.format.spaces import Tree, map_tree
from marl_minari.storage.episode import MultiAgentEpisode


@dataclass(frozen=True)
class MultiAgentArrays:
    """Contiguous per-agent arrays of several episodes, with their boundaries.

    Step rows (``S = sum(T_e)``) and observation rows (``S + E``: every episode keeps its final
    observation) are concatenated episode after episode. ``obs_rows`` / ``next_obs_rows`` map
    each step row to the rows of its observation and next observation.

    Attributes:
        possible_agents: column order of the per-agent 2-D arrays.
        episode_ids: ``(E,)`` the dataset's episode indices.
        episode_lengths: ``(E,)`` steps per episode.
        observations: ``{agent: tree}`` with ``S + E`` rows.
        actions: ``{agent: tree}`` with ``S`` rows.
        rewards, terminations, truncations, acted: ``(S, N)``.
        active: ``(S + E, N)``, aligned with observations.
        team_rewards, episode_terminations, episode_truncations: ``(S,)``.
        state: ``(S + E, ...)`` or ``None``.
        agent_infos: ``{agent: tree}`` with ``S + E`` rows, or ``None``.
        extras: ``{name: array}`` with ``S + E`` rows.
    """

    possible_agents: tuple[str, ...]
    episode_ids: np.ndarray
    episode_lengths: np.ndarray
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
    state: np.ndarray | None = None
    agent_infos: dict[str, Tree] | None = None
    extras: dict[str, np.ndarray] = field(default_factory=dict)

    @functools.cached_property
    def step_starts(self) -> np.ndarray:
        """``(E,)`` first step row of each episode (computed once: ``episode()`` uses it)."""
        return np.concatenate([[0], np.cumsum(self.episode_lengths)[:-1]]).astype(np.int64)

    @property
    def obs_starts(self) -> np.ndarray:
        """``(E,)`` first observation row of each episode."""
        return self.step_starts + np.arange(len(self.episode_lengths), dtype=np.int64)

    @property
    def step_episode(self) -> np.ndarray:
        """``(S,)`` position (0..E-1) of the episode each step row belongs to."""
        return np.repeat(np.arange(len(self.episode_lengths)), self.episode_lengths)

    @property
    def obs_rows(self) -> np.ndarray:
        """``(S,)`` observation row from which each step's action was taken."""
        return np.arange(int(self.episode_lengths.sum()), dtype=np.int64) + self.step_episode

    @property
    def next_obs_rows(self) -> np.ndarray:
        """``(S,)`` observation row that each step led to."""
        return self.obs_rows + 1

    def returns(self) -> np.ndarray:
        """``(E, N)`` undiscounted per-agent return of every episode (as ``episode(i).returns``)."""
        return episode_returns(self.rewards, self.episode_lengths)

    def episode(self, position: int) -> MultiAgentEpisode:
        """The ``position``-th episode of these arrays as a :class:`MultiAgentEpisode`."""
        s0 = int(self.step_starts[position])
        s1 = s0 + int(self.episode_lengths[position])
        o0, o1 = s0 + position, s1 + position + 1

        def obs(tree: Tree) -> Tree:
            return map_tree(lambda a: a[o0:o1], tree)

        def act(tree: Tree) -> Tree:
            return map_tree(lambda a: a[s0:s1], tree)

        return MultiAgentEpisode(
            possible_agents=self.possible_agents,
            observations={a: obs(t) for a, t in self.observations.items()},
            actions={a: act(t) for a, t in self.actions.items()},
            rewards=self.rewards[s0:s1], terminations=self.terminations[s0:s1],
            truncations=self.truncations[s0:s1], active=self.active[o0:o1],
            acted=self.acted[s0:s1], team_rewards=self.team_rewards[s0:s1],
            episode_terminations=self.episode_terminations[s0:s1],
            episode_truncations=self.episode_truncations[s0:s1],
            state=None if self.state is None else self.state[o0:o1],
            agent_infos=None if self.agent_infos is None else {
                a: obs(t) for a, t in self.agent_infos.items()},
            extras={k: v[o0:o1] for k, v in self.extras.items()},
            id=int(self.episode_ids[position]),
        )


def recorded_mask(arrays: MultiAgentArrays, agent: str) -> np.ndarray | None:
    """``(S + E, A)`` the agent's recorded legal-action masks per observation row, or ``None``
    when none is recorded (as an array leaf) in its observations or its infos (the rule of
    :mod:`marl_minari.format.legal_actions`)."""
    return find_mask(arrays.observations[agent], (arrays.agent_infos or {}).get(agent))
