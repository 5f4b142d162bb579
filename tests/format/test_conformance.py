"""The spec is the standard: an independent writer built from ``docs/format.md`` and the library
agree on every dataset, attribute and number.

``spec_writer`` (h5py, numpy and json only) writes a dataset from a script of what a parallel
env handed out. The same script is played through ``ParallelDataCollector`` by a scripted
env. The two files must hold identical datasets and attributes, the metadata must agree, and
the library must read the independent dataset with the same numbers (returns, observations,
actions, masks, agents) as its own, with and without the offset index. A change to the layout
that is not a change to the spec fails here.
"""

from __future__ import annotations

import ast
import functools
import json
import operator
import warnings
from pathlib import Path
from typing import Any

import h5py
import minari
import numpy as np
import pytest
import spec_writer
from gymnasium import spaces
from pettingzoo.utils.env import ParallelEnv

import marl_minari as mm

AGENTS = ["scout", "medic", "tank"]  # not sorted: agent order comes from metadata
BOX3 = {"type": "Box", "dtype": "float32", "shape": [3], "low": [-10.0] * 3, "high": [10.0] * 3}
OBS_SPACES = {
    "scout": BOX3,
    "medic": {"type": "Dict", "subspaces": {
        "pos": {"type": "Box", "dtype": "float32", "shape": [2], "low": [-10.0] * 2,
                "high": [10.0] * 2},
        "action_mask": {"type": "Box", "dtype": "int8", "shape": [3], "low": [0] * 3,
                        "high": [1] * 3}}},
    "tank": BOX3,
}
ACT_SPACES = {
    "scout": {"type": "Discrete", "dtype": "int64", "start": 0, "n": 4},
    "medic": {"type": "Discrete", "dtype": "int64", "start": 0, "n": 3},
    "tank": {"type": "Box", "dtype": "float32", "shape": [2], "low": [-1.0] * 2,
             "high": [1.0] * 2},
}
STATE_SPACE = {"type": "Box", "dtype": "float32", "shape": [4], "low": -10.0, "high": 10.0}
DESCRIPTOR = {"api": "parallel", "entry_point": "conformance_env:make", "env_id": None,
              "kwargs": {}, "versions": {}, "kwargs_known": True}
META = {"algorithm_name": "scripted", "author": "tests", "author_email": "t@example.com",
        "code_permalink": "https://example.com", "description": "conformance"}


# --- the script: what the env hands out and what the policy passes -----------------------------


def _script() -> list[dict[str, Any]]:
    """Four episodes that exercise every rule: a death, a reward without an observation,
    actions passed for dead agents, infos that start late, an episode cut by ``reset``."""
    rng = np.random.default_rng(2024)

    def observation(agent: str) -> Any:
        if agent == "medic":
            return {"pos": rng.normal(size=2).astype(np.float32),
                    "action_mask": rng.integers(0, 2, 3).astype(np.int8)}
        return rng.normal(size=3).astype(np.float32)

    def infos(agents: list[str], row: int, tank_infos: bool) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if "scout" in agents:
            out["scout"] = {"row": np.int64(row)}
        if tank_infos and "tank" in agents and row != 1:
            out["tank"] = {"fuel": np.float32(rng.uniform()), "hits": np.int64(row * 2)}
        return out

    def row(agents: list[str], k: int, tank_infos: bool = False,
            without_observation: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"observations": {a: observation(a) for a in agents
                                 if a not in without_observation},
                "infos": infos([a for a in agents if a not in without_observation], k,
                               tank_infos),
                "state": rng.normal(size=4).astype(np.float32)}

    def step(live: list[str], *, ends: dict[str, str] | None = None,
             rewards: dict[str, float] | None = None) -> dict[str, Any]:
        ends = ends or {}
        return {
            "agents_before": list(live),
            # The policy acts for every possible agent, dead ones included.
            "actions": {"scout": int(rng.integers(4)), "medic": int(rng.integers(3)),
                        "tank": rng.uniform(-1, 1, 2).astype(np.float32)},
            "rewards": {a: (rewards or {}).get(a, float(rng.normal() * 0.1)) for a in live},
            "terminations": {a: ends.get(a) == "term" for a in live},
            "truncations": {a: ends.get(a) == "trunc" for a in live},
        }

    episodes = []
    # Episode 0: everyone to the end.
    live = list(AGENTS)
    e0 = {"seed": 11, "rows": [row(live, 0)], "steps": []}
    for t in range(4):
        e0["steps"].append(step(live, ends={a: "term" for a in live} if t == 3 else None))
        e0["rows"].append(row(live, t + 1))
        e0["steps"][-1]["agents_after"] = [] if t == 3 else list(live)
    episodes.append(e0)
    # Episode 1: medic dies at step 2; tank gets a reward without an observation at step 4 and
    # leaves; scout is truncated at step 5.
    e1 = {"seed": 12, "rows": [row(AGENTS, 0)], "steps": []}
    live = list(AGENTS)
    plan = {2: ({"medic": "term"}, None, ()), 4: ({"tank": "term"}, {"tank": 5.0}, ("tank",)),
            5: ({"scout": "trunc"}, None, ())}
    for t in range(6):
        ends, rewards, hidden = plan.get(t, (None, None, ()))
        e1["steps"].append(step(live, ends=ends, rewards=rewards))
        e1["rows"].append(row(live, t + 1, without_observation=hidden))
        live = [a for a in live if not (ends or {}).get(a)]
        e1["steps"][-1]["agents_after"] = list(live)
    episodes.append(e1)
    # Episode 2: reset without a seed; tank hands out infos for the first time (not at
    # row 1).
    live = list(AGENTS)
    e2 = {"seed": None, "rows": [row(live, 0, tank_infos=True)], "steps": []}
    for t in range(3):
        e2["steps"].append(step(live, ends={a: "term" for a in live} if t == 2 else None))
        e2["rows"].append(row(live, t + 1, tank_infos=True))
        e2["steps"][-1]["agents_after"] = [] if t == 2 else list(live)
    episodes.append(e2)
    # Episode 3: cut short by a reset after two steps; tank's info columns are filled.
    e3 = {"seed": 14, "cut": True, "rows": [row(live, 0)], "steps": []}
    for t in range(2):
        e3["steps"].append(step(live))
        e3["rows"].append(row(live, t + 1))
        e3["steps"][-1]["agents_after"] = list(live)
    episodes.append(e3)
    return episodes


class _ScriptedEnv(ParallelEnv):
    """Replays the script: hands out exactly what it says, whatever the actions."""

    metadata = {"name": "conformance_v0"}

    def __init__(self, script: list[dict[str, Any]]) -> None:
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self.state_space = spaces.Box(-10.0, 10.0, (4,), np.float32)
        self._script = script
        self._episode = -1
        self._t = 0

    def observation_space(self, agent: str) -> spaces.Space:
        if agent == "medic":
            return spaces.Dict({"pos": spaces.Box(-10.0, 10.0, (2,), np.float32),
                                "action_mask": spaces.Box(0, 1, (3,), np.int8)})
        return spaces.Box(-10.0, 10.0, (3,), np.float32)

    def action_space(self, agent: str) -> spaces.Space:
        if agent == "tank":
            return spaces.Box(-1.0, 1.0, (2,), np.float32)
        return spaces.Discrete(4 if agent == "scout" else 3)

    def state(self) -> np.ndarray:
        if self._episode < 0:
            raise RuntimeError("reset first")
        return self._script[self._episode]["rows"][self._t]["state"]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self._episode = (self._episode + 1) % len(self._script)  # replays from the start
        self._t = 0
        self.agents = list(AGENTS)
        first = self._script[self._episode]["rows"][0]
        return dict(first["observations"]), dict(first["infos"])

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        step = self._script[self._episode]["steps"][self._t]
        assert self.agents == step["agents_before"]
        self._t += 1
        row = self._script[self._episode]["rows"][self._t]
        self.agents = list(step["agents_after"])
        return (dict(row["observations"]), dict(step["rewards"]), dict(step["terminations"]),
                dict(step["truncations"]), dict(row["infos"]))


def _record_with_the_library(script: list[dict[str, Any]]) -> mm.MultiAgentDataset:
    collector = mm.ParallelDataCollector(_ScriptedEnv(script), record_infos=True,
                                         jpeg_encoding=False,
                                         env_descriptor=mm.EnvDescriptor(**DESCRIPTOR))
    for episode in script:
        collector.reset(seed=episode["seed"])
        for step in episode["steps"]:
            collector.step(step["actions"])
    collector.reset(seed=99)  # cuts episode 3; the new episode has no step and is not saved
    dataset = collector.create_dataset("conformance/library-v0", **META)
    collector.close()
    return dataset


def _write_from_the_spec(script: list[dict[str, Any]], root: Path) -> dict[str, Any]:
    return spec_writer.write(
        root / "conformance" / "spec-v0", dataset_id="conformance/spec-v0", agents=AGENTS,
        obs_spaces=OBS_SPACES, act_spaces=ACT_SPACES, state_space=STATE_SPACE,
        descriptor={**DESCRIPTOR, "future_key": "written by a newer version"},
        episodes=script, record_infos=True, extra_marl={"future_marl_key": [1, 2]})


@pytest.fixture()
def both(datasets_root: Path) -> tuple[mm.MultiAgentDataset, Path, list[dict[str, Any]]]:
    script = _script()
    library = _record_with_the_library(script)
    for episode, seed in zip(script, library.episode_seeds(), strict=True):
        episode["seed"] = seed  # a reset without one draws one, as Minari's recorder does
    _write_from_the_spec(script, datasets_root)
    return library, datasets_root / "conformance" / "spec-v0" / "data", script


# --- the writer is independent -----------------------------------------------------------------


def test_the_spec_writer_imports_nothing_but_h5py_numpy_json_and_blake3() -> None:
    tree = ast.parse(Path(spec_writer.__file__).read_text())
    imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= {"__future__", "json", "pathlib", "typing", "h5py", "numpy", "blake3"}


# --- the two writers agree ---------------------------------------------------------------------


def _datasets(group: h5py.Group) -> dict[str, h5py.Dataset]:
    found: dict[str, h5py.Dataset] = {}
    group.visititems(lambda name, obj: found.__setitem__(name, obj)
                     if isinstance(obj, h5py.Dataset) else None)
    return found


def test_the_library_writes_what_the_spec_says(both: Any) -> None:
    library, spec_data, script = both
    with h5py.File(library.data_path / "main_data.hdf5", "r") as ours, \
            h5py.File(spec_data / "main_data.hdf5", "r") as theirs:
        assert sorted(ours) == sorted(theirs) == [f"episode_{i}" for i in range(len(script))]
        for name in theirs:
            assert dict(ours[name].attrs) == dict(theirs[name].attrs), name
            mine, spec = _datasets(ours[name]), _datasets(theirs[name])
            assert sorted(mine) == sorted(spec), name
            for path, expected in spec.items():
                got = mine[path]
                assert got.dtype == expected.dtype, (name, path)
                assert got.shape == expected.shape, (name, path)
                np.testing.assert_array_equal(got[()], expected[()], err_msg=f"{name}/{path}")
        # Late infos: no tank info group before tank's first info, filled after it.
        assert "infos/marl/agent_infos/tank" not in theirs["episode_1"]
        assert not theirs["episode_3/infos/marl/agent_infos/tank/fuel"][()].any()

    ours_meta = json.loads((library.data_path / "metadata.json").read_text())
    spec_meta = json.loads((spec_data / "metadata.json").read_text())
    for key in ("total_episodes", "total_steps", "data_format", "jpeg_encoding"):
        assert ours_meta[key] == spec_meta[key], key
    for key in ("observation_space", "action_space"):
        assert json.loads(ours_meta[key]) == json.loads(spec_meta[key]), key
    marl = dict(spec_meta["marl_minari"])
    del marl["future_marl_key"], marl["library_version"], marl["env"]["future_key"]
    ours_marl = dict(ours_meta["marl_minari"])
    del ours_marl["library_version"]
    assert ours_marl == {**marl, "state_space": ours_marl["state_space"]}
    assert json.loads(ours_marl["state_space"]) == json.loads(marl["state_space"])
    env_spec = json.loads(spec_meta["env_spec"])
    del env_spec["kwargs"]["descriptor"]["future_key"]
    assert json.loads(ours_meta["env_spec"]) == env_spec

    with np.load(library.data_path / "marl_minari_index.npz") as ours_index, \
            np.load(spec_data / "marl_minari_index.npz") as spec_index:
        ours_header = json.loads(ours_index["header"].tobytes())
        spec_header = json.loads(spec_index["header"].tobytes())
        assert ours_header["version"] == spec_header["version"] == 2
        assert ours_header["paths"] == spec_header["paths"]
        np.testing.assert_array_equal(ours_index["steps"], spec_index["steps"])
        for i, _ in enumerate(spec_header["paths"]):  # the same datasets are indexed
            np.testing.assert_array_equal(ours_index[f"o{i}"] >= 0, spec_index[f"o{i}"] >= 0)


# --- the library reads the independent dataset with the same numbers ---------------------------


def _left_to_right(values: list[float]) -> float:
    return functools.reduce(operator.add, values, 0.0)


def _check_against_script(dataset: mm.MultiAgentDataset, script: list[dict[str, Any]]) -> None:
    assert dataset.possible_agents == tuple(AGENTS)
    assert dataset.total_episodes == len(script)
    arrays = dataset.to_arrays()
    expected_returns = [[_left_to_right([float(s["rewards"].get(a, 0.0)) for s in e["steps"]])
                         for a in AGENTS] for e in script]
    assert arrays.returns().tolist() == expected_returns
    assert dataset.episode_seeds() == [e["seed"] for e in script]
    dead_actions = 0
    for i, (episode, played) in enumerate(zip(dataset, script, strict=True)):
        assert [episode.returns[a] for a in AGENTS] == expected_returns[i]
        assert episode.total_steps == len(played["steps"])
        for a, agent in enumerate(AGENTS):
            for k, row in enumerate(played["rows"]):
                present = agent in row["observations"]
                assert episode.active[k, a] == present
                stored = episode.observations[agent]
                if agent == "medic":
                    for key in ("pos", "action_mask"):  # the mask is an observation leaf
                        expected = row["observations"][agent][key] if present else 0
                        np.testing.assert_array_equal(stored[key][k], expected)
                else:
                    np.testing.assert_array_equal(
                        stored[k], row["observations"][agent] if present else 0)
                np.testing.assert_array_equal(episode.state[k], row["state"])
            for t, step in enumerate(played["steps"]):
                acts = agent in step["agents_before"] and agent in played["rows"][t][
                    "observations"]
                dead_actions += not acts
                assert episode.acted[t, a] == acts
                np.testing.assert_array_equal(episode.actions[agent][t],
                                              step["actions"][agent] if acts else 0)
                assert episode.rewards[t, a] == step["rewards"].get(agent, 0.0)
        # Read together with episode 2, tank's info columns are filled before its first info.
        tank_fuel = [row["infos"].get("tank", {}).get("fuel", 0.0) for row in played["rows"]]
        np.testing.assert_array_equal(episode.agent_infos["tank"]["fuel"],
                                      np.asarray(tank_fuel, dtype=np.float32))
        alone = dataset.episode(i).agent_infos
        assert ("tank" in alone) is (i >= 2), "read alone, only episodes with the group"
        np.testing.assert_array_equal(episode.agent_infos["scout"]["row"],
                                      np.arange(len(played["rows"])))
        assert bool(episode.episode_truncations[-1]) == (i in (1, 3))
    assert dead_actions > 0  # the policy did pass actions for dead agents
    # The reward handed to tank without an observation is kept, tank marked absent.
    tank = AGENTS.index("tank")
    assert arrays.episode(1).rewards[4, tank] == 5.0
    assert not arrays.episode(1).active[5, tank]


def test_the_library_reads_the_spec_dataset_with_the_same_numbers(both: Any) -> None:
    library, spec_data, script = both
    with pytest.warns(UserWarning, match=r"env descriptor keys \['future_key'\] are unknown"):
        spec_dataset = mm.load_dataset("conformance/spec-v0")
    assert spec_dataset.spec.env == mm.EnvDescriptor(**DESCRIPTOR)
    _check_against_script(library, script)
    _check_against_script(spec_dataset, script)
    ours, theirs = library.to_arrays(), spec_dataset.to_arrays()
    assert ours.returns().tolist() == theirs.returns().tolist()
    np.testing.assert_array_equal(ours.team_rewards, theirs.team_rewards)

    from marl_minari.format import offset_index

    with h5py.File(spec_data / "main_data.hdf5", "r") as file:  # the index the spec describes
        trusted = offset_index.load(spec_data, file, len(script),
                                    sum(len(e["steps"]) for e in script))
    assert trusted is not None, "the library ignores an index written from the spec's words"
    assert mm.check_dataset("conformance/spec-v0").index_checked

    (spec_data / "marl_minari_index.npz").unlink()  # through h5py: the same numbers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        _check_against_script(mm.load_dataset("conformance/spec-v0"), script)


def test_plain_minari_opens_the_spec_dataset(both: Any) -> None:
    _, _, script = both
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        plain = minari.load_dataset("conformance/spec-v0")
    assert plain.total_episodes == len(script)
    for episode, played in zip(plain.iterate_episodes(), script, strict=True):
        team = [_left_to_right([float(s["rewards"][a]) for a in AGENTS if a in s["rewards"]])
                for s in played["steps"]]
        np.testing.assert_array_equal(episode.rewards, team)
        assert set(episode.observations) == set(AGENTS)
    assert plain.env_spec is not None
    assert plain.env_spec.entry_point == "marl_minari.joint:JointEnv"


@pytest.mark.parametrize(("change", "key"), [
    ({"api": None}, "api"),
    ({"possible_agents": "scout"}, "possible_agents"),
    ({"layout_version": "1"}, "layout_version is '1', not a layout version .* damaged"),
    ({"layout_version": 0}, "layout_version is 0, not a layout version"),
    ({"layout_version": 2}, "uses layout version 2; this marl-minari reads up to 1. Upgrade"),
    ({"reward_aggregation": "median"}, "reward_aggregation"),
])
def test_required_metadata_keys_are_checked(both: Any, change: dict[str, Any],
                                            key: str) -> None:
    _, spec_data, _ = both
    path = spec_data / "metadata.json"
    metadata = json.loads(path.read_text())
    metadata["marl_minari"].update(change)
    path.write_text(json.dumps(metadata))
    with pytest.raises(mm.LayoutError, match=key), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        mm.load_dataset("conformance/spec-v0")


@pytest.mark.parametrize(("change", "message"), [
    ({"data_format": "arrow"}, "data_format is 'arrow', but multi-agent datasets are stored "
                               "in HDF5"),
    ({"observation_space": '{"type": "Box", "low": [0.0], "high": [1.0], "shape": [1], '
                           '"dtype": "float32"}'},
     r"must be Dicts keyed by possible_agents .*, not a Box and keys"),
], ids=["data-format", "spaces"])
def test_metadata_that_cannot_describe_the_file_names_the_dataset(
        both: Any, change: dict[str, Any], message: str) -> None:
    """``data_format: arrow`` led readers to Minari's Arrow storage (a bare
    ``FileNotFoundError``); mismatched spaces named neither the dataset nor a fix."""
    _, spec_data, _ = both
    path = spec_data / "metadata.json"
    metadata = json.loads(path.read_text())
    metadata.update(change)
    path.write_text(json.dumps(metadata))
    with pytest.raises(mm.LayoutError, match=f"^dataset 'conformance/spec-v0': .*{message}"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        mm.load_dataset("conformance/spec-v0")


def test_optional_metadata_keys_have_their_defaults(both: Any) -> None:
    _, spec_data, _ = both
    path = spec_data / "metadata.json"
    metadata = json.loads(path.read_text())
    for key in ("env", "reward_aggregation", "record_infos", "library_version"):
        del metadata["marl_minari"][key]
    path.write_text(json.dumps(metadata))
    spec = mm.load_dataset("conformance/spec-v0").spec
    assert spec.env is None and spec.reward_aggregation == "sum" and not spec.record_infos
