"""Helpers of the adapter tests: real vaults written as Mava/OG-MARL write them, and exact
comparisons of datasets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import numpy as np

# --------------------------------------------------------------------------- vaults


def _mpe_rows(streams: int, steps: int, max_cycles: int, seed: int,
              action_dtype: Any = np.int32) -> Iterator[list[dict[str, Any]]]:
    """Per-step OG-MARL rows (for all streams) from real simple_spread envs."""
    from mpe2 import simple_spread_v3

    envs = [simple_spread_v3.parallel_env(max_cycles=max_cycles + b) for b in range(streams)]
    agents = envs[0].possible_agents
    obs = [env.reset(seed=seed + b)[0] for b, env in enumerate(envs)]
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        rows: list[dict[str, Any]] = []
        for b, env in enumerate(envs):
            actions = {a: int(rng.integers(5)) for a in agents}
            after, rewards, terms, truncs, _ = env.step(actions)
            rows.append({
                "observations": np.stack([obs[b][a] for a in agents]).astype(np.float32),
                "actions": np.asarray([actions[a] for a in agents], dtype=action_dtype),
                "rewards": np.asarray([rewards[a] for a in agents], dtype=np.float32),
                "terminals": np.asarray([terms[a] for a in agents], dtype=np.float32),
                "truncations": np.asarray([truncs[a] for a in agents], dtype=np.float32),
                "infos": {"legals": np.ones((len(agents), 5), dtype=np.float32),
                          "state": np.concatenate([obs[b][a] for a in agents]).astype(
                              np.float32)},
            })
            obs[b] = after if env.agents else env.reset()[0]
        yield rows


def _smac_rows(streams: int, steps: int, seed: int, extra_key: bool
               ) -> Iterator[list[dict[str, Any]]]:
    """SMAC-like rows: agents die (zero observation, only no-op legal, action 0), the team
    reward and done are copied to every agent, episodes end at random."""
    rng = np.random.default_rng(seed)
    n, width = 3, 4
    alive = np.ones((streams, n), dtype=bool)
    for _ in range(steps):
        rows = []
        for b in range(streams):
            legals = (rng.random((n, width)) < 0.7).astype(np.float32)
            legals[:, 0] = 0.0
            legals[:, 1] = 1.0
            obs = rng.standard_normal((n, 6)).astype(np.float32)
            actions = rng.integers(1, width, size=n).astype(np.int32)
            obs[~alive[b]] = 0.0
            legals[~alive[b]] = 0.0
            legals[~alive[b], 0] = 1.0
            actions[~alive[b]] = 0
            done = rng.random() < 0.15
            team = np.float32(rng.standard_normal())
            row = {
                "observations": obs, "actions": actions,
                "rewards": np.full(n, team, dtype=np.float32),
                "terminals": np.full(n, float(done), dtype=np.float32),
                "truncations": np.zeros(n, dtype=np.float32),
                "infos": {"legals": legals,
                          "state": rng.standard_normal(8).astype(np.float32)},
            }
            if extra_key:
                row["episode_return"] = np.float32(team)
            rows.append(row)
            if done:
                alive[b] = True
            else:
                alive[b] &= rng.random(n) > 0.1
        yield rows


def write_vault(rel_dir: Path, name: str, uid: str, *, streams: int = 1, steps: int = 40,
                write_every: int = 9, kind: str = "mpe", max_cycles: int = 7,
                seed: int = 0, metadata: dict[str, Any] | None = None,
                extra_key: bool = True, action_dtype: Any = np.int32) -> Any:
    """Write a vault as Mava/OG-MARL do; return what ``Vault.read()`` gives back
    (``action_dtype``: how the mpe kind stores its discrete actions)."""
    import flashbax as fbx
    import jax
    import jax.numpy as jnp
    from flashbax.vault import Vault

    rows_iter: Iterator[list[dict[str, Any]]] = (
        _mpe_rows(streams, steps, max_cycles, seed, action_dtype) if kind == "mpe"
        else _smac_rows(streams, steps, seed, extra_key))
    first = next(rows_iter)
    example = jax.tree.map(jnp.asarray, first[0])
    buffer = fbx.make_trajectory_buffer(
        add_batch_size=streams, sample_batch_size=2, sample_sequence_length=2, period=1,
        min_length_time_axis=2, max_length_time_axis=write_every + 3)
    state = buffer.init(example)
    vault = Vault(name, state.experience, rel_dir=str(rel_dir), vault_uid=uid,
                  metadata=metadata)
    add = jax.jit(buffer.add)

    def batch(rows: list[dict[str, Any]]) -> Any:
        return jax.tree.map(lambda *xs: jnp.asarray(np.stack(xs))[:, None], *rows)

    state = add(state, batch(first))
    for step, rows in enumerate(rows_iter, start=2):
        state = add(state, batch(rows))
        if step % write_every == 0:
            vault.write(state)
    vault.write(state)
    return Vault(name, rel_dir=str(rel_dir), vault_uid=uid).read()


def rename_leaves(vault: Path, names: dict[str, str]) -> None:
    """Rename leaves of a vault written by Flashbax (its metadata and its stored arrays)."""
    import tensorstore as ts

    meta = json.loads((vault / "metadata.json").read_text())
    for kind in ("structure_shape", "structure_dtype"):
        meta[kind] = {names.get(k, k): v for k, v in meta[kind].items()}
    (vault / "metadata.json").write_text(json.dumps(meta))
    for old, new in names.items():
        spec = {"driver": "zarr", "kvstore": {"driver": "ocdbt", "base": f"file://{vault}",
                                              "path": f"{old}."}}
        source = ts.open(spec, open=True).result()
        values = source[:, :4096].read().result()
        target = dict(spec, kvstore=dict(spec["kvstore"], path=f"{new}."))
        store = ts.open(target, create=True, shape=source.shape, dtype=source.dtype,
                        chunk_layout=source.chunk_layout).result()
        store[:, :4096].write(values).result()


# --------------------------------------------------------------------------- comparisons


def assert_trees_equal(a: Any, b: Any, where: str = "") -> None:
    """Exact equality of nested dicts/tuples of arrays, dtypes and shapes included."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {set(a)} vs {set(b)}"
        for key in a:
            assert_trees_equal(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, tuple) and not isinstance(a, np.ndarray):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_trees_equal(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray) or hasattr(a, "dtype"):
        x, y = np.asarray(a), np.asarray(b)
        assert x.dtype == y.dtype, f"{where}: dtype {x.dtype} vs {y.dtype}"
        assert x.shape == y.shape, f"{where}: shape {x.shape} vs {y.shape}"
        assert np.array_equal(x, y), f"{where}: values differ"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def assert_same_episodes(first: Any, second: Any) -> None:
    """Every field of every episode (seeds and options included) is identical."""
    assert first.total_episodes == second.total_episodes
    for one, two in zip(first.iterate_episodes(), second.iterate_episodes(), strict=True):
        for item in fields(one):
            if item.name == "id":
                continue
            assert_trees_equal(getattr(one, item.name), getattr(two, item.name), item.name)


def assert_same_metadata(first: dict[str, Any], second: dict[str, Any],
                         ignore: tuple[str, ...] = ("dataset_id",)) -> None:
    """``metadata.json`` dicts equal except for ``ignore``d keys."""
    keys = (set(first) | set(second)) - set(ignore)
    different = sorted(k for k in keys if first.get(k) != second.get(k))
    assert not different, {k: (first.get(k), second.get(k)) for k in different}


# --------------------------------------------------------------------------- synthetic datasets


def synthetic_dataset(dataset_id: str, episodes: int, steps: int = 25, obs_dim: int = 200,
                      seed: int = 0) -> Any:
    """A dataset written through the writer: 3 agents, ``obs_dim``-float observations, a
    state, action masks in the infos, agents dying part-way through some episodes."""
    from gymnasium import spaces

    import marl_minari as mm

    agents = ("a0", "a1", "a2")
    box = spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    spec = mm.MultiAgentSpec(
        api="parallel", possible_agents=agents,
        observation_spaces={a: box for a in agents},
        action_spaces={a: spaces.Discrete(6) for a in agents},
        state_space=spaces.Box(-np.inf, np.inf, (12,), np.float32))
    rng = np.random.default_rng(seed)

    def make() -> Iterator[Any]:
        for index in range(episodes):
            rows = steps + 1
            death = np.where(rng.random(3) < 0.3, rng.integers(1, rows, size=3), rows)
            active = np.arange(rows)[:, None] < death[None, :]
            obs = rng.standard_normal((rows, 3, obs_dim)).astype(np.float32) * active[..., None]
            masks = (rng.random((rows, 3, 6)) < 0.6).astype(np.int8) * active[..., None]
            acted = active[:-1]
            rewards = rng.standard_normal((steps, 3)) * acted
            ends = np.zeros(steps, dtype=bool)
            ends[-1] = True
            yield mm.MultiAgentEpisode(
                possible_agents=agents,
                observations={a: obs[:, i] for i, a in enumerate(agents)},
                actions={a: (rng.integers(0, 6, steps) * acted[:, i]).astype(np.int64)
                         for i, a in enumerate(agents)},
                rewards=rewards, terminations=np.zeros((steps, 3), bool) | ends[:, None],
                truncations=np.zeros((steps, 3), bool), active=active, acted=acted,
                team_rewards=rewards.sum(axis=1), episode_terminations=ends,
                episode_truncations=np.zeros(steps, dtype=bool),
                state=rng.standard_normal((rows, 12)).astype(np.float32),
                agent_infos={a: {"action_mask": masks[:, i]} for i, a in enumerate(agents)},
                seed=index, options={"level": index % 3} if index % 2 else None)

    mm.write_dataset(dataset_id, make(), spec, algorithm_name="synthetic")
    return mm.load_dataset(dataset_id)
