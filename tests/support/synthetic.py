"""Small datasets and vaults with known contents: a vault whose coverage is known by
construction, and datasets whose episodes have chosen lengths and team returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

import marl_minari as mm
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.episode import MultiAgentEpisode

AGENTS = ("a", "b")


def spec_of(agents: tuple[str, ...]) -> MultiAgentSpec:
    """Agents seeing two floats in [-1, 1] and choosing one of 3 actions."""
    return MultiAgentSpec(
        api="parallel", possible_agents=agents,
        observation_spaces={a: spaces.Box(-1, 1, (2,), np.float32) for a in agents},
        action_spaces={a: spaces.Discrete(3) for a in agents})


def write_known_vault(rel_dir: Path, name: str, uid: str) -> dict[str, np.ndarray]:
    """An OG-MARL style vault (one stream, 60 steps, 3 agents, 4 actions) built so that its
    coverage is known by construction, written with Flashbax's own ``Vault``.

    Agent ``i`` sees ``[t % (3 + i), i]`` and plays ``(t // 2) % 2``, a function of ``t % 4``:
    its pairs are every (``t % (3 + i)``, action) combination that ``t`` reaches, 3 x 2 = 6
    for agent 0 (3 and 4 coprime), 4 for agent 1 (the action follows the observation) and
    5 x 2 = 10 for agent 2: OACo 0.1, 1/15 and 1/6, average 1/9. The state is
    ``[t % 5, 0.25]`` plus noise below 5e-5, which rounding to 4 decimals removes: 5 x 2 = 10
    (state, joint action) pairs, SACo 1/6 (without the rounding every state would be
    distinct: SACo 1). Episodes end every
    10 steps (terminals on every agent).
    """
    import jax.numpy as jnp
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
    from flashbax.vault import Vault

    t, n, a = 60, 3, 4
    steps = np.arange(t)
    observations = np.zeros((1, t, n, 2), np.float32)
    for i in range(n):
        observations[0, :, i, 0] = steps % (3 + i)
        observations[0, :, i, 1] = i
    actions = np.repeat(((steps // 2) % 2)[None, :, None], n, axis=2).astype(np.int32)
    noise = (steps + 1) * 6e-7  # below 5e-5: rounded away; above float32's spacing near 4
    state = np.stack([steps % 5 + noise, np.full(t, 0.25)], axis=1)[None].astype(np.float32)
    terminals = np.zeros((1, t, n), np.float32)
    terminals[0, 9::10] = 1
    experience: dict[str, Any] = {
        "observations": observations, "actions": actions,
        "rewards": np.ones((1, t, n), np.float32), "terminals": terminals,
        "truncations": np.zeros((1, t, n), np.float32),
        "infos": {"legals": np.ones((1, t, n, a), np.float32), "state": state}}
    buffer = TrajectoryBufferState(
        experience={k: ({kk: jnp.asarray(vv) for kk, vv in v.items()} if isinstance(v, dict)
                        else jnp.asarray(v)) for k, v in experience.items()},
        current_index=jnp.int32(t), is_full=jnp.bool_(False))
    vault = Vault(name, experience_structure=buffer.experience, rel_dir=str(rel_dir),
                  vault_uid=uid)
    vault.write(buffer, source_interval=(0, t))
    return {"observations": observations[0], "actions": actions[0], "state": state[0]}


def episode_with(length: int, team_return: float, seed: int,
                 agents: tuple[str, ...] = AGENTS) -> MultiAgentEpisode:
    """An episode of ``length`` steps whose team rewards add up to ``team_return`` (the return
    is paid at the last step), reset with ``seed``."""
    rng = np.random.default_rng(seed)
    n = len(agents)
    team = np.zeros(length)
    team[-1] = team_return
    ends = np.zeros(length, dtype=bool)
    ends[-1] = True
    return MultiAgentEpisode(
        possible_agents=agents,
        observations={a: rng.uniform(-1, 1, (length + 1, 2)).astype(np.float32) for a in agents},
        actions={a: rng.integers(0, 3, length) for a in agents},
        rewards=np.repeat(team[:, None] / n, n, axis=1),
        terminations=np.repeat(ends[:, None], n, axis=1),
        truncations=np.zeros((length, n), dtype=bool),
        active=np.ones((length + 1, n), dtype=bool), acted=np.ones((length, n), dtype=bool),
        team_rewards=team, episode_terminations=ends,
        episode_truncations=np.zeros(length, dtype=bool), seed=seed)


def write_episodes(dataset_id: str, lengths: list[int], returns: list[float],
                   agents: tuple[str, ...] = AGENTS) -> Any:
    """A dataset whose episode ``i`` has ``lengths[i]`` steps and team return ``returns[i]``
    (reset seed ``100 + i``)."""
    episodes = [episode_with(length, value, 100 + i, agents)
                for i, (length, value) in enumerate(zip(lengths, returns, strict=True))]
    mm.write_dataset(dataset_id, episodes, spec_of(agents), fsync=False)
    return mm.load_dataset(dataset_id)


def episode_of(observations: dict[str, np.ndarray], actions: dict[str, np.ndarray],
               seed: int) -> MultiAgentEpisode:
    """An episode whose agents see ``observations[a][t]`` (``(T, 2)``) and play
    ``actions[a][t]`` at step ``t`` (the final observation repeats the last one)."""
    agents = tuple(observations)
    n, length = len(agents), len(next(iter(actions.values())))
    ends = np.zeros(length, dtype=bool)
    ends[-1] = True
    return MultiAgentEpisode(
        possible_agents=agents,
        observations={a: np.concatenate([o, o[-1:]]).astype(np.float32)
                      for a, o in observations.items()},
        actions={a: np.asarray(v) for a, v in actions.items()},
        rewards=np.zeros((length, n)), terminations=np.repeat(ends[:, None], n, axis=1),
        truncations=np.zeros((length, n), dtype=bool),
        active=np.ones((length + 1, n), dtype=bool), acted=np.ones((length, n), dtype=bool),
        team_rewards=np.zeros(length), episode_terminations=ends,
        episode_truncations=np.zeros(length, dtype=bool), seed=seed)


REPEATS = [0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 4, 5]
"""What agent ``a`` of :func:`write_repeating_dataset` sees at each of its 14 steps."""


def write_repeating_dataset(dataset_id: str) -> Any:
    """A dataset (no global state) of 14 steps in two episodes (7 + 7) whose pairs repeat
    known numbers of times.

    Agent ``a`` sees ``[REPEATS[t] / 10, 0]`` and plays 0: its pairs occur 5, 3, 3, 1, 1 and 1
    times (counts 1, 3, 5 for 3, 2, 1 pairs). Agent ``b`` sees ``[0, 0]`` and plays ``t % 2``:
    2 pairs, 7 times each. The joint observation stands for the state, so the joint pairs are
    (``REPEATS[t]``, ``t % 2``): (0, 0) 3 times, (0, 1) (1, 1) (2, 0) twice, 5 others once
    (counts 1, 2, 3 for 5, 3, 1 pairs).
    """
    steps = np.arange(len(REPEATS))
    seen = {"a": np.stack([np.asarray(REPEATS) / 10, np.zeros(len(steps))], axis=1),
            "b": np.zeros((len(steps), 2))}
    played = {"a": np.zeros(len(steps), dtype=np.int64), "b": steps % 2}
    halves = (slice(0, 7), slice(7, 14))
    episodes = [episode_of({a: o[h] for a, o in seen.items()},
                           {a: v[h] for a, v in played.items()}, seed)
                for seed, h in enumerate(halves)]
    mm.write_dataset(dataset_id, episodes, spec_of(("a", "b")), fsync=False)
    return mm.load_dataset(dataset_id)


def write_skewed_dataset(dataset_id: str, agents: int, episodes: int = 6, length: int = 50,
                         seed: int = 0) -> Any:
    """A dataset of ``agents`` agents whose observations are drawn from Zipf distributions
    (a few values very often, many rarely; a little more spread for later agents) with 3
    actions: pairs repeat with counts from 1 to hundreds, as in real data."""
    rng = np.random.default_rng(seed)
    names = tuple(f"agent_{i}" for i in range(agents))
    made = []
    for index in range(episodes):
        seen = {a: np.stack([np.minimum(rng.zipf(1.6 + 0.4 * i / agents, length), 100) / 100,
                             np.zeros(length)], axis=1) for i, a in enumerate(names)}
        played = {a: rng.choice(3, length, p=[0.7, 0.2, 0.1]) for a in names}
        made.append(episode_of(seen, played, index))
    mm.write_dataset(dataset_id, made, spec_of(names), fsync=False)
    return mm.load_dataset(dataset_id)
