"""Experience recorded as Mava's systems record it: a Flashbax flat buffer
(``make_flat_buffer(..., add_sequences=True, add_batch_size=B)``) of timesteps
``{"done", "action", "reward", "observation", "legal_action_mask"}`` (plus a global ``state``
when asked), written with ``Vault(vault_name=..., experience_structure=buffer_state.experience,
rel_dir=...)`` and ``vault.write(buffer_state)`` after every update.

The rollouts are made up with numpy (episodes of different lengths in every stream, so that
episodes end at different steps per stream); :func:`expected_episodes` cuts them with plain
loops, independently of the library.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np


@dataclass
class Rollouts:
    """Updates of Mava-style experience, leaves ``(B, T_update, N, ...)`` (numpy)."""

    envs: int = 4
    agents: int = 3
    obs_dim: int = 5
    actions: int = 4
    updates: int = 6
    rollout: int = 8
    seed: int = 0
    state_dim: int | None = None
    min_episode: int = 2
    max_episode: int = 11
    all_updates: list[dict[str, np.ndarray]] = field(default_factory=list)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(self.seed)
        step = np.zeros(self.envs, dtype=np.int64)
        length = rng.integers(self.min_episode, self.max_episode + 1, self.envs)
        b, n = self.envs, self.agents
        for _ in range(self.updates):
            done = np.zeros((b, self.rollout, n), dtype=bool)
            for t in range(self.rollout):
                ends = step == length - 1
                done[ends, t] = True
                step = np.where(ends, 0, step + 1)
                length = np.where(ends, rng.integers(self.min_episode, self.max_episode + 1,
                                                     b), length)
            legal = rng.random((b, self.rollout, n, self.actions)) < 0.6
            action = rng.integers(0, self.actions, (b, self.rollout, n)).astype(np.int32)
            legal[np.arange(b)[:, None, None], np.arange(self.rollout)[None, :, None],
                  np.arange(n)[None, None, :], action] = True
            update = {
                "done": done,
                "action": action,
                "reward": rng.normal(size=(b, self.rollout, n)).astype(np.float32),
                "observation": rng.normal(size=(b, self.rollout, n, self.obs_dim)
                                          ).astype(np.float32),
                "legal_action_mask": legal,
            }
            if self.state_dim is not None:
                update["state"] = rng.normal(size=(b, self.rollout, self.state_dim)
                                             ).astype(np.float32)
            self.all_updates.append(update)
            yield update

    def timestep(self) -> dict[str, Any]:
        """One timestep of the structure (what Mava passes to ``buffer.init``)."""
        import jax.numpy as jnp

        example = {
            "done": jnp.zeros(self.agents, dtype=bool),
            "action": jnp.zeros(self.agents, dtype=jnp.int32),
            "reward": jnp.zeros(self.agents, dtype=jnp.float32),
            "observation": jnp.zeros((self.agents, self.obs_dim), dtype=jnp.float32),
            "legal_action_mask": jnp.zeros((self.agents, self.actions), dtype=bool),
        }
        if self.state_dim is not None:
            example["state"] = jnp.zeros(self.state_dim, dtype=jnp.float32)
        return example

    def streams(self) -> dict[str, np.ndarray]:
        """Every update so far joined along time: leaves ``(B, T, ...)``."""
        return {k: np.concatenate([u[k] for u in self.all_updates], axis=1)
                for k in self.all_updates[0]}


def flat_buffer(rollouts: Rollouts, time_axis: int) -> tuple[Any, Any]:
    """Mava's buffer: ``(buffer, buffer_state)`` with a time axis of ``time_axis`` steps."""
    import flashbax as fbx

    buffer = fbx.make_flat_buffer(
        max_length=time_axis * rollouts.envs, min_length=2, sample_batch_size=2,
        add_sequences=True, add_batch_size=rollouts.envs)
    return buffer, buffer.init(rollouts.timestep())


def buffer_states(rollouts: Rollouts, time_axis: int = 20) -> Iterator[Any]:
    """The buffer state after each update (what Mava hands to ``vault.write``)."""
    import jax
    import jax.numpy as jnp

    buffer, state = flat_buffer(rollouts, time_axis)
    add = jax.jit(buffer.add)
    for update in rollouts:
        state = add(state, jax.tree.map(jnp.asarray, update))
        yield state


def write_mava_vault(rel_dir: Path, vault_name: str, vault_uid: str, rollouts: Rollouts,
                     time_axis: int = 20) -> int:
    """Mava's snippet: a flat buffer, a ``Vault`` of its experience structure, one
    ``vault.write(buffer_state)`` per update. Returns the timesteps written."""
    from flashbax.vault import Vault

    vault = None
    written = 0
    for state in buffer_states(rollouts, time_axis):
        if vault is None:
            vault = Vault(vault_name=vault_name, experience_structure=state.experience,
                          rel_dir=str(rel_dir), vault_uid=vault_uid)
        written += int(vault.write(state))
    return written


@dataclass(frozen=True)
class Expected:
    """An episode cut out of the streams by hand."""

    stream: int
    start: int
    length: int
    finished: bool


def expected_episodes(done: np.ndarray, trailing: bool = True) -> list[Expected]:
    """Episodes of ``(B, T, N)`` done flags (any agent), ordered by end step then stream;
    unfinished ones last, in stream order."""
    found = []
    b, t = done.shape[:2]
    rest = []
    for stream in range(b):
        start = 0
        for step in range(t):
            if done[stream, step].any():
                found.append(Expected(stream, start, step - start + 1, True))
                start = step + 1
        if start < t:
            rest.append(Expected(stream, start, t - start, False))
    found.sort(key=lambda e: (e.start + e.length, e.stream))
    return found + (rest if trailing else [])
