"""A bounded on-disk cache of verified blocks of published files.

Blocks are stored under the name of their digest (``blake3-<hex>``, ``sha256-<hex>`` for a
whole file of an old manifest), so the cache is content-addressed: two datasets sharing a
block share its entry, several processes can fill one cache at once (every entry is written
under a temporary name and renamed into place), and an entry can never be taken for another
block. Only bytes that matched their digest are ever put here, and an entry is checked again
the first time a process reads it (a damaged entry is deleted and fetched anew), unless it is
the very file this process wrote there. When the
entries pass the cache's byte budget, the least recently used ones are deleted.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from marl_minari.errors import RemoteError
from marl_minari.format.digests import hash_file, new_hash

from .blocks import Block

CACHE_ENV_VAR: Final = "MARL_MINARI_CACHE"
"""Folder of the block cache (default ``~/.cache/marl-minari/blocks``)."""
CACHE_BYTES_ENV_VAR: Final = "MARL_MINARI_CACHE_BYTES"
"""Byte budget of the block cache (default :data:`DEFAULT_CACHE_BYTES`; ``0``: no disk cache)."""
DEFAULT_CACHE_BYTES: Final = 4 << 30


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
        self._written = 0
        self._lock = threading.Lock()

    def path(self, block: Block) -> Path | None:
        """The verified entry of ``block``, or ``None`` when there is none (or it was damaged
        and has been deleted)."""
        if not self.max_bytes:
            return None
        path = self.folder / _entry_name(block)
        try:
            status = path.stat()
        except FileNotFoundError:
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

    def read_blocks(self, blocks: Sequence[Block],
                    buffer_bytes: int) -> dict[int, memoryview]:
        """The verified bytes of those of ``blocks`` the cache holds, by block number: views
        of buffers of at most ``buffer_bytes`` (or one block), read in order."""
        found: dict[int, memoryview] = {}
        begin = 0
        while self.max_bytes and begin < len(blocks):
            end, size = begin + 1, blocks[begin].length
            while end < len(blocks) and size + blocks[end].length <= buffer_bytes:
                size += blocks[end].length
                end += 1
            # np.empty: its pages are first touched by the reads (a bytearray zeroes them)
            buffer = memoryview(np.empty(size, dtype=np.uint8).data)
            position = 0
            for block in blocks[begin:end]:
                view = buffer[position:position + block.length]
                if self.read_into(block, view):
                    found[block.number] = view
                    position += block.length
            begin = end
        return found

    def read_into(self, block: Block, out: memoryview) -> bool:
        """Read the cached bytes of ``block`` into ``out`` (``block.length`` bytes), verified;
        ``False`` (``out`` then holds nothing of use) when they are not cached.

        The entry is read once, and its bytes are checked in memory the first time this
        process reads that file (a damaged one is deleted).
        """
        if not self.max_bytes:
            return False
        name = _entry_name(block)
        path = os.path.join(self.folder, name)
        try:
            handle = open(path, "rb", buffering=0)  # noqa: SIM115 (closed below)
        except FileNotFoundError:  # not cached, or evicted by another process meanwhile
            return False
        with handle:
            status = os.fstat(handle.fileno())
            done = 0
            while done < block.length and status.st_size == block.length:
                count = handle.readinto(out[done:])
                if not count:
                    break
                done += count
            identity = (status.st_ino, status.st_mtime_ns)
            damaged = status.st_size != block.length or done != block.length or (
                self._checked.get(name) != identity and not matches(block, out))
            if not damaged:
                with contextlib.suppress(OSError):
                    os.utime(handle.fileno() if os.utime in os.supports_fd else path)
                    status = os.fstat(handle.fileno())  # the times just set: what was checked
        if damaged:  # deleted once closed (an open file cannot be deleted everywhere)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            return False
        self._checked[name] = (status.st_ino, status.st_mtime_ns)  # used: evicted last
        return True

    def put(self, block: Block, data: bytes | memoryview) -> None:
        """Keep ``data``, which the caller has verified to be ``block``'s bytes."""
        if not self.max_bytes or block.length > self.max_bytes:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / _entry_name(block)
        temporary = self.folder / f".{target.name}.{uuid.uuid4().hex}.tmp"
        try:
            with open(temporary, "wb") as out:
                out.write(data)
                out.flush()
                status = os.fstat(out.fileno())
            os.replace(temporary, target)
            # The file this process wrote with verified bytes (a rename keeps its inode and
            # times): reading it back needs no second check, anything put in its place does.
            self._checked[target.name] = (status.st_ino, status.st_mtime_ns)
        finally:
            temporary.unlink(missing_ok=True)
        self._grew(block.length)

    def adopt(self, block: Block, verified_file: Path) -> Path:
        """Move a downloaded, verified file (a whole-file block) into the cache; its entry.

        The file stays usable even when it is larger than the budget: it is then the only
        entry kept.
        """
        if not self.max_bytes:
            return verified_file
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.folder / _entry_name(block)
        os.replace(verified_file, target)
        status = target.stat()
        self._checked[target.name] = (status.st_ino, status.st_mtime_ns)
        self._grew(block.length, keep=target.name)
        return target

    def _grew(self, count: int, keep: str | None = None) -> None:
        with self._lock:
            self._written += count
            if self._written <= self.max_bytes // 8:
                return  # scanning the folder after every write would cost more than it saves
            self._written = 0
        self.evict(keep)

    def evict(self, keep: str | None = None) -> None:
        """Delete the least recently used entries until the cache fits its budget."""
        entries = []
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.folder):
                if entry.name.startswith(".") and entry.name.endswith(".tmp"):
                    continue  # another process's write in progress
                with contextlib.suppress(FileNotFoundError):
                    status = entry.stat()
                    entries.append((status.st_mtime_ns, status.st_size, entry.name))
        total = sum(size for _, size, _ in entries)
        for _, size, name in sorted(entries):
            if total <= self.max_bytes:
                break
            if name == keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                (self.folder / name).unlink()
            self._checked.pop(name, None)
            total -= size


def matches(block: Block, data: bytes | memoryview) -> bool:
    """True when ``data`` is ``block``'s bytes (its length and digest)."""
    if len(data) != block.length:
        return False
    digest = new_hash(block.algorithm)
    digest.update(data)
    return digest.hexdigest() == block.digest
