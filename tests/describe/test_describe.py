"""``marl_minari.describe``: statistics checked against plain Minari and raw vault arrays,
plots, dataset cards (published with the dataset) and the ``describe`` command."""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import minari
import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

import marl_minari as mm
from marl_minari.describe import (
    PANEL_SIZE,
    DatasetDescription,
    Summary,
    dataset_card,
    describe,
    size_category,
)
from marl_minari.errors import DatasetNotFoundError, InvalidOptionError, UnknownAgentError
from marl_minari.format.ids import dataset_dir

Recorder = Callable[..., tuple[Any, list[dict[str, Any]]]]
KAZ = ("butterfly/knights_archers_zombies_v11",
       {"max_cycles": 150, "spawn_delay": 1, "line_death": True})
SPREAD = ("mpe2/simple_spread_v3", {"max_cycles": 10})
SPREAD_CONTINUOUS = ("mpe2/simple_spread_v3", {"max_cycles": 8, "continuous_actions": True})


# --------------------------------------------------------------------------- expectations
def assert_summary(summary: Summary, values: np.ndarray) -> None:
    """``summary`` equals the statistics numpy computes from ``values``."""
    values = np.asarray(values, dtype=np.float64)
    assert summary.count == len(values)
    q25, median, q75 = np.percentile(values, [25, 50, 75])
    expected = {"mean": values.mean(), "std": values.std(), "min": values.min(), "q25": q25,
                "median": median, "q75": q75, "max": values.max()}
    for key, value in expected.items():
        assert getattr(summary, key) == pytest.approx(value, rel=1e-9, abs=1e-9), key


def assert_close(a: Any, b: Any, where: str = "") -> None:
    """Nested dicts/lists equal, floats up to rounding (running means combine chunks)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            assert_close(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_close(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12), where
    else:
        assert a == b, where


def expected_from_plain_minari(dataset_id: str) -> dict[str, Any]:
    """Statistics computed with plain ``minari`` episodes and numpy only."""
    plain = minari.load_dataset(dataset_id)
    metadata = json.loads((dataset_dir(dataset_id) / "data" / "metadata.json").read_text())
    agents = metadata["marl_minari"]["possible_agents"]
    out: dict[str, Any] = {"lengths": [], "team": [], "returns": [], "active": 0, "acted": 0,
                           "terminated": 0, "truncated": 0, "agent_active": np.zeros(len(agents)),
                           "agent_acted": np.zeros(len(agents)),
                           "agent_terms": np.zeros(len(agents)),
                           "agent_truncs": np.zeros(len(agents)),
                           "actions": {a: [] for a in agents}}
    for episode in plain.iterate_episodes():
        marl = episode.infos["marl"]
        steps = len(episode.rewards)
        out["lengths"].append(steps)
        out["team"].append(float(np.sum(episode.rewards)))
        out["returns"].append(np.asarray(marl["rewards"])[1:].sum(axis=0))
        active = np.asarray(marl["active"])[:-1]
        acted = np.asarray(marl["acted"])[:-1]
        out["agent_active"] += active.sum(axis=0)
        out["agent_acted"] += acted.sum(axis=0)
        out["agent_terms"] += np.asarray(marl["terminations"])[1:].sum(axis=0)
        out["agent_truncs"] += np.asarray(marl["truncations"])[1:].sum(axis=0)
        out["terminated"] += bool(episode.terminations[-1])
        out["truncated"] += bool(episode.truncations[-1])
        for i, agent in enumerate(agents):
            out["actions"][agent].append(np.asarray(episode.actions[agent])[acted[:, i]])
    out["agents"] = agents
    out["returns"] = np.stack(out["returns"])
    out["actions"] = {a: np.concatenate(v) for a, v in out["actions"].items()}
    return out


def check_against_plain(description: DatasetDescription, dataset_id: str,
                        action_spaces: dict[str, gym.Space]) -> None:
    expected = expected_from_plain_minari(dataset_id)
    agents = expected["agents"]
    assert description.possible_agents == tuple(agents)
    assert description.total_episodes == len(expected["lengths"])
    assert description.total_steps == sum(expected["lengths"])
    assert_summary(description.episode_lengths, np.asarray(expected["lengths"]))
    assert_summary(description.team_returns, np.asarray(expected["team"]))
    assert description.terminated_episodes == expected["terminated"]
    assert description.truncated_episodes == expected["truncated"]
    assert description.unfinished_episodes == 0
    steps = description.total_steps
    assert description.inactive_share == pytest.approx(
        1 - expected["agent_active"].sum() / (steps * len(agents)))
    for i, agent in enumerate(agents):
        stats = description.agent(agent)
        assert_summary(stats.returns, expected["returns"][:, i])
        assert stats.active_steps == expected["agent_active"][i]
        assert stats.acted_steps == expected["agent_acted"][i]
        assert stats.inactive_share == pytest.approx(1 - expected["agent_active"][i] / steps)
        assert stats.terminations == expected["agent_terms"][i]
        assert stats.truncations == expected["agent_truncs"][i]
        (action,) = stats.actions
        taken = expected["actions"][agent]
        assert action.samples == len(taken)
        space = action_spaces[agent]
        if isinstance(space, gym.spaces.Discrete):
            assert action.kind == "discrete"
            assert action.counts == tuple(np.bincount(taken, minlength=int(space.n)))
            assert action.labels == tuple(str(v) for v in range(int(space.n)))
        else:
            assert isinstance(space, gym.spaces.Box) and action.kind == "continuous"
            taken = taken.astype(np.float64)
            np.testing.assert_allclose(action.minimum, taken.min(axis=0))
            np.testing.assert_allclose(action.maximum, taken.max(axis=0))
            np.testing.assert_allclose(action.mean, taken.mean(axis=0), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(action.std, taken.std(axis=0), rtol=1e-7, atol=1e-12)
            assert action.out_of_space == int(
                ((taken < space.low) | (taken > space.high)).any(axis=1).sum())


# --------------------------------------------------------------------------- datasets
@pytest.mark.parametrize("env", [KAZ, SPREAD, SPREAD_CONTINUOUS],
                         ids=["kaz-dying-agents", "spread", "spread-continuous"])
def test_statistics_equal_plain_minari(recorded_parallel: Recorder,
                                       env: tuple[str, dict[str, Any]]) -> None:
    env_id, kwargs = env
    dataset, records = recorded_parallel(env_id, episodes=3, **kwargs)
    if env is KAZ:
        assert not dataset.to_arrays().active.all(), "an agent must die for this test to bite"
    description = describe("tests/recorded-v0", chunk_steps=40)
    assert description.kind == "multi_agent"
    check_against_plain(description, "tests/recorded-v0", dataset.spec.action_spaces)
    # the play log agrees too (returns per agent, in episode order)
    np.testing.assert_allclose(
        description.episode_returns,
        [[r["returns"][a] for a in dataset.possible_agents] for r in records])
    # any chunking gives the same statistics; so do the other source types
    whole = describe(dataset, chunk_steps=10**9).to_dict(include_episodes=True)
    assert_close(describe(dataset.minari, chunk_steps=1).to_dict(include_episodes=True), whole)
    assert_close(description.to_dict(include_episodes=True), whole)
    json.dumps(whole, allow_nan=False)


def test_metadata_and_text(recorded_parallel: Recorder) -> None:
    recorded_parallel(*SPREAD[:1], episodes=2, **SPREAD[1])
    description = describe("tests/recorded-v0")
    meta = description.metadata
    assert meta["env"]["env_id"] == "mpe2/simple_spread_v3"
    assert meta["env"]["kwargs"]["max_cycles"] == 10 and meta["env"]["kwargs"]["N"] == 3
    assert meta["algorithm_name"] == "random" and meta["author"] == ["tests"]
    assert meta["code_permalink"] == "https://example.com/tests"
    assert meta["layout_version"] == 1 and meta["api"] == "parallel"
    assert meta["action_spaces"]["agent_0"] == "Discrete(5)"
    assert meta["observation_spaces"]["agent_0"].startswith("Box(")
    text = description.to_text()
    assert "mpe2/simple_spread_v3" in text and "agent_2" in text
    with pytest.raises(dataclasses.FrozenInstanceError):
        description.name = "other"  # type: ignore[misc]
    with pytest.raises(UnknownAgentError, match="no agent 'nobody' .* agent_0, agent_1"):
        description.agent("nobody")
    with pytest.raises(KeyError):  # still what a mapping lookup raises
        description.agent("nobody")


def test_single_agent_minari_dataset(record_cartpole: Any) -> None:
    record_cartpole("cartpole/random-v0", 6, max_episode_steps=60)

    description = describe("cartpole/random-v0", chunk_steps=30)
    assert description.kind == "single_agent" and description.possible_agents == ("agent_0",)
    episodes = list(minari.load_dataset("cartpole/random-v0").iterate_episodes())
    lengths = np.asarray([len(e.rewards) for e in episodes])
    returns = np.asarray([float(e.rewards.sum()) for e in episodes])
    actions = np.concatenate([e.actions for e in episodes])
    assert description.total_episodes == 6 and description.total_steps == lengths.sum()
    assert_summary(description.episode_lengths, lengths)
    assert_summary(description.team_returns, returns)
    agent = description.agent("agent_0")
    assert_summary(agent.returns, returns)
    assert agent.actions[0].counts == tuple(np.bincount(actions, minlength=2))
    assert agent.inactive_share == 0.0 and agent.acted_steps == lengths.sum()
    assert description.terminated_episodes == sum(bool(e.terminations[-1]) for e in episodes)
    assert description.truncated_episodes == sum(bool(e.truncations[-1]) for e in episodes)
    assert description.metadata["env"]["env_id"] == "CartPole-v1"
    assert description.metadata["action_spaces"] == {"agent_0": "Discrete(2)"}
    assert describe(minari.load_dataset("cartpole/random-v0")).to_dict() == \
        description.to_dict()


def test_missing_sources_are_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="not found locally"):
        describe("tests/absent-v0")
    with pytest.raises(DatasetNotFoundError, match="neither a dataset folder"):
        describe(tmp_path)
    with pytest.raises(TypeError):
        describe(42)
    with pytest.raises(InvalidOptionError, match="chunk_steps must be an integer >= 1"):
        describe("tests/absent-v0", chunk_steps=0)


# --------------------------------------------------------------------------- vaults
def write_ogmarl_vault(rel_dir: Path, name: str, uid: str) -> dict[str, Any]:
    """An OG-MARL style vault written with Flashbax's own ``Vault``; returns its arrays.

    Two streams of 37 steps, 3 agents, 4-float observations, 5 actions. Episodes end with the
    team's done copied to every agent (terminals, or truncations for some); agent 2 dies
    inside some episodes (zero observation, only the no-op legal); stream 1 ends with steps
    after its last done.
    """
    import jax.numpy as jnp
    from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
    from flashbax.vault import Vault

    rng = np.random.default_rng(7)
    b, t, n, o, a = 2, 37, 3, 4, 5
    observations = rng.normal(size=(b, t, n, o)).astype(np.float32)
    actions = rng.integers(0, a, (b, t, n)).astype(np.int32)
    rewards = np.repeat(rng.normal(size=(b, t, 1)), n, axis=2).astype(np.float32)
    terminals = np.zeros((b, t, n), np.float32)
    truncations = np.zeros((b, t, n), np.float32)
    legals = np.ones((b, t, n, a), np.float32)
    ends = {0: [8, 19, 30, 36], 1: [11, 25]}
    for stream, stream_ends in ends.items():
        start = 0
        for k, end in enumerate(stream_ends):
            (truncations if k % 2 else terminals)[stream, end, :] = 1
            if k % 2 == 0:  # agent 2 dies half-way through this episode
                dead = slice((start + end) // 2, end + 1)
                observations[stream, dead, 2] = 0
                legals[stream, dead, 2] = [1, 0, 0, 0, 0]
                actions[stream, dead, 2] = 0
            start = end + 1
    experience: dict[str, Any] = {
        "observations": observations, "actions": actions, "rewards": rewards,
        "terminals": terminals, "truncations": truncations,
        "infos": {"legals": legals, "state": observations.reshape(b, t, n * o)}}
    state = TrajectoryBufferState(
        experience={k: ({kk: jnp.asarray(vv) for kk, vv in v.items()} if isinstance(v, dict)
                        else jnp.asarray(v)) for k, v in experience.items()},
        current_index=jnp.int32(t), is_full=jnp.bool_(False))
    vault = Vault(name, experience_structure=state.experience, rel_dir=str(rel_dir),
                  vault_uid=uid, metadata={"env": "toy", "quality": "Good"})
    vault.write(state, source_interval=(0, t))
    return {**{k: v for k, v in experience.items() if k != "infos"}, "legals": legals,
            "ends": ends}


def expected_vault_episodes(raw: dict[str, Any]) -> dict[str, Any]:
    """Episodes of the raw arrays: cut after every done; trailing steps are one more,
    truncated, episode (what ``from_vault`` does by default)."""
    lengths, returns, team, terminated, truncated, inactive = [], [], [], 0, 0, 0
    counts = np.zeros((3, 5), dtype=np.int64)
    b, t = raw["rewards"].shape[:2]
    for stream in range(b):
        done = (raw["terminals"][stream] + raw["truncations"][stream]).any(axis=1)
        cuts = [int(c) + 1 for c in np.flatnonzero(done)]
        if not cuts or cuts[-1] != t:
            cuts.append(t)
        start = 0
        for stop in cuts:
            rows = slice(start, stop)
            lengths.append(int(stop - start))
            returns.append(raw["rewards"][stream, rows].sum(axis=0, dtype=np.float64))
            team.append(raw["rewards"][stream, rows].astype(np.float64).mean(axis=1).sum())
            terminated += bool(raw["terminals"][stream, stop - 1].any())
            truncated += int(not raw["terminals"][stream, stop - 1].any())
            obs_zero = (raw["observations"][stream, rows] == 0).all(axis=-1)
            noop_only = (raw["legals"][stream, rows] == [1, 0, 0, 0, 0]).all(axis=-1)
            inactive += int((obs_zero & noop_only).sum())
            for agent in range(3):
                counts[agent] += np.bincount(raw["actions"][stream, rows, agent], minlength=5)
            start = stop
    return {"lengths": np.asarray(lengths), "returns": np.stack(returns),
            "team": np.asarray(team), "terminated": terminated, "truncated": truncated,
            "inactive": inactive, "counts": counts}


def test_ogmarl_vault(tmp_path: Path, datasets_root: Path) -> None:
    raw = write_ogmarl_vault(tmp_path / "vaults", "toy_env", "Good")
    path = tmp_path / "vaults" / "toy_env" / "Good"
    description = describe(path, chunk_steps=16)
    expected = expected_vault_episodes(raw)

    assert description.kind == "vault" and description.name == str(path.resolve())
    assert description.possible_agents == ("agent_0", "agent_1", "agent_2")
    assert description.total_steps == 2 * 37
    assert description.total_episodes == len(expected["lengths"]) == 7
    assert sorted(description.episode_length_values) == sorted(expected["lengths"])
    assert_summary(description.episode_lengths, expected["lengths"])
    assert_summary(description.team_returns, expected["team"])
    for i in range(3):
        agent = description.agent(f"agent_{i}")
        assert_summary(agent.returns, expected["returns"][:, i])
        assert agent.actions[0].counts == tuple(expected["counts"][i])
    assert description.terminated_episodes == expected["terminated"]
    assert description.truncated_episodes == expected["truncated"]
    assert description.agent("agent_2").active_steps == 74 - expected["inactive"] > 0
    assert description.inactive_share == pytest.approx(expected["inactive"] / (3 * 74))
    assert description.metadata["vault_metadata"]["quality"] == "Good"
    assert description.metadata["vault_uid"] == "Good"
    assert description.metadata["action_spaces"]["agent_0"] == "Discrete(5)"
    # the temporary import leaves nothing behind in the datasets root
    assert not [p for p in datasets_root.rglob("*") if p.is_file()]
    card = dataset_card(description, tmp_path / "card" / "README.md")
    assert "Flashbax vault" in card.read_text() and "flashbax" in card.read_text()


# --------------------------------------------------------------------------- plots, card
def png_size(path: Path) -> tuple[int, int]:
    """Width and height from the PNG header, read without PIL."""
    data = path.read_bytes()[:24]
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def test_dataset_card_is_published(recorded_parallel: Recorder, tmp_path: Path) -> None:
    from marl_minari.registry import publish

    recorded_parallel(KAZ[0], episodes=2, dataset_id="tests/kaz-v0", **KAZ[1])
    description = describe("tests/kaz-v0")
    card = dataset_card(description, dataset_dir("tests/kaz-v0") / "README.md")
    text = card.read_text()
    assert text.startswith("---\n")
    front = yaml.safe_load(text.split("---\n")[1])
    assert front["pretty_name"] == "tests/kaz-v0"
    assert front["license"] == "unknown"
    assert front["task_categories"] == ["reinforcement-learning"]
    assert {"minari", "multi-agent-reinforcement-learning", "marl-minari"} <= set(front["tags"])
    assert front["size_categories"] == [size_category(description.total_steps)] == ["n<1K"]
    for expected in ("butterfly/knights_archers_zombies_v11", "`archer_0`", "`knight_1`",
                     "Discrete(6)", "| Algorithm | random |", "| Author | tests |",
                     "https://example.com/tests", "| Layout version | 1 |", '"max_cycles": 150',
                     "![Statistics of tests/kaz-v0](statistics.png)", "recorded by the test"):
        assert expected in text, expected
    image = card.parent / "statistics.png"
    assert png_size(image)[0] == 4 * PANEL_SIZE[0]

    remote = tmp_path / "remote"
    publish("tests/kaz-v0", f"file://{remote}")
    published = {p.name: p for p in remote.rglob("*") if p.is_file()}
    assert published["README.md"].read_text() == text
    assert published["statistics.png"].read_bytes() == image.read_bytes()


# --------------------------------------------------------------------------- action leaves
def action_stats(space: gym.Space, chunks: list[np.ndarray]) -> Any:
    """The summary ``describe`` gives one action leaf fed in ``chunks``."""
    from marl_minari.describe.stats import _ActionStats

    stats = _ActionStats("", space)
    for chunk in chunks:
        stats.add(chunk)
    return stats.result()


def test_every_action_leaf_kind_is_counted_across_chunks() -> None:
    rng = np.random.default_rng(3)
    # Discrete with a start: values -2..2, plus two outside (-3 and 3)
    values = np.concatenate([rng.integers(-2, 3, 50), [-3, 3]])
    summary = action_stats(gym.spaces.Discrete(5, start=-2), [values[:17], values[17:]])
    inside = values[(values >= -2) & (values <= 2)]
    assert summary.kind == "discrete" and summary.samples == 52
    assert summary.labels == ("-2", "-1", "0", "1", "2")
    assert summary.counts == tuple(np.bincount(inside + 2, minlength=5))
    assert summary.out_of_space == 2

    # MultiDiscrete: per component value counts of the actions inside the space; a row with a
    # component outside its range counts once as outside and not at all in counts
    space = gym.spaces.MultiDiscrete([3, 2])
    rows = np.stack([rng.integers(0, 3, 40), rng.integers(0, 2, 40)], axis=1)
    rows[5] = [3, 0]
    summary = action_stats(space, [rows[:11], rows[11:]])
    assert summary.kind == "multi_discrete" and summary.out_of_space == 1
    assert summary.labels == ("c0=0", "c0=1", "c0=2", "c1=0", "c1=1")
    inside_rows = rows[(rows[:, 0] < 3) & (rows[:, 1] < 2)]
    assert summary.counts == (*np.bincount(inside_rows[:, 0], minlength=3),
                              *np.bincount(inside_rows[:, 1], minlength=2))

    # MultiBinary: how often each bit was set; rows with a non-bit value are outside
    bits = rng.integers(0, 2, (30, 4))
    bits[7, 2] = 5
    summary = action_stats(gym.spaces.MultiBinary(4), [bits[:3], bits[3:]])
    assert summary.kind == "binary" and summary.labels == ("b0", "b1", "b2", "b3")
    valid_bits = bits[np.isin(bits, (0, 1)).all(axis=1)]
    assert summary.counts == tuple((valid_bits == 1).sum(axis=0))
    assert summary.out_of_space == 1

    # Box: running mean and std over chunks equal numpy's over everything
    box = gym.spaces.Box(-1.0, 1.0, (2,))
    rows = rng.uniform(-1.2, 1.0, (64, 2))
    summary = action_stats(box, [rows[:1], rows[1:40], rows[40:]])
    np.testing.assert_allclose(summary.mean, rows.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(summary.std, rows.std(axis=0), rtol=1e-12)
    assert summary.minimum == tuple(rows.min(axis=0))
    assert summary.out_of_space == int((rows < -1).any(axis=1).sum()) > 0

    # Text: only counted
    summary = action_stats(gym.spaces.Text(8), [np.asarray(["a", "bc"], dtype=object)])
    assert summary.kind == "text" and summary.samples == 2 and summary.counts == ()


def test_size_categories() -> None:
    assert [size_category(n) for n in (0, 999, 1000, 99_999, 1_000_000, 10**10)] == [
        "n<1K", "n<1K", "1K<n<10K", "10K<n<100K", "1M<n<10M", "n>10B"]


# --------------------------------------------------------------------------- command
def test_describe_command(recorded_parallel: Recorder, tmp_path: Path) -> None:
    from marl_minari.cli import app
    recorded_parallel(SPREAD[0], episodes=3, dataset_id="tests/spread-v0", **SPREAD[1])
    recorded_parallel(KAZ[0], episodes=2, dataset_id="tests/kaz-v0", **KAZ[1])
    raw = write_ogmarl_vault(tmp_path / "vaults", "toy_env", "Good")
    runner = CliRunner()

    result = runner.invoke(app, ["describe", "tests/spread-v0", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload == json.loads(json.dumps(describe("tests/spread-v0").to_dict()))

    vault = str(tmp_path / "vaults" / "toy_env" / "Good")
    result = runner.invoke(app, ["describe", "tests/spread-v0", "--compare", "tests/kaz-v0",
                                 "--compare", vault, "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert [p["kind"] for p in payload] == ["multi_agent", "multi_agent", "vault"]
    assert payload[2]["total_steps"] == raw["rewards"].shape[0] * raw["rewards"].shape[1]

    # compared: the plot shows both datasets, the card's own plot only the first; both are
    # written and every file is named
    plot, card = tmp_path / "out" / "cmp.png", tmp_path / "card" / "README.md"
    plot.parent.mkdir()
    card.parent.mkdir()
    result = runner.invoke(app, ["describe", "tests/kaz-v0", "--compare", "tests/spread-v0",
                                 "--plot", str(plot), "--card", str(card),
                                 "--license", "cc-by-4.0"])
    assert result.exit_code == 0, result.output
    assert "tests/kaz-v0" in result.output and "knight_0" in result.output
    written = [line for line in result.output.splitlines() if " written to " in line]
    assert written == [f"plot written to {plot}", f"dataset card written to {card}",
                       f"plot written to {card.parent / 'statistics.png'}"]
    assert png_size(plot)[0] == 1600 and png_size(card.parent / "statistics.png")[0] == 1600
    front = yaml.safe_load(card.read_text().split("---\n")[1])
    assert front["pretty_name"] == "tests/kaz-v0" and front["license"] == "cc-by-4.0"

    # one dataset: the card links the --plot file, drawn once; no second statistics.png
    plot, card = tmp_path / "one" / "stats.png", tmp_path / "one" / "card.md"
    plot.parent.mkdir()
    result = runner.invoke(app, ["describe", "tests/kaz-v0", "--plot", str(plot), "--card",
                                 str(card), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["name"] == "tests/kaz-v0"  # stdout stays JSON
    assert result.stderr.splitlines()[-2:] == [f"dataset card written to {card}",
                                               f"plot written to {plot}"]
    assert sorted(p.name for p in plot.parent.iterdir()) == ["card.md", "stats.png"]
    assert "![Statistics of tests/kaz-v0](stats.png)" in card.read_text()

    result = runner.invoke(app, ["describe", "tests/absent-v0"])
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "tests/absent-v0" in result.output
    debug = runner.invoke(app, ["--debug", "describe", "tests/absent-v0"])
    assert isinstance(debug.exception, mm.DatasetNotFoundError)
