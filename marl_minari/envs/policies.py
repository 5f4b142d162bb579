"""Simple behaviour policies for recording (random, respecting action masks)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.format.legal_actions import find_mask


class RandomPolicy:
    """Samples each agent's action uniformly among its legal actions.

    Args:
        seed: seed of the policy's own random generator (independent of the env's).
    """

    def __init__(self, seed: int | None = None) -> None:
        self._rng = np.random.default_rng(seed)

    def __call__(self, space: spaces.Space, observation: Any = None, info: Any = None) -> Any:
        """An action for ``space``, legal under the mask found in ``observation``/``info``."""
        mask = find_mask(observation, info, arrays_only=False)
        if mask is not None and isinstance(space, spaces.Discrete):
            legal = np.flatnonzero(mask)
            if len(legal):
                return int(space.start + self._rng.choice(legal))
        space.seed(int(self._rng.integers(2**31)))
        return space.sample()
