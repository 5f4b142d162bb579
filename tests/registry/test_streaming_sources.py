"""``streaming=True`` on the one door: published datasets read in place over real servers on
127.0.0.1, compared with the local dataset they were published from."""

from __future__ import annotations

import json
import pickle
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from index_checks import count_entry_checks
from marl_minari.registry import StreamSettings
from marl_minari.registry.block_cache import BlockCache
from marl_minari.registry.blocks import MIN_BLOCK_SIZE
from marl_minari.registry.cache_writes import CACHE_WRITES
from marl_minari.registry.stream_warnings import StreamingWarning
from range_servers import RangeHandler, range_handler
from registry_helpers import cached_block_numbers, drop_range_digests

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import CorruptedDataError, DatasetNotFoundError
from marl_minari.format import entry_checks, layout
from marl_minari.format.ids import dataset_dir
from marl_minari.sources.streaming import StreamingDataset, StreamingSource
from marl_minari.storage.arrays import MultiAgentArrays

DATASET = "mpe2/spread/streamed-v0"


pytestmark = pytest.mark.usefixtures("block_cache")  # the default cache, per test


@pytest.fixture
def local_copy(streamable: Path) -> Iterator[tuple[MultiAgentArrays, list[Any]]]:
    """Every episode of the published dataset read from its local copy, which is then
    removed: what streams can only come from the registry."""
    dataset = mm.load_dataset(DATASET)
    arrays = dataset.to_arrays()
    attributes = dataset.episode_attributes(range(dataset.total_episodes))
    shutil.rmtree(dataset_dir(DATASET))
    yield arrays, attributes
    assert not dataset_dir(DATASET).exists()  # nothing was downloaded


@pytest.fixture
def served(thread_server: Callable[[Path, type[Any]], str], registry_dir: Path
           ) -> Callable[..., tuple[str, type[RangeHandler]]]:
    def serve(base: type[RangeHandler] = RangeHandler, **attributes: Any
              ) -> tuple[str, type[RangeHandler]]:
        handler = range_handler(f"Streaming{base.__name__}", base, **attributes)
        return thread_server(registry_dir, handler), handler

    return serve


def assert_same(got: MultiAgentArrays, expected: MultiAgentArrays) -> None:
    assert got.possible_agents == expected.possible_agents
    np.testing.assert_array_equal(got.episode_ids, expected.episode_ids)
    np.testing.assert_array_equal(got.episode_lengths, expected.episode_lengths)
    for agent in expected.possible_agents:
        np.testing.assert_array_equal(got.observations[agent], expected.observations[agent])
        np.testing.assert_array_equal(got.actions[agent], expected.actions[agent])
    for name in ("rewards", "terminations", "truncations", "active", "acted", "team_rewards"):
        np.testing.assert_array_equal(getattr(got, name), getattr(expected, name))


@pytest.mark.parametrize("kind", ["file", "http", "s3"])
def test_a_published_dataset_streams_episode_by_episode(
        kind: str, local_copy: tuple[MultiAgentArrays, list[Any]], registry_dir: Path,
        served: Callable[..., tuple[str, Any]], request: pytest.FixtureRequest) -> None:
    expected, attributes = local_copy
    if kind == "file":
        registry_url = f"file://{registry_dir}"
    elif kind == "http":
        registry_url, _ = served()
    else:
        registry_url = request.getfixturevalue("s3_remote")
        shutil.copytree(registry_dir / DATASET, dataset_dir(DATASET),  # publish from a copy
                        ignore=shutil.ignore_patterns("manifest.json"))
        registry.publish(DATASET, registry_url)
        shutil.rmtree(dataset_dir(DATASET))
    source = mm.open_source(f"{registry_url}/{DATASET}", streaming=True)
    assert isinstance(source, StreamingSource)
    assert source.total_episodes == 12 and source.total_steps == int(
        expected.episode_lengths.sum())
    assert_same(source.read(np.arange(12)), expected)
    episodes = list(source.episodes())
    assert [(e.seed, e.options) for e in episodes] == attributes
    assert [e.id for e in episodes] == list(range(12))


def test_a_cache_folder_that_cannot_be_written_is_read_without(
        local_copy: tuple[MultiAgentArrays, list[Any]], served: Callable[..., tuple[str, Any]],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache folder that cannot be made (a read-only home, a full disk; here a path through
    a file) is no reason to fail a read: the small files go to a folder of the process's own,
    the blocks are not kept, each says so once, and a second pass fetches again."""
    expected, _ = local_copy
    url, handler = served()
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    monkeypatch.setenv("MARL_MINARI_CACHE", str(blocked / "blocks"))
    with pytest.warns(StreamingWarning) as said:
        source = mm.open_source(f"{url}/{DATASET}", streaming=True)
        assert_same(source.read(np.arange(12)), expected)
    messages = [str(warning.message) for warning in said]
    assert sum("metadata and offset index are kept in" in m for m in messages) == 1
    assert sum("block cache" in m and "cannot be written" in m for m in messages) == 1
    assert {warning.filename for warning in said} == {__file__}  # the user's lines
    assert source.local_data_path.is_dir() and blocked.read_text() == ""
    handler.served.clear()
    assert_same(mm.open_source(f"{url}/{DATASET}", streaming=True).read(np.arange(12)),
                expected)
    assert any(path.endswith(layout.MAIN_FILE_NAME) for path, _, _ in handler.served)


def test_load_dataset_streaming_reads_episodes_and_arrays(
        local_copy: tuple[MultiAgentArrays, list[Any]],
        served: Callable[..., tuple[str, Any]]) -> None:
    expected, attributes = local_copy
    url, _ = served()
    dataset = mm.load_dataset(f"{url}/{DATASET}", streaming=True)
    assert isinstance(dataset, StreamingDataset)
    assert len(dataset) == 12 and dataset.possible_agents == expected.possible_agents
    chosen = dataset.to_arrays([3, 7])
    whole = dataset.to_arrays()
    assert_same(whole, expected)
    np.testing.assert_array_equal(chosen.episode_ids, [3, 7])
    for agent in expected.possible_agents:
        starts = np.concatenate([[0], np.cumsum(expected.episode_lengths + 1)])
        np.testing.assert_array_equal(chosen.observations[agent], np.concatenate(
            [expected.observations[agent][starts[i]:starts[i + 1]] for i in (3, 7)]))
    assert (dataset[5].seed, dataset[5].options) == attributes[5]
    assert dataset[-1].id == 11
    assert [e.id for e in dataset.iterate_episodes([2, 9])] == [2, 9]


@pytest.fixture
def larger(record_parallel: Callable[..., Any], registry_dir: Path) -> int:
    """80 episodes published (about 24 blocks); the data file's size."""
    record_parallel("mpe2/simple_spread_v3", 80, max_cycles=25, dataset_id=DATASET)
    registry.publish(DATASET)
    size = (dataset_dir(DATASET) / "data" / layout.MAIN_FILE_NAME).stat().st_size
    assert size > 20 * MIN_BLOCK_SIZE
    return size


def _data_file_requests(served: list[tuple[str, int, int]]) -> list[tuple[int, int]]:
    return [(offset, length) for path, offset, length in served
            if path.endswith(layout.MAIN_FILE_NAME)]


def _opening_blocks(registry_dir: Path, dataset_id: str) -> tuple[int, set[int]]:
    """The data file's block size and the blocks its manifest says opening reads."""
    manifest = json.loads((registry_dir / dataset_id / "manifest.json").read_text())
    entry = next(e for e in manifest["files"] if e["path"].endswith(layout.MAIN_FILE_NAME))
    return entry["block_size"], set(entry["open_blocks"])


def test_only_the_episodes_read_move(larger: int, served: Callable[..., tuple[str, Any]],
                                     registry_dir: Path) -> None:
    url, handler = served()
    source = mm.open_source(f"{url}/{DATASET}", streaming=True)
    assert isinstance(source, StreamingSource)
    opened = len(handler.served)
    source.read([40])
    moved = sum(length for path, _, length in handler.served)
    assert moved < larger / 2, (moved, larger)
    # Opening read the data file only in the blocks its manifest names (open_blocks): none
    # waited for another's bytes, so all went out with the small files.
    size, hinted = _opening_blocks(registry_dir, DATASET)
    opening = _data_file_requests(handler.served[:opened])
    assert opening and {number for offset, length in opening
                        for number in range(offset // size, (offset + length - 1) // size + 1)
                        } <= hinted, (opening, hinted)
    assert len(_data_file_requests(handler.served[opened:])) <= 2


class _SmallFilesTogether(RangeHandler):
    """Answers ``metadata.json`` only once the offset index was asked for too (up to a
    minute: an open that fetches one small file after the other never asks meanwhile)."""

    asked: ClassVar[threading.Event]
    overlapped: ClassVar[list[bool]]

    def send_head(self) -> Any:
        if self.path.endswith(layout.INDEX_FILE_NAME):
            self.asked.set()
        if self.path.endswith(layout.METADATA_FILE_NAME):
            self.overlapped.append(self.asked.wait(60))
        return super().send_head()


def test_opening_fetches_the_small_files_and_the_opening_blocks_together(
        larger: int, served: Callable[..., tuple[str, Any]]) -> None:
    """They all depend on the manifest alone: one round trip after it, not three."""
    url, handler = served(_SmallFilesTogether, asked=threading.Event(), overlapped=[])
    source = mm.open_source(f"{url}/{DATASET}", streaming=True)
    assert handler.overlapped == [True]
    assert len(source.read([3]).episode_ids) == 1


def test_the_blocks_the_index_sample_reads_come_with_the_opening_ones(
        registry_dir: Path, served: Callable[..., tuple[str, Any]]) -> None:
    """Before the first read through the offset index, a reader compares the entries of the
    first, middle and last episodes with HDF5, reading their object headers, which lie in
    blocks of their own in a file of many episodes: the manifest lists them among the blocks
    opening reads, so reading the middle episode asks for its data alone (one request;
    without those blocks, four one after the other)."""
    from gymnasium import spaces
    from marl_strategies import random_episode

    from marl_minari.format.spec import MultiAgentSpec
    from marl_minari.storage.writer import write_dataset

    agents = ["p", "q"]
    obs = {a: spaces.Box(-1, 1, (64,), dtype=np.float32) for a in agents}
    act = {a: spaces.Discrete(3) for a in agents}
    spec = MultiAgentSpec(api="parallel", possible_agents=tuple(agents),
                          observation_spaces=obs, action_spaces=act)
    write_dataset("sampled/many-v0", [random_episode(agents, obs, act, 6, seed)
                                      for seed in range(240)], spec)
    registry.publish("sampled/many-v0")
    shutil.rmtree(dataset_dir("sampled/many-v0"))
    size, hinted = _opening_blocks(registry_dir, "sampled/many-v0")
    assert len(hinted) > 4
    url, handler = served()
    source = mm.open_source(f"{url}/sampled/many-v0", streaming=True)
    opened = len(handler.served)
    source.read([120])
    assert len(_data_file_requests(handler.served[opened:])) <= 1


@pytest.mark.parametrize("memory_blocks", [1024, 6])
def test_a_full_pass_fetches_its_blocks_together_before_comparing_the_index(
        larger: int, served: Callable[..., tuple[str, Any]], monkeypatch: pytest.MonkeyPatch,
        memory_blocks: int) -> None:
    """Before the index entries of a read are compared with HDF5, the blocks of its leaves
    come in a few coalesced requests (half the blocks kept in memory at a time), so the
    comparisons' metadata reads (object headers beside the data) do not fetch block after
    block, one dependent request each."""
    expected = mm.load_dataset(DATASET).to_arrays()
    url, handler = served()
    compared = count_entry_checks(monkeypatch, forget=True)
    source = mm.open_source(f"{url}/{DATASET}", streaming=True, stream_settings=StreamSettings(
        memory_bytes=memory_blocks * MIN_BLOCK_SIZE))
    assert isinstance(source, StreamingSource)
    opened = len(handler.served)
    assert_same(source.read(source.episode_indices), expected)
    assert compared  # every entry is still compared
    blocks = -(-larger // MIN_BLOCK_SIZE)
    requests = [p for p, _, _ in handler.served[opened:] if p.endswith(".hdf5")]
    assert len(requests) <= (blocks // 4 if memory_blocks > blocks else blocks), \
        (len(requests), blocks)


def test_a_full_pass_compares_the_index_while_its_blocks_are_written_to_the_cache(
        larger: int, served: Callable[..., tuple[str, Any]], monkeypatch: pytest.MonkeyPatch,
        block_cache: Path) -> None:
    """The blocks a bulk read fetched go to the disk cache on the cache writer's thread while
    the offset index is compared, and the read returns once every one is written."""
    expected = mm.load_dataset(DATASET).to_arrays()
    url, _ = served()
    writing = threading.Event()
    writing.set()
    real_put = BlockCache.put_verified

    def gated_put(self: BlockCache, *args: Any) -> None:  # slow, and held during the reads
        assert writing.wait(60), "the comparisons waited for the cache writes"
        time.sleep(0.3)
        real_put(self, *args)

    monkeypatch.setattr(BlockCache, "put_verified", gated_put)
    count_entry_checks(monkeypatch, forget=True)
    source = mm.open_source(f"{url}/{DATASET}", streaming=True)
    assert isinstance(source, StreamingSource)
    pinned = source.remote_file.pinned_digest
    key = str(StreamSettings().cache().pack_folder(pinned))
    assert CACHE_WRITES.pending(key) == 0  # the open's blocks are written when it returns
    writing.clear()
    pending_at_comparison: list[int] = []
    real_compare = entry_checks.compare_leaves

    def comparing(*args: Any) -> Any:
        pending_at_comparison.append(CACHE_WRITES.pending(key))
        writing.set()
        return real_compare(*args)

    monkeypatch.setattr(entry_checks, "compare_leaves", comparing)
    assert_same(source.read(source.episode_indices), expected)
    assert pending_at_comparison and pending_at_comparison[0] > 0
    assert CACHE_WRITES.pending(key) == 0
    assert cached_block_numbers(block_cache, pinned) == set(range(-(-larger // MIN_BLOCK_SIZE)))


def test_a_tampered_block_names_the_range_and_other_episodes_stay_readable(
        larger: int, registry_dir: Path, block_cache: Path) -> None:
    expected = mm.load_dataset(DATASET).to_arrays()
    remote = f"file://{registry_dir}"
    source = mm.open_source(f"{remote}/{DATASET}", streaming=True)
    assert isinstance(source, StreamingSource)
    source.read([0])
    with np.load(registry_dir / DATASET / "data" / layout.INDEX_FILE_NAME) as stored:
        header = json.loads(stored["header"].tobytes())
        offsets = stored[f"o{header['paths'].index('observations/agent_0')}"]
    fetched = cached_block_numbers(block_cache)
    untouched = [e for e in range(80) if int(offsets[e]) // MIN_BLOCK_SIZE not in fetched]
    victim, other = untouched[0], untouched[-1]
    assert int(offsets[victim]) // MIN_BLOCK_SIZE != int(offsets[other]) // MIN_BLOCK_SIZE
    published = registry_dir / DATASET / "data" / layout.MAIN_FILE_NAME
    data = bytearray(published.read_bytes())
    data[int(offsets[victim]) + 3] ^= 0xFF
    published.write_bytes(bytes(data))
    with pytest.raises(CorruptedDataError, match=rf"bytes \d+-\d+ \(block \d+\) from mirror "
                                                 rf"{remote}"):
        source.read([victim])
    starts = np.concatenate([[0], np.cumsum(expected.episode_lengths + 1)])
    for episode in (0, other):
        np.testing.assert_array_equal(
            source.read([episode]).observations["agent_0"],
            expected.observations["agent_0"][starts[episode]:starts[episode + 1]])


def test_a_streaming_source_pickles_without_its_bytes(
        local_copy: tuple[MultiAgentArrays, list[Any]],
        served: Callable[..., tuple[str, Any]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    expected, _ = local_copy
    url, _ = served()
    source = mm.open_source(f"{url}/{DATASET}", streaming=True)
    source.read([0])
    payload = pickle.dumps(source)
    assert len(payload) < 64 * 1024
    monkeypatch.setenv("MARL_MINARI_CACHE", str(tmp_path / "elsewhere" / "blocks"))
    copy = pickle.loads(payload)  # a worker with an empty cache fetches for itself
    assert_same(copy.read(np.arange(12)), expected)
    assert copy.remote_file.counts.bytes > 0


def test_subsample_moves_only_the_chosen_episodes(
        local_copy: tuple[MultiAgentArrays, list[Any]],
        served: Callable[..., tuple[str, Any]]) -> None:
    expected, _ = local_copy
    url, _ = served()
    subset = mm.subsample(mm.open_source(f"{url}/{DATASET}", streaming=True),
                          "mpe2/spread/subset-v0", max_steps=60, seed=3)
    record = subset.metadata["subset"]
    assert record["source_name"] == f"{url}/{DATASET}"
    ids = record["episode_ids"]
    assert 0 < len(ids) < 12
    got = subset.to_arrays()
    np.testing.assert_array_equal(got.episode_lengths, expected.episode_lengths[ids])
    assert not dataset_dir(DATASET).exists()


def test_describe_and_make_buffer_mix_remote_and_local(
        local_copy: tuple[MultiAgentArrays, list[Any]], record_parallel: Callable[..., Any],
        served: Callable[..., tuple[str, Any]]) -> None:
    pytest.importorskip("flashbax")
    url, _ = served()
    remote = mm.open_source(f"{url}/{DATASET}", streaming=True)
    description = mm.describe(remote)
    assert description.total_episodes == 12
    record_parallel("mpe2/simple_spread_v3", 3, max_cycles=25, dataset_id="mpe2/spread/local-v0")
    from marl_minari.adapters import make_buffer

    buffer, state = make_buffer([remote, "mpe2/spread/local-v0"], sample_batch_size=4,
                                sample_sequence_length=5, weights=[0.5, 0.5])
    assert buffer is not None and state is not None


def test_make_buffer_reads_a_streamed_state_straight_into_the_buffer(
        local_copy: tuple[MultiAgentArrays, list[Any]],
        served: Callable[..., tuple[str, Any]]) -> None:
    # The recorded state goes from the fetched blocks into the buffer's rows, each episode's
    # final row left out, as from a local file.
    pytest.importorskip("flashbax")
    from marl_minari.adapters import make_buffer

    from marl_minari.vaults.step_rows import StepRows

    expected, _ = local_copy
    assert expected.state is not None
    url, _ = served()
    _, state = make_buffer([mm.open_source(f"{url}/{DATASET}", streaming=True)],
                           sample_batch_size=2, sample_sequence_length=2, chunk_steps=40)
    rows = StepRows(expected.episode_lengths, expected.obs_rows)
    np.testing.assert_array_equal(np.asarray(state.experience["infos"]["state"])[0],
                                  rows.take(expected.state))


def test_streaming_a_missing_dataset_says_so(registry_dir: Path, streamable: Path,
                                             served: Callable[..., tuple[str, Any]]) -> None:
    url, _ = served()
    with pytest.raises(DatasetNotFoundError):
        mm.open_source(f"{url}/mpe2/spread/absent-v0", streaming=True)


def test_to_vault_reads_a_streaming_source(local_copy: tuple[MultiAgentArrays, list[Any]],
                                           served: Callable[..., tuple[str, Any]],
                                           tmp_path: Path) -> None:
    pytest.importorskip("flashbax")
    from marl_minari.adapters import to_vault

    expected, _ = local_copy
    url, _ = served()
    to_vault(mm.open_source(f"{url}/{DATASET}", streaming=True), rel_dir=tmp_path / "vaults",
             vault_name="streamed", vault_uid="Good")
    back = mm.open_source(tmp_path / "vaults" / "streamed" / "Good")
    assert back.total_steps == int(expected.episode_lengths.sum())


def test_a_uniform_subset_moves_only_the_episodes_it_keeps(
        larger: int, served: Callable[..., tuple[str, Any]]) -> None:
    url, handler = served()
    subset = mm.subsample(mm.open_source(f"{url}/{DATASET}", streaming=True),
                          "mpe2/spread/small-v0", max_steps=50, seed=1)
    assert subset.total_episodes == 2
    moved = sum(length for path, _, length in handler.served if path.endswith(".hdf5"))
    assert moved < larger / 2, (moved, larger)  # opening alone reads about a fifth here


def test_a_streaming_warning_names_the_users_line_whichever_door_reached_it(
        local_copy: tuple[MultiAgentArrays, list[Any]], registry_dir: Path,
        served: Callable[..., tuple[str, Any]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The warning of a file published without range digests is made deep in the reader,
    reached through several doors at several depths; each attributes it to the caller's
    line (``-W error`` and filters by module then see the user's code, not the reader's)."""
    drop_range_digests(registry_dir, DATASET)
    url = f"{served()[0]}/{DATASET}"
    doors: dict[str, Callable[[], object]] = {
        "load_dataset": lambda: mm.load_dataset(url, streaming=True)[0],
        "open_source": lambda: mm.open_source(url, streaming=True).read(np.arange(2)),
        "describe": lambda: mm.describe(mm.open_source(url, streaming=True)),
    }
    for name, door in doors.items():
        monkeypatch.setenv("MARL_MINARI_CACHE", str(tmp_path / name))  # downloaded again
        with pytest.warns(StreamingWarning, match="without range digests") as said:
            door()
        assert [(name, w.filename) for w in said] == [(name, __file__)]


class _StallingHandler(RangeHandler):
    """Once ``stalled[0]`` is set, answers nothing for ``main_data.hdf5`` (a stalled
    mirror: the connection stays open), counting those requests."""

    stalled: ClassVar[list[bool]] = [False]
    unanswered: ClassVar[list[str]] = []

    def send_head(self) -> Any:
        if self.stalled[0] and self.path.endswith(layout.MAIN_FILE_NAME):
            with self.lock:
                self.unanswered.append(self.headers.get("Range", ""))
            time.sleep(30)
            self.close_connection = True
            return None
        return super().send_head()


def test_a_read_from_a_stalled_mirror_waits_out_one_deadline(
        larger: int, served: Callable[..., tuple[str, Any]], tmp_path: Path) -> None:
    """HDF5 takes a failed read for a missing object and reads on; each read waited out a
    deadline of its own (two here: 2 x http_timeout for one episode)."""
    shutil.rmtree(dataset_dir(DATASET))  # what streams can only come from the mirror
    url, handler = served(_StallingHandler, stalled=[False], unanswered=[])
    source = mm.open_source(f"{url}/{DATASET}", streaming=True, stream_settings=StreamSettings(
        cache_dir=tmp_path / "blocks", memory_bytes=0,
        remote=registry.RemoteSettings(http_timeout=1.0)))
    handler.stalled[0] = True
    with pytest.raises(mm.RemoteError, match="did not finish within 1.0 s"):
        source.read([20])  # in blocks the open did not fetch
    assert len(handler.unanswered) == 1
    handler.stalled[0] = False
    assert source.read([20]).episode_ids.tolist() == [20]  # the next operation asks again


def test_a_streaming_source_checks_the_ids_it_is_given(streamable: Path, registry_dir: Path
                                                       ) -> None:
    source = mm.open_source(f"file://{registry_dir}/{DATASET}", streaming=True)
    with pytest.raises(mm.InvalidOptionError, match=r"integers, got float64 values \[1.5\]"):
        source.read([1.5])
    with pytest.raises(mm.EpisodeIndexError, match=r"must lie in 0..11, got \[12\]"):
        source.episode_attributes([12])
    dataset = mm.load_dataset(f"file://{registry_dir}/{DATASET}", streaming=True)
    with pytest.raises(mm.InvalidOptionError, match="one integer position"):
        dataset[0.0]
    with pytest.raises(mm.InvalidOptionError, match="np.flatnonzero"):
        dataset.to_arrays(np.ones(12, dtype=bool))
