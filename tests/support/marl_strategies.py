"""Hypothesis strategies and helpers shared by the property tests.

Random nested Gymnasium spaces (Dict/Tuple of Box, Discrete, MultiDiscrete, MultiBinary,
Text), random agent sets, episodes built from them, a small PettingZoo ``ParallelEnv`` whose
agents live on such spaces, and exact comparisons of what was written with what was read.
"""

from __future__ import annotations

import copy
import string
from typing import Any

import numpy as np
from gymnasium import spaces
from hypothesis import strategies as st
from pettingzoo.utils.env import ParallelEnv

from marl_minari.format.spaces import fill_rows, stack
from marl_minari.storage.episode import MultiAgentEpisode

NAME_ALPHABET = string.ascii_letters + string.digits + "_-"

names = st.text(alphabet=NAME_ALPHABET + "é ", min_size=1, max_size=6).filter(
    lambda s: s.strip() == s)


@st.composite
def boxes(draw: st.DrawFn) -> spaces.Box:
    shape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.int8, np.int64, np.uint8]))
    if np.issubdtype(dtype, np.floating) and draw(st.booleans()):
        return spaces.Box(-np.inf, np.inf, shape=shape, dtype=dtype)
    low = 0 if dtype == np.uint8 else -5
    return spaces.Box(low, 9, shape=shape, dtype=dtype)


leaf_spaces = st.one_of(
    boxes(),
    st.builds(spaces.Discrete, st.integers(1, 6), start=st.integers(-3, 3)),
    st.builds(lambda nvec: spaces.MultiDiscrete(nvec),
              st.lists(st.integers(1, 4), min_size=1, max_size=3)),
    st.builds(lambda shape: spaces.MultiBinary(shape),
              st.lists(st.integers(1, 3), min_size=1, max_size=2)),
    st.builds(lambda lo, extra, charset: spaces.Text(lo + extra, min_length=lo, charset=charset),
              st.integers(0, 3), st.integers(0, 4),
              st.sampled_from([string.ascii_letters, "abc é✓", "xyz01"])),
)


def _dicts(children: st.SearchStrategy[spaces.Space]) -> st.SearchStrategy[spaces.Space]:
    return st.dictionaries(names, children, min_size=1, max_size=3).map(spaces.Dict)


def _tuples(children: st.SearchStrategy[spaces.Space]) -> st.SearchStrategy[spaces.Space]:
    return st.lists(children, min_size=1, max_size=3).map(lambda s: spaces.Tuple(tuple(s)))


nested_spaces = st.recursive(
    leaf_spaces, lambda children: st.one_of(_dicts(children), _tuples(children)), max_leaves=5)

agent_lists = st.lists(names, min_size=1, max_size=4, unique=True)


@st.composite
def agent_spaces(draw: st.DrawFn) -> tuple[list[str], dict[str, spaces.Space],
                                           dict[str, spaces.Space]]:
    """``(possible_agents, observation_spaces, action_spaces)``."""
    agents = draw(agent_lists)
    observations = {a: draw(nested_spaces) for a in agents}
    actions = {a: draw(nested_spaces) for a in agents}
    return agents, observations, actions


def sample(space: spaces.Space, rng: np.random.Generator) -> Any:
    """A sample of ``space`` drawn reproducibly from ``rng``."""
    space.seed(int(rng.integers(2**31)))
    return space.sample()


def random_episode(agents: list[str], obs_spaces: dict[str, spaces.Space],
                   act_spaces: dict[str, spaces.Space], steps: int, seed: int, *,
                   state_space: spaces.Space | None = None,
                   with_infos: bool = False) -> MultiAgentEpisode:
    """A :class:`MultiAgentEpisode` of random data with agents coming and going."""
    rng = np.random.default_rng(seed)
    n = len(agents)
    active = rng.random((steps + 1, n)) < 0.8
    acted = active[:-1] & (rng.random((steps, n)) < 0.9)
    obs = {a: stack(obs_spaces[a], [sample(obs_spaces[a], rng) if active[k, i] else None
                                    for k in range(steps + 1)], a)
           for i, a in enumerate(agents)}
    act = {a: stack(act_spaces[a], [sample(act_spaces[a], rng) if acted[t, i] else None
                                    for t in range(steps)], a)
           for i, a in enumerate(agents)}
    rewards = np.where(active[1:], rng.normal(size=(steps, n)), 0.0)
    ends = np.zeros(steps, dtype=bool)
    ends[-1] = True
    truncated = bool(rng.integers(2))
    infos = None
    if with_infos:
        infos = {a: {"score": rng.normal(size=steps + 1),
                     "nested": {"count": rng.integers(0, 9, size=(steps + 1, 2)),
                                "label": np.array([f"r{k}" for k in range(steps + 1)],
                                                  dtype=object)}}
                 for a in agents}
    return MultiAgentEpisode(
        possible_agents=tuple(agents),
        observations=obs,
        actions=act,
        rewards=rewards,
        terminations=rng.random((steps, n)) < 0.2,
        truncations=rng.random((steps, n)) < 0.2,
        active=active,
        acted=acted,
        team_rewards=rewards.sum(axis=1),
        episode_terminations=ends & (not truncated),
        episode_truncations=ends & truncated,
        state=None if state_space is None else np.asarray(
            [sample(state_space, rng) for _ in range(steps + 1)]),
        agent_infos=infos,
        extras={"phase": np.arange(steps + 1, dtype=np.int32)},
        seed=None if seed % 3 == 0 else seed,
        options=None if seed % 2 else {"level": int(seed % 7), "mode": {"hard": bool(seed % 5)}},
    )


def assert_tree_equal(actual: Any, expected: Any, where: str = "") -> None:
    """Exact equality of two trees: same structure, dtypes, shapes and values."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), where
        assert set(actual) == set(expected), f"{where}: keys {set(actual)} != {set(expected)}"
        for key in expected:
            assert_tree_equal(actual[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, tuple):
        assert isinstance(actual, tuple) and len(actual) == len(expected), where
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_tree_equal(a, e, f"{where}[{i}]")
    else:
        actual, expected = np.asarray(actual), np.asarray(expected)
        assert actual.dtype == expected.dtype, f"{where}: dtype {actual.dtype} != {expected.dtype}"
        assert actual.shape == expected.shape, f"{where}: shape {actual.shape} != {expected.shape}"
        if expected.dtype == object:
            assert actual.tolist() == expected.tolist(), where
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=where)


def assert_episode_equal(actual: MultiAgentEpisode, expected: MultiAgentEpisode) -> None:
    """Every field of ``expected`` (a written episode) equals ``actual`` (read back)."""
    assert actual.possible_agents == expected.possible_agents
    assert_tree_equal(actual.observations, expected.observations, "observations")
    assert_tree_equal(actual.actions, expected.actions, "actions")
    for name in ("rewards", "terminations", "truncations", "active", "acted", "team_rewards",
                 "episode_terminations", "episode_truncations"):
        assert_tree_equal(getattr(actual, name), np.asarray(getattr(expected, name)), name)
    if expected.state is None:
        assert actual.state is None
    else:
        assert_tree_equal(actual.state, expected.state, "state")
    if expected.agent_infos is None:
        assert actual.agent_infos is None
    else:
        assert actual.agent_infos is not None
        assert_tree_equal(actual.agent_infos, expected.agent_infos, "agent_infos")
    assert_tree_equal(actual.extras, expected.extras, "extras")


def fill_value(space: spaces.Space) -> Any:
    """One row of fill values of ``space`` (what an absent agent's row holds)."""
    from marl_minari.format.spaces import map_tree

    return map_tree(lambda a: a[0], fill_rows(space, 1))


def row(tree: Any, k: int) -> Any:
    """Row ``k`` of a stacked tree."""
    from marl_minari.format.spaces import map_tree

    return map_tree(lambda a: a[k], tree)


class RandomSpacesEnv(ParallelEnv):
    """A parallel env on arbitrary per-agent spaces, with agents joining and dying.

    Agent ``i`` is present from step ``joins[i]`` (0: at reset) until the step it terminates
    (``leaves[i]``, or never). The episode is truncated for everyone still present after
    ``max_steps``. Infos hold a constant-structure dict per agent, and a global state is
    offered. Everything handed out is deep-copied into ``log`` for the tests to compare.
    """

    metadata = {"name": "random_spaces_v0", "render_modes": []}

    def __init__(self, agents: list[str], obs_spaces: dict[str, spaces.Space],
                 act_spaces: dict[str, spaces.Space], *, max_steps: int = 5,
                 joins: dict[str, int] | None = None, leaves: dict[str, int] | None = None,
                 with_infos: bool = True) -> None:
        self.possible_agents = list(agents)
        self._obs_spaces = obs_spaces
        self._act_spaces = act_spaces
        self.state_space = spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        self.max_steps = max_steps
        self.joins = joins or {}
        self.leaves = leaves or {}
        self.with_infos = with_infos
        self.agents: list[str] = []
        self.log: list[dict[str, Any]] = []
        self._rng = np.random.default_rng(0)
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space:
        return self._act_spaces[agent]

    def state(self) -> np.ndarray:
        return np.full(3, self._t / (self.max_steps + 1), dtype=np.float32)

    def _infos(self, present: list[str]) -> dict[str, Any]:
        if not self.with_infos:
            return {a: {} for a in present}
        return {a: {"t": self._t, "x": float(self._rng.normal()),
                    "deep": {"v": self._rng.integers(0, 5, size=2)}} for a in present}

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        self._rng = np.random.default_rng(seed)
        self._t = 0
        self.agents = [a for a in self.possible_agents if self.joins.get(a, 0) == 0]
        obs = {a: sample(self._obs_spaces[a], self._rng) for a in self.agents}
        infos = self._infos(self.agents)
        self.log = [copy.deepcopy({"observations": obs, "infos": infos,
                                   "state": self.state(), "seed": seed, "options": options})]
        return obs, infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            return {}, {}, {}, {}, {}
        self._t += 1
        joining = [a for a in self.possible_agents
                   if self.joins.get(a, 0) == self._t and a not in self.agents]
        present = [a for a in self.possible_agents if a in self.agents or a in joining]
        obs = {a: sample(self._obs_spaces[a], self._rng) for a in present}
        rewards = {a: float(self._rng.normal()) for a in present}
        terms = {a: self.leaves.get(a) == self._t for a in present}
        truncs = {a: self._t >= self.max_steps and not terms[a] for a in present}
        infos = self._infos(present)
        self.agents = [a for a in present if not (terms[a] or truncs[a])]
        self.log.append(copy.deepcopy({
            "actions": {a: actions[a] for a in actions}, "observations": obs,
            "rewards": rewards, "terminations": terms, "truncations": truncs, "infos": infos,
            "state": self.state()}))
        return obs, rewards, terms, truncs, infos
