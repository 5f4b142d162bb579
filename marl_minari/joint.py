"""``JointEnv``: a Gymnasium view of a PettingZoo parallel env with the dataset's spaces.

``minari.load_dataset(id).recover_environment()`` returns one of these for datasets recorded by
marl-minari, so single-agent tools that re-create the environment (d3rlpy, evaluation loops)
get a working env whose observation and action spaces are the dataset's Dict spaces.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from marl_minari.descriptor import EnvDescriptor
from marl_minari.spaces import fill_rows, map_tree


class JointEnv(gym.Env):
    """All agents of a parallel env as one Gymnasium env.

    Observations and actions are dicts over ``possible_agents``; agents not present get fill
    values (zeros) in observations and their actions are ignored. The reward is the
    aggregate the dataset used; ``terminated``/``truncated`` say whether the episode ended.
    ``info`` holds the per-agent infos, rewards, terminations and truncations under ``"agents"``.

    Args:
        env: a PettingZoo parallel env, or ``None`` to make one from ``descriptor``.
        descriptor: an :class:`EnvDescriptor` or its dict (used when ``env`` is ``None``).
        possible_agents: agent order (defaults to the env's).
        reward_aggregation: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
    """

    def __init__(self, env: Any = None, descriptor: EnvDescriptor | dict | None = None,
                 possible_agents: list[str] | None = None,
                 reward_aggregation: str = "sum", render_mode: str | None = None) -> None:
        if env is None:
            if descriptor is None:
                raise ValueError("JointEnv needs an env or a descriptor")
            if isinstance(descriptor, dict):
                descriptor = EnvDescriptor.from_dict(descriptor)
            overrides = {"render_mode": render_mode} if render_mode else {}
            env = descriptor.make("parallel", **overrides)
        self.parallel_env = env
        self.agents_order = list(possible_agents or env.possible_agents)
        self.observation_space = spaces.Dict(
            {a: env.observation_space(a) for a in self.agents_order})
        self.action_space = spaces.Dict({a: env.action_space(a) for a in self.agents_order})
        self.reward_aggregation = reward_aggregation
        self.metadata = dict(getattr(env, "metadata", {}))
        self.render_mode = getattr(env, "render_mode", None)
        self._fill = {a: map_tree(lambda x: x[0], fill_rows(self.observation_space[a], 1))
                      for a in self.agents_order}

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        observations, infos = self.parallel_env.reset(seed=seed, options=options)
        return self._joint(observations), {"agents": infos}

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        live = {a: action[a] for a in self.parallel_env.agents}
        observations, rewards, terms, truncs, infos = self.parallel_env.step(live)
        ended = not self.parallel_env.agents
        truncated = ended and any(truncs.values())
        values = np.asarray([rewards[a] for a in rewards], dtype=np.float64)
        reward = float(_aggregate(values, self.reward_aggregation))
        info = {"agents": infos, "rewards": rewards, "terminations": terms,
                "truncations": truncs}
        return self._joint(observations), reward, ended and not truncated, truncated, info

    def render(self) -> Any:
        return self.parallel_env.render()

    def close(self) -> None:
        self.parallel_env.close()

    def _joint(self, observations: dict[str, Any]) -> dict[str, Any]:
        return {a: observations.get(a, self._fill[a]) for a in self.agents_order}


def _aggregate(values: np.ndarray, how: str) -> float:
    if values.size == 0:
        return 0.0
    reducers: dict[str, Any] = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}
    return float(reducers[how](values))
