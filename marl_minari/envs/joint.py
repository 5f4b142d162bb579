"""``JointEnv``: a Gymnasium view of a PettingZoo parallel env with the dataset's spaces.

``minari.load_dataset(id).recover_environment()`` returns one of these for datasets recorded by
marl-minari, so single-agent tools that re-create the environment (d3rlpy, evaluation loops)
get a working env whose observation and action spaces are the dataset's Dict spaces.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium import spaces

from marl_minari.envs.make import check_recreated, recreate_env
from marl_minari.errors import EnvDescriptorError
from marl_minari.format.env_descriptor import EnvDescriptor
from marl_minari.format.returns import REWARD_AGGREGATIONS, team_rewards
from marl_minari.format.spaces import fill_rows, map_tree


class JointEnv(gym.Env):
    """All agents of a PettingZoo env as one Gymnasium env.

    Observations and actions are dicts over ``possible_agents``; agents not present get fill
    values (zeros) in observations and their actions are ignored. The reward is the
    aggregate the dataset used; ``terminated``/``truncated`` say whether the episode ended.
    ``info`` holds the per-agent infos, rewards, terminations and truncations under ``"agents"``.

    A turn-based (AEC) env is viewed one ``env.step`` call per Gymnasium step, as its datasets
    store it: only the action of the agent to move is used (``None`` for an agent that is
    done, as PettingZoo requires), observations are every live agent's ``observe``, and
    ``info["agent_selection"]`` names whose turn it is.

    Args:
        env: a PettingZoo parallel or AEC env, or ``None`` to make one from ``descriptor``.
        descriptor: an :class:`EnvDescriptor` or its dict (used when ``env`` is ``None``; the
            env is made through the api it was recorded with).
        possible_agents: agent order (defaults to the env's).
        reward_aggregation: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"``.
        trust_remote_code: make the env from ``descriptor`` even if it names a package outside
            the trusted environment packages (see
            :func:`~marl_minari.envs.make.recreate_env`).

    Raises:
        EnvDescriptorError: no env and no descriptor, the descriptor's env cannot (or may
            not) be made, or its agents are not ``possible_agents`` (a dataset recorded from
            an env made with other arguments).
    """

    def __init__(self, env: Any = None, descriptor: EnvDescriptor | dict | None = None,
                 possible_agents: list[str] | None = None,
                 reward_aggregation: str = "sum", render_mode: str | None = None,
                 trust_remote_code: bool = False) -> None:
        from pettingzoo.utils.env import AECEnv

        if env is None:
            if descriptor is None:
                raise EnvDescriptorError("JointEnv needs a PettingZoo env or an env descriptor")
            if isinstance(descriptor, dict):
                descriptor = EnvDescriptor.from_dict(descriptor)
            overrides = {"render_mode": render_mode} if render_mode else {}
            env = recreate_env(descriptor, None, trust_remote_code=trust_remote_code,
                               **overrides)
        if reward_aggregation not in REWARD_AGGREGATIONS:
            raise EnvDescriptorError(
                f"reward_aggregation must be one of {list(REWARD_AGGREGATIONS)}, "
                f"got {reward_aggregation!r}")
        self.pettingzoo_env = env
        self.turn_based = isinstance(env, AECEnv)
        self.agents_order = list(possible_agents or env.possible_agents)
        check_recreated(env, descriptor if isinstance(descriptor, EnvDescriptor) else None,
                        self.agents_order)
        self.observation_space = spaces.Dict(
            {a: env.observation_space(a) for a in self.agents_order})
        self.action_space = spaces.Dict({a: env.action_space(a) for a in self.agents_order})
        self.reward_aggregation = reward_aggregation
        self.metadata = dict(getattr(env, "metadata", {}))
        self.render_mode = getattr(env, "render_mode", None)
        self._fill = {a: map_tree(lambda x: x[0], fill_rows(self.observation_space[a], 1))
                      for a in self.agents_order}

    @property
    def parallel_env(self) -> Any:
        """The wrapped PettingZoo env (parallel or AEC; kept under its first name)."""
        return self.pettingzoo_env

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        if self.turn_based:
            self.pettingzoo_env.reset(seed=seed, options=options)
            return self._observe_all(), self._turn_info()
        observations, infos = self.pettingzoo_env.reset(seed=seed, options=options)
        return self._joint(observations), {"agents": infos}

    def step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        if self.turn_based:
            return self._turn_step(action)
        live = {a: action[a] for a in self.pettingzoo_env.agents}
        observations, rewards, terms, truncs, infos = self.pettingzoo_env.step(live)
        info = {"agents": infos, "rewards": rewards, "terminations": terms,
                "truncations": truncs}
        return (self._joint(observations), self._reward(rewards),
                *self._ended(truncs), info)

    def render(self) -> Any:
        return self.pettingzoo_env.render()

    def close(self) -> None:
        self.pettingzoo_env.close()

    def _turn_step(self, action: dict[str, Any]) -> tuple[dict, float, bool, bool, dict]:
        env = self.pettingzoo_env
        agent = env.agent_selection
        done = env.terminations[agent] or env.truncations[agent]
        env.step(None if done else action[agent])
        rewards = dict(env.rewards)
        info = {**self._turn_info(), "rewards": rewards}
        return self._observe_all(), self._reward(rewards), *self._ended(env.truncations), info

    def _turn_info(self) -> dict[str, Any]:
        env = self.pettingzoo_env
        return {"agents": dict(env.infos), "agent_selection": env.agent_selection if env.agents
                else None, "terminations": dict(env.terminations),
                "truncations": dict(env.truncations)}

    def _observe_all(self) -> dict[str, Any]:
        env = self.pettingzoo_env
        return self._joint({a: env.observe(a) for a in env.agents})

    def _reward(self, rewards: dict[str, float]) -> float:
        # The dataset's team reward: agents in possible_agents order, as recorded.
        values = [[float(rewards.get(a, 0.0)) for a in self.agents_order]]
        rewarded = [[a in rewards for a in self.agents_order]]
        return float(team_rewards(values, rewarded, self.reward_aggregation)[0])

    def _ended(self, truncations: dict[str, bool]) -> tuple[bool, bool]:
        ended = not self.pettingzoo_env.agents
        truncated = ended and any(truncations.values())
        return ended and not truncated, truncated

    def _joint(self, observations: dict[str, Any]) -> dict[str, Any]:
        return {a: self._fill[a] if observations.get(a) is None else observations[a]
                for a in self.agents_order}

