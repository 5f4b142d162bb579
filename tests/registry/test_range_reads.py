"""Range digests at publish, and published files read in place by verified byte ranges
(``registry.remote_file``) from real servers on 127.0.0.1: a static server honouring
``Range``, Python's ``http.server`` (which ignores it), moto's S3, and lying, truncating and
slow mirrors."""

from __future__ import annotations

import pickle
import random
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import h5py
import numpy as np
import pytest
from marl_minari.registry.backend import RangesIgnored
from marl_minari.registry.block_cache import BlockCache
from marl_minari.registry.blocks import MIN_BLOCK_SIZE
from marl_minari.registry.remote_file import (
    RemoteFile,
    StreamSettings,
    open_remote_file,
    read_whole,
)
from marl_minari.registry.settings import RemoteSettings
from marl_minari.registry.stream_warnings import StreamingWarning
from range_servers import (
    LyingHandler,
    RangeHandler,
    TricklingHandler,
    TruncatingHandler,
    range_handler,
)
from registry_helpers import cached_block_numbers, drop_range_digests, pack_files

from marl_minari import registry
from marl_minari.errors import CorruptedDataError, RemoteError
from marl_minari.format.ids import dataset_dir
from marl_minari.storage.byte_ranges import ByteRanges, RangesFile

DATASET = "mpe2/spread/streamed-v0"
MAIN = "data/main_data.hdf5"


@pytest.fixture
def settings(tmp_path: Path) -> StreamSettings:
    return StreamSettings(cache_dir=tmp_path / "cache", cache_bytes=1 << 30)


def some_ranges(size: int, count: int = 20, seed: int = 0) -> list[tuple[int, int]]:
    rng = random.Random(seed)
    ranges = []
    for _ in range(count):
        offset = rng.randrange(size)
        ranges.append((offset, rng.randrange(min(size - offset, 3 * MIN_BLOCK_SIZE) + 1)))
    return [*ranges, (0, size), (size, 0)]


# ---------------------------------------------------------------------- reading ranges
@pytest.fixture
def range_server(thread_server: Callable[[Path, type[Any]], str], registry_dir: Path
                 ) -> Callable[..., tuple[str, type[RangeHandler]]]:
    """``serve(base, **attributes)`` -> ``(url, handler class)`` serving the registry."""

    def serve(base: type[RangeHandler] = RangeHandler, **attributes: Any
              ) -> tuple[str, type[RangeHandler]]:
        handler = range_handler(f"Test{base.__name__}", base, **attributes)
        return thread_server(registry_dir, handler), handler

    return serve


@pytest.mark.parametrize("kind", ["file", "http", "s3"])
def test_ranges_read_in_place_equal_the_published_bytes(
        kind: str, streamable: Path, registry_dir: Path, settings: StreamSettings,
        range_server: Callable[..., tuple[str, type[RangeHandler]]],
        request: pytest.FixtureRequest) -> None:
    if kind == "file":
        remote = f"file://{registry_dir}"
    elif kind == "http":
        remote, _ = range_server()
    else:
        remote = request.getfixturevalue("s3_remote")
        registry.publish(DATASET, remote)
    data = streamable.read_bytes()
    source = open_remote_file(remote, DATASET, settings=settings)
    assert isinstance(source, ByteRanges)
    assert source.size == len(data) and source.name.endswith(f"{DATASET}/{MAIN}")
    ranges = some_ranges(len(data))
    got = source.read_ranges(ranges)
    assert [bytes(piece) for piece in got] == [data[o:o + n] for o, n in ranges]
    assert source.counts.bytes == len(data)  # each block fetched once, then cached
    again = open_remote_file(remote, DATASET, settings=settings)
    assert [bytes(p) for p in again.read_ranges(ranges)] == [data[o:o + n] for o, n in ranges]
    assert again.counts.bytes == 0  # the second pass reads the verified disk cache


def test_one_range_moves_only_its_blocks(streamable: Path, settings: StreamSettings,
                                         range_server: Callable[..., tuple[str, Any]]
                                         ) -> None:
    url, handler = range_server()
    source = open_remote_file(url, DATASET, settings=settings)
    handler.served.clear()
    (piece,) = source.read_ranges([(2 * MIN_BLOCK_SIZE + 10, 100)])
    assert bytes(piece) == streamable.read_bytes()[2 * MIN_BLOCK_SIZE + 10:][:100]
    assert handler.served == [(f"/{DATASET}/{MAIN}", 2 * MIN_BLOCK_SIZE, MIN_BLOCK_SIZE)]


def test_adjacent_blocks_are_coalesced_up_to_the_request_cap(
        streamable: Path, tmp_path: Path,
        range_server: Callable[..., tuple[str, Any]]) -> None:
    url, handler = range_server()
    size = streamable.stat().st_size
    blocks = -(-size // MIN_BLOCK_SIZE)
    for cap, requests in ((1 << 30, 1), (MIN_BLOCK_SIZE, blocks), (2 * MIN_BLOCK_SIZE,
                                                                  -(-blocks // 2))):
        source = open_remote_file(url, DATASET, settings=StreamSettings(
            cache_dir=tmp_path / f"cache-{cap}", max_request_bytes=cap))
        handler.served.clear()
        (whole,) = source.read_ranges([(0, size)])
        assert bytes(whole) == streamable.read_bytes()
        assert len(handler.served) == source.counts.requests == requests


def test_h5py_opens_the_data_file_in_place(streamable: Path, settings: StreamSettings,
                                           range_server: Callable[..., tuple[str, Any]]
                                           ) -> None:
    url, _ = range_server()
    source = open_remote_file(url, DATASET, settings=settings)
    with h5py.File(RangesFile(source), "r") as remote, h5py.File(streamable, "r") as local:
        assert sorted(remote) == sorted(local)
        name = "episode_7/rewards"
        np.testing.assert_array_equal(remote[name][()], local[name][()])
    assert source.counts.bytes < streamable.stat().st_size


def test_a_lying_mirror_is_named_and_nothing_unverified_is_kept(
        streamable: Path, settings: StreamSettings,
        range_server: Callable[..., tuple[str, Any]]) -> None:
    data = streamable.read_bytes()
    url, _ = range_server(LyingHandler, flip_at=2 * MIN_BLOCK_SIZE + 5)
    source = open_remote_file(url, DATASET, settings=settings)
    with pytest.raises(CorruptedDataError) as caught:
        source.read_ranges([(MIN_BLOCK_SIZE, 2 * MIN_BLOCK_SIZE)])  # blocks 1 and 2
    message = str(caught.value)
    assert f"{url}/{DATASET}/{MAIN}" in message
    assert f"bytes {2 * MIN_BLOCK_SIZE}-{3 * MIN_BLOCK_SIZE - 1} (block 2)" in message
    assert f"mirror {url}" in message
    assert cached_block_numbers(settings.cache().folder) == {1}
    # the rest of the file stays readable, block 1 from the cache
    before = source.counts.bytes
    got = source.read_ranges([(0, 100), (MIN_BLOCK_SIZE, 10), (3 * MIN_BLOCK_SIZE, 50)])
    assert [bytes(p) for p in got] == [data[:100], data[MIN_BLOCK_SIZE:][:10],
                                       data[3 * MIN_BLOCK_SIZE:][:50]]
    assert source.counts.bytes - before == 2 * MIN_BLOCK_SIZE  # blocks 0 and 3 only
    with pytest.raises(CorruptedDataError, match="block 2"):
        source.read_ranges([(2 * MIN_BLOCK_SIZE + 5, 1)])


def test_a_truncated_mirror_is_corrupted_data(streamable: Path, settings: StreamSettings,
                                              range_server: Callable[..., tuple[str, Any]]
                                              ) -> None:
    url, _ = range_server(TruncatingHandler, stop_at=3 * MIN_BLOCK_SIZE + 7)
    source = open_remote_file(url, DATASET, settings=settings)
    with pytest.raises(CorruptedDataError, match=r"block 3\) from mirror .*only 7 of its"):
        source.read_ranges([(0, streamable.stat().st_size)])
    assert cached_block_numbers(settings.cache().folder) == {0, 1, 2}  # verified
    assert [p.name for p in pack_files(settings.cache().folder)] == ["0-3"]  # one pack


def test_a_read_of_the_cache_waits_for_the_writes_of_a_prefetch(
        streamable: Path, settings: StreamSettings, monkeypatch: pytest.MonkeyPatch,
        range_server: Callable[..., tuple[str, Any]]) -> None:
    """A prefetch leaves its blocks' cache writes to the cache writer (here slowed down);
    another reader of the same file in the process waits for them and reads the cache."""
    real_put = BlockCache.put_verified

    def slow_put(self: BlockCache, *args: Any) -> None:
        time.sleep(0.3)
        real_put(self, *args)

    monkeypatch.setattr(BlockCache, "put_verified", slow_put)
    data = streamable.read_bytes()
    url, _ = range_server()
    first = open_remote_file(url, DATASET, settings=settings)
    first.prefetch_ranges([(0, len(data))])
    again = open_remote_file(url, DATASET, settings=settings)
    assert bytes(again.read_ranges([(0, len(data))])[0]) == data
    assert again.counts.requests == 0
    assert cached_block_numbers(settings.cache().folder) == set(
        range(-(-len(data) // MIN_BLOCK_SIZE)))


def test_a_slow_mirror_ends_at_the_deadline(streamable: Path, tmp_path: Path,
                                            range_server: Callable[..., tuple[str, Any]]
                                            ) -> None:
    url, _ = range_server(TricklingHandler)
    source = open_remote_file(url, DATASET, settings=StreamSettings(
        cache_dir=tmp_path / "cache",
        remote=RemoteSettings(http_timeout=1.0, min_download_rate=1_000_000)))
    with pytest.raises(RemoteError, match="deadline"):
        source.read_ranges([(0, 10)])
    assert not cached_block_numbers(tmp_path / "cache")


def test_a_server_ignoring_range_falls_back_to_a_verified_whole_file(
        streamable: Path, registry_dir: Path, settings: StreamSettings,
        http_server: Callable[[Path], str], caplog: pytest.LogCaptureFixture) -> None:
    url = http_server(registry_dir)  # python -m http.server answers 200 to every Range
    data = streamable.read_bytes()
    source = open_remote_file(url, DATASET, settings=settings)
    with pytest.warns(StreamingWarning, match="ignores HTTP Range requests") as said:
        got = source.read_ranges([(MIN_BLOCK_SIZE, 10), (5, 5)])
    assert [warning.filename for warning in said] == [__file__]  # the line that read
    # said once, as the warning: a log line too would print it twice where logging is not
    # set up (Python's last-resort handler writes it to stderr beside the warning)
    assert not [record for record in caplog.records if "Range" in record.getMessage()]
    assert [bytes(p) for p in got] == [data[MIN_BLOCK_SIZE:][:10], data[5:10]]
    assert source.counts.whole_downloads == 1
    assert bytes(source.read_ranges([(0, len(data))])[0]) == data
    assert source.counts.whole_downloads == 1
    again = open_remote_file(url, DATASET, settings=settings)
    assert bytes(again.read_ranges([(7, 3)])[0]) == data[7:10]
    assert again.counts.bytes == 0  # the verified whole file is in the cache
    # a bulk read's windows from the copy: each byte once, though the ranges overlap
    windows = [(offset, bytes(window)) for offset, window
               in again.read_windows([(100, 50), (120, 50), (170, 5), (900, 10)])]
    assert windows == [(100, data[100:175]), (900, data[900:910])]


def test_a_whole_file_fallback_needs_no_writable_cache(
        streamable: Path, registry_dir: Path, tmp_path: Path,
        http_server: Callable[[Path], str]) -> None:
    """A server ignoring Range, and a cache folder that cannot be made: the whole-file copy
    is verified in a temporary file of its own, read from, and deleted when closed."""
    url = http_server(registry_dir)
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    data = streamable.read_bytes()
    source = open_remote_file(url, DATASET,
                              settings=StreamSettings(cache_dir=blocked / "cache"))
    with pytest.warns(StreamingWarning) as said:
        got = source.read_ranges([(MIN_BLOCK_SIZE, 10), (5, 5)])
    assert [bytes(p) for p in got] == [data[MIN_BLOCK_SIZE:][:10], data[5:10]]
    assert any("ignores HTTP Range" in str(w.message) for w in said)
    assert any("cannot be written" in str(w.message) for w in said)
    copy = source._whole_temporary
    assert copy is not None and copy.is_file() and blocked.read_text() == ""
    source.close()
    assert not copy.exists()


def test_a_server_ignoring_range_serves_small_files_as_asked(
        streamable: Path, registry_dir: Path, settings: StreamSettings,
        http_server: Callable[[Path], str]) -> None:
    """A range asking for a whole file is answered by a 200 too: those are the bytes asked,
    so a small file needs neither the whole-file fallback nor its warning; any other range
    answered 200 is still a server ignoring ranges."""
    url = http_server(registry_dir)
    metadata = (dataset_dir(DATASET) / "data/metadata.json").read_bytes()
    source = open_remote_file(url, DATASET, "data/metadata.json", settings=settings)
    with warnings.catch_warnings():
        warnings.simplefilter("error", StreamingWarning)
        assert read_whole(source) == metadata
    assert source.counts.whole_downloads == 0
    backend = registry.open_backend(url)
    key = f"{DATASET}/data/metadata.json"
    assert bytes(backend.read_range(key, 0, len(metadata))) == metadata
    for offset, length in [(1, len(metadata)), (0, len(metadata) - 1), (0, len(metadata) + 1)]:
        with pytest.raises(RangesIgnored):
            backend.read_range(key, offset, length)


def test_a_dataset_published_before_range_digests_is_verified_whole_first(
        streamable: Path, registry_dir: Path, settings: StreamSettings,
        range_server: Callable[..., tuple[str, Any]]) -> None:
    drop_range_digests(registry_dir, DATASET)
    url, _ = range_server()
    data = streamable.read_bytes()
    source = open_remote_file(url, DATASET, settings=settings)
    with pytest.warns(StreamingWarning, match=r"without range digests.*-vN\+1"):
        assert bytes(source.read_ranges([(100, 50)])[0]) == data[100:150]
    # a tampered old-format file is refused whole, and nothing of it is kept
    (registry_dir / DATASET / MAIN).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    fresh = StreamSettings(cache_dir=settings.cache_dir.parent / "fresh")  # type: ignore[union-attr]
    tampered = open_remote_file(url, DATASET, settings=fresh)
    with pytest.warns(StreamingWarning), pytest.raises(CorruptedDataError, match="modified"):
        tampered.read_ranges([(0, 1)])
    assert not list(fresh.cache().folder.iterdir())


def test_small_files_are_verified_whole(streamable: Path, registry_dir: Path,
                                        settings: StreamSettings,
                                        range_server: Callable[..., tuple[str, Any]]) -> None:
    url, _ = range_server()
    metadata = dataset_dir(DATASET) / "data/metadata.json"
    assert read_whole(open_remote_file(url, DATASET, "data/metadata.json",
                                       settings=settings)) == metadata.read_bytes()
    (registry_dir / DATASET / "data/metadata.json").write_bytes(b"{}" + b" " * 100)
    fresh = StreamSettings(cache_dir=settings.cache_dir.parent / "fresh")  # type: ignore[union-attr]
    with pytest.raises(CorruptedDataError, match="data/metadata.json"):
        read_whole(open_remote_file(url, DATASET, "data/metadata.json", settings=fresh))


def test_ranges_past_the_end_are_refused(streamable: Path, registry_dir: Path,
                                         settings: StreamSettings) -> None:
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    with pytest.raises(CorruptedDataError, match="reaches past"):
        source.read_ranges([(source.size - 1, 2)])


def test_the_cache_keeps_to_its_budget(streamable: Path, registry_dir: Path,
                                       tmp_path: Path) -> None:
    budget = 2 * MIN_BLOCK_SIZE
    settings = StreamSettings(cache_dir=tmp_path / "small", cache_bytes=budget)
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    assert bytes(source.read_ranges([(0, source.size)])[0]) == streamable.read_bytes()
    assert sum(p.stat().st_size for p in (tmp_path / "small").rglob("*")
               if p.is_file()) <= budget


def test_a_damaged_cache_entry_is_fetched_again(streamable: Path, registry_dir: Path,
                                                settings: StreamSettings) -> None:
    remote = f"file://{registry_dir}"
    open_remote_file(remote, DATASET, settings=settings).read_ranges([(0, 10)])
    (entry,) = pack_files(settings.cache().folder)
    entry.write_bytes(b"\x00" * entry.stat().st_size)
    source = open_remote_file(remote, DATASET, settings=settings)
    assert bytes(source.read_ranges([(0, 10)])[0]) == streamable.read_bytes()[:10]
    assert source.counts.bytes == MIN_BLOCK_SIZE


def test_a_cache_entry_of_another_length_is_fetched_again(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    """An entry whose first bytes are the block's but which goes on is not the block."""
    remote = f"file://{registry_dir}"
    open_remote_file(remote, DATASET, settings=settings).read_ranges([(0, 10)])
    (entry,) = pack_files(settings.cache().folder)
    with open(entry, "ab") as out:
        out.write(b"more")
    source = open_remote_file(remote, DATASET, settings=settings)
    assert bytes(source.read_ranges([(0, 10)])[0]) == streamable.read_bytes()[:10]
    assert source.counts.bytes == MIN_BLOCK_SIZE
    assert entry.stat().st_size == MIN_BLOCK_SIZE


def test_a_pickled_supplier_fetches_for_itself(streamable: Path, settings: StreamSettings,
                                               range_server: Callable[..., tuple[str, Any]]
                                               ) -> None:
    url, _ = range_server()
    source = open_remote_file(url, DATASET, settings=settings)
    source.read_ranges([(0, 10)])
    copy: RemoteFile = pickle.loads(pickle.dumps(source))
    assert len(pickle.dumps(source)) < 2 * MIN_BLOCK_SIZE  # no bytes travel with it
    assert copy.name == source.name
    assert bytes(copy.read_ranges([(3 * MIN_BLOCK_SIZE, 4)])[0]) == (
        streamable.read_bytes()[3 * MIN_BLOCK_SIZE:][:4])


def test_credentials_never_reach_messages(streamable: Path, settings: StreamSettings,
                                          range_server: Callable[..., tuple[str, Any]]) -> None:
    url, _ = range_server(LyingHandler, flip_at=0)
    secret_url = url.replace("http://", "http://reader:s3cr3t-pw@")
    source = open_remote_file(secret_url, DATASET, settings=settings)
    assert "s3cr3t" not in source.name
    with pytest.raises(CorruptedDataError) as caught:
        source.read_ranges([(0, 1)])
    assert "s3cr3t" not in str(caught.value) and "reader" not in str(caught.value)


def test_an_answer_for_another_range_is_refused(streamable: Path, settings: StreamSettings,
                                                range_server: Callable[..., tuple[str, Any]]
                                                ) -> None:
    url, _ = range_server(shift=1)
    source = open_remote_file(url, DATASET, settings=settings)
    with pytest.raises(RemoteError, match=r"bytes=0-65535\) answered HTTP 206 with "
                                          r"Content-Range 'bytes 1-65536/"):
        source.read_ranges([(0, 10)])


def test_cached_blocks_are_read_into_buffers_of_at_most_the_size_asked(
        tmp_path: Path) -> None:
    """A read's cached blocks are read run by run from their packs into a few shared buffers
    (copied out of by the thousand), none over the size asked (a block kept in memory keeps
    its buffer), and a block the cache does not hold leaves no hole in one."""
    from marl_minari.registry.block_cache import BlockCache
    from marl_minari.registry.blocks import Block

    contents = [bytes([number]) * 1000 for number in range(5)]
    blocks = [Block(number, number * 1000, 1000, "blake3",
                    blake3.blake3(data).hexdigest()) for number, data in enumerate(contents)]
    cache = BlockCache(tmp_path / "blocks", 1 << 20)
    cache.put_run("k" * 64, blocks[:1], contents[0])  # block 1 is not cached
    cache.put_run("k" * 64, blocks[2:], b"".join(contents[2:]))
    found = BlockCache(tmp_path / "blocks", 1 << 20).read_blocks("k" * 64, blocks, blocks, 2000)
    assert {number: bytes(view) for number, view in found.items()} == {
        number: contents[number] for number in (0, 2, 3, 4)}
    assert found[2].obj is found[3].obj is not found[4].obj
    assert found[0].obj is not found[2].obj
    assert all(np.frombuffer(view.obj, dtype=np.uint8).size <= 2000 for view in found.values())
    assert bytes(found[2].obj) == contents[2] + contents[3]


# ---------------------------------------------------------------------- gathering rows
def _row_addresses(size: int, length: int, seed: int = 0) -> np.ndarray:
    """Random rows, and rows across every block boundary and at the file's last byte."""
    rng = np.random.default_rng(seed)
    edges = np.arange(MIN_BLOCK_SIZE, size - length, MIN_BLOCK_SIZE) - length // 2
    return np.concatenate([rng.integers(0, size - length + 1, 200), edges, [size - length]])


@pytest.mark.parametrize("request_bytes", [1 << 30, MIN_BLOCK_SIZE])
@pytest.mark.parametrize("length", [1, 16, 300, MIN_BLOCK_SIZE])
def test_rows_gathered_in_place_equal_the_published_bytes(
        streamable: Path, registry_dir: Path, tmp_path: Path, length: int,
        request_bytes: int) -> None:
    """Blocks fetched in one run (rows over a boundary lie in one buffer) or one request
    each (every row over a boundary is read by ranges)."""
    data = np.frombuffer(streamable.read_bytes(), dtype=np.uint8)
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=StreamSettings(
        cache_dir=tmp_path / "cache", max_request_bytes=request_bytes))
    addresses = _row_addresses(len(data), length)
    rows = source.read_rows(addresses, length)
    assert rows.shape == (len(addresses), length) and rows.dtype == np.uint8
    assert (rows == data[addresses[:, None] + np.arange(length)]).all()
    assert source.counts.bytes == len(data)  # each block fetched once
    assert (source.read_rows(addresses[::-1], length) == rows[::-1]).all()
    assert source.counts.bytes == len(data)  # then gathered from memory


def test_a_gather_beyond_the_memory_budget_fetches_each_block_once(
        streamable: Path, registry_dir: Path, tmp_path: Path) -> None:
    """Blocks memory cannot hold together are read by ranges, not fetched, dropped and
    fetched again (no disk cache here to read them back from)."""
    data = np.frombuffer(streamable.read_bytes(), dtype=np.uint8)
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=StreamSettings(
        cache_dir=tmp_path / "cache", cache_bytes=0, memory_bytes=MIN_BLOCK_SIZE))
    addresses = np.arange(10, len(data) - 16, MIN_BLOCK_SIZE)  # one row in each block
    rows = source.read_rows(addresses, 16)
    assert (rows == data[addresses[:, None] + np.arange(16)]).all()
    assert source.counts.bytes == len(data)


def test_a_gather_from_a_lying_mirror_names_the_block(
        streamable: Path, settings: StreamSettings,
        range_server: Callable[..., tuple[str, Any]]) -> None:
    url, _ = range_server(LyingHandler, flip_at=2 * MIN_BLOCK_SIZE + 5)
    source = open_remote_file(url, DATASET, settings=settings)
    with pytest.raises(CorruptedDataError, match=r"\(block 2\)") as caught:
        source.read_rows(np.array([10, 2 * MIN_BLOCK_SIZE]), 8)
    assert source.failure is caught.value  # as a read HDF5 made would report it
    data = streamable.read_bytes()
    assert bytes(source.read_rows(np.array([10]), 8)[0]) == data[10:18]


def test_rows_past_the_end_are_refused(streamable: Path, registry_dir: Path,
                                       settings: StreamSettings) -> None:
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    with pytest.raises(CorruptedDataError, match="reaches past"):
        source.read_rows(np.array([0, source.size - 4]), 8)
    with pytest.raises(CorruptedDataError, match="reaches past"):
        source.read_rows(np.array([-1]), 8)
    assert source.counts.bytes == 0  # refused before any block is fetched
    assert source.read_rows(np.array([], dtype=np.int64), 8).shape == (0, 8)


def test_a_row_longer_than_a_block_never_spans_an_unverified_one(
        streamable: Path, settings: StreamSettings,
        range_server: Callable[..., tuple[str, Any]]) -> None:
    """Blocks 1 and 3 kept as views of the run that also brought a bad block 2: a row from
    block 1 to block 3 lies in that one buffer, but is read by verified ranges."""
    url, _ = range_server(LyingHandler, flip_at=2 * MIN_BLOCK_SIZE + 5)
    source = open_remote_file(url, DATASET, settings=settings)
    with pytest.raises(CorruptedDataError, match=r"\(block 2\)"):
        source.read_ranges([(MIN_BLOCK_SIZE, 3 * MIN_BLOCK_SIZE)])
    with pytest.raises(CorruptedDataError, match=r"\(block 2\)"):
        source.read_rows(np.array([MIN_BLOCK_SIZE]), 3 * MIN_BLOCK_SIZE)
