"""A JAX multi-agent environment recorded into a Minari dataset, the way Mava records one.

The environment (``GridGather``) is pure JAX: ``reset`` and ``step`` are jitted and vmapped
over parallel envs, with auto-reset. The loop is Mava's: roll out ``rollout`` steps of every
env with ``jax.lax.scan``, add the trajectory to a Flashbax flat buffer
(``add_sequences=True, add_batch_size=num_envs``), then hand the buffer state to the recorder
(where Mava calls ``vault.write(buffer_state)``). The result opens with plain
``minari.load_dataset``.

Run: ``python examples/jax_env_to_minari.py`` (needs the ``jax`` extra).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flashbax as fbx
import jax
import jax.numpy as jnp
import minari
from marl_minari.collectors import FlashbaxDataCollector

MOVES = jnp.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]], dtype=jnp.int32)
"""Stay, up, down, left, right."""


class EnvState(NamedTuple):
    """Positions of the agents and the goal on the grid, and the step count."""

    agents: jax.Array  # (N, 2) int32
    goal: jax.Array  # (2,) int32
    step: jax.Array  # () int32


class GridGather:
    """``num_agents`` agents on a ``size`` x ``size`` grid walk to a shared goal.

    Each agent observes its own position, the goal's, and the offset between them (floats);
    its actions are stay/up/down/left/right, a move off the grid illegal; every agent gets
    the team reward ``-mean distance to the goal``; the episode ends (``done`` for every
    agent, as Mava copies the team's done) when all agents stand on the goal or after
    ``max_steps`` steps.
    """

    num_actions = 5
    obs_dim = 6

    def __init__(self, num_agents: int = 3, size: int = 5, max_steps: int = 12) -> None:
        self.num_agents, self.size, self.max_steps = num_agents, size, max_steps

    def reset(self, key: jax.Array) -> EnvState:
        agents_key, goal_key = jax.random.split(key)
        agents = jax.random.randint(agents_key, (self.num_agents, 2), 0, self.size)
        goal = jax.random.randint(goal_key, (2,), 0, self.size)
        return EnvState(agents, goal, jnp.zeros((), jnp.int32))

    def observe(self, state: EnvState) -> jax.Array:
        goal = jnp.broadcast_to(state.goal, state.agents.shape)
        return jnp.concatenate([state.agents, goal, goal - state.agents], axis=-1
                               ).astype(jnp.float32) / self.size

    def legal_action_mask(self, state: EnvState) -> jax.Array:
        target = state.agents[:, None, :] + MOVES[None]
        return jnp.all((target >= 0) & (target < self.size), axis=-1)

    def step(self, key: jax.Array, state: EnvState, actions: jax.Array
             ) -> tuple[EnvState, jax.Array, jax.Array]:
        """One step with auto-reset: ``(next state, rewards (N,), done (N,))``."""
        moved = jnp.clip(state.agents + MOVES[actions], 0, self.size - 1)
        distance = jnp.abs(moved - state.goal).sum(axis=-1)
        step = state.step + 1
        done = jnp.all(distance == 0) | (step >= self.max_steps)
        reward = jnp.full(self.num_agents, -distance.mean(), dtype=jnp.float32)
        next_state = EnvState(moved, state.goal, step)
        fresh = self.reset(key)
        next_state = jax.tree.map(lambda a, b: jnp.where(done, a, b), fresh, next_state)
        return next_state, reward, jnp.full(self.num_agents, done)


def timestep_structure(env: GridGather) -> dict[str, jax.Array]:
    """One timestep as Mava's systems store it."""
    n = env.num_agents
    return {"done": jnp.zeros(n, bool), "action": jnp.zeros(n, jnp.int32),
            "reward": jnp.zeros(n, jnp.float32),
            "observation": jnp.zeros((n, env.obs_dim), jnp.float32),
            "legal_action_mask": jnp.zeros((n, env.num_actions), bool)}


def make_rollout(env: GridGather, num_envs: int, rollout: int) -> Any:
    """A jitted rollout of ``rollout`` steps of ``num_envs`` envs under a random legal
    policy: ``(states, key) -> (states, key, trajectory with leaves (num_envs, rollout, ...))``."""
    step = jax.vmap(env.step)

    def one_step(carry: tuple[EnvState, jax.Array], _: Any) -> tuple[Any, dict[str, Any]]:
        states, key = carry
        key, act_key, step_key = jax.random.split(key, 3)
        observation = jax.vmap(env.observe)(states)
        legal = jax.vmap(env.legal_action_mask)(states)
        logits = jnp.where(legal, 0.0, -jnp.inf)
        action = jax.random.categorical(act_key, logits).astype(jnp.int32)
        states, reward, done = step(jax.random.split(step_key, num_envs), states, action)
        return (states, key), {"done": done, "action": action, "reward": reward,
                               "observation": observation, "legal_action_mask": legal}

    @jax.jit
    def run(states: EnvState, key: jax.Array) -> tuple[EnvState, jax.Array, Any]:
        (states, key), trajectory = jax.lax.scan(one_step, (states, key), None, rollout)
        # scan stacks time first: (rollout, num_envs, ...) -> (num_envs, rollout, ...)
        return states, key, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), trajectory)

    return run


def record(dataset_id: str, *, num_envs: int = 4, num_agents: int = 3, updates: int = 10,
           rollout: int = 16, seed: int = 0, recording_path: str | None = None
           ) -> FlashbaxDataCollector:
    """Train-loop shaped recording; returns the collector after ``create_dataset``."""
    env = GridGather(num_agents)
    key = jax.random.PRNGKey(seed)
    key, reset_key = jax.random.split(key)
    states = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))
    buffer = fbx.make_flat_buffer(max_length=num_envs * (rollout * 2), min_length=2,
                                  sample_batch_size=2, add_sequences=True,
                                  add_batch_size=num_envs)
    buffer_state = buffer.init(timestep_structure(env))
    add = jax.jit(buffer.add, donate_argnums=0)
    collector = FlashbaxDataCollector(experience_structure=buffer_state.experience,
                                      agents=[f"walker_{i}" for i in range(num_agents)],
                                      recording_path=recording_path)
    run = make_rollout(env, num_envs, rollout)
    for _ in range(updates):
        states, key, trajectory = run(states, key)
        buffer_state = add(buffer_state, trajectory)
        collector.write(buffer_state)  # where Mava calls vault.write(buffer_state)
    collector.create_dataset(dataset_id, algorithm_name="random", author="marl-minari",
                             author_email="marl-minari@example.com",
                             code_permalink="https://example.com/jax_env_to_minari.py",
                             description="GridGather, a JAX multi-agent env, random policy")
    return collector


if __name__ == "__main__":
    recorded = record("jax/gridgather/random-v0")
    recorded.close()
    dataset = minari.load_dataset("jax/gridgather/random-v0")
    print(f"{dataset.total_episodes} episodes, {dataset.total_steps} steps")
