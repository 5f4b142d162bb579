"""The reader: per-agent arrays in bulk and per episode, and what it does with damaged files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import h5py
import minari
import numpy as np
import pytest
from gymnasium import spaces
from marl_strategies import assert_episode_equal, assert_tree_equal, random_episode

import marl_minari as mm
from marl_minari.errors import CorruptedDataError, DatasetNotFoundError, LayoutError
from marl_minari.format import layout, offset_index
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.writer import write_dataset

AGENTS = ["p", "q", "r"]
OBS = {"p": spaces.Box(-3, 3, (4,), dtype=np.float32),
       "q": spaces.Tuple((spaces.Discrete(5), spaces.Text(4, min_length=0))),
       "r": spaces.Dict({"m": spaces.MultiBinary(3), "v": spaces.Box(0, 9, (2, 2), np.int64)})}
ACT = {"p": spaces.Box(-1, 1, (2,), dtype=np.float32), "q": spaces.Discrete(3),
       "r": spaces.MultiDiscrete([3, 3])}
STATE = spaces.Box(-1, 1, (5,), dtype=np.float32)


@pytest.fixture
def written() -> tuple[Any, list]:
    spec = MultiAgentSpec(api="parallel", possible_agents=tuple(AGENTS), observation_spaces=OBS,
                          action_spaces=ACT, state_space=STATE)
    episodes = [random_episode(AGENTS, OBS, ACT, steps, seed, state_space=STATE,
                               with_infos=True) for seed, steps in enumerate([3, 1, 5, 2])]
    write_dataset("read/mixed-v0", episodes, spec)
    return mm.load_dataset("read/mixed-v0"), episodes


def _assert_arrays_match(arrays: Any, episodes: list, indices: list[int]) -> None:
    assert arrays.episode_ids.tolist() == indices
    for position, index in enumerate(indices):
        expected = episodes[index]
        assert_episode_equal(arrays.episode(position), expected)


def test_to_arrays_equals_per_episode_reads(written: tuple) -> None:
    dataset, episodes = written
    arrays = dataset.to_arrays()
    _assert_arrays_match(arrays, episodes, [0, 1, 2, 3])
    for i in range(4):
        assert_episode_equal(dataset.episode(i), arrays.episode(i))
    assert [e.id for e in dataset] == [0, 1, 2, 3]
    assert len(dataset) == 4 and dataset[2].total_steps == 5


def test_to_arrays_of_a_subset_in_any_order(written: tuple) -> None:
    dataset, episodes = written
    _assert_arrays_match(dataset.to_arrays([2, 0]), episodes, [2, 0])
    _assert_arrays_match(dataset.to_arrays([3]), episodes, [3])
    with pytest.raises(mm.InvalidOptionError, match="given no episodes to read from .*hdf5"):
        dataset.to_arrays([])


def test_to_arrays_of_a_dataset_without_episodes_says_so() -> None:
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3))
    collector.reset(seed=0)  # in progress: not in the dataset
    with pytest.warns(UserWarning):
        dataset = collector.create_dataset("tests/empty-v0", algorithm_name="none")
    collector.close()
    assert dataset.total_episodes == 0
    with pytest.raises(mm.InvalidOptionError, match="or a dataset that holds no episodes"):
        dataset.to_arrays()


def test_bulk_arrays_are_concatenated_with_boundaries(written: tuple) -> None:
    dataset, episodes = written
    arrays = dataset.to_arrays()
    lengths = [e.total_steps for e in episodes]
    assert arrays.episode_lengths.tolist() == lengths
    assert arrays.step_starts.tolist() == [0, 3, 4, 9]
    assert arrays.obs_starts.tolist() == [0, 4, 6, 12]
    assert arrays.rewards.shape == (11, 3) and arrays.active.shape == (15, 3)
    assert arrays.observations["p"].shape == (15, 4)
    assert arrays.state is not None and arrays.state.shape == (15, 5)
    # obs_rows/next_obs_rows pair each step with its observations
    np.testing.assert_array_equal(arrays.observations["p"][arrays.obs_rows[3:4]],
                                  episodes[1].observations["p"][:1])
    np.testing.assert_array_equal(arrays.observations["p"][arrays.next_obs_rows[3:4]],
                                  episodes[1].observations["p"][1:2])
    np.testing.assert_allclose(arrays.returns(),
                               [[e.returns[a] for a in AGENTS] for e in episodes])


def test_iterate_episodes_in_small_batches(written: tuple) -> None:
    dataset, episodes = written
    read = list(dataset.iterate_episodes([3, 1, 2], batch_size=2))
    assert [e.id for e in read] == [3, 1, 2]
    for episode in read:
        assert_episode_equal(episode, episodes[episode.id])
        assert episode.seed == episodes[episode.id].seed
        assert episode.options == episodes[episode.id].options


def test_negative_indices_count_from_the_end_as_in_minari(written: tuple) -> None:
    dataset, _ = written
    assert len(dataset) == 4
    assert dataset[-1].id == dataset[3].id == dataset.minari[-1].id
    assert dataset.episode(-4).id == dataset.minari[-4].id == 0
    for index in (-5, 4):
        with pytest.raises(IndexError, match="out of range"):
            dataset.episode(index)
        with pytest.raises(IndexError):
            dataset.minari[index]


def test_text_and_tuple_leaves_come_back_as_written(written: tuple) -> None:
    dataset, episodes = written
    text = dataset.episode(2).observations["q"][1]
    assert text.dtype == object
    assert text.tolist() == episodes[2].observations["q"][1].tolist()
    infos = dataset.episode(0).agent_infos
    assert infos is not None
    assert infos["r"]["nested"]["label"].tolist() == ["r0", "r1", "r2", "r3"]


def test_load_dataset_errors(datasets_root: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="not found locally"):
        mm.load_dataset("read/missing-v0")
    # a single-agent Minari dataset is not in the layout
    import gymnasium as gym
    from minari import DataCollector

    env = DataCollector(gym.make("CartPole-v1"))
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.action_space.sample())
    env.create_dataset("read/cartpole-v0", algorithm_name="random", author="t",
                       author_email="t@example.com", code_permalink="https://example.com",
                       description="single agent")
    with pytest.raises(LayoutError, match="not a multi-agent dataset"):
        mm.load_dataset("read/cartpole-v0")


# --- damaged files -----------------------------------------------------------------------------


def _main(dataset: Any) -> Path:
    return dataset.data_path / layout.MAIN_FILE_NAME


@pytest.mark.parametrize("keep", [0.5, 0.99, 0.01])
def test_truncated_data_file_gives_a_clear_error(written: tuple, keep: float) -> None:
    dataset, _ = written
    path = _main(dataset)
    with open(path, "r+b") as handle:
        handle.truncate(int(path.stat().st_size * keep))
    with pytest.raises(CorruptedDataError, match="main_data.hdf5 is damaged"):
        mm.load_dataset("read/mixed-v0")
    # A dataset loaded before the damage fails on use with the same message.
    with pytest.raises(CorruptedDataError, match="main_data.hdf5 is damaged"):
        dataset.to_arrays()
    with pytest.raises(CorruptedDataError, match="damaged"):
        dataset.episode(0)
    with pytest.raises(CorruptedDataError, match="damaged"):
        dataset.episode_seeds()


def test_overwritten_file_header_gives_a_clear_error(written: tuple) -> None:
    dataset, _ = written
    with open(_main(dataset), "r+b") as handle:
        handle.write(b"\0" * 64)
    with pytest.raises(CorruptedDataError, match="damaged"):
        dataset.to_arrays()


def test_missing_dataset_in_an_episode_is_named(written: tuple) -> None:
    dataset, _ = written
    with h5py.File(_main(dataset), "a") as file:
        del file["episode_3/actions/p"]
    with pytest.raises(CorruptedDataError, match="episode_3 lacks dataset actions/p"):
        dataset.to_arrays()


def test_metadata_claiming_more_episodes_than_stored(written: tuple) -> None:
    dataset, _ = written
    meta_path = dataset.data_path / "metadata.json"
    metadata = json.loads(meta_path.read_text())
    metadata["total_episodes"] = 6
    meta_path.write_text(json.dumps(metadata))
    with pytest.raises(CorruptedDataError, match="counts 6 episodes but the file holds 4"):
        mm.load_dataset("read/mixed-v0")


def test_a_data_file_that_is_not_a_regular_file_is_refused(written: tuple) -> None:
    """A FIFO in its place (an untrusted archive can hold one) made every reader wait
    forever for a writer."""
    import os

    from marl_minari.storage.byte_ranges import LocalFileRanges

    dataset, _ = written
    main = _main(dataset)
    main.unlink()
    os.mkfifo(main)
    with pytest.raises(CorruptedDataError, match=rf"^{main} is a FIFO, not a regular file"):
        mm.load_dataset("read/mixed-v0")
    with pytest.raises(CorruptedDataError, match="is a FIFO"):
        LocalFileRanges(main)
    main.unlink()
    main.mkdir()
    with pytest.raises(CorruptedDataError, match="is a folder, not a regular file"):
        mm.load_dataset("read/mixed-v0")
    metadata = dataset.data_path / "metadata.json"
    metadata.unlink()
    os.mkfifo(metadata)  # was taken for a dataset that is not there ("record it")
    for reference in ("read/mixed-v0", dataset.data_path.parent, dataset.data_path):
        with pytest.raises(CorruptedDataError, match=rf"^{metadata} is a FIFO"):
            mm.load_dataset(reference)  # the data folder: looked at as a vault first


def test_unreadable_metadata_gives_a_clear_error(written: tuple) -> None:
    dataset, _ = written
    (dataset.data_path / "metadata.json").write_text("{not json")
    with pytest.raises(CorruptedDataError, match="not valid JSON"):
        dataset.metadata  # noqa: B018
    (dataset.data_path / "metadata.json").write_text("[" * 100_000 + "]" * 100_000)
    for reference in ("read/mixed-v0", dataset.data_path):  # a RecursionError escaped before
        with pytest.raises(CorruptedDataError, match="nests deeper than a JSON parser follows"):
            mm.load_dataset(reference)


# --- the offset index --------------------------------------------------------------------------


def _index_used(dataset: Any) -> bool:
    meta = dataset.metadata
    with h5py.File(_main(dataset), "r") as file:
        return offset_index.load(dataset.data_path, file, int(meta["total_episodes"]),
                                 int(meta["total_steps"])) is not None


def _edit_index(dataset: Any, edit: Any) -> None:
    path = dataset.data_path / layout.INDEX_FILE_NAME
    with np.load(path) as stored:
        arrays = {key: stored[key].copy() for key in stored.files}
    edit(arrays)
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


def _header(arrays: dict, **changes: Any) -> None:
    header = json.loads(arrays["header"].tobytes())
    header.update(changes)
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)


def _shift_first(arrays: dict) -> None:
    for key in arrays:
        if key.startswith("o") and arrays[key][0] >= 0:
            arrays[key][0] += 16


def _shift_last(arrays: dict) -> None:
    for key in arrays:
        if key.startswith("o") and arrays[key][-1] >= 0:
            arrays[key][-1] -= 16


def _shift_middle(arrays: dict) -> None:
    # Episode 2 of 4: the first and the last episode are left intact, so a check that only
    # looks at the ends passes; the reads must still not use the shifted offsets.
    for key in arrays:
        if key.startswith("o") and arrays[key][2] >= 0:
            arrays[key][2] += 16


def _steps_first(arrays: dict) -> None:
    arrays["steps"][0] += 1
    arrays["steps"][2] -= 1


def _steps_middle(arrays: dict) -> None:
    arrays["steps"][1] += 1


def _file_size(arrays: dict) -> None:
    _header(arrays, file_size=12345)


def _reversed_paths(arrays: dict) -> None:
    header = json.loads(arrays["header"].tobytes())
    _header(arrays, paths=header["paths"][::-1])


def _fewer_episodes(arrays: dict) -> None:
    for key in list(arrays):
        if key != "header":
            arrays[key] = arrays[key][:-1]


def _shift_middle_observation(arrays: dict) -> None:
    # Written per the spec but wrong for one middle episode: points at episode 2's data.
    header = json.loads(arrays["header"].tobytes())
    key = f"o{header['paths'].index(next(p for p in header['paths'] if p.startswith('obs')))}"
    arrays[key][1] = arrays[key][2]


def _swap_middle_entries(arrays: dict) -> None:
    # Still increasing and inside the file, but episode 1 and 2 swapped for one path.
    header = json.loads(arrays["header"].tobytes())
    key = f"o{header['paths'].index('rewards')}"
    arrays[key][1] = arrays[key][1] + 8


def _old_version(arrays: dict) -> None:
    _header(arrays, version=1)


@pytest.mark.parametrize("edit", [_shift_first, _shift_middle, _shift_last, _steps_first,
                                  _steps_middle,
                                  _file_size, _reversed_paths, _fewer_episodes,
                                  _shift_middle_observation, _swap_middle_entries,
                                  _old_version])
def test_tampered_index_is_ignored_and_reads_stay_correct(written: tuple, edit: Any) -> None:
    dataset, episodes = written
    assert _index_used(dataset)
    _edit_index(dataset, edit)
    _assert_arrays_match(dataset.to_arrays(), episodes, [0, 1, 2, 3])
    assert not _index_used(dataset)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty"])
def test_damaged_index_file_is_ignored(written: tuple, damage: str) -> None:
    dataset, episodes = written
    path = dataset.data_path / layout.INDEX_FILE_NAME
    content = path.read_bytes()
    path.write_bytes({"garbage": b"PK\x03\x04 not a zip", "truncated": content[:len(content) // 2],
                      "empty": b""}[damage])
    assert not _index_used(dataset)
    _assert_arrays_match(dataset.to_arrays(), episodes, [0, 1, 2, 3])


def test_stale_index_of_another_dataset_is_ignored(written: tuple) -> None:
    dataset, episodes = written
    spec = dataset.spec
    other = [random_episode(AGENTS, OBS, ACT, steps, seed, state_space=STATE, with_infos=True)
             for seed, steps in enumerate([2, 2, 2, 2], start=50)]
    write_dataset("read/other-v0", other, spec)
    other_data = mm.load_dataset("read/other-v0").data_path
    shutil.copyfile(other_data / layout.INDEX_FILE_NAME, dataset.data_path / layout.INDEX_FILE_NAME)
    assert not _index_used(dataset)
    _assert_arrays_match(dataset.to_arrays(), episodes, [0, 1, 2, 3])


def test_index_goes_stale_when_minari_appends(written: tuple) -> None:
    dataset, episodes = written
    # Minari's own storage appends an episode of the same layout behind the writer's back.
    with h5py.File(_main(dataset), "a") as file:
        file.copy(file["episode_1"], "episode_4")
        file["episode_4"].attrs["id"] = 4
    metadata = json.loads((dataset.data_path / "metadata.json").read_text())
    metadata.update(total_episodes=5, total_steps=metadata["total_steps"] + 1)
    (dataset.data_path / "metadata.json").write_text(json.dumps(metadata))
    reloaded = mm.load_dataset("read/mixed-v0")
    assert not _index_used(reloaded)
    arrays = reloaded.to_arrays()
    _assert_arrays_match(reloaded.to_arrays([0, 1, 2, 3]), episodes, [0, 1, 2, 3])
    assert_tree_equal(arrays.episode(4).observations, episodes[1].observations)
    assert minari.load_dataset("read/mixed-v0").total_episodes == 5


def test_reads_without_any_index_match(written: tuple) -> None:
    dataset, episodes = written
    (dataset.data_path / layout.INDEX_FILE_NAME).unlink()
    _assert_arrays_match(dataset.to_arrays(), episodes, [0, 1, 2, 3])
    _assert_arrays_match(dataset.to_arrays([1, 3]), episodes, [1, 3])


@pytest.mark.parametrize("with_index", [True, False])
def test_info_columns_of_an_agent_that_appears_later_are_read_in_bulk(with_index: bool) -> None:
    spec = MultiAgentSpec(api="parallel", possible_agents=tuple(AGENTS), observation_spaces=OBS,
                          action_spaces=ACT)
    from dataclasses import replace

    episodes = [random_episode(AGENTS, OBS, ACT, steps, seed, with_infos=True)
                for seed, steps in enumerate([2, 3, 2])]
    # agent r hands out no info in the first two episodes (it joined later)
    episodes[:2] = [replace(e, agent_infos={a: t for a, t in e.agent_infos.items() if a != "r"})
                    for e in episodes[:2]]
    write_dataset("read/late-v0", episodes, spec)
    dataset = mm.load_dataset("read/late-v0")
    if not with_index:
        (dataset.data_path / layout.INDEX_FILE_NAME).unlink()
    for order in ([0, 1, 2], [2, 0], [1, 2]):
        arrays = dataset.to_arrays(order)
        assert arrays.agent_infos is not None and set(arrays.agent_infos) == set(AGENTS)
        for position, index in enumerate(order):
            read = arrays.episode(position).agent_infos
            written = episodes[index].agent_infos
            assert read is not None and written is not None
            for agent in AGENTS:
                if agent in written:
                    assert_tree_equal(read[agent], written[agent], f"{index} {agent}")
                else:  # fill values where the agent gave no info
                    assert not read[agent]["score"].any()
                    assert read[agent]["nested"]["label"].tolist() == [""] * (
                        episodes[index].total_steps + 1)
    assert set(dataset.episode(0).agent_infos) == {"p", "q"}
    assert_tree_equal(dataset.episode(2).agent_infos, episodes[2].agent_infos)
    assert dataset.to_arrays([0, 1]).agent_infos.keys() == {"p", "q"}


@pytest.mark.parametrize("deleted", [1, 2, 3])
def test_a_deleted_episode_is_never_read_through_the_index(written: tuple,
                                                           deleted: int) -> None:
    """A write keeping the file's size (an episode deleted): the index may still load (the
    open checks do not grow with the number of episodes), but no entry of the deleted episode
    is trusted, the others still read right, and the deleted one is named where it is read."""
    dataset, episodes = written
    path = _main(dataset)
    size = path.stat().st_size
    with h5py.File(path, "r+") as file:
        del file[f"episode_{deleted}"]
    assert path.stat().st_size == size
    if deleted == 3:  # the last one: the count in metadata.json no longer holds
        with pytest.raises(CorruptedDataError, match="counts 4 episodes but the file holds 3"):
            mm.load_dataset("read/mixed-v0")
        return
    reloaded = mm.load_dataset("read/mixed-v0")
    kept = [i for i in range(4) if i != deleted]
    _assert_arrays_match(reloaded.to_arrays(kept), episodes, kept)
    for asked in ([deleted], [0, deleted]):
        with pytest.raises(CorruptedDataError, match=f"episode_{deleted} is missing"):
            reloaded.to_arrays(asked)
    with pytest.raises(CorruptedDataError, match=f"missing \\['episode_{deleted}'\\]"):
        mm.check_dataset("read/mixed-v0")


def test_every_index_entry_is_checked_by_mismatches(written: tuple) -> None:
    dataset, _ = written
    _edit_index(dataset, _swap_middle_entries)
    index = offset_index.read(dataset.data_path)
    assert index is not None
    with h5py.File(_main(dataset), "r") as file:
        found = offset_index.mismatches(index, file, range(4))
    assert len(found) == 1 and found[0].startswith("episode_1/rewards")


def test_index_of_a_real_recording_is_used_although_hdf5_reuses_space(
        record_parallel: Any) -> None:
    # HDF5 places some later datasets before earlier ones: offsets need not grow.
    dataset, _ = record_parallel("mpe2/simple_spread_v3", 30, dataset_id="read/many-v0",
                                 max_cycles=3)
    index = offset_index.read(dataset.data_path)
    assert index is not None
    assert any((np.diff(o[o >= 0]) <= 0).any() for o in index.offsets.values())
    assert _index_used(dataset)
    fast = dataset.to_arrays()
    (dataset.data_path / layout.INDEX_FILE_NAME).unlink()
    slow = mm.load_dataset("read/many-v0").to_arrays()
    for position in range(30):
        assert_episode_equal(fast.episode(position), slow.episode(position))


def test_metadata_with_an_integer_longer_than_python_converts_is_damage(written: tuple
                                                                       ) -> None:
    """The parser's ValueError escaped, advising sys.set_int_max_str_digits()."""
    dataset, _ = written
    (dataset.data_path / "metadata.json").write_text('{"total_episodes": ' + "9" * 5000 + "}")
    with pytest.raises(CorruptedDataError, match="metadata.json is not valid JSON: it holds an "
                                                 "integer of more digits than a reader converts"):
        mm.load_dataset("read/mixed-v0")
