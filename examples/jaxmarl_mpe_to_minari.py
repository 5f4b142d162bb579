"""JaxMARL's MPE ``simple_spread`` recorded into a Minari dataset from a Mava-style loop.

Same loop as ``jax_env_to_minari.py`` (jitted, vmapped rollouts with ``jax.lax.scan``, a
Flashbax flat buffer, ``collector.write(buffer_state)`` where Mava calls
``vault.write(buffer_state)``), on a third-party JAX env: JaxMARL's ``MPE_simple_spread_v3``
under a uniform random policy. MPE has no illegal actions, so every action is legal in the
stored mask.

Run: ``pip install "marl-minari[jax]" jaxmarl`` then ``python examples/jaxmarl_mpe_to_minari.py``.
"""

from __future__ import annotations

from typing import Any

import flashbax as fbx
import jax
import jax.numpy as jnp
import jaxmarl
import minari
from marl_minari.collectors import FlashbaxDataCollector


def record(dataset_id: str, *, num_envs: int = 8, updates: int = 20, rollout: int = 25,
           seed: int = 0) -> int:
    """Record ``updates`` rollouts of ``num_envs`` envs; returns the episodes stored."""
    env = jaxmarl.make("MPE_simple_spread_v3")
    agents = list(env.agents)
    num_actions = int(env.action_space(agents[0]).n)
    obs_dim = int(env.observation_space(agents[0]).shape[0])

    def one_step(carry: tuple[Any, Any, jax.Array], _: Any) -> tuple[Any, dict[str, Any]]:
        observations, states, key = carry
        key, act_key, step_key = jax.random.split(key, 3)
        action = jax.random.randint(act_key, (num_envs, len(agents)), 0, num_actions)
        step = jax.vmap(env.step)
        next_obs, states, rewards, dones, _ = step(
            jax.random.split(step_key, num_envs), states,
            {a: action[:, i] for i, a in enumerate(agents)})
        timestep = {
            "done": jnp.stack([dones[a] for a in agents], axis=1),
            "action": action.astype(jnp.int32),
            "reward": jnp.stack([rewards[a] for a in agents], axis=1).astype(jnp.float32),
            "observation": jnp.stack([observations[a] for a in agents], axis=1),
            "legal_action_mask": jnp.ones((num_envs, len(agents), num_actions), bool),
        }
        return (next_obs, states, key), timestep

    @jax.jit
    def run(observations: Any, states: Any, key: jax.Array) -> Any:
        carry, trajectory = jax.lax.scan(one_step, (observations, states, key), None, rollout)
        return carry, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), trajectory)

    key = jax.random.PRNGKey(seed)
    key, reset_key = jax.random.split(key)
    observations, states = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))
    n = len(agents)
    buffer = fbx.make_flat_buffer(max_length=num_envs * rollout * 2, min_length=2,
                                  sample_batch_size=2, add_sequences=True,
                                  add_batch_size=num_envs)
    buffer_state = buffer.init({
        "done": jnp.zeros(n, bool), "action": jnp.zeros(n, jnp.int32),
        "reward": jnp.zeros(n, jnp.float32), "observation": jnp.zeros((n, obs_dim), jnp.float32),
        "legal_action_mask": jnp.zeros((n, num_actions), bool)})
    add = jax.jit(buffer.add, donate_argnums=0)
    collector = FlashbaxDataCollector(experience_structure=buffer_state.experience,
                                      agents=agents)
    for _ in range(updates):
        (observations, states, key), trajectory = run(observations, states, key)
        buffer_state = add(buffer_state, trajectory)
        collector.write(buffer_state)  # where Mava calls vault.write(buffer_state)
    collector.create_dataset(dataset_id, algorithm_name="random",
                             description="JaxMARL MPE_simple_spread_v3, random policy")
    episodes = collector.durable_episodes
    collector.close()
    return episodes


if __name__ == "__main__":
    record("jaxmarl/mpe-spread/random-v0")
    dataset = minari.load_dataset("jaxmarl/mpe-spread/random-v0")
    print(f"{dataset.total_episodes} episodes, {dataset.total_steps} steps")
    episode = next(dataset.iterate_episodes())
    print("first episode: observations", {k: v.shape for k, v in episode.observations.items()}
          if isinstance(episode.observations, dict) else episode.observations.shape)
