"""Per-agent transitions of turn-based (AEC) datasets, in the usual offline-RL form.

In an AEC dataset (``docs/format.md``, *Turn-based episodes*) one step is one ``env.step``
call: agents take turns, so an agent's consecutive decisions are several dataset steps apart.
For one agent,
:func:`agent_transitions` returns one transition per action it took::

    observation  = its observation at the turn it acted on
    action       = the action it took
    reward       = everything credited to it from that step up to its next turn (what
                   ``last()`` handed it at that next turn)
    next_obs     = its observation at its next turn (the dead-agent turn after the game ended
                   included), or at the episode's last row if it had no further turn
    terminated   = its termination flag at that next turn
    truncated    = its truncation flag there, or the next observation is the last of the
                   recorded episode (an episode cut short ends every agent's trajectory)

Parallel datasets work too: there every step is a turn of every acting agent, and a
transition is one step (reward of that step, observation after it).

Rewards credited to an agent before its first action of an episode (handed by ``last()`` at
its first turn) belong to no transition; ``MultiAgentEpisode.returns`` counts them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from marl_minari.errors import InvalidOptionError
from marl_minari.format import layout
from marl_minari.format.returns import sequential_sums
from marl_minari.format.spaces import Tree, map_tree
from marl_minari.sources import load_dataset
from marl_minari.storage.arrays import MultiAgentArrays, recorded_mask
from marl_minari.storage.dataset import MultiAgentDataset


@dataclass(frozen=True)
class AgentTransitions:
    """One agent's transitions (``M`` of them), arrays aligned on the first axis.

    Attributes:
        agent: the agent's name.
        observations: tree of ``(M, ...)``: observation at each turn it acted on.
        actions: tree of ``(M, ...)``: the action taken.
        rewards: ``(M,)`` float64: rewards credited from the action to its next turn, summed
            in step order (bit-exact to what ``last()`` returned for envs that follow the AEC
            API).
        next_observations: tree of ``(M, ...)``: observation at its next turn.
        terminations: ``(M,)`` bool: the agent was terminated at its next turn.
        truncations: ``(M,)`` bool: it was truncated there, or the next observation is the
            episode's last row and it was not terminated (the trajectory ends).
        action_masks: ``(M, A)`` legal-action masks at the turn (``None`` if the env gives
            none, neither as ``observation["action_mask"]`` nor as ``info["action_mask"]``).
        next_action_masks: ``(M, A)`` masks at the next turn, or ``None``.
        episode_ids: ``(M,)`` dataset index of the episode of each transition.
        steps: ``(M,)`` step (within its episode) at which the action was taken.
        next_steps: ``(M,)`` observation row (within its episode) of the next observation.
    """

    agent: str
    observations: Tree
    actions: Tree
    rewards: np.ndarray
    next_observations: Tree
    terminations: np.ndarray
    truncations: np.ndarray
    action_masks: np.ndarray | None
    next_action_masks: np.ndarray | None
    episode_ids: np.ndarray
    steps: np.ndarray
    next_steps: np.ndarray

    @property
    def dones(self) -> np.ndarray:
        """``(M,)`` bool: terminated or truncated."""
        return self.terminations | self.truncations

    def __len__(self) -> int:
        return len(self.rewards)


def agent_transitions(
    source: MultiAgentDataset | MultiAgentArrays | str,
    agent: str,
    episode_indices: list[int] | np.ndarray | None = None,
) -> AgentTransitions:
    """One agent's ``(obs, action, reward, next_obs, done, legal mask)`` transitions.

    Args:
        source: a :class:`MultiAgentDataset`, a dataset id, or arrays from
            :meth:`MultiAgentDataset.to_arrays`.
        agent: one of the dataset's ``possible_agents``.
        episode_indices: episodes to read (all by default); only for a dataset or id.

    Returns:
        The agent's transitions, episode after episode, in step order.

    Raises:
        ValueError: ``agent`` is not one of the dataset's agents, or ``episode_indices`` was
            given with arrays.
    """
    if isinstance(source, str):
        source = load_dataset(source)
    if isinstance(source, MultiAgentArrays):
        if episode_indices is not None:
            raise InvalidOptionError("episode_indices applies to a dataset; slice arrays "
                                     "beforehand")
        arrays = source
    else:
        arrays = source.to_arrays(None if episode_indices is None else list(episode_indices))
    if agent not in arrays.possible_agents:
        raise InvalidOptionError(f"unknown agent {agent!r}; the dataset's agents are "
                                 f"{list(arrays.possible_agents)}")
    column = arrays.possible_agents.index(agent)
    lengths = arrays.episode_lengths.astype(np.int64)
    obs_episode = np.repeat(np.arange(len(lengths)), lengths + 1)
    final_rows = arrays.obs_starts + lengths

    # Rows (observation-aligned) at which the agent acted: the step with the same index.
    acting_steps = np.flatnonzero(arrays.acted[:, column])
    turn_rows = acting_steps + arrays.step_episode[acting_steps]

    selection = arrays.extras.get(layout.AGENT_SELECTION)
    if selection is not None:
        # AEC: the next transition boundary is the agent's next turn (acting or dead) or the
        # episode's last row.
        is_turn = np.asarray(selection) == column
        boundaries = np.union1d(np.flatnonzero(is_turn), final_rows)
        next_rows = boundaries[np.searchsorted(boundaries, turn_rows, side="right")]
    else:
        next_rows = turn_rows + 1
    episode = obs_episode[turn_rows]
    end_steps = next_rows - episode  # (global) step after the last one credited

    rewards = sequential_sums(arrays.rewards[:, column], acting_steps, end_steps)
    flag_steps = end_steps - 1  # per-agent flags of observation row b live at step b - 1
    terminated = arrays.terminations[flag_steps, column].astype(bool)
    data_ends = next_rows == final_rows[episode]
    truncated = arrays.truncations[flag_steps, column].astype(bool) | (data_ends & ~terminated)

    observations = arrays.observations[agent]
    masks = recorded_mask(arrays, agent)

    def at(rows: np.ndarray) -> Any:
        return lambda leaf: leaf[rows]

    return AgentTransitions(
        agent=agent,
        observations=map_tree(at(turn_rows), observations),
        actions=map_tree(at(acting_steps), arrays.actions[agent]),
        rewards=rewards,
        next_observations=map_tree(at(next_rows), observations),
        terminations=terminated,
        truncations=truncated,
        action_masks=None if masks is None else masks[turn_rows],
        next_action_masks=None if masks is None else masks[next_rows],
        episode_ids=arrays.episode_ids[episode],
        steps=acting_steps - arrays.step_starts[episode],
        next_steps=next_rows - arrays.obs_starts[episode],
    )


