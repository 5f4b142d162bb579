"""Episodes of random actions, the way a plain Minari dataset is recorded in the tests."""

from __future__ import annotations

from typing import Any


def play_random_episodes(env: Any, episodes: int) -> None:
    """Play ``episodes`` episodes of random actions in ``env`` (a gymnasium env, a Minari
    ``DataCollector`` among them): episode ``k`` is reset with seed ``k`` and draws its
    actions from the action space seeded with ``k``, so a recording is repeatable."""
    for episode in range(episodes):
        env.reset(seed=episode)
        env.action_space.seed(episode)
        done = False
        while not done:
            _, _, terminated, truncated, _ = env.step(env.action_space.sample())
            done = terminated or truncated
