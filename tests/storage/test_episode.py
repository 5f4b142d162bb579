"""``MultiAgentEpisode``: per-agent summaries and shape checks."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gymnasium import spaces
from marl_strategies import random_episode

AGENTS = ["a", "b"]
OBS = {a: spaces.Box(-1, 1, (2,)) for a in AGENTS}
ACT = {a: spaces.Discrete(3) for a in AGENTS}


def test_returns_and_agent_steps_follow_the_columns() -> None:
    episode = random_episode(AGENTS, OBS, ACT, 4, seed=3)
    assert episode.total_steps == 4
    assert episode.returns == {a: pytest.approx(float(episode.rewards[:, i].sum()))
                               for i, a in enumerate(AGENTS)}
    assert episode.agent_steps == {a: int(episode.acted[:, i].sum())
                                   for i, a in enumerate(AGENTS)}
    assert episode.agent_index("b") == 1
    episode.check_shapes()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("rewards", np.zeros((4, 3)), "rewards has shape"),
        ("active", np.ones((4, 2), bool), "active has shape"),
        ("acted", np.ones((5, 2), bool), "acted has shape"),
        ("episode_truncations", np.zeros(3, bool), "episode_truncations has shape"),
    ],
)
def test_check_shapes_names_the_wrong_field(field: str, value: np.ndarray, message: str) -> None:
    episode = replace(random_episode(AGENTS, OBS, ACT, 4, seed=3), **{field: value})
    with pytest.raises(ValueError, match=message):
        episode.check_shapes()


def test_check_shapes_checks_per_agent_rows() -> None:
    episode = random_episode(AGENTS, OBS, ACT, 4, seed=3)
    short = replace(episode, observations={**episode.observations, "b": np.zeros((4, 2))})
    with pytest.raises(ValueError, match="observations of 'b' need 5 rows"):
        short.check_shapes()
    short = replace(episode, actions={**episode.actions, "a": np.zeros(5, np.int64)})
    with pytest.raises(ValueError, match="actions of 'a' need 4 rows"):
        short.check_shapes()
