"""A tiny parallel env of our own with wide observations, for memory tests: real PettingZoo
API, real recorder, data large enough that holding it all in memory would show."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class WideObservations(ParallelEnv):  # type: ignore[misc]
    """Two agents; observations are ``width`` float32 noise, episodes last ``steps`` steps."""

    metadata = {"name": "wide_observations_v0", "render_modes": []}

    def __init__(self, width: int, steps: int) -> None:
        self.possible_agents = ["agent_0", "agent_1"]
        self.width, self.steps = width, steps
        self.rng = np.random.default_rng(0)
        self.t = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-10.0, 10.0, (self.width,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3)

    def _observe(self) -> dict[str, np.ndarray]:
        return {a: self.rng.standard_normal(self.width, dtype=np.float32) for a in self.agents}

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self.t = 0
        return self._observe(), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        self.t += 1
        observations = self._observe()
        last = self.t >= self.steps
        rewards = {a: float(actions[a]) for a in self.agents}
        terminations = {a: False for a in self.agents}
        truncations = {a: last for a in self.agents}
        infos: dict[str, dict[str, Any]] = {a: {} for a in self.agents}
        if last:
            self.agents = []
        return observations, rewards, terminations, truncations, infos


def record_big_observations(dataset_id: str, episodes: int, steps: int, width: int) -> None:
    """Record ``episodes`` episodes of :class:`WideObservations` as ``dataset_id``."""
    import marl_minari as mm

    collector = mm.ParallelDataCollector(WideObservations(width, steps))
    for episode in range(episodes):
        collector.reset(seed=episode)
        while collector.agents:
            collector.step({a: episode % 3 for a in collector.agents})
    collector.create_dataset(dataset_id, algorithm_name="constant", author="tests",
                             author_email="tests@example.com",
                             code_permalink="https://example.com/tests",
                             description="wide observations for memory tests")
    collector.close()
