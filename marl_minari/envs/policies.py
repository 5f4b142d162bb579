"""Simple behaviour policies for recording (random, respecting action masks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.format.layout import ACTION_MASK_KEY


def action_mask(observation: Any, info: Any) -> np.ndarray | None:
    """The legal-action mask of an agent, from its observation dict or its info dict."""
    for source in (observation, info):
        if isinstance(source, Mapping) and ACTION_MASK_KEY in source:
            return np.asarray(source[ACTION_MASK_KEY])
    return None


class RandomPolicy:
    """Samples each agent's action uniformly among its legal actions.

    Args:
        seed: seed of the policy's own random generator (independent of the env's).
    """

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)

    def __call__(self, space: spaces.Space, observation: Any = None, info: Any = None) -> Any:
        """An action for ``space``, legal under the mask found in ``observation``/``info``."""
        mask = action_mask(observation, info)
        if mask is not None and isinstance(space, spaces.Discrete):
            legal = np.flatnonzero(mask)
            if len(legal):
                return int(space.start + self._rng.choice(legal))
        space.seed(int(self._rng.integers(2**31)))
        return space.sample()
