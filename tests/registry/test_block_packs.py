"""The block cache's packs: verified adjacent blocks of one file stored as one file, read
with one ``preadv`` and checked block by block in the reading process; every way a pack can
be wrong on disk ends with the pack deleted and its blocks fetched again, never trusted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import blake3
import pytest
from marl_minari.registry import block_cache as block_cache_module
from marl_minari.registry.block_cache import BlockCache, Pack
from marl_minari.registry.blocks import MIN_BLOCK_SIZE, Block
from marl_minari.registry.remote_file import StreamSettings, open_remote_file
from registry_helpers import cached_block_numbers, pack_files

DATASET = "mpe2/spread/streamed-v0"


@pytest.fixture
def settings(tmp_path: Path) -> StreamSettings:
    return StreamSettings(cache_dir=tmp_path / "cache", cache_bytes=1 << 30)


def _first_blocks(registry_dir: Path, settings: StreamSettings, count: int) -> Path:
    """Read blocks ``0..count-1`` over ``file://`` (one request, so one pack); the pack."""
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    source.read_ranges([(0, count * MIN_BLOCK_SIZE)])
    (pack,) = pack_files(settings.cache().folder)
    assert pack.name == f"0-{count}"
    return pack


def _read_again(registry_dir: Path, settings: StreamSettings, streamable: Path,
                count: int) -> int:
    """Read blocks ``0..count-1`` as a new process would; the bytes fetched from the remote
    (the bytes returned are checked against the published file)."""
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    got = source.read_ranges([(0, count * MIN_BLOCK_SIZE)])
    assert bytes(got[0]) == streamable.read_bytes()[:count * MIN_BLOCK_SIZE]
    return source.counts.bytes


def test_a_fetched_run_is_one_pack_and_a_second_reader_fetches_nothing(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    _first_blocks(registry_dir, settings, 4)
    assert _read_again(registry_dir, settings, streamable, 4) == 0


def test_a_truncated_pack_is_deleted_and_fetched_again(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    pack = _first_blocks(registry_dir, settings, 4)
    with open(pack, "r+b") as out:
        out.truncate(3 * MIN_BLOCK_SIZE)
    assert _read_again(registry_dir, settings, streamable, 4) == 4 * MIN_BLOCK_SIZE
    assert pack.stat().st_size == 4 * MIN_BLOCK_SIZE  # written anew, whole


def test_a_pack_that_goes_on_past_its_blocks_is_deleted(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    """Trailing bytes make it no pack of ours, even where every block in it matches."""
    pack = _first_blocks(registry_dir, settings, 2)
    with open(pack, "ab") as out:
        out.write(b"more")
    assert _read_again(registry_dir, settings, streamable, 2) == 2 * MIN_BLOCK_SIZE
    assert pack.stat().st_size == 2 * MIN_BLOCK_SIZE


def test_an_edited_pack_returns_only_matching_blocks_and_is_deleted(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    pack = _first_blocks(registry_dir, settings, 4)
    data = bytearray(pack.read_bytes())
    data[2 * MIN_BLOCK_SIZE + 7] ^= 0xFF  # block 2
    pack.write_bytes(bytes(data))
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    got = source.read_ranges([(2 * MIN_BLOCK_SIZE, 10)])
    assert bytes(got[0]) == streamable.read_bytes()[2 * MIN_BLOCK_SIZE:][:10]
    assert source.counts.bytes == MIN_BLOCK_SIZE  # block 2 alone, fetched again
    assert not pack.exists()
    assert cached_block_numbers(settings.cache().folder) == {2}


def test_a_pack_swapped_for_another_is_deleted(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    """Another run's pack under this run's name, of the right size, is caught by the hashes."""
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    source.read_ranges([(0, 2 * MIN_BLOCK_SIZE)])
    source.read_ranges([(2 * MIN_BLOCK_SIZE, 2 * MIN_BLOCK_SIZE)])
    first, second = pack_files(settings.cache().folder)
    assert (first.name, second.name) == ("0-2", "2-2")
    os.replace(second, first)  # blocks 2-3 where blocks 0-1 belong
    assert _read_again(registry_dir, settings, streamable, 2) == 2 * MIN_BLOCK_SIZE


def test_a_pack_of_another_file_is_never_read_for_this_one(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    """Packs live per file, in a folder named by the digest of its manifest digests."""
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    source.read_ranges([(0, 10)])
    (pack,) = pack_files(settings.cache().folder)
    assert pack.parent.name == source.pinned_digest[:32]
    other = open_remote_file(f"file://{registry_dir}", DATASET, "data/metadata.json",
                             settings=settings)
    assert other.pinned_digest != source.pinned_digest
    read = other.read_ranges([(0, 5)])
    assert other.counts.bytes == other.size and len(bytes(read[0])) == 5
    assert pack.exists()  # not taken for the other file's block 0, so not deleted


def test_a_half_written_pack_is_never_read(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    """A write cut short (killed before its rename) leaves only a temporary name, which no
    reader takes for a pack; a torn file under a pack's own name is deleted for its size."""
    pack = _first_blocks(registry_dir, settings, 2)
    whole = pack.read_bytes()
    pack.unlink()
    (pack.parent / f".{pack.name}.0123abcd.tmp").write_bytes(whole)  # complete, still unread
    assert _read_again(registry_dir, settings, streamable, 2) == 2 * MIN_BLOCK_SIZE
    pack.write_bytes(whole[:MIN_BLOCK_SIZE + 100])
    assert _read_again(registry_dir, settings, streamable, 2) == 2 * MIN_BLOCK_SIZE


def test_a_pack_is_whole_under_a_temporary_name_before_it_takes_its_own(
        streamable: Path, registry_dir: Path, settings: StreamSettings,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Killed at any point before the rename, a writer leaves no file under a pack's name;
    killed right before it, nothing at all (its temporary is removed)."""
    renames: list[tuple[str, int]] = []

    def killed_before_rename(source: str | Path, target: str | Path) -> None:
        assert not Path(target).exists()
        renames.append((Path(source).name, Path(source).stat().st_size))
        raise KeyboardInterrupt

    monkeypatch.setattr(block_cache_module.os, "replace", killed_before_rename)
    source = open_remote_file(f"file://{registry_dir}", DATASET, settings=settings)
    with pytest.raises(KeyboardInterrupt):
        source.read_ranges([(0, 2 * MIN_BLOCK_SIZE)])
    ((name, size),) = renames
    assert name.startswith(".0-2.") and name.endswith(".tmp") and size == 2 * MIN_BLOCK_SIZE
    assert not [p for p in settings.cache().folder.rglob("*") if p.is_file()]


def test_files_in_a_pack_folder_that_are_no_packs_of_the_file_are_ignored(
        streamable: Path, registry_dir: Path, settings: StreamSettings) -> None:
    pack = _first_blocks(registry_dir, settings, 2)
    for name in ("1-100000", "notapack", "3-x"):  # the first reaches past the file
        (pack.parent / name).write_bytes(b"x")
    pack.unlink()
    assert _read_again(registry_dir, settings, streamable, 2) == 2 * MIN_BLOCK_SIZE


def test_a_pack_shrinking_while_read_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "pack"
    path.write_bytes(b"x" * 10)
    handle = os.open(path, os.O_RDONLY)
    try:
        assert block_cache_module._read_exactly(handle, memoryview(bytearray(20)), 0) is False
        assert block_cache_module._read_exactly(handle, memoryview(bytearray(4)), 6) is True
    finally:
        os.close(handle)


@pytest.mark.parametrize("kind", ["a link", "a FIFO"])
def test_a_pack_that_is_not_a_regular_file_is_not_read(
        streamable: Path, registry_dir: Path, settings: StreamSettings, kind: str) -> None:
    """Never followed, never waited on: the blocks are fetched again."""
    pack = _first_blocks(registry_dir, settings, 2)
    elsewhere = pack.parent.parent / "elsewhere"
    os.replace(pack, elsewhere)
    if kind == "a link":
        pack.symlink_to(elsewhere)
    else:
        os.mkfifo(pack)
    assert _read_again(registry_dir, settings, streamable, 2) == 2 * MIN_BLOCK_SIZE


def _blocks(count: int, length: int = 1000) -> tuple[list[Block], list[bytes]]:
    contents = [bytes([number]) * length for number in range(count)]
    return [Block(number, number * length, length, "blake3", blake3.blake3(data).hexdigest())
            for number, data in enumerate(contents)], contents


def test_overlapping_packs_are_read_from_the_one_reaching_furthest(tmp_path: Path) -> None:
    blocks, contents = _blocks(6)
    cache = BlockCache(tmp_path, 1 << 20)
    cache.put_run("k" * 64, blocks[1:3], b"".join(contents[1:3]))
    cache.put_run("k" * 64, blocks[1:6], b"".join(contents[1:6]))
    found = BlockCache(tmp_path, 1 << 20).read_blocks("k" * 64, blocks, blocks, 1 << 20)
    assert {n: bytes(v) for n, v in found.items()} == {n: contents[n] for n in range(1, 6)}
    assert len({id(view.obj) for view in found.values()}) == 1  # one read, from pack 1-5


def test_pack_names_are_parsed_strictly() -> None:
    assert Pack.parse("12-64") == Pack(12, 64)
    for name in (".12-64.ab.tmp", "12-0", "12", "-3", "1-2-3", "a-1", "١-1"):
        assert Pack.parse(name) is None, name


_WRITER = """
import sys
import blake3
from marl_minari.registry.block_cache import BlockCache
from marl_minari.registry.blocks import Block
folder = sys.argv[1]
contents = [bytes([n]) * 4096 for n in range(64)]
blocks = [Block(n, n * 4096, 4096, "blake3", blake3.blake3(c).hexdigest())
          for n, c in enumerate(contents)]
from pathlib import Path
cache = BlockCache(Path(folder), 1 << 30)
for _ in range(30):
    for begin in range(0, 64, 4):
        run = blocks[begin:begin + 12]
        cache.put_run("k" * 64, run, b"".join(contents[b.number] for b in run))
"""


def test_two_writers_and_a_reader_at_once_leave_only_whole_verified_packs(
        tmp_path: Path) -> None:
    """Two processes write the same overlapping runs of one file into one cache (the same
    packs, at once) while this one reads: every block read is the block's bytes, neither
    writer fails, and afterwards no temporary is left and every block is read from the
    packs."""
    blocks, contents = _blocks(64, 4096)
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)])
               for _ in range(2)]
    wrong: list[int] = []
    while any(writer.poll() is None for writer in writers):
        found = BlockCache(tmp_path, 1 << 30).read_blocks("k" * 64, blocks, blocks, 1 << 20)
        wrong.extend(n for n, view in found.items() if bytes(view) != contents[n])
    assert [writer.wait() for writer in writers] == [0, 0]
    assert wrong == []
    assert not list(tmp_path.rglob(".*.tmp"))
    found = BlockCache(tmp_path, 1 << 30).read_blocks("k" * 64, blocks, blocks, 1 << 20)
    assert sorted(found) == list(range(64))
    assert cached_block_numbers(tmp_path) == set(range(64))


def test_eviction_deletes_whole_least_recently_used_packs(tmp_path: Path) -> None:
    blocks, contents = _blocks(8)
    for begin in (0, 4):
        BlockCache(tmp_path, 1 << 20).put_run("k" * 64, blocks[begin:begin + 4],
                                             b"".join(contents[begin:begin + 4]))
    for age, pack in enumerate(pack_files(tmp_path)):
        os.utime(pack, ns=(age * 10**9, age * 10**9))  # 0-4 older than 4-4
    cache = BlockCache(tmp_path, 4000)
    assert sorted(cache.read_blocks("k" * 64, blocks[:1], blocks, 1 << 20)) == [0]  # used now
    cache.evict()
    assert [p.name for p in pack_files(tmp_path)] == ["0-4"]


def test_eviction_deletes_the_temporaries_of_killed_writers_only(tmp_path: Path) -> None:
    blocks, contents = _blocks(2)
    cache = BlockCache(tmp_path, 1 << 20)
    cache.put_run("k" * 64, blocks, b"".join(contents))
    folder = cache.pack_folder("k" * 64)
    abandoned, live = folder / ".0-2.dead.tmp", folder / ".0-2.live.tmp"
    for temporary in (abandoned, live):
        temporary.write_bytes(b"partial")
    old = time.time() - block_cache_module.ABANDONED_WRITE_SECONDS - 60
    os.utime(abandoned, (old, old))
    cache.evict()
    assert not abandoned.exists() and live.exists()
    assert [p.name for p in pack_files(tmp_path)] == ["0-2"]
