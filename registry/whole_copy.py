"""A published file fetched whole and verified, where it cannot be read by verified ranges:
its manifest has no range digests (published before them), or its server ignores ``Range``.
:class:`~.remote_file.RemoteFile` then serves every range from this copy."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from marl_minari.errors import CorruptedDataError

from .backend import Backend
from .block_cache import BlockCache
from .blocks import Block, block_digests
from .manifest import FileEntry
from .stream_settings import TransferCounts


def whole_block(entry: FileEntry) -> Block:
    """The whole file described by ``entry`` as one block, checked by its whole-file digest."""
    return Block(0, 0, entry.size, entry.check_algorithm, entry.check_digest)


def fetch_whole(backend: Backend, key: str, entry: FileEntry, cache: BlockCache,
                shown_as: str, counts: TransferCounts) -> tuple[Path, bool]:
    """Download the file ``key`` (described by ``entry``) and verify it against the
    manifest's whole-file digest: ``(the copy, whether it is a temporary file the caller
    deletes)``, the copy kept in ``cache`` where it has room.

    Raises:
        CorruptedDataError: the bytes do not match the manifest (``shown_as`` names them).
        RemoteError: the registry failed.
    """
    whole = whole_block(entry)
    target = _scratch_file(cache)
    try:
        size, digest = backend.get_file(key, target, entry.size, whole.algorithm, None)
        counts.add(size)
        counts.whole_downloads += 1
        entry.check_arrived(shown_as, size, digest)
        kept = cache.adopt(whole, target)
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return kept, kept == target


def _scratch_file(cache: BlockCache) -> Path:
    """A new empty file for a whole-file download: in the cache's folder (it is then moved
    into the cache), else in the system's temporary folder."""
    if cache.max_bytes and not cache.write_failure:
        try:
            cache.folder.mkdir(parents=True, exist_ok=True)
            return _empty_file(cache.folder)
        except OSError as exc:
            cache.cannot_write(exc)
    return _empty_file(None)


def _empty_file(folder: Path | None) -> Path:
    """A new empty file of this process's in ``folder`` (``None``: the system's temporary
    folder)."""
    handle, name = tempfile.mkstemp(prefix=".whole-", suffix=".tmp", dir=folder)
    os.close(handle)
    return Path(name)


def check_blocks_of_whole(copy: Path, entry: FileEntry, shown_as: str) -> None:
    """Check a whole-file copy against the range digests too: a manifest whose two kinds of
    digests describe different files is refused.

    Raises:
        CorruptedDataError: they differ (``shown_as`` names the file).
    """
    if entry.block_size is None or entry.block_blake3 is None:
        return
    _, _, found = block_digests(copy, entry.block_size)
    if found != entry.block_blake3:
        first = next((n for n, (a, b) in enumerate(
            zip(found, entry.block_blake3, strict=False)) if a != b), len(found))
        raise CorruptedDataError(
            f"{shown_as}: the manifest's range digests and whole-file digest describe "
            f"different files (block {first} of the verified whole file differs from its "
            "range digest): the published manifest is inconsistent; ask the registry's "
            "owner to publish the dataset again as a new version")
