"""The one way in (marl_minari.sources): what it opens, the single agent's name, the download
rule, and that describe, the adapters and Ray follow it."""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import (
    DatasetNotFoundError,
    InvalidOptionError,
    MarlMinariError,
    NotADatasetError,
)
from marl_minari.format.ids import dataset_dir, local_dataset_ids
from marl_minari.sources import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_CHUNK_STEPS,
    MIN_CHUNK_BYTES,
    SINGLE_AGENT,
    DatasetSource,
    holding_chunk_bytes,
    open_source,
    steps_per_chunk,
)

SPREAD = "mpe2/simple_spread_v3"


def _record_spread(record_parallel: Callable[..., Any], dataset_id: str,
                   episodes: int = 2) -> Any:
    dataset, _ = record_parallel(SPREAD, episodes, max_cycles=6, dataset_id=dataset_id)
    return dataset


def _same_arrays(a: mm.MultiAgentArrays, b: mm.MultiAgentArrays) -> None:
    assert a.possible_agents == b.possible_agents
    assert np.array_equal(a.episode_ids, b.episode_ids)
    assert np.array_equal(a.rewards, b.rewards)
    assert np.array_equal(a.active, b.active)
    for agent in a.possible_agents:
        assert np.array_equal(a.actions[agent], b.actions[agent])


def test_every_way_of_naming_a_dataset_gives_one_source(
        record_parallel: Callable[..., Any]) -> None:
    dataset = _record_spread(record_parallel, "tests/spread-v0", episodes=3)
    folder = dataset_dir("tests/spread-v0")
    named = [open_source("tests/spread-v0"), open_source(folder), open_source(folder / "data"),
             open_source(folder / "data" / "main_data.hdf5"), open_source(dataset),
             open_source(dataset.minari)]
    whole = dataset.to_arrays()
    for source in named:
        assert source.kind == "multi_agent" and source.dataset_id == "tests/spread-v0"
        assert source.spec.possible_agents == dataset.possible_agents
        assert source.episode_indices.tolist() == [0, 1, 2]
        _same_arrays(source.read(source.episode_indices), whole)
    assert open_source(named[0]) is named[0]
    # Chunks hold whole episodes and cover every episode once, in order.
    chunks = list(named[0].chunks(chunk_steps=1))
    assert [c.episode_ids.tolist() for c in chunks] == [[0], [1], [2]]
    with pytest.raises(NotADatasetError):
        open_source(42)
    with pytest.raises(InvalidOptionError, match="chunk_steps"):
        next(named[0].chunks(chunk_steps=0))


def test_default_chunks_are_sized_by_bytes_and_a_given_size_is_kept(
        record_parallel: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # Wide rows get fewer steps per chunk; narrow rows stop at DEFAULT_CHUNK_STEPS; a step
    # wider than the budget is still read (one step, whole episodes); a given size is kept.
    assert steps_per_chunk(None, 2_400) == DEFAULT_CHUNK_BYTES // 2_400 == 13_981
    assert steps_per_chunk(None, 2_400, budget=4 * 2**20) == 1_747
    assert steps_per_chunk(None, 1) == DEFAULT_CHUNK_STEPS
    assert steps_per_chunk(None, 10 * DEFAULT_CHUNK_BYTES) == 1
    assert steps_per_chunk(100_000, 10 * DEFAULT_CHUNK_BYTES) == 100_000
    with pytest.raises(InvalidOptionError, match="chunk_steps"):
        steps_per_chunk(0, 1)
    # What holds every step (make_buffer) reads a thirty-second of it at a time, 1 to 32 MiB;
    # a sixteenth where the reads go straight into the arrays (a vault).
    assert holding_chunk_bytes(64 * 2**20) == 2 * 2**20
    assert holding_chunk_bytes(64 * 2**20, in_place=True) == 4 * 2**20
    assert holding_chunk_bytes(1000) == MIN_CHUNK_BYTES
    assert holding_chunk_bytes(10**12) == DEFAULT_CHUNK_BYTES
    _record_spread(record_parallel, "tests/spread-v0", episodes=3)  # 6 steps each
    source = open_source("tests/spread-v0")
    spec = source.spec
    assert spec.state_space is not None and spec.state_space.shape is not None
    floats = int(np.prod(spec.state_space.shape)) + sum(  # float32 state and observations
        int(np.prod(spec.observation_spaces[a].shape or ())) for a in spec.possible_agents)
    assert 4 * floats < source.step_bytes < 4 * floats + 100  # + actions, rewards, flags
    # A budget of 6 of this source's steps: one episode per chunk by default.
    monkeypatch.setattr("marl_minari.sources.base.DEFAULT_CHUNK_BYTES", 6 * source.step_bytes)
    assert [b.tolist() for b in source.batches()] == [[0], [1], [2]]
    assert [c.episode_ids.tolist() for c in source.chunks()] == [[0], [1], [2]]
    assert [b.tolist() for b in source.batches(12)] == [[0, 1], [2]]


def test_a_filtered_minari_dataset_gives_only_its_episodes(
        record_parallel: Callable[..., Any]) -> None:
    dataset = _record_spread(record_parallel, "tests/spread-v0", episodes=4)
    subset = dataset.minari.filter_episodes(lambda episode: episode.id in (1, 3))
    source = open_source(subset)
    assert source.episode_indices.tolist() == [1, 3] and not source.reads_all_episodes
    arrays = np.concatenate([c.episode_ids for c in source.chunks()])
    assert arrays.tolist() == [1, 3]


def test_a_source_pickles_and_reads_the_same_in_another_process(
        record_parallel: Callable[..., Any]) -> None:
    _record_spread(record_parallel, "tests/spread-v0")
    source = open_source("tests/spread-v0")
    before = source.read([0, 1])  # opens the reader, which must not travel
    copy = pickle.loads(pickle.dumps(source))
    assert isinstance(copy, DatasetSource) and copy.data_path == source.data_path
    _same_arrays(copy.read([0, 1]), before)


def test_a_plain_dataset_is_agent_0_in_describe_adapters_and_ray(
        record_cartpole: Callable[..., Any], tmp_path: Path) -> None:
    from marl_minari.adapters import to_vault

    from marl_minari.ray import local_rows

    plain = record_cartpole("plain/cartpole-v0", 3, record_infos=True)
    source = open_source("plain/cartpole-v0")
    assert source.kind == "single_agent" and source.spec.possible_agents == (SINGLE_AGENT,)
    assert SINGLE_AGENT == "agent_0"
    assert mm.describe("plain/cartpole-v0").possible_agents == ("agent_0",)
    rows = local_rows("plain/cartpole-v0")
    assert set(rows["agent_id"].tolist()) == {"agent_0"}
    vault = to_vault("plain/cartpole-v0", rel_dir=tmp_path / "vaults")
    import json

    view = json.loads((vault / "metadata.json").read_text())["marl_minari"]["view"]
    assert view["agents"] == ["agent_0"]

    # Every field read through Minari, and the fast path that leaves observations unread,
    # give the episodes Minari itself gives.
    episodes = list(plain.iterate_episodes())
    full = source.read(source.episode_indices)
    fast = source.read(source.episode_indices, observations=False)
    assert fast.observations == {"agent_0": {}}
    for arrays in (full, fast):
        assert np.array_equal(arrays.episode_lengths, [len(e.rewards) for e in episodes])
        assert np.array_equal(arrays.actions["agent_0"],
                              np.concatenate([e.actions for e in episodes]))
        assert np.array_equal(arrays.rewards[:, 0], np.concatenate([e.rewards for e in episodes]))
        assert np.array_equal(arrays.episode_terminations,
                              np.concatenate([e.terminations for e in episodes]))
    assert np.array_equal(full.observations["agent_0"],
                          np.concatenate([e.observations for e in episodes]))


def test_one_chunk_default_and_one_agent_name_everywhere() -> None:
    import importlib

    from marl_minari import sources

    # ``marl_minari.describe`` the attribute is the function; import_module gives the package.
    adapters = importlib.import_module("marl_minari.adapters")
    describe = importlib.import_module("marl_minari.describe")
    assert adapters.DEFAULT_CHUNK_STEPS == describe.DEFAULT_CHUNK_STEPS == \
        sources.DEFAULT_CHUNK_STEPS == 65_536
    assert adapters.SINGLE_AGENT == describe.SINGLE_AGENT == sources.SINGLE_AGENT == "agent_0"


def test_a_missing_id_is_not_downloaded_and_names_the_closest_local_ids(
        record_parallel: Callable[..., Any]) -> None:
    from marl_minari.adapters import to_vault

    from marl_minari.ray import local_rows

    _record_spread(record_parallel, "tests/spread-v0")
    assert local_dataset_ids() == ["tests/spread-v0"]
    for open_missing in (open_source, mm.describe, to_vault, local_rows):
        with pytest.raises(DatasetNotFoundError, match="tests/spread-v0") as caught:
            open_missing("tests/spred-v0")
        assert "dataset 'tests/spred-v0' not found locally" in str(caught.value)
        assert "download=True" in str(caught.value)
    with pytest.raises(DatasetNotFoundError, match="no dataset at 'no id here'.*not a dataset id"):
        open_source("no id here")
    with pytest.raises(DatasetNotFoundError, match="neither a dataset folder"):
        open_source(Path(__file__).parent)


def test_an_id_is_downloaded_only_when_asked_or_from_a_named_remote(
        datasets_root: Path, tmp_path: Path, record_parallel: Callable[..., Any],
        monkeypatch: pytest.MonkeyPatch) -> None:
    registry_dir = tmp_path / "registry"
    remote = f"file://{registry_dir}"
    monkeypatch.delenv("MARL_MINARI_REGISTRY", raising=False)
    _record_spread(record_parallel, "published/spread-v0")
    registry.publish("published/spread-v0", remote)
    shutil.rmtree(datasets_root / "published")

    with pytest.raises(DatasetNotFoundError, match="published/spread-v0"):
        open_source("published/spread-v0")
    assert not dataset_dir("published/spread-v0").exists()

    fetched = open_source("published/spread-v0", remote=remote)
    assert fetched.spec.possible_agents == ("agent_0", "agent_1", "agent_2")
    assert fetched.data_path == (dataset_dir("published/spread-v0") / "data").resolve()

    shutil.rmtree(datasets_root / "published")
    monkeypatch.setenv("MINARI_REMOTE", remote)
    with pytest.raises(DatasetNotFoundError):
        open_source("published/spread-v0")
    assert open_source("published/spread-v0", download=True).total_episodes == 2
    assert minari.list_local_datasets()  # Minari sees what was fetched


def test_a_vault_folder_is_a_source(record_parallel: Callable[..., Any], tmp_path: Path) -> None:
    from marl_minari.adapters import to_vault

    dataset = _record_spread(record_parallel, "tests/spread-v0")
    vault = to_vault("tests/spread-v0", rel_dir=tmp_path / "vaults")
    with open_source(vault) as source:
        assert source.kind == "vault"
        assert source.vault_path == vault.resolve()
        assert source.name == str(vault.resolve())
        _same_arrays(source.read(source.episode_indices), dataset.to_arrays())


def test_bad_options_are_library_errors(record_parallel: Callable[..., Any]) -> None:
    from marl_minari.ray import local_rows, map_pattern
    from marl_minari.rows import patterns as P
    from marl_minari.rows.turns import agent_transitions

    dataset = _record_spread(record_parallel, "tests/spread-v0")
    arrays = dataset.to_arrays()
    rows = P.agent_step_rows(arrays, dataset.spec)
    calls: list[Callable[[], Any]] = [
        lambda: P.build_rows("frames", arrays, dataset.spec),
        lambda: P.select_agents(dataset.spec, ["nobody"]),
        lambda: P.n_step(rows, n=0),
        lambda: P.sequences(rows, length=0),
        lambda: P.transitions({"t": rows["t"]}),
        lambda: agent_transitions(arrays, "nobody"),
        lambda: agent_transitions(arrays, "agent_0", episode_indices=[0]),
        lambda: local_rows([]),
        lambda: map_pattern(None, "bogus"),  # type: ignore[arg-type]
    ]
    for call in calls:
        with pytest.raises(MarlMinariError):
            call()


ENTRY_POINTS: dict[str, Callable[[Any, Path], int]] = {
    "load_dataset": lambda ref, _: len(mm.load_dataset(ref)),
    "check_dataset": lambda ref, _: mm.check_dataset(ref).total_episodes,
    "describe": lambda ref, _: mm.describe(ref).total_episodes,
    "combine_datasets": lambda ref, _: len(mm.combine_datasets([ref], "door/combined-v0")),
    "to_vault": lambda ref, tmp: _vault_episodes(ref, tmp),
    "make_buffer": lambda ref, _: _buffer_episodes(ref),
    "open_source": lambda ref, _: open_source(ref).total_episodes,
}


def _vault_episodes(reference: Any, tmp: Path) -> int:
    from marl_minari.adapters import to_vault

    return open_source(to_vault(reference, rel_dir=tmp / "vaults")).total_episodes


def _buffer_episodes(reference: Any) -> int:
    from marl_minari.adapters import make_buffer

    _, state = make_buffer([reference], sample_batch_size=2, sample_sequence_length=2)
    return int(state.experience["terminals"].any(axis=-1).sum())


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("kind", ["folder", "data file", "file url", "data folder"])
def test_every_entry_point_accepts_every_reference(
        record_parallel: Callable[..., Any], tmp_path: Path, entry: str, kind: str) -> None:
    _record_spread(record_parallel, "door/spread-v0", episodes=2)
    folder = dataset_dir("door/spread-v0")
    reference = {"folder": str(folder), "data file": folder / "data" / "main_data.hdf5",
                 "file url": folder.as_uri(), "data folder": folder / "data"}[kind]
    assert ENTRY_POINTS[entry](reference, tmp_path) == 2


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("kind", ["missing path", "missing id", "too long", "not a path"])
def test_every_entry_point_gives_the_same_error_for_the_same_mistake(
        tmp_path: Path, entry: str, kind: str) -> None:
    reference = {"missing path": str(tmp_path / "nowhere" / "spread"),
                 "missing id": "door/nowhere-v0", "too long": "a" * 300,
                 "not a path": "no id here"}[kind]
    with pytest.raises(DatasetNotFoundError) as caught:
        ENTRY_POINTS[entry](reference, tmp_path)
    expected = {"missing path": f"no dataset at {reference!r}",
                "missing id": "'door/nowhere-v0' not found locally",
                "too long": "no dataset at 'aaaa", "not a path": "no dataset at 'no id here'"}
    assert expected[kind] in str(caught.value)
    assert "malformed" not in str(caught.value).split(":")[0]


def test_a_pass_in_chunks_opens_the_data_file_once(
        record_parallel: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # Every bulk consumer reads through chunks(): the file is opened (and its leaves found)
    # once for the pass, not once per chunk.
    import marl_minari.storage.episode_reader as episode_reader

    dataset = _record_spread(record_parallel, "tests/spread-v0", episodes=4)
    opened: list[Any] = []
    real_open = episode_reader.open_data_file
    monkeypatch.setattr(episode_reader, "open_data_file",
                        lambda path: opened.append(path) or real_open(path))
    chunks = list(open_source("tests/spread-v0").chunks(chunk_steps=6))
    assert [c.episode_ids.tolist() for c in chunks] == [[0], [1], [2], [3]]
    assert len(opened) == 1
    for position, chunk in enumerate(chunks):
        _same_arrays(chunk, dataset.to_arrays([position]))
    # Without the offset index every leaf is read through HDF5, whose open file grows with
    # the episodes visited: then each chunk opens the file anew.
    (dataset_dir("tests/spread-v0") / "data" / "marl_minari_index.npz").unlink()
    opened.clear()
    unindexed = list(open_source("tests/spread-v0").chunks(chunk_steps=6))
    assert len(opened) == 4
    for chunk, indexed in zip(unindexed, chunks, strict=True):
        _same_arrays(chunk, indexed)


def test_a_pass_without_observations_leaves_them_unread(
        record_parallel: Callable[..., Any]) -> None:
    # Statistics, returns and subsets read actions and rewards only.
    dataset = _record_spread(record_parallel, "tests/spread-v0", episodes=3)
    (chunk,) = open_source("tests/spread-v0").chunks(observations=False)
    assert chunk.observations == {a: {} for a in chunk.possible_agents}
    _same_arrays(chunk, dataset.to_arrays())
    (full,) = open_source("tests/spread-v0").chunks()
    assert all(np.array_equal(full.observations[a], dataset.to_arrays().observations[a])
               for a in full.possible_agents)


def test_a_pass_that_reuses_its_arrays_reads_every_chunk_into_the_same_memory(
        record_parallel: Callable[..., Any]) -> None:
    # make_buffer turns each chunk into buffer rows before it asks for the next: the chunks
    # are read into memory allocated (and first touched) once, and read what new arrays read.
    dataset = _record_spread(record_parallel, "tests/spread-v0", episodes=4)
    seen: list[np.ndarray] = []
    for position, chunk in enumerate(open_source("tests/spread-v0").chunks(
            chunk_steps=6, reuse_arrays=True)):
        expected = dataset.to_arrays([position])
        _same_arrays(chunk, expected)
        for agent in chunk.possible_agents:
            assert np.array_equal(chunk.observations[agent], expected.observations[agent])
        assert np.array_equal(chunk.state, expected.state)
        seen.append(chunk.observations["agent_0"])
    assert all(np.shares_memory(seen[0], later) for later in seen[1:])
    fresh = [c.observations["agent_0"] for c in open_source("tests/spread-v0").chunks(
        chunk_steps=6)]
    assert not np.shares_memory(fresh[0], fresh[1])


def test_episode_steps_come_from_the_kept_index_only_while_its_files_are_unchanged(
        record_parallel: Callable[..., Any]) -> None:
    # A source's episode lengths (make_buffer's first need) reuse the offset index that the
    # dataset's reads checked, instead of opening the file and loading the index again.
    import dataclasses
    import os

    dataset = _record_spread(record_parallel, "tests/spread-v0", episodes=3)
    stored = [int(dataset.episode(i).rewards.shape[0]) for i in range(3)]
    assert dataset.episode_steps().tolist() == stored
    cache = dataset._index_cache
    assert cache.index is not None  # kept by the reads above
    cache.index = dataclasses.replace(cache.index, steps=cache.index.steps + 1)
    assert open_source(dataset).episode_lengths().tolist() == [s + 1 for s in stored]
    data_file = dataset.data_path / "main_data.hdf5"
    os.utime(data_file, ns=(data_file.stat().st_atime_ns, data_file.stat().st_mtime_ns + 10**9))
    assert dataset.episode_steps().tolist() == stored  # the files changed: read anew


def test_the_source_of_an_opened_dataset_takes_its_checked_metadata_and_spec(
        record_parallel: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # The object read, parsed and cross-checked its metadata with the data file when it was
    # opened, and its reads go by them: the source takes them as they are, opening no file.
    import marl_minari.sources.folders as folders

    dataset = _record_spread(record_parallel, "tests/spread-v0", episodes=3)
    opened: list[Any] = []
    monkeypatch.setattr(folders, "open_data_file", lambda path: opened.append(path))
    monkeypatch.setattr(folders, "read_metadata", lambda path: opened.append(path))
    subset = dataset.subset([0, 2])
    source = open_source(subset)
    assert opened == []
    assert source.metadata is subset.checked_metadata
    assert source.spec is subset.spec
    assert source.joint_spaces == (subset.observation_space, subset.action_space)
    assert source.kind == "multi_agent" and source.dataset_id == "tests/spread-v0"
    assert source.episode_indices.tolist() == [0, 2]
    _same_arrays(source.read(source.episode_indices), dataset.to_arrays([0, 2]))
    # A plain Minari dataset object is still read and checked as a folder.
    monkeypatch.undo()
    assert open_source(dataset.minari).metadata == dataset.checked_metadata
