"""Values recorded outside their spaces, warned of as Minari's ``DataCollector`` warns of them.

Minari warns at every step whose observation or action is not in its space; a recorder here
checks each finished episode at once, column by column (a few numpy comparisons per agent,
not a ``contains`` call per agent-step), and warns once per agent and kind of value, naming
the episode, the rows and the space. The values are stored as given: ``describe`` counts the
actions outside their spaces.
"""

from __future__ import annotations

import warnings

import numpy as np

from marl_minari.format.spaces import rows_outside
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.episode import MultiAgentEpisode

WARNING_STACKLEVEL = 4
"""Frames from the warning to the user's ``step`` (this module, the recorder's core, the
collector's ``step``): the PettingZoo recorders'."""


class SpaceChecks:
    """Warns of the values of finished episodes that lie outside their spaces, once per agent
    and kind (action, observation) for the recorder's life."""

    def __init__(self, spec: MultiAgentSpec, *, stacklevel: int = WARNING_STACKLEVEL) -> None:
        self._spec = spec
        self._stacklevel = stacklevel
        self._warned: set[tuple[str, str]] = set()

    def check(self, episode: MultiAgentEpisode, number: int) -> None:
        """Warn of ``episode`` (the recorder's ``number``-th, from 0) if some value of an agent
        not warned of before lies outside its space; rows of absent agents are not looked at.
        Image observations on their way to JPEG encoding are not looked at either: the
        encoder takes only values of their type."""
        found = []
        for column, agent in enumerate(episode.possible_agents):
            for kind, tree, present, space in (
                    ("action", episode.actions[agent], episode.acted[:, column],
                     self._spec.action_spaces[agent]),
                    ("observation", episode.observations[agent], episode.active[:, column],
                     self._spec.observation_spaces[agent])):
                if (agent, kind) in self._warned or not isinstance(tree, (np.ndarray, dict,
                                                                           tuple)):
                    continue
                rows = np.flatnonzero(rows_outside(space, tree) & present)
                if len(rows):
                    self._warned.add((agent, kind))
                    where = "step" if kind == "action" else "observation row"
                    found.append(f"the {kind} of agent {agent!r} lies outside its space "
                                 f"{space} at {len(rows)} {where}(s) (first: {where} "
                                 f"{int(rows[0])})")
        if found:
            warnings.warn(
                f"recorded episode {number} (counting from 0 in this recorder): "
                f"{'; '.join(found)}. The values are stored as given, as Minari's "
                "DataCollector stores them (and warns of them); `describe` counts the actions "
                "outside their spaces. These agents' values of that kind are not warned of "
                "again by this recorder.", UserWarning, stacklevel=self._stacklevel)
