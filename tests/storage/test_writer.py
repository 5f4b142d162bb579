"""The writer: what is written is what is read, atomically, as a plain Minari dataset."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import h5py
import minari
import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from marl_strategies import agent_spaces, assert_episode_equal, random_episode

import marl_minari as mm
from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    IncompatibleSourcesError,
    InvalidDatasetIdError,
)
from marl_minari.format import layout, offset_index
from marl_minari.format.digests import remembered_digests
from marl_minari.format.ids import dataset_dir
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.writer import append_to_dataset, write_dataset

_ids = itertools.count()


def _spec(agents: list[str], obs: dict, act: dict, **kw: Any) -> MultiAgentSpec:
    return MultiAgentSpec(api="parallel", possible_agents=tuple(agents), observation_spaces=obs,
                          action_spaces=act, **kw)


SIMPLE_AGENTS = ["red", "blue"]
SIMPLE_OBS = {"red": spaces.Box(-1, 1, (2,), dtype=np.float32),
              "blue": spaces.Dict({"pos": spaces.Box(-1, 1, (3,)), "id": spaces.Discrete(4)})}
SIMPLE_ACT = {"red": spaces.Discrete(3), "blue": spaces.MultiDiscrete([2, 5])}


def _simple(count: int = 3, first_seed: int = 0) -> tuple[MultiAgentSpec, list]:
    spec = _spec(SIMPLE_AGENTS, SIMPLE_OBS, SIMPLE_ACT)
    episodes = [random_episode(SIMPLE_AGENTS, SIMPLE_OBS, SIMPLE_ACT, 2 + i, first_seed + i)
                for i in range(count)]
    return spec, episodes


@settings(max_examples=25, deadline=None)
@given(agent_spaces(), st.lists(st.integers(1, 4), min_size=1, max_size=3), st.booleans(),
       st.booleans(), st.booleans())
def test_what_is_written_is_what_is_read(agent_sp: tuple, lengths: list[int], with_state: bool,
                                         with_infos: bool, jpeg: bool) -> None:
    agents, obs, act = agent_sp
    state_space = spaces.Box(-2, 2, shape=(2,), dtype=np.float32) if with_state else None
    spec = _spec(agents, obs, act, state_space=state_space)
    episodes = [random_episode(agents, obs, act, steps, seed=i, state_space=state_space,
                               with_infos=with_infos) for i, steps in enumerate(lengths)]
    dataset_id = f"prop/roundtrip-v{next(_ids)}"
    write_dataset(dataset_id, episodes, spec, jpeg_encoding=jpeg)

    dataset = mm.load_dataset(dataset_id)
    assert dataset.possible_agents == tuple(agents)
    assert dataset.spec.observation_spaces == obs and dataset.spec.action_spaces == act
    assert (dataset.total_episodes, dataset.total_steps) == (len(lengths), sum(lengths))
    arrays = dataset.to_arrays()
    np.testing.assert_array_equal(arrays.episode_lengths, lengths)
    for i, written in enumerate(episodes):
        read = dataset.episode(i)
        assert_episode_equal(read, written)
        assert_episode_equal(arrays.episode(i), written)
        assert read.id == i
        assert read.seed == written.seed
        assert read.options == written.options
    assert dataset.episode_seeds() == [e.seed for e in episodes]
    # Minari reads the same file with its own reader.
    plain = minari.load_dataset(dataset_id)
    for i, episode in enumerate(plain.iterate_episodes()):
        assert episode.id == i
        np.testing.assert_array_equal(episode.rewards, episodes[i].team_rewards)
        np.testing.assert_array_equal(episode.infos["marl"]["active"], episodes[i].active)


def test_image_leaves_are_jpeg_encoded_by_default_and_raw_without() -> None:
    image = spaces.Box(0, 255, (32, 40, 3), dtype=np.uint8)
    obs = {"cam": spaces.Dict({"pixels": image, "speed": spaces.Box(0, 1, (1,))})}
    act = {"cam": spaces.Discrete(2)}
    rng = np.random.default_rng(0)
    smooth = np.clip(np.linspace(0, 255, 32 * 40 * 3).reshape(32, 40, 3)
                     + rng.normal(0, 3, (5, 32, 40, 3)), 0, 255).astype(np.uint8)
    episode = random_episode(["cam"], obs, act, 4, seed=1)
    episode.observations["cam"]["pixels"][...] = smooth
    episode.active[...] = True
    spec = _spec(["cam"], obs, act)
    write_dataset("img/raw-v0", [episode], spec, jpeg_encoding=False)
    write_dataset("img/jpeg-v0", [episode], spec)

    raw = mm.load_dataset("img/raw-v0").episode(0).observations["cam"]["pixels"]
    np.testing.assert_array_equal(raw, smooth)
    jpeg = mm.load_dataset("img/jpeg-v0").episode(0).observations["cam"]["pixels"]
    assert jpeg.shape == smooth.shape and jpeg.dtype == np.uint8
    assert np.abs(jpeg.astype(int) - smooth).mean() < 8  # lossy, but the same picture
    with h5py.File(mm.load_dataset("img/jpeg-v0").data_path / layout.MAIN_FILE_NAME) as file:
        stored = file["episode_0/observations/cam/pixels"]
        assert stored.shape[0] == 5 and stored.ndim <= 2  # encoded bytes per frame, no pixels
    minari_pixels = next(minari.load_dataset("img/jpeg-v0").iterate_episodes())
    np.testing.assert_array_equal(minari_pixels.observations["cam"]["pixels"], jpeg)
    assert json.loads((mm.load_dataset("img/raw-v0").data_path / "metadata.json").read_text())[
        "jpeg_encoding"] is False


def test_metadata_has_minari_keys_and_the_multi_agent_key(datasets_root: Path) -> None:
    spec, episodes = _simple()
    target = write_dataset("team/sub/simple-v0", episodes, spec, algorithm_name="random",
                           author="A. Person", author_email="a@example.com",
                           code_permalink="https://example.com", description="d",
                           requirements=["mpe2"], ref_min_score=-1.0, ref_max_score=1.0,
                           extra={"custom": 1})
    assert target == datasets_root / "team" / "sub" / "simple-v0"
    metadata = json.loads((target / "data" / "metadata.json").read_text())
    assert metadata["dataset_id"] == "team/sub/simple-v0"
    assert metadata["total_episodes"] == 3
    assert metadata["total_steps"] == sum(e.total_steps for e in episodes)
    assert metadata["data_format"] == "hdf5"
    assert metadata["minari_version"] == minari.__version__
    assert metadata["author"] == ["A. Person"] and metadata["author_email"] == ["a@example.com"]
    assert metadata["custom"] == 1 and metadata["dataset_size"] >= 0
    marl = metadata[layout.METADATA_KEY]
    assert marl[layout.META_POSSIBLE_AGENTS] == SIMPLE_AGENTS
    assert marl[layout.META_LAYOUT_VERSION] == layout.LAYOUT_VERSION
    for folder in (datasets_root / "team", datasets_root / "team" / "sub"):
        assert json.loads((folder / "namespace_metadata.json").read_text()) == {}
    assert (target / "data" / layout.INDEX_FILE_NAME).exists()
    # nothing is left in the staging folder
    assert not [p for p in (datasets_root / ".marl_minari").iterdir()
                if p.name not in ("recordings", "locks")]


@pytest.mark.parametrize("dataset_id", ["t/x-v0", "../x-v0", "x", "ns/../x-v0", "x-v0/"])
def test_malformed_id_is_refused_and_leaves_no_folder(datasets_root: Path,
                                                      dataset_id: str) -> None:
    spec, episodes = _simple(1)
    with pytest.raises(InvalidDatasetIdError, match="malformed dataset id"):
        write_dataset(dataset_id, episodes, spec)
    assert list(datasets_root.iterdir()) == []
    assert not (datasets_root.parent / "x-v0").exists()


def test_existing_id_is_refused_and_left_untouched() -> None:
    spec, episodes = _simple(2)
    target = write_dataset("team/simple-v0", episodes, spec)
    before = (target / "data" / layout.MAIN_FILE_NAME).read_bytes()
    with pytest.raises(DatasetExistsError, match="already exists"):
        write_dataset("team/simple-v0", _simple(1, 7)[1], spec)
    assert (target / "data" / layout.MAIN_FILE_NAME).read_bytes() == before
    assert mm.load_dataset("team/simple-v0").total_episodes == 2


def test_a_failing_episode_source_leaves_nothing_behind(datasets_root: Path) -> None:
    spec, episodes = _simple(3)

    def source() -> Any:
        yield episodes[0]
        raise RuntimeError("source broke")

    with pytest.raises(RuntimeError, match="source broke"):
        write_dataset("team/broken-v0", source(), spec)
    assert not (datasets_root / "team" / "broken-v0").exists()
    assert not [p for p in (datasets_root / ".marl_minari").iterdir()
                if p.name not in ("recordings", "locks")]
    write_dataset("team/broken-v0", episodes, spec)  # the id is still free
    assert mm.load_dataset("team/broken-v0").total_episodes == 3


def test_large_seeds_and_nested_options_round_trip() -> None:
    spec, episodes = _simple(3)
    from dataclasses import replace

    episodes = [replace(episodes[0], seed=2**64 - 1, options={"a": {"b": 2, "c": "x"}}),
                replace(episodes[1], seed=-5, options=None),
                replace(episodes[2], seed=None, options={"flag": True, "scale": 0.5})]
    write_dataset("team/seeds-v0", episodes, spec)
    dataset = mm.load_dataset("team/seeds-v0")
    assert dataset.episode_seeds() == [2**64 - 1, -5, None]
    assert dataset.episode(0).options == {"a": {"b": 2, "c": "x"}}
    assert dataset.episode(1).options is None
    assert dataset.episode(2).options == {"flag": True, "scale": 0.5}
    assert [e.seed for e in dataset.iterate_episodes()] == [2**64 - 1, -5, None]


def test_append_adds_episodes_and_extends_the_index() -> None:
    spec, first = _simple(2)
    _, more = _simple(2, first_seed=10)
    target = write_dataset("team/grow-v0", first, spec)
    append_to_dataset("team/grow-v0", more, spec)
    dataset = mm.load_dataset("team/grow-v0")
    assert dataset.total_episodes == 4
    assert dataset.total_steps == sum(e.total_steps for e in first + more)
    # kept valid (what readers do with it: tests/storage/test_index_trust.py)
    assert offset_index.read(target / "data") is not None
    for i, written in enumerate(first + more):
        assert_episode_equal(dataset.episode(i), written)
    plain = minari.load_dataset("team/grow-v0")
    assert plain.total_episodes == 4
    assert [int(e.id) for e in plain.iterate_episodes()] == [0, 1, 2, 3]


def test_append_to_a_file_with_a_stray_later_episode_is_refused_and_changes_nothing() -> None:
    """A data file holding an episode group past the committed ones, but not right after them
    (no append leaves that: a damaged or edited file), stops the append with an error naming
    the file; the dataset stays as it was."""
    spec, first = _simple(2)
    _, more = _simple(3, first_seed=10)
    target = write_dataset("team/stray-v0", first, spec)
    data_file = target / "data" / layout.MAIN_FILE_NAME
    with h5py.File(data_file, "a") as file:
        file.create_group("episode_3")  # episode_2 is absent: not an interrupted append's
    before = data_file.read_bytes()
    with pytest.raises(CorruptedDataError, match=re.escape(f"{data_file} already holds episode_3")):
        append_to_dataset("team/stray-v0", more, spec)
    assert data_file.read_bytes() == before
    assert json.loads((target / "data" / layout.METADATA_FILE_NAME).read_text())[
        "total_episodes"] == 2


def test_append_does_not_hash_the_data_file(hashed_bytes: list[int]) -> None:
    """An append's cost must not grow with the dataset: no digest pass over main_data.hdf5
    (the copy that makes the append all-or-nothing is its only whole-file work)."""
    spec, first = _simple(40)
    _, more = _simple(2, first_seed=100)
    target = write_dataset("team/hashless-v0", first, spec)
    assert f"data/{layout.MAIN_FILE_NAME}" in remembered_digests(target)
    hashed_bytes.clear()
    append_to_dataset("team/hashless-v0", more, spec)
    size = (target / "data" / layout.MAIN_FILE_NAME).stat().st_size
    assert sum(hashed_bytes) < size / 4, (sum(hashed_bytes), size)
    assert f"data/{layout.MAIN_FILE_NAME}" not in remembered_digests(target)
    assert mm.load_dataset("team/hashless-v0").total_episodes == 42


def test_append_refuses_other_agents_or_spaces_and_missing_datasets() -> None:
    spec, episodes = _simple(1)
    write_dataset("team/fixed-v0", episodes, spec)
    other_agents = _spec(["red", "green"], {"red": SIMPLE_OBS["red"], "green": SIMPLE_OBS["red"]},
                         {"red": SIMPLE_ACT["red"], "green": SIMPLE_ACT["red"]})
    with pytest.raises(IncompatibleSourcesError, match="agents"):
        append_to_dataset("team/fixed-v0", [], other_agents)
    other_space = _spec(SIMPLE_AGENTS, SIMPLE_OBS, {**SIMPLE_ACT, "red": spaces.Discrete(4)})
    with pytest.raises(IncompatibleSourcesError, match="action space of 'red'"):
        append_to_dataset("team/fixed-v0", [], other_space)
    with pytest.raises(DatasetNotFoundError):
        append_to_dataset("team/missing-v0", episodes, spec)
    assert mm.load_dataset("team/fixed-v0").total_episodes == 1


STATE = spaces.Box(-1, 1, (4,), dtype=np.float32)


def _stated(count: int, state: bool, first_seed: int = 0) -> tuple[MultiAgentSpec, list]:
    spec = _spec(SIMPLE_AGENTS, SIMPLE_OBS, SIMPLE_ACT, state_space=STATE if state else None)
    return spec, [random_episode(SIMPLE_AGENTS, SIMPLE_OBS, SIMPLE_ACT, 2, first_seed + i,
                                 state_space=STATE if state else None) for i in range(count)]


@pytest.mark.parametrize("stored_state", [True, False])
def test_a_dataset_never_mixes_episodes_with_and_without_state(stored_state: bool) -> None:
    """All of a dataset's episodes have a global state or none has: a mix cannot be read
    whole, so appends and writes that would make one are refused and change nothing."""
    spec, episodes = _stated(2, stored_state)
    other_spec, others = _stated(1, not stored_state, first_seed=10)
    write_dataset("team/stated-v0", episodes, spec)
    which = ("differ in global state: 'not recorded' vs 'recorded'" if stored_state else
             "differ in global state: 'recorded' vs 'not recorded'")
    with pytest.raises(IncompatibleSourcesError, match=which):
        append_to_dataset("team/stated-v0", others, other_spec)
    # the spec says as the dataset, the episode not: refused by the file writer
    with pytest.raises(IncompatibleSourcesError, match=r"episode 2 \(seed 10\) has "):
        append_to_dataset("team/stated-v0", others, spec)
    with pytest.raises(IncompatibleSourcesError, match=r"episode 1 \(seed 10\) has "):
        write_dataset("team/mixed-v0", [episodes[0], *others], spec)
    assert mm.load_dataset("team/stated-v0").total_episodes == 2
    assert not dataset_dir("team/mixed-v0").exists()


@pytest.mark.filterwarnings("ignore:algorithm_name, author")
def test_a_refused_append_keeps_the_recorded_episodes(tmp_path: Path) -> None:
    """Episodes recorded without the state the dataset has stay in the recording: they can
    be written as a dataset of their own."""
    def record(record_state: bool, seed: int) -> mm.ParallelDataCollector:
        collector = mm.ParallelDataCollector(
            mm.make_env("mpe2/simple_spread_v3", max_cycles=3), record_state=record_state,
            recording_path=tmp_path / f"rec-{seed}")
        for k in range(2):
            collector.reset(seed=seed + k)
            while collector.agents:
                collector.step({a: 0 for a in collector.agents})
        return collector

    first = record(True, 0)
    first.create_dataset("team/spread-v0")
    first.close()
    late = record(False, 10)
    with pytest.raises(IncompatibleSourcesError, match="record_state"):
        late.add_to_dataset("team/spread-v0")
    assert mm.load_dataset("team/spread-v0").total_episodes == 2
    late.create_dataset("team/spread-stateless-v0")
    late.close()
    assert mm.load_dataset("team/spread-stateless-v0").episode_seeds() == [10, 11]


# --- plain Minari on a recorded dataset ------------------------------------------------------


@pytest.fixture
def spread(record_parallel: Any) -> tuple[Any, list[dict[str, Any]]]:
    return record_parallel("mpe2/simple_spread_v3", episodes=4, max_cycles=6,
                           dataset_id="mpe2/spread/random-v0")


def test_minari_loads_iterates_samples_and_filters(spread: tuple) -> None:
    dataset, records = spread
    plain = minari.load_dataset("mpe2/spread/random-v0")
    assert plain.total_episodes == 4 and plain.total_steps == 24
    assert isinstance(plain.observation_space, spaces.Dict)
    assert set(plain.observation_space.spaces) == set(dataset.possible_agents)
    episodes = list(plain.iterate_episodes())
    for episode, record in zip(episodes, records, strict=True):
        assert len(episode) == record["steps"]
        assert set(episode.observations) == set(dataset.possible_agents)
        assert episode.observations["agent_0"].shape == (record["steps"] + 1, 18)
        np.testing.assert_allclose(episode.rewards.sum(), sum(record["returns"].values()))
        assert episode.truncations[-1] and not episode.terminations.any()
    sampled = plain.sample_episodes(3)
    assert len(sampled) == 3 and len({int(e.id) for e in sampled}) == 3
    filtered = plain.filter_episodes(lambda e: int(e.id) % 2 == 1)
    assert [int(e.id) for e in filtered.iterate_episodes()] == [1, 3]
    wrapped = mm.load_dataset(filtered)  # the multi-agent view keeps Minari's selection
    assert wrapped.total_episodes == 2
    assert [e.id for e in wrapped] == [1, 3]
    assert wrapped.to_arrays().episode_ids.tolist() == [1, 3]
    assert wrapped.episode_seeds() == [1, 3]
    assert wrapped.episode(1).id == 3
    assert_episode_equal(wrapped.episode(0), dataset.episode(1))
    with pytest.raises(IndexError):
        wrapped.episode(2)


def test_minari_split_and_combine(spread: tuple) -> None:
    plain = minari.load_dataset("mpe2/spread/random-v0")
    first, second = minari.split_dataset(plain, [3, 1], seed=1)
    ids = sorted(int(e.id) for d in (first, second) for e in d.iterate_episodes())
    assert ids == [0, 1, 2, 3]
    views = [mm.load_dataset(part) for part in (first, second)]
    assert sorted(e.id for view in views for e in view) == [0, 1, 2, 3]
    assert [e.id for e in views[1]] == [int(i) for i in second.episode_indices]
    assert views[0].total_steps == 18
    combined = minari.combine_datasets([plain, plain], "mpe2/spread/combined-v0")
    assert combined.total_episodes == 8 and combined.total_steps == 48
    rewards = [e.rewards.sum() for e in combined.iterate_episodes()]
    np.testing.assert_allclose(rewards[:4], rewards[4:])


def test_minari_recover_environment_gives_the_joint_gymnasium_env(spread: tuple) -> None:
    plain = minari.load_dataset("mpe2/spread/random-v0")
    env = plain.recover_environment()
    assert isinstance(env, gym.Env)
    assert env.observation_space == plain.observation_space
    assert env.action_space == plain.action_space
    observation, info = env.reset(seed=3)
    assert plain.observation_space.contains(observation)
    total, steps, done = 0.0, 0, False
    while not done:
        observation, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert plain.observation_space.contains(observation)
        np.testing.assert_allclose(reward, sum(info["rewards"].values()))
        total += reward
        steps += 1
        done = terminated or truncated
    assert steps == 6 and truncated
    env.close()


def _minari_cli(*args: str) -> subprocess.CompletedProcess[str]:
    executable = Path(sys.executable).parent / "minari"
    return subprocess.run([str(executable), *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"}, check=False)


def test_minari_cli_show_and_list(spread: tuple) -> None:
    shown = _minari_cli("show", "mpe2/spread/random-v0")
    assert shown.returncode == 0, shown.stderr
    assert "mpe2/spread/random-v0" in shown.stdout
    assert "marl_minari.joint:JointEnv" in shown.stdout
    listed = _minari_cli("list", "local")
    assert listed.returncode == 0, listed.stderr
    assert "mpe2/spread/random-v0" in listed.stdout
    row = next(line for line in listed.stdout.splitlines() if "mpe2/spread/random-v0" in line)
    assert "4" in row and "24" in row


@pytest.mark.parametrize(("metadata", "named"), [
    ({"author": 123}, "metadata author="), ({"author_email": ["a@b.c", 7]},
                                            "metadata author_email="),
    ({"ref_max_score": float("nan")}, "metadata ref_max_score="),
    ({"algorithm_name": 1}, "metadata algorithm_name="),
])
def test_metadata_of_the_wrong_type_is_refused_before_anything_is_written(
        metadata: dict[str, Any], named: str) -> None:
    agents = ["a", "b"]
    obs = {a: spaces.Box(-1, 1, (2,), dtype=np.float32) for a in agents}
    act = {a: spaces.Discrete(2) for a in agents}
    episodes = [random_episode(agents, obs, act, 3, 0)]
    with pytest.raises(mm.InvalidOptionError, match=named):
        write_dataset("meta/typed-v0", episodes, _spec(agents, obs, act), **metadata)
    assert not dataset_dir("meta/typed-v0").exists()
