"""Row tables and transition patterns (marl_minari.rows.patterns), checked against plain loops.

No ray here: these run in the core environment. tests/ray checks that the same functions give
the same rows on Ray Data.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from marl_strategies import leaf_spaces, nested_spaces, random_episode, row

import marl_minari as mm
from marl_minari.errors import IncompatibleSourcesError
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.ray import flatten_columns, local_rows
from marl_minari.rows import patterns as P
from marl_minari.rows.turns import agent_transitions
from marl_minari.sources import open_source
from marl_minari.storage.writer import write_dataset

AGENTS = ["a", "b", "c"]
_ids = itertools.count()
SLOW = settings(max_examples=15, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


def _uniform_dataset(obs_space: spaces.Space, act_space: spaces.Space, lengths: list[int],
                     seed: int = 0, state: bool = True) -> mm.MultiAgentDataset:
    """Agents sharing spaces, coming and going, acting with gaps, with infos and state."""
    obs = {a: obs_space for a in AGENTS}
    act = {a: act_space for a in AGENTS}
    state_space = spaces.Box(-1, 1, (3,), np.float32) if state else None
    spec = MultiAgentSpec(api="parallel", possible_agents=tuple(AGENTS), observation_spaces=obs,
                          action_spaces=act, state_space=state_space)
    episodes = [random_episode(AGENTS, obs, act, steps, seed * 100 + i, with_infos=True,
                               state_space=state_space) for i, steps in enumerate(lengths)]
    dataset_id = f"patterns/uniform{next(_ids)}-v0"
    write_dataset(dataset_id, episodes, spec)
    return mm.load_dataset(dataset_id)


def _reference_agent_rows(dataset: mm.MultiAgentDataset) -> list[dict[str, Any]]:
    """Agent-step rows of a parallel dataset, built one episode, agent and step at a time."""
    out = []
    for episode in dataset:
        steps = episode.total_steps
        for i, agent in enumerate(dataset.possible_agents):
            acted = [t for t in range(steps) if episode.acted[t, i]]
            for k, t in enumerate(acted):
                terminated = bool(episode.terminations[t, i])
                out.append({
                    "episode_id": episode.id, "agent_id": agent, "agent_index": i, "t": t,
                    "agent_t": k, "traj_len": len(acted),
                    "obs": row(episode.observations[agent], t),
                    "next_obs": row(episode.observations[agent], t + 1),
                    "action": row(episode.actions[agent], t),
                    "reward": float(episode.rewards[t, i]), "terminated": terminated,
                    "truncated": bool(episode.truncations[t, i]) or (
                        t + 1 == steps and not terminated),
                    "active": bool(episode.active[t, i]),
                    "next_active": bool(episode.active[t + 1, i]),
                    "state": episode.state[t], "next_state": episode.state[t + 1],
                    "info_score": episode.agent_infos[agent]["score"][t],
                })
    return out


def _batch_row(batch: P.Batch, k: int) -> dict[str, Any]:
    return {name: value[k] for name, value in batch.items()}


def _equal(a: Any, b: Any) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and bool(np.all(a == b))


def _tree_row(batch: P.Batch, prefix: str, space: spaces.Space, k: int) -> Any:
    return row(P.unflatten(batch, prefix, space), k)


def _trees_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_trees_equal(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_trees_equal(x, y) for x, y in zip(a, b, strict=True))
    return _equal(a, b)


@SLOW
@given(obs_space=nested_spaces, act_space=leaf_spaces, lengths=st.lists(
    st.integers(1, 6), min_size=1, max_size=4), seed=st.integers(0, 1000))
def test_agent_step_rows_match_a_loop_over_episodes(obs_space: spaces.Space,
                                                    act_space: spaces.Space,
                                                    lengths: list[int], seed: int) -> None:
    dataset = _uniform_dataset(obs_space, act_space, lengths, seed)
    rows = P.agent_step_rows(dataset.to_arrays(), dataset.spec, dataset="d")
    expected = _reference_agent_rows(dataset)
    assert len(rows["t"]) == len(expected)
    assert set(rows["dataset"].tolist()) <= {"d"}
    for k, want in enumerate(expected):
        got = _batch_row(rows, k)
        for name in ("episode_id", "agent_id", "agent_index", "t", "agent_t", "traj_len",
                     "reward", "terminated", "truncated", "active", "next_active", "state",
                     "next_state"):
            assert _equal(got[name], want[name]), (k, name)
        assert got["acted"]
        assert _equal(got["info.score"], want["info_score"])
        assert _trees_equal(_tree_row(rows, "obs", obs_space, k), want["obs"])
        assert _trees_equal(_tree_row(rows, "next_obs", obs_space, k), want["next_obs"])
        assert _trees_equal(_tree_row(rows, "action", act_space, k), want["action"])
    if isinstance(act_space, spaces.Discrete):
        assert rows["legal_mask"].shape == (len(expected), act_space.n)
        assert rows["legal_mask"].all() and rows["next_legal_mask"].all()
    else:
        assert "legal_mask" not in rows


def test_all_agent_steps_keep_absent_agents_with_fill_values() -> None:
    dataset = _uniform_dataset(spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(3),
                               [4, 2, 5])
    arrays = dataset.to_arrays()
    rows = P.agent_step_rows(arrays, dataset.spec, only_acted=False)
    assert len(rows["t"]) == arrays.rewards.size
    assert rows["acted"].sum() == arrays.acted.sum()
    absent = ~rows["active"]
    assert not rows["obs"][absent].any()
    picked = P.agent_step_rows(arrays, dataset.spec, agents=["c", "a"])
    assert sorted(set(picked["agent_id"].tolist())) == ["a", "c"]


def test_agents_with_different_spaces_need_a_selection(datasets_root: Any) -> None:
    obs = {"x": spaces.Box(0, 1, (2,), np.float32), "y": spaces.Box(0, 1, (3,), np.float32)}
    act = {"x": spaces.Discrete(2), "y": spaces.Discrete(2)}
    spec = MultiAgentSpec(api="parallel", possible_agents=("x", "y"), observation_spaces=obs,
                          action_spaces=act)
    write_dataset("patterns/hetero-v0", [random_episode(["x", "y"], obs, act, 3, 1)], spec)
    dataset = mm.load_dataset("patterns/hetero-v0")
    with pytest.raises(IncompatibleSourcesError, match="agents="):
        P.agent_step_rows(dataset.to_arrays(), dataset.spec)
    rows = P.agent_step_rows(dataset.to_arrays(), dataset.spec, agents=["y"])
    assert rows["obs"].shape[1:] == (3,)
    # Step and episode rows keep every agent in its own columns.
    steps = P.step_rows(dataset.to_arrays(), dataset.spec)
    assert steps["obs.x"].shape[1:] == (2,) and steps["obs.y"].shape[1:] == (3,)


def _reference_n_step(rows: P.Batch, n: int, gamma: float) -> list[dict[str, Any]]:
    out = []
    ordered = P.sort_rows(rows)
    keys = list(zip(ordered["episode_id"].tolist(), ordered["agent_index"].tolist(),
                    strict=True))
    for k in range(len(keys)):
        end = k
        while end + 1 < len(keys) and keys[end + 1] == keys[k]:
            end += 1
        m = min(n, end - k + 1)
        total = 0.0
        for j in range(m):
            total += gamma ** j * float(ordered["reward"][k + j])
        last = k + m - 1
        discount = 0.0 if ordered["terminated"][last] else gamma ** m
        out.append({"reward": total, "discount": discount, "n_steps": m,
                    "next_obs": ordered["next_obs"][last], "obs": ordered["obs"][k],
                    "terminated": ordered["terminated"][last], "t": ordered["t"][k]})
    return out


@SLOW
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=4), seed=st.integers(0, 99),
       n=st.integers(1, 5), gamma=st.sampled_from([1.0, 0.99, 0.5, 0.0]))
def test_n_step_matches_a_loop(lengths: list[int], seed: int, n: int, gamma: float) -> None:
    dataset = _uniform_dataset(spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(3),
                               lengths, seed, state=False)
    rows = P.agent_step_rows(dataset.to_arrays(), dataset.spec)
    got = P.n_step(rows, n, gamma)
    expected = _reference_n_step(rows, n, gamma)
    assert len(got["t"]) == len(expected)
    for k, want in enumerate(expected):
        for name, value in want.items():
            assert np.allclose(got[name][k], value, rtol=0, atol=1e-12), (k, name)
    # Row order does not matter, and the result is bit-identical.
    shuffled = {k: v[np.random.default_rng(seed).permutation(len(v))] for k, v in rows.items()}
    again = P.n_step(shuffled, n, gamma)
    for name in got:
        assert np.array_equal(got[name], again[name]), name


def test_transitions_are_one_step_returns() -> None:
    dataset = _uniform_dataset(spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(3),
                               [5, 3])
    rows = P.agent_step_rows(dataset.to_arrays(), dataset.spec)
    one = P.transitions(rows, gamma=0.9)
    ordered = P.sort_rows(rows)
    assert np.array_equal(one["reward"], ordered["reward"])
    assert np.array_equal(one["next_obs"], ordered["next_obs"])
    assert np.array_equal(one["discount"], np.where(ordered["terminated"], 0.0, 0.9))
    assert (one["n_steps"] == 1).all()


@given(rows=st.integers(0, 30), length=st.integers(1, 8), stride=st.integers(1, 9),
       pad=st.booleans())
def test_window_offsets(rows: int, length: int, stride: int, pad: bool) -> None:
    starts = P.window_offsets(rows, length, stride, pad)
    assert (starts % stride == 0).all() and (starts < max(rows, 1)).all()
    if not pad:
        assert (starts + length <= rows).all()
        assert len(starts) == (0 if rows < length else (rows - length) // stride + 1)
        return
    if rows == 0:
        assert starts.tolist() == []
        return
    covered = np.zeros(rows, dtype=bool)
    for start in starts:
        covered[start:start + length] = True
    if stride <= length:
        assert covered.all()
    # No window starts after one already reached the end.
    assert all(s + length < rows for s in starts[:-1])


@SLOW
@given(lengths=st.lists(st.integers(1, 9), min_size=1, max_size=3), seed=st.integers(0, 99),
       length=st.integers(1, 5), stride=st.integers(1, 6), pad=st.booleans())
def test_sequences_match_a_loop(lengths: list[int], seed: int, length: int, stride: int,
                                pad: bool) -> None:
    dataset = _uniform_dataset(spaces.Dict({"o": spaces.Box(-1, 1, (2,), np.float32),
                                            "w": spaces.Text(3)}), spaces.Discrete(3),
                               lengths, seed, state=False)
    rows = P.agent_step_rows(dataset.to_arrays(), dataset.spec)
    got = P.sequences(rows, length, stride, pad)
    ordered = P.sort_rows(rows)
    keys = list(zip(ordered["episode_id"].tolist(), ordered["agent_index"].tolist(),
                    strict=True))
    windows = []
    for key, group in itertools.groupby(range(len(keys)), key=lambda k: keys[k]):
        members = list(group)
        for offset in P.window_offsets(len(members), length, stride, pad).tolist():
            windows.append((key, members[offset:offset + length]))
    assert len(got["mask"]) == len(windows)
    for w, (key, members) in enumerate(windows):
        assert (got["episode_id"][w], got["agent_index"][w]) == key
        assert got["mask"][w].tolist() == [j < len(members) for j in range(length)]
        assert got["start_t"][w] == ordered["t"][members[0]]
        real = len(members)
        assert np.array_equal(got["obs.o"][w][:real], ordered["obs.o"][members])
        assert np.array_equal(got["reward"][w][:real], ordered["reward"][members])
        assert list(got["obs.w"][w][:real]) == list(ordered["obs.w"][members])
        assert not got["obs.o"][w][real:].any() and not got["reward"][w][real:].any()
        assert all(s == "" for s in got["obs.w"][w][real:])


def test_patterns_refuse_part_of_a_trajectory() -> None:
    dataset = _uniform_dataset(spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(3),
                               [6, 6])
    rows = P.agent_step_rows(dataset.to_arrays(), dataset.spec)
    half = {k: v[: len(v) // 2 + 1] for k, v in rows.items()}
    for pattern in (P.transitions, lambda b: P.n_step(b, 3), lambda b: P.sequences(b, 2)):
        with pytest.raises(P.IncompleteTrajectoryError, match="part of a trajectory"):
            pattern(half)
        doubled = P.concat([rows, rows])
        with pytest.raises(P.IncompleteTrajectoryError):
            pattern(doubled)
    with pytest.raises(ValueError, match="agent_steps"):
        P.n_step(P.step_rows(dataset.to_arrays(), dataset.spec))


def test_patterns_of_an_empty_batch() -> None:
    dataset = _uniform_dataset(spaces.Box(-1, 1, (2,), np.float32), spaces.Discrete(3), [3])
    rows = P.agent_step_rows(dataset.to_arrays(), dataset.spec)
    empty = {k: v[:0] for k, v in rows.items()}
    assert len(P.n_step(empty, 3)["reward"]) == 0
    windows = P.sequences(empty, 4)
    assert windows["obs"].shape == (0, 4, 2) and windows["mask"].shape == (0, 4)


def test_step_and_episode_rows_follow_the_arrays() -> None:
    dataset = _uniform_dataset(spaces.Tuple((spaces.Discrete(4), spaces.Box(0, 1, (2,)))),
                               spaces.Discrete(3), [3, 1, 4])
    arrays = dataset.to_arrays()
    steps = P.step_rows(arrays, dataset.spec, dataset="d")
    assert np.array_equal(steps["obs.b._index_1"], arrays.observations["b"][1][arrays.obs_rows])
    assert np.array_equal(steps["next_obs.c._index_0"],
                          arrays.observations["c"][0][arrays.next_obs_rows])
    assert np.array_equal(steps["reward"], arrays.rewards)
    assert np.array_equal(steps["next_active"], arrays.active[arrays.next_obs_rows])
    assert np.array_equal(steps["t"], [0, 1, 2, 0, 0, 1, 2, 3])
    assert np.array_equal(steps["info.a.nested.count"],
                          arrays.agent_infos["a"]["nested"]["count"][arrays.obs_rows])
    episodes = P.episode_rows(arrays, dataset.spec)
    assert episodes["length"].tolist() == [3, 1, 4]
    for i in range(3):
        episode = arrays.episode(i)
        assert np.array_equal(episodes["obs.a._index_0"][i], episode.observations["a"][0])
        assert np.array_equal(episodes["active"][i], episode.active)
        assert np.array_equal(episodes["reward"][i], episode.rewards)
        assert np.array_equal(episodes["state"][i], episode.state)


def _tictactoe_results(game: int) -> dict[str, float]:
    """Each player's total reward in game ``game`` of ``record_tictactoe``, replayed on the
    PettingZoo env itself (same seed, same move choices)."""
    env = mm.make_env("classic/tictactoe-v3", api="aec")
    env.reset(seed=game)
    rng = np.random.default_rng(game)
    totals = dict.fromkeys(env.possible_agents, 0.0)
    for _ in env.agent_iter():
        observation, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else int(
            rng.choice(np.flatnonzero(observation["action_mask"]))))
        for agent, reward in env.rewards.items():
            totals[agent] += float(reward)
    env.close()
    return totals


def test_turn_based_rows_go_from_turn_to_turn(record_tictactoe: Any) -> None:
    dataset = record_tictactoe("patterns/tictactoe-v0", 5)
    arrays = dataset.to_arrays()
    rows = P.agent_step_rows(arrays, dataset.spec)
    assert set(rows) >= {"obs.observation", "obs.action_mask", "legal_mask"}
    for i, agent in enumerate(dataset.possible_agents):
        expected = agent_transitions(arrays, agent)
        mine = {k: v[rows["agent_index"] == i] for k, v in rows.items()}
        assert np.array_equal(mine["reward"], expected.rewards)
        assert np.array_equal(mine["terminated"], expected.terminations)
        assert np.array_equal(mine["truncated"], expected.truncations)
        assert np.array_equal(mine["t"], expected.steps)
        assert np.array_equal(mine["episode_id"], expected.episode_ids)
        assert np.array_equal(mine["next_obs.observation"],
                              expected.next_observations["observation"])
        assert np.array_equal(mine["legal_mask"], expected.action_masks.astype(bool))
        assert np.array_equal(mine["next_legal_mask"], expected.next_action_masks.astype(bool))
    # A player's 9-step return from its first turn is its game result: the env's own rewards
    # for the same seeded game, +1 for the winner and -1 for the loser, or 0 for both.
    last = P.n_step(rows, 9, 1.0)
    firsts = last["agent_t"] == 0
    results = {(int(e), dataset.possible_agents[int(i)]): r for e, i, r in zip(
        last["episode_id"][firsts], last["agent_index"][firsts], last["reward"][firsts],
        strict=True)}
    assert set(results.values()) <= {-1.0, 0.0, 1.0}
    decided = 0
    for game in range(5):
        expected = _tictactoe_results(game)
        assert {a: results[(game, a)] for a in expected} == expected, game
        assert sorted(expected.values()) in ([-1.0, 1.0], [0.0, 0.0]), game
        decided += max(expected.values()) == 1.0
    assert decided > 0, "a game must have a winner for this test to bite"
    with pytest.raises(ValueError, match="turn-based"):
        P.agent_step_rows(arrays, dataset.spec, only_acted=False)


def test_plain_minari_dataset_reads_as_one_agent(record_cartpole: Any) -> None:
    plain = record_cartpole("plain/cartpole-v0")
    source = open_source("plain/cartpole-v0")
    assert source.kind == "single_agent" and source.spec.possible_agents == ("agent_0",)
    rows = local_rows("plain/cartpole-v0")
    episodes = list(plain.iterate_episodes())
    assert len(rows["t"]) == sum(len(e.actions) for e in episodes)
    for episode in episodes:
        mine = {k: v[rows["episode_id"] == episode.id] for k, v in rows.items()}
        assert np.array_equal(mine["obs"], episode.observations[:-1])
        assert np.array_equal(mine["next_obs"], episode.observations[1:])
        assert np.array_equal(mine["action"], episode.actions)
        assert np.array_equal(mine["reward"], episode.rewards)
        assert np.array_equal(mine["terminated"], episode.terminations)
        assert mine["truncated"][-1] == (not episode.terminations[-1])
        assert (mine["agent_id"] == "agent_0").all() and mine["legal_mask"].all()
    by_path = local_rows(source.data_path, "steps")
    assert np.array_equal(by_path["reward"][:, 0], np.concatenate(
        [e.rewards for e in episodes]))
    # A folder and an id are the same source; a missing one is reported.
    with pytest.raises(mm.DatasetNotFoundError):
        open_source("plain/missing-v0")


flattenable = st.recursive(
    leaf_spaces.filter(lambda s: not isinstance(s, spaces.Text)),
    lambda children: st.one_of(
        st.dictionaries(st.text("abcxyz", min_size=1, max_size=3), children, min_size=1,
                        max_size=3).map(spaces.Dict),
        st.lists(children, min_size=1, max_size=3).map(lambda s: spaces.Tuple(tuple(s)))),
    max_leaves=5)


@settings(max_examples=40, deadline=None)
@given(space=flattenable, seed=st.integers(0, 2**31 - 1))
def test_flatten_columns_equals_gymnasium_flatten(space: spaces.Space, seed: int) -> None:
    space.seed(seed)
    samples = [space.sample() for _ in range(4)]
    from marl_minari.format.spaces import stack

    tree = stack(space, samples, "sample")
    columns = P.flatten("obs", tree)
    flat = flatten_columns(columns, "obs", space)
    for k, sample in enumerate(samples):
        expected = spaces.flatten(space, sample)
        assert flat[k].dtype == expected.dtype
        assert np.array_equal(flat[k], expected)
    assert flat.shape[1:] == spaces.flatten_space(space).shape
