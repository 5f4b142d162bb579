"""Where an agent's legal-action mask is recorded: one lookup, one precedence.

PettingZoo environments give legal actions in one of two places: a ``Dict`` observation with
an ``action_mask`` entry (the classic games' convention) or an ``action_mask`` entry of the
agent's info. When both are recorded the observation's wins: it is part of the observation
space (its shape and dtype are declared and checked at every step, and it is always
recorded), while infos are recorded only with ``record_infos`` and their structure is
whatever the environment returned. Pattern rows, turn transitions and vault ``legals`` all
take the mask from here, so they agree on every step (``docs/format.md``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

import numpy as np

from marl_minari.format import layout
from marl_minari.storage.reader import MultiAgentArrays

MaskField = Literal["observations", "agent_infos"]
MaskSource = tuple[MaskField, str]
"""``(field, key)``: the mask is ``arrays.<field>[agent][key]``."""


def mask_source(observation_keys: Collection[str],
                info_keys: Collection[str]) -> MaskSource | None:
    """Where the mask is, given the keys of an agent's observation ``Dict`` and of its info
    tree (empty collections where they are not dicts); ``None`` if neither has one."""
    if layout.ACTION_MASK_KEY in observation_keys:
        return ("observations", layout.ACTION_MASK_KEY)
    if layout.ACTION_MASK_KEY in info_keys:
        return ("agent_infos", layout.ACTION_MASK_KEY)
    return None


def recorded_mask(arrays: MultiAgentArrays, agent: str) -> np.ndarray | None:
    """``(S + E, A)`` the agent's recorded legal-action masks per observation row, or
    ``None`` when none is recorded (as an array leaf) in either place."""
    observation = arrays.observations[agent]
    infos = (arrays.agent_infos or {}).get(agent)
    source = mask_source(_array_keys(observation), _array_keys(infos))
    if source is None:
        return None
    tree = observation if source[0] == "observations" else infos
    return np.asarray(tree[source[1]])  # type: ignore[index]


def _array_keys(tree: object) -> set[str]:
    """Keys of ``tree`` whose values are arrays (a nested dict is no mask)."""
    if not isinstance(tree, dict):
        return set()
    return {k for k, v in tree.items() if isinstance(v, np.ndarray)}
