"""A bounded on-disk cache of verified blocks of published files.

Blocks read by ranges are kept in *packs*: each run of adjacent blocks one request fetched
(and verified) is one file, ``packs/<file key>/<first block>-<block count>``, holding their
bytes and nothing else, in a folder per file named by the digest of the manifest digests of
its bytes (:attr:`RemoteFile.pinned_digest`). A pass over a cached file then opens a handful
of packs instead of a file per block: each run of wanted blocks is read with one ``preadv``
into the buffer the caller copies from, and every block is hashed there against the
manifest's digest, in the reading process, every time (a pack is never mapped nor trusted for
an earlier check: it could change after it). A pack of the wrong size, not a regular file, or
holding a block that does not match is deleted, and what it lacked is fetched again.

A whole file (a server ignoring ``Range``, a manifest without range digests) is kept under
the name of its digest (``blake3-<hex>``, ``sha256-<hex>``), checked the first time a process
uses it. Every entry is written under a temporary name and renamed into place, so several
processes can fill one cache at once and a write cut short leaves no entry. Only bytes that
matched their digest are ever put here. When the entries pass the cache's byte budget, the
least recently used ones (whole packs) are deleted. Writing is best effort: a cache that
cannot be written (a read-only or full disk, a path through a file) is left alone, and
reads go on without it (:attr:`BlockCache.write_failure` says why).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Final

import numpy as np

from marl_minari.errors import RemoteError
from marl_minari.format.digests import hash_file

from .blocks import Block, adjacent_runs, run_matches
from .cache_writes import CACHE_WRITES

CACHE_ENV_VAR: Final = "MARL_MINARI_CACHE"
"""Folder of the block cache (default ``~/.cache/marl-minari/blocks``)."""
CACHE_BYTES_ENV_VAR: Final = "MARL_MINARI_CACHE_BYTES"
"""Byte budget of the block cache (default :data:`DEFAULT_CACHE_BYTES`; ``0``: no disk cache)."""
DEFAULT_CACHE_BYTES: Final = 4 << 30
PACKS_FOLDER: Final = "packs"
"""Subfolder of the cache holding, per file, the packs of its verified blocks."""
ABANDONED_WRITE_SECONDS: Final = 24 * 3600
"""A temporary file of the cache unchanged this long is a killed writer's, deleted on
eviction (a live write, even a slow download, changes its file far more often)."""
PACK_KEY_LENGTH: Final = 32
"""Hex digits of a file's pinned digest naming its pack folder (128 bits)."""


def default_cache_dir() -> Path:
    """``$MARL_MINARI_CACHE``, else ``~/.cache/marl-minari/blocks``."""
    configured = os.environ.get(CACHE_ENV_VAR, "").strip()
    return Path(configured).expanduser() if configured else (
        Path.home() / ".cache" / "marl-minari" / "blocks")


def default_cache_bytes() -> int:
    """``$MARL_MINARI_CACHE_BYTES``, else :data:`DEFAULT_CACHE_BYTES`.

    Raises:
        RemoteError: the variable is not a non-negative integer.
    """
    configured = os.environ.get(CACHE_BYTES_ENV_VAR, "").strip()
    if not configured:
        return DEFAULT_CACHE_BYTES
    if not configured.isdigit():
        raise RemoteError(f"{CACHE_BYTES_ENV_VAR}={configured!r} is not a byte count; set it "
                          "to a non-negative integer (0 turns the disk cache off)")
    return int(configured)


def _entry_name(block: Block) -> str:
    return f"{block.algorithm}-{block.digest}"


class BlockCache:
    """Verified blocks on disk, at most about ``max_bytes`` of them (see the module docstring).

    Args:
        folder: where the entries live (created on the first write).
        max_bytes: the byte budget; ``0`` stores nothing.
    """

    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self._checked: dict[str, tuple[int, int]] = {}
        """Entries this process has verified, with their ``(inode, mtime)`` then."""
        self._packs: dict[str, dict[int, Pack]] = {}
        """Per file, the pack to read each cached block from (see :meth:`_holders`)."""
        self._written = 0
        self._lock = threading.Lock()
        self.write_failure: OSError | None = None
        """Why the cache could not be written, the first time it could not."""

    def path(self, block: Block) -> Path | None:
        """The verified entry of ``block``, or ``None`` when there is none (or it was damaged
        and has been deleted)."""
        if not self.max_bytes:
            return None
        path = self.folder / _entry_name(block)
        try:
            status = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        identity = (status.st_ino, status.st_mtime_ns)
        if self._checked.get(path.name) != identity:
            size, digests = hash_file(path, (block.algorithm,))
            if size != block.length or digests[block.algorithm] != block.digest:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: evicted last
            status = path.stat()  # the times just set: what this process checked
            identity = (status.st_ino, status.st_mtime_ns)
        self._checked[path.name] = identity
        return path

    # ------------------------------------------------------------------ packs
    def holds(self, key: str, blocks: Sequence[Block], file_blocks: Sequence[Block]) -> set[int]:
        """The numbers of those of ``blocks`` a pack of the file pinned by ``key`` holds, by
        the pack folder's listing alone (their bytes are checked when read)."""
        if not self.max_bytes:
            return set()
        holders = self._holders_of(key, blocks, file_blocks)
        return {block.number for block in blocks if block.number in holders}

    def pack_folder(self, key: str) -> Path:
        """Where the packs of the file pinned by ``key`` (its :attr:`RemoteFile.pinned_digest`:
        a digest of the manifest's digests of its bytes) live."""
        return self.folder / PACKS_FOLDER / key[:PACK_KEY_LENGTH]

    def read_blocks(self, key: str, blocks: Sequence[Block], file_blocks: Sequence[Block],
                    buffer_bytes: int) -> dict[int, memoryview]:
        """The verified bytes of those of ``blocks`` (blocks of the file pinned by ``key``,
        whose blocks are ``file_blocks``) that the cache holds, by block number: views of
        buffers of at most ``buffer_bytes`` (or one block) each, kept by the caller
        (:meth:`verified_runs` without ``reuse``)."""
        found: dict[int, memoryview] = {}
        for run, data in self.verified_runs(key, blocks, file_blocks, buffer_bytes):
            base = run[0].offset
            for block in run:
                found[block.number] = data[block.offset - base:block.end - base]
        return found

    def verified_runs(self, key: str, blocks: Sequence[Block], file_blocks: Sequence[Block],
                      buffer_bytes: int, *, reuse: bool = False
                      ) -> Iterator[tuple[list[Block], memoryview]]:
        """Those of ``blocks`` (of the file pinned by ``key``, whose blocks are
        ``file_blocks``) that the cache holds, as runs of adjacent verified blocks in file
        order, each with its bytes: at most ``buffer_bytes`` (or one block) at a time.

        Each run of wanted blocks one pack holds is read with one ``preadv`` straight into a
        buffer and every block of it is hashed there, against the manifest's digest, before
        it is yielded: a pack is never trusted for having been checked before, nor mapped
        (its file could change after the check). With ``reuse``, every run is read into one
        window, so a run's bytes are valid only until the next run is asked for (a pass
        touches a window's memory instead of new memory as large as the file); without it,
        each run has a buffer of its own. A pack of the wrong size, or holding a block that
        does not match, is deleted once the runs are read (the blocks of it that matched are
        still yielded; the caller fetches the rest anew).
        """
        if not self.max_bytes or not blocks:
            return
        wanted = sorted(blocks, key=lambda block: block.number)
        holders = self._holders_of(key, wanted, file_blocks)
        folder = self.pack_folder(key)
        opened: dict[str, int | None] = {}
        damaged: set[str] = set()
        window: memoryview | None = None
        try:
            for pack, run in _runs_by_pack(wanted, holders, buffer_bytes):
                handle = opened.get(pack.name, -1)
                if handle == -1:
                    handle = opened[pack.name] = _open_pack(folder / pack.name,
                                                            pack.size(file_blocks))
                if handle is None:
                    damaged.add(pack.name)
                    continue
                size = run[-1].end - run[0].offset
                if not reuse:  # np.empty: its pages are first touched by the read
                    buffer = memoryview(np.empty(size, dtype=np.uint8).data)
                else:
                    if window is None or len(window) < size:
                        window = memoryview(np.empty(max(size, buffer_bytes), np.uint8).data)
                    buffer = window[:size]
                offset = run[0].offset - file_blocks[pack.first].offset
                if not _read_exactly(handle, buffer, offset):
                    damaged.add(pack.name)
                    continue
                verdicts = run_matches(run, buffer)
                if not all(verdicts):
                    damaged.add(pack.name)
                for matched in adjacent_runs(
                        block for block, good in zip(run, verdicts, strict=True) if good):
                    yield matched, buffer[matched[0].offset - run[0].offset:
                                          matched[-1].end - run[0].offset]
        finally:
            for name, handle in opened.items():
                if handle is None:
                    continue
                if name not in damaged:
                    with contextlib.suppress(OSError):
                        os.utime(handle)  # recently used: evicted last
                os.close(handle)
            for name in damaged:  # deleted once closed (an open file cannot be deleted everywhere)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(folder / name)
            if damaged:
                self._packs.pop(key, None)

    def put_run(self, key: str, run: Sequence[Block], data: bytes | memoryview) -> None:
        """Keep ``data``, which the caller has verified to be the bytes of ``run`` (adjacent
        blocks of the file pinned by ``key``), as one pack: written under a temporary name
        and renamed into place, so no reader ever opens a half-written pack."""
        size = sum(block.length for block in run)
        if not self.max_bytes or not run or size > self.max_bytes:
            return
        if len(data) != size:
            raise ValueError(f"{len(data)} bytes given for {size} bytes of blocks")
        folder = self.pack_folder(key)
        pack = Pack(run[0].number, len(run))
        temporary = folder / f".{pack.name}.{uuid.uuid4().hex}.tmp"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as out:
                out.write(data)
            os.replace(temporary, folder / pack.name)
        except OSError as exc:
            self.cannot_write(exc)
            return
        finally:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
        known = self._packs.get(key)
        if known is not None:
            _hold(known, pack)
        self._grew(size)

    def put_verified(self, key: str, verified: Sequence[Block], data: memoryview,
                     start: int) -> None:
        """Keep ``verified`` (blocks of the file pinned by ``key``, in order, whose bytes the
        caller has checked; ``data`` holds the file's bytes from offset ``start`` on) as one
        pack per run of adjacent ones."""
        for run in adjacent_runs(verified):
            self.put_run(key, run, data[run[0].offset - start:run[-1].end - start])

    def put_verified_soon(self, key: str, verified: Sequence[Block], data: memoryview,
                          start: int) -> None:
        """:meth:`put_verified` on the process's cache writer
        (:mod:`~marl_minari.registry.cache_writes`): ``data`` is kept until written, and
        :meth:`settle` waits for it."""
        if not self.max_bytes or not verified:
            return
        size = verified[-1].end - verified[0].offset
        CACHE_WRITES.submit(str(self.pack_folder(key)), size,
                            partial(self.put_verified, key, verified, data, start))

    def settle(self, key: str) -> None:
        """Wait for the writes of the file pinned by ``key`` handed to the cache writer."""
        CACHE_WRITES.settle(str(self.pack_folder(key)))

    def _holders_of(self, key: str, blocks: Sequence[Block], file_blocks: Sequence[Block]
                    ) -> dict[int, Pack]:
        """The packs holding the file's blocks (:meth:`_holders`), the pack folder listed
        again when it is not known to hold every one of ``blocks`` (another process may have
        kept them since), once the writes this process handed over for it are made."""
        self.settle(key)
        holders = self._holders(key, file_blocks)
        if any(block.number not in holders for block in blocks):
            holders = self._holders(key, file_blocks, refresh=True)
        return holders

    def _holders(self, key: str, file_blocks: Sequence[Block], *,
                 refresh: bool = False) -> dict[int, Pack]:
        """Which pack to read each cached block of the file from: the listing of its pack
        folder, made once per process (and again when a block is not in it)."""
        known = self._packs.get(key)
        if known is None or refresh:
            known = {}
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for entry in os.scandir(self.pack_folder(key)):
                    pack = Pack.parse(entry.name)
                    if pack is not None and pack.first + pack.count <= len(file_blocks):
                        _hold(known, pack)
            self._packs[key] = known
        return known

    def adopt(self, block: Block, verified_file: Path) -> Path:
        """Move a downloaded, verified file (a whole-file block) into the cache; its entry.

        The file stays usable even when it is larger than the budget: it is then the only
        entry kept.
        """
        if not self.max_bytes or self.write_failure:
            return verified_file
        target = self.folder / _entry_name(block)
        os.replace(verified_file, target)  # made in this folder, which could be written
        status = target.stat()
        self._checked[target.name] = (status.st_ino, status.st_mtime_ns)
        self._grew(block.length, keep=target.name)
        return target

    def cannot_write(self, failure: OSError) -> None:
        """Remember that the cache could not be written (the first ``failure``): whole-file
        copies are then kept out of it."""
        if self.write_failure is None:
            self.write_failure = failure

    def _grew(self, count: int, keep: str | None = None) -> None:
        with self._lock:
            self._written += count
            if self._written <= self.max_bytes // 8:
                return  # scanning the folder after every write would cost more than it saves
            self._written = 0
        self.evict(keep)

    def evict(self, keep: str | None = None) -> None:
        """Delete the least recently used entries (whole files, packs) until the cache fits
        its budget."""
        entries = []
        for folder in [str(self.folder), *_subfolders(self.folder / PACKS_FOLDER)]:
            with contextlib.suppress(FileNotFoundError, NotADirectoryError):
                for entry in os.scandir(folder):
                    if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                        _drop_if_abandoned(entry)  # else another process's write in progress
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        if not entry.is_file(follow_symlinks=False):
                            continue
                        status = entry.stat(follow_symlinks=False)
                        entries.append((status.st_mtime_ns, status.st_size, entry.path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            if keep is not None and path == os.path.join(self.folder, keep):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            self._checked.pop(os.path.basename(path), None)
            total -= size
        self._packs.clear()  # listed again when next read


@dataclass(frozen=True)
class Pack:
    """``count`` adjacent verified blocks of one file from block ``first`` on, stored as one
    file named ``<first>-<count>`` holding their bytes and nothing else."""

    first: int
    count: int

    @property
    def name(self) -> str:
        return f"{self.first}-{self.count}"

    @classmethod
    def parse(cls, name: str) -> Pack | None:
        """The pack a file name denotes, or ``None`` (a write in progress, anything else)."""
        first, dash, count = name.partition("-")
        if not (dash and first.isdigit() and count.isdigit() and first.isascii()
                and count.isascii() and int(count) > 0):
            return None
        return cls(int(first), int(count))

    def size(self, file_blocks: Sequence[Block]) -> int:
        """The bytes an intact pack holds."""
        last = file_blocks[self.first + self.count - 1]
        return last.end - file_blocks[self.first].offset


def _hold(holders: dict[int, Pack], pack: Pack) -> None:
    """Read blocks from ``pack`` where it holds more of the blocks after them than the pack
    known so far (fewer, longer reads)."""
    end = pack.first + pack.count
    for number in range(pack.first, end):
        known = holders.get(number)
        if known is None or known.first + known.count < end:
            holders[number] = pack


def _runs_by_pack(wanted: Sequence[Block], holders: dict[int, Pack],
                  buffer_bytes: int) -> list[tuple[Pack, list[Block]]]:
    """``wanted`` (in order) cut into runs of adjacent blocks read from one pack, each at most
    ``buffer_bytes`` (or one block); blocks no pack holds are left out."""
    held = [block for block in wanted if block.number in holders]
    return [(holders[run[0].number], run)
            for run in adjacent_runs(held, buffer_bytes, lambda block: holders[block.number])]


def _open_pack(path: Path, size: int) -> int | None:
    """A descriptor of the pack at ``path`` when it is a regular file of ``size`` bytes;
    ``None`` when it is not (it is then deleted) or is gone (evicted meanwhile)."""
    try:
        # never follows a link, never waits on a FIFO
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # gone, or a link
        return None
    status = os.fstat(handle)
    if not stat.S_ISREG(status.st_mode) or status.st_size != size:
        os.close(handle)
        return None
    return handle


def _read_exactly(handle: int, buffer: memoryview, offset: int) -> bool:
    """Fill ``buffer`` from ``offset`` of ``handle`` (one ``preadv`` unless interrupted);
    ``False`` when the file ends first (it shrank since it was opened)."""
    done = 0
    while done < len(buffer):
        count = os.preadv(handle, [buffer[done:]], offset + done)
        if not count:
            return False
        done += count
    return True


def _drop_if_abandoned(entry: os.DirEntry[str]) -> None:
    """Delete a temporary file no write has touched for :data:`ABANDONED_WRITE_SECONDS`: left
    by a writer that was killed (it is never read, but would hold its disk space forever)."""
    with contextlib.suppress(OSError):
        if time.time() - entry.stat(follow_symlinks=False).st_mtime > ABANDONED_WRITE_SECONDS:
            os.unlink(entry.path)


def _subfolders(folder: Path) -> list[str]:
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        return [entry.path for entry in os.scandir(folder)
                if entry.is_dir(follow_symlinks=False)]
    return []
