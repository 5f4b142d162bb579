"""Values recorded outside their spaces, warned of as Minari's ``DataCollector`` warns of them.

Minari warns at every step whose observation or action is not in its space; a recorder here
checks each finished episode at once, column by column (a few numpy comparisons per agent,
not a ``contains`` call per agent-step), and warns once per agent and kind of value, naming
the episode, the rows and the space. The values are stored as given: ``describe`` counts the
actions outside their spaces.
"""

from __future__ import annotations

import numpy as np

from marl_minari.format.jpeg import FrameRows
from marl_minari.format.spaces import is_image_space, rows_outside
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.user_warnings import warn

FROZEN_ROWS = 3
"""Rows of an agent's episode, at least, for one unchanging frame to be warned of."""


def _row(frames: np.ndarray | FrameRows, index: int) -> np.ndarray:
    return frames.row(index) if isinstance(frames, FrameRows) else frames[index]


class SpaceChecks:
    """Warns of the values of finished episodes that lie outside their spaces, once per agent
    and kind (action, observation) for the recorder's life."""

    def __init__(self, spec: MultiAgentSpec) -> None:
        self._spec = spec
        self._warned: set[tuple[str, str]] = set()
        self._image_agents = [agent for agent in spec.possible_agents
                              if is_image_space(spec.observation_spaces[agent])]
        self._frozen_warned = False

    def check(self, episode: MultiAgentEpisode, number: int) -> None:
        """Warn of ``episode`` (the recorder's ``number``-th, from 0) if some value of an agent
        not warned of before lies outside its space; rows of absent agents are not looked at.
        Image observations on their way to JPEG encoding are not looked at either: the
        encoder takes only values of their type. Warn too, once, of an agent whose image
        observation is one frame at every row of the episode (:meth:`_frozen_frames`)."""
        first_rows = np.zeros(1, dtype=np.int64)
        for message in self._messages(episode, first_rows, first_rows, number):
            warn(message)
        self._frozen_frames(episode, number)

    def _frozen_frames(self, episode: MultiAgentEpisode, number: int) -> None:
        """Some envs draw their frames only when rendering (PettingZoo's ``pistonball_v6``
        without a ``render_mode`` hands out the reset frame at every step): their recordings
        hold one picture per episode. Warned of once per recorder, for episodes of at least
        :data:`FROZEN_ROWS` rows of an agent."""
        if self._frozen_warned:
            return
        for agent in self._image_agents:
            column = episode.possible_agents.index(agent)
            rows = np.flatnonzero(episode.active[:, column])
            frames = episode.observations[agent]
            if len(rows) < FROZEN_ROWS or not isinstance(frames, (np.ndarray, FrameRows)):
                continue
            first = _row(frames, int(rows[0]))
            if all(np.array_equal(_row(frames, int(row)), first) for row in rows[1:]):
                self._frozen_warned = True
                warn(f"recorded episode {number} (counting from 0 in this recorder): the image "
                     f"observation of agent {agent!r} is the same frame at all {len(rows)} of "
                     "its rows. An env that draws its frames only when it renders hands out "
                     "one picture (PettingZoo's pistonball_v6 without a render_mode does): "
                     "make it with render_mode='rgb_array' (make_env(..., "
                     "render_mode='rgb_array')). Not warned of again by this recorder.")
                return

    def check_arrays(self, arrays: MultiAgentArrays, first_number: int) -> None:
        """:meth:`check` of each episode of ``arrays`` (the recorder's ``first_number``-th
        on), with one comparison per agent and kind for all of them."""
        step_starts = np.asarray(arrays.step_starts, dtype=np.int64)
        observation_starts = step_starts + np.arange(len(step_starts))
        for message in self._messages(arrays, observation_starts, step_starts, first_number):
            warn(message)

    def _messages(self, columns: MultiAgentEpisode | MultiAgentArrays,
                  observation_starts: np.ndarray, step_starts: np.ndarray,
                  first_number: int) -> list[str]:
        """A warning's text per episode holding the first value outside its space of an agent
        and kind not warned of before (``*_starts``: each episode's first row)."""
        found: dict[int, list[str]] = {}
        for column, agent in enumerate(columns.possible_agents):
            for kind, tree, present, space, starts in (
                    ("action", columns.actions[agent], columns.acted[:, column],
                     self._spec.action_spaces[agent], step_starts),
                    ("observation", columns.observations[agent], columns.active[:, column],
                     self._spec.observation_spaces[agent], observation_starts)):
                if (agent, kind) in self._warned or not isinstance(tree, (np.ndarray, dict,
                                                                           tuple)):
                    continue
                rows = np.flatnonzero(rows_outside(space, tree) & present)
                if not len(rows):
                    continue
                self._warned.add((agent, kind))
                position = int(np.searchsorted(starts, rows[0], side="right")) - 1
                if position + 1 < len(starts):
                    rows = rows[rows < starts[position + 1]]
                where = "step" if kind == "action" else "observation row"
                found.setdefault(position, []).append(
                    f"the {kind} of agent {agent!r} lies outside its space {space} at "
                    f"{len(rows)} {where}(s) (first: {where} {int(rows[0] - starts[position])})")
        return [f"recorded episode {first_number + position} (counting from 0 in this "
                f"recorder): {'; '.join(found[position])}. The values are stored as given, as "
                "Minari's DataCollector stores them (and warns of them); `describe` counts the "
                "actions outside their spaces. These agents' values of that kind are not "
                "warned of again by this recorder." for position in sorted(found)]
