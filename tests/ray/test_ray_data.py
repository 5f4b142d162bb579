"""Ray Data datasource, patterns on Ray, and RLlib offline training from an export.

Runs on a local Ray instance with 2 CPUs (``ray_local`` in conftest.py). Skipped only when ray
is not installed; the ``ray`` extra installs it.
"""

from __future__ import annotations

import functools
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

pytest.importorskip("ray")

import marl_minari as mm  # noqa: E402
import marl_minari.ray as R  # noqa: E402
from marl_minari.errors import CorruptedDataError, IncompatibleSourcesError  # noqa: E402
from marl_minari.rows import patterns as P  # noqa: E402

META = {"algorithm_name": "random", "author": "tests", "author_email": "tests@example.com",
        "code_permalink": "https://example.com/tests", "description": "ray tests"}
# RLlib's offline schema (ray.rllib.offline.offline_prelearner.SCHEMA) plus agent_index.
RLLIB_COLUMNS = {"eps_id", "agent_id", "module_id", "agent_index", "obs", "new_obs", "actions",
                 "rewards", "terminateds", "truncateds", "t"}


class CoinEnv(ParallelEnv):  # type: ignore[misc]
    """Two agents collecting coins; ``runner`` may leave early; masks come in the infos."""

    metadata = {"name": "coins_v0", "is_parallelizable": True}

    def __init__(self) -> None:
        self.possible_agents = ["collector", "runner"]
        self._obs = spaces.Box(-10, 10, (3,), np.float32)
        self._act = spaces.Discrete(3)
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> spaces.Space:
        return self._obs

    def action_space(self, agent: str) -> spaces.Space:
        return self._act

    def _info(self, agent: str) -> dict[str, Any]:
        mask = np.ones(3, dtype=np.int8)
        mask[int(self._rng.integers(3))] = 0
        return {"action_mask": mask, "coins": float(self._coins[agent])}

    def _observe(self) -> tuple[dict[str, Any], dict[str, Any]]:
        obs = {a: self._rng.normal(size=3).astype(np.float32) for a in self.agents}
        return obs, {a: self._info(a) for a in self.agents}

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[dict[str, Any], dict[str, Any]]:
        self._rng = np.random.default_rng(seed)
        self.agents = list(self.possible_agents)
        self._coins = {a: 0.0 for a in self.agents}
        self._steps = 0
        self._length = int(self._rng.integers(3, 9))
        return self._observe()

    def step(self, actions: dict[str, Any]) -> tuple[dict[str, Any], ...]:
        self._steps += 1
        rewards = {a: float(actions[a]) - 1.0 + float(self._rng.normal()) for a in self.agents}
        for agent, reward in rewards.items():
            self._coins[agent] += reward
        terminations = {a: False for a in self.agents}
        if "runner" in self.agents and self._rng.random() < 0.25:
            terminations["runner"] = True
        truncations = {a: self._steps >= self._length for a in self.agents}
        obs, infos = self._observe()
        self.agents = [a for a in self.agents if not (terminations[a] or truncations[a])]
        return obs, rewards, terminations, truncations, infos


def _record_coins(dataset_id: str, episodes: int) -> mm.MultiAgentDataset:
    collector = mm.ParallelDataCollector(CoinEnv(), record_infos=True)
    for seed in range(episodes):
        collector.reset(seed=seed)
        rng = np.random.default_rng(seed)
        while collector.agents:
            collector.step({a: int(rng.integers(3)) for a in collector.agents})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dataset = collector.create_dataset(dataset_id, **META)
    collector.close()
    return dataset


@pytest.fixture
def spread(recorded_parallel: Any) -> mm.MultiAgentDataset:
    dataset, _ = recorded_parallel("mpe2/simple_spread_v3", episodes=6,
                                   dataset_id="ray/spread-v0", max_cycles=8)
    return dataset


def _ray_rows(dataset: Any) -> list[dict[str, Any]]:
    return [dict(r) for r in dataset.take_all()]


def _local_list(batch: P.Batch) -> list[dict[str, Any]]:
    count = len(next(iter(batch.values())))
    return [{k: v[i] for k, v in batch.items()} for i in range(count)]


def _key(row: dict[str, Any], keys: tuple[str, ...]) -> tuple[Any, ...]:
    return tuple(str(row[k]) if isinstance(row[k], str) else int(row[k]) for k in keys)


def assert_same_rows(got: list[dict[str, Any]], want: list[dict[str, Any]],
                     keys: tuple[str, ...] = ("dataset", "episode_id", "agent_index", "t")
                     ) -> None:
    """Same rows (any order), same columns, values equal with the same dtypes."""
    keys = tuple(k for k in keys if want and k in want[0])
    got = sorted(got, key=functools.partial(_key, keys=keys))
    want = sorted(want, key=functools.partial(_key, keys=keys))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for name, expected in w.items():
            value = g[name]
            if isinstance(expected, str):
                assert value == expected, name
                continue
            expected, value = np.asarray(expected), np.asarray(value)
            if expected.dtype == object:
                assert value.astype(str).tolist() == expected.astype(str).tolist(), name
                continue
            assert value.dtype == expected.dtype, (name, value.dtype, expected.dtype)
            assert value.shape == expected.shape and np.array_equal(value, expected), name


def test_read_tasks_cover_episode_ranges_in_whole_episode_blocks(spread: Any) -> None:
    datasource = R.make_datasource("ray/spread-v0", block_steps=16)
    tasks = datasource.get_read_tasks(3)
    assert len(tasks) == 3
    seen: list[list[int]] = []
    for task in tasks:
        episodes: list[int] = []
        for block in task():
            ids = block.column("episode_id").to_numpy()
            t = block.column("t").to_numpy()
            # A block holds whole episodes: every agent's steps 0..7.
            for episode in np.unique(ids):
                assert sorted(t[ids == episode].tolist()) == sorted(list(range(8)) * 3)
            episodes.extend(np.unique(ids).tolist())
        seen.append(episodes)
    assert [e for task in seen for e in task] == list(range(6))
    assert all(task == list(range(task[0], task[-1] + 1)) for task in seen)
    assert datasource.estimate_inmemory_data_size() > 0


def test_agent_steps_are_the_local_readers_rows(ray_local: Any, spread: Any) -> None:
    dataset = R.read_dataset("ray/spread-v0", override_num_blocks=3,
                             block_steps=16).materialize()
    assert "3 tasks executed" in dataset.stats()
    want = P.agent_step_rows(spread.to_arrays(), spread.spec, dataset="ray/spread-v0")
    assert_same_rows(_ray_rows(dataset), _local_list(want))
    assert dataset.count() == 6 * 8 * 3


def test_blocks_are_what_ray_would_build(spread: Any) -> None:
    from ray.data.block import BlockAccessor

    from marl_minari.ray.data import to_block

    coins = _record_coins("ray/coins-v0", 4)
    for source in (spread, coins):
        arrays = source.to_arrays()
        for kind in P.ROW_KINDS:
            batch = P.build_rows(kind, arrays, source.spec, dataset="d")
            ours, theirs = to_block(batch), BlockAccessor.batch_to_block(batch)
            assert ours.schema == theirs.schema, kind
            assert ours.equals(theirs), kind


def test_steps_and_episodes_rows(ray_local: Any, spread: Any) -> None:
    steps = R.read_dataset("ray/spread-v0", "steps", override_num_blocks=2)
    want = P.step_rows(spread.to_arrays(), spread.spec, dataset="ray/spread-v0")
    assert_same_rows(_ray_rows(steps), _local_list(want), keys=("episode_id", "t"))
    coins = _record_coins("ray/coins-v0", 7)
    episodes = R.read_dataset("ray/coins-v0", "episodes", override_num_blocks=3, block_steps=9)
    want = P.episode_rows(coins.to_arrays(), coins.spec, dataset="ray/coins-v0")
    assert len(set(want["length"].tolist())) > 1  # variable-length episodes
    assert_same_rows(_ray_rows(episodes), _local_list(want), keys=("episode_id",))


def test_patterns_agree_between_ray_and_local_arrays(ray_local: Any) -> None:
    coins = _record_coins("ray/coins-v0", 12)
    arrays = coins.to_arrays()
    local = P.agent_step_rows(arrays, coins.spec, dataset="ray/coins-v0")
    assert len(set(local["traj_len"].tolist())) > 1  # the runner leaves early
    assert "info.coins" in local and "next_legal_mask" in local
    dataset = R.read_dataset("ray/coins-v0", override_num_blocks=2, block_steps=12)
    for name, kwargs, keys in (
            ("transitions", {"gamma": 0.9}, ("episode_id", "agent_index", "t")),
            ("n_step", {"n": 3, "gamma": 0.97}, ("episode_id", "agent_index", "t")),
            ("sequences", {"length": 4, "stride": 2},
             ("episode_id", "agent_index", "start_t"))):
        got = _ray_rows(R.map_pattern(dataset, name, **kwargs))
        want = _local_list(P.PATTERNS[name](local, **kwargs))
        assert_same_rows(got, want, keys=keys)
    # Blocks re-cut by Ray no longer hold whole trajectories: refused, not silently wrong.
    with pytest.raises(Exception, match="part of a trajectory"):
        R.map_pattern(dataset.repartition(5), "n_step", n=2).take_all()


def test_plain_minari_dataset_and_several_sources(ray_local: Any, spread: Any,
                                                  record_parallel: Any,
                                                  record_cartpole: Any) -> None:
    plain = record_cartpole("ray/cartpole-v0", 4)
    dataset = R.read_dataset(plain.storage.data_path, override_num_blocks=2)
    want = R.local_rows(plain.storage.data_path)
    assert_same_rows(_ray_rows(dataset), _local_list(want))
    assert dataset.count() == plain.total_steps

    record_parallel("mpe2/simple_spread_v3", episodes=2, dataset_id="ray/spread-v1",
                    max_cycles=5)
    both = R.read_dataset(["ray/spread-v0", "ray/spread-v1"], override_num_blocks=2)
    assert_same_rows(_ray_rows(both), _local_list(R.local_rows(["ray/spread-v0",
                                                                 "ray/spread-v1"])))
    assert both.count() == (6 * 8 + 2 * 5) * 3
    with pytest.raises(IncompatibleSourcesError):
        R.read_dataset(["ray/spread-v0", plain.storage.data_path])


def test_export_rllib_and_train_bc_through_offline_data(ray_local: Any, spread: Any,
                                                        tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from ray.rllib.algorithms.bc import BCConfig
    from ray.rllib.offline.offline_data import OfflineData
    from ray.rllib.offline.offline_prelearner import SCHEMA

    export = R.export_rllib("ray/spread-v0", tmp_path / "rllib", override_num_blocks=2)
    module = export.modules[R.DEFAULT_MODULE_ID]
    assert module.agents == ("agent_0", "agent_1", "agent_2")
    assert module.rows == 6 * 8 * 3
    assert module.observation_space == spread.spec.observation_spaces["agent_0"]
    assert R.load_rllib_export(tmp_path / "rllib").modules[R.DEFAULT_MODULE_ID].rows == 144

    table = ray_local.data.read_parquet(str(module.path)).to_pandas()
    assert set(table.columns) == RLLIB_COLUMNS
    assert set(SCHEMA) >= RLLIB_COLUMNS  # nothing lands in extra_model_outputs
    local = P.sort_rows(R.local_rows("ray/spread-v0"))
    table = table.sort_values(["eps_id", "t"])
    assert sorted(table["eps_id"].unique()) == sorted(
        {f"ray/spread-v0:{e}:{a}" for e in range(6) for a in module.agents})
    by_agent = table.set_index(["eps_id", "t"])
    for k in range(0, len(local["t"]), 7):
        row = by_agent.loc[(f"ray/spread-v0:{local['episode_id'][k]}:{local['agent_id'][k]}",
                            local["agent_t"][k])]
        assert np.array_equal(np.asarray(row["obs"]), local["obs"][k])
        assert np.array_equal(np.asarray(row["new_obs"]), local["next_obs"][k])
        assert row["actions"] == local["action"][k] and row["rewards"] == local["reward"][k]
        assert row["truncateds"] == local["truncated"][k]

    config = module.configure(BCConfig()).offline_data(
        dataset_num_iters_per_learner=1,
        # Two CPUs: one pre-learner actor, so that the Parquet read gets the other.
        map_batches_kwargs={"concurrency": 1, "num_cpus": 0.5},
    ).training(train_batch_size_per_learner=32)
    algo = config.build_algo()
    try:
        assert isinstance(algo.offline_data, OfflineData)
        result = algo.train()
    finally:
        algo.stop()
    learner = result["learners"]["default_policy"]
    assert learner["num_module_steps_trained"] == 32
    assert np.isfinite(learner["policy_loss"])


def test_export_per_module_with_dict_observations(ray_local: Any, tmp_path: Path,
                                                 record_tictactoe: Any) -> None:
    ttt = record_tictactoe("ray/tictactoe-v0", 6)
    export = R.export_rllib("ray/tictactoe-v0", tmp_path / "ttt",
                            policy_mapping_fn=lambda agent, episode: f"module_{agent}")
    assert sorted(export.modules) == ["module_player_1", "module_player_2"]
    local = R.local_rows("ray/tictactoe-v0")
    space = ttt.spec.observation_spaces["player_1"]
    for name, module in export.modules.items():
        assert module.path.name == f"module_id={name}"
        assert module.observation_space == spaces.Box(0, 1, (27,), np.float32)
        table = ray_local.data.read_parquet(str(module.path)).to_pandas()
        agent = module.agents[0]
        mine = {k: v[local["agent_id"] == agent] for k, v in local.items()}
        assert len(table) == module.rows == len(mine["t"])
        table = table.sort_values(["eps_id", "t"])
        order = np.lexsort((mine["agent_t"], mine["episode_id"].astype(str)))
        for k, position in enumerate(order):
            expected = spaces.flatten(space, {"action_mask": mine["obs.action_mask"][position],
                                              "observation": mine["obs.observation"][position]})
            assert np.array_equal(np.asarray(table["obs"].iloc[k]), expected.astype(np.float32))
        assert np.isclose(table["rewards"].sum(), mine["reward"].sum())
        assert table["terminateds"].sum() == 6  # every game ends with both players done
    keyed = R.export_rllib("ray/tictactoe-v0", tmp_path / "ttt", obs_key="observation",
                           obs_dtype=None, overwrite=True)
    assert keyed.modules[R.DEFAULT_MODULE_ID].observation_space == space["observation"]
    with pytest.raises(FileExistsError):
        R.export_rllib("ray/tictactoe-v0", tmp_path / "ttt")


def test_export_with_infos(ray_local: Any, tmp_path: Path) -> None:
    coins = _record_coins("ray/coins-v0", 5)
    export = R.export_rllib("ray/coins-v0", tmp_path / "coins", include_infos=True)
    table = ray_local.data.read_parquet(str(export.modules[R.DEFAULT_MODULE_ID].path))
    rows = table.take_all()
    assert len(rows) == int(coins.to_arrays().acted.sum())
    info = rows[0]["infos"]
    assert set(info) == {"action_mask", "coins"}
    assert np.asarray(info["action_mask"]).shape == (3,)
    # Every trajectory ends with a done flag (the runner terminates, or time runs out).
    ends = [r for r in rows if r["terminateds"] or r["truncateds"]]
    assert len(ends) == 5 * 2


def test_cli_export_rllib(ray_local: Any, spread: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from marl_minari.cli import app
    runner = CliRunner()
    out = tmp_path / "cli"
    result = runner.invoke(app, ["export", "rllib", "ray/spread-v0", str(out),
                                 "--modules", "per-agent", "--read-tasks", "2"])
    assert result.exit_code == 0, result.output
    assert "module agent_1: 48 agent-steps" in result.output
    manifest = json.loads((out / R.RLLIB_MANIFEST).read_text())
    assert sorted(manifest["modules"]) == ["agent_0", "agent_1", "agent_2"]
    again = runner.invoke(app, ["export", "rllib", "ray/spread-v0", str(out)])
    assert again.exit_code == 1 and "not empty" in again.output
    missing = runner.invoke(app, ["export", "rllib", "ray/missing-v0", str(tmp_path / "x")])
    assert missing.exit_code == 1 and "not found locally" in missing.output


def test_every_public_ray_name_resolves_from_the_package() -> None:
    missing = [name for name in R.__all__ if getattr(R, name, None) is None]
    assert not missing
    assert "read_dataset" in dir(R) and "multi_agent_offline" in dir(R)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        R.nope  # noqa: B018


def _valid_module(entry: dict[str, Any], **change: Any) -> dict[str, Any]:
    return {**entry, **change}


def test_a_crafted_rllib_manifest_never_points_rllib_outside_the_export(
        ray_local: Any, spread: Any, tmp_path: Path) -> None:
    out = tmp_path / "rllib"
    R.export_rllib("ray/spread-v0", out, override_num_blocks=1)
    manifest_file = out / R.RLLIB_MANIFEST
    good = json.loads(manifest_file.read_text())
    entry = good["modules"][R.DEFAULT_MODULE_ID]
    (tmp_path / "outside").mkdir()
    broken: dict[str, Any] = {
        "parent path": _valid_module(entry, path="../outside"),
        "deep parent path": _valid_module(entry, path="x/../../outside"),
        "absolute path": _valid_module(entry, path="/etc"),
        "the export itself": _valid_module(entry, path="."),
        "path of a number": _valid_module(entry, path=7),
        "agents not a list": _valid_module(entry, agents="agent_0"),
        "rows not a count": _valid_module(entry, rows="many"),
        "no observation space": {k: v for k, v in entry.items() if k != "observation_space"},
        "action space garbage": _valid_module(entry, action_space={"type": "Nope"}),
        "entry not an object": ["path", "default_policy"],
    }
    for case, module in broken.items():
        manifest_file.write_text(json.dumps(good | {"modules": {R.DEFAULT_MODULE_ID: module}}))
        with pytest.raises(CorruptedDataError, match=R.RLLIB_MANIFEST) as caught:
            R.load_rllib_export(out)
        assert "export again" in str(caught.value), case
    for document in {"modules a list": good | {"modules": [entry]},
                           "another format": good | {"format": "parquet"},
                           "not an object": [good], "not JSON": "{"}.values():
        manifest_file.write_text(document if isinstance(document, str)
                                 else json.dumps(document))
        with pytest.raises(CorruptedDataError, match=R.RLLIB_MANIFEST):
            R.load_rllib_export(out)
    manifest_file.write_text(json.dumps(good))
    assert R.load_rllib_export(out).modules[R.DEFAULT_MODULE_ID].path == out.resolve() / entry[
        "path"]


def test_cli_export_starts_its_own_ray_whatever_an_address_file_names(
        spread: Any, tmp_path: Path) -> None:
    """A killed Ray session leaves its address file behind; ``ray.init(address=None)`` joins
    the cluster it names: with --num-cpus that was an "unexpected ValueError", without it a
    wait for a dead address."""
    import os
    import subprocess
    import sys
    import tempfile

    # Ray's socket paths must stay under 108 bytes: a short folder of its own, not tmp_path
    with tempfile.TemporaryDirectory(prefix="mm-ray-", dir="/tmp") as ray_tmp:
        (Path(ray_tmp) / "ray").mkdir()
        (Path(ray_tmp) / "ray" / "ray_current_cluster").write_text("127.0.0.1:1\n")  # dead
        environment = {**os.environ, "RAY_TMPDIR": ray_tmp}
        environment.pop("RAY_ADDRESS", None)
        done = subprocess.run(
            [sys.executable, "-m", "marl_minari", "export", "rllib", "ray/spread-v0",
             str(tmp_path / "out"), "--num-cpus", "1", "--read-tasks", "1"],
            env=environment, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "out" / R.RLLIB_MANIFEST).is_file()


def test_an_image_dataset_reads(ray_local: Any) -> None:
    """Its spaces make a read task of megabytes; Ray's warning of large tasks asked the task
    function for its ``__name__``, which a ``functools.partial`` has not: every read failed."""
    from marl_minari.collectors.collect import collect

    dataset = collect("butterfly/pistonball_v6", 1, dataset_id="ray/piston-v0",
                      env_kwargs={"n_pistons": 3, "max_cycles": 5, "render_mode": "rgb_array"},
                      algorithm_name="random", author="tests", author_email="t@example.com",
                      code_permalink="https://example.com", description="t")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # Ray's: the task is large, as it is
        assert len(R.read_dataset("ray/piston-v0", "steps").take_all()) == dataset.total_steps
