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

from collections.abc import Collection, Mapping
from typing import Literal

import numpy as np

from marl_minari.format import layout

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


def find_mask(observation: object, info: object, *,
              arrays_only: bool = True) -> np.ndarray | None:
    """An agent's legal-action mask, from its observation and its info (trees of one row, or
    of many rows), by the precedence of :func:`mask_source`; ``None`` if neither holds one.

    Args:
        observation: the agent's observation (a dict when it can hold a mask).
        info: the agent's info dict, or ``None``.
        arrays_only: only array values count as masks (stored data); ``False`` accepts any
            value but a dict (what an env hands out at a step may be a list).
    """
    trees = {"observations": observation, "agent_infos": info}
    source = mask_source(_mask_keys(observation, arrays_only), _mask_keys(info, arrays_only))
    if source is None:
        return None
    tree = trees[source[0]]
    assert isinstance(tree, Mapping)  # mask_source found the key in it
    return np.asarray(tree[source[1]])


def _mask_keys(tree: object, arrays_only: bool) -> set[str]:
    if not isinstance(tree, Mapping):
        return set()
    return {k for k, v in tree.items()
            if (isinstance(v, np.ndarray) if arrays_only else not isinstance(v, Mapping))}
