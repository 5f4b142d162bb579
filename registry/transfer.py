"""Moving bytes: copy a stream or a local file into a new file while hashing it.

Every transfer of the registry goes through here, so the size limit (more bytes than the
manifest records stop a transfer at once), the operation's deadline (checked after every
arrival) and the hashing of exactly the bytes written are each implemented once.
"""

from __future__ import annotations

import errno
import io
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Final

from marl_minari.errors import CorruptedDataError
from marl_minari.format.digests import (
    ALGORITHMS,
    BLAKE3,
    SHA256,
    FileDigests,
    MultiHash,
    RememberedDigests,
    StatKey,
    hash_handle,
    stat_key,
)

from .deadline import Deadline

CHUNK_SIZE: Final = 8 << 20
"""Bytes per read/hash/write step of a transfer."""
SMALL_READ_SIZE: Final = 64 << 10
"""Bytes asked for per read of a small object (index, manifest, metadata)."""


Progress = Callable[[int], None]
"""Called with the number of bytes just transferred."""


def changed_since_hashed(source: Path) -> CorruptedDataError:
    """The error for a local file that changed after its remembered digests were computed."""
    return CorruptedDataError(f"{source} changed after its digests were computed; publish again")


Digests = dict[str, str]
"""``{algorithm: hex digest}``."""


def copy_and_hash(source: Any, target: Path, algorithms: Sequence[str], *,
                  limit: int | None = None, progress: Progress | None = None,
                  deadline: Deadline | None = None) -> tuple[int, Digests]:
    """Copy a binary stream into ``target`` while hashing it; ``(size, digests)``.

    For streams (HTTP responses, ...). Each chunk is read into a reusable buffer, then hashed
    on a second thread while it is written (both release the GIL), so a chunk costs about
    ``max(write, hash)``. The digests are of exactly the bytes written.

    Args:
        source: object with ``readinto1(buffer)``, ``readinto(buffer)`` or ``read(n)``.
        target: file to create (truncated if it exists).
        algorithms: digests to compute (see :mod:`marl_minari.format.digests`).
        limit: stop with :class:`CorruptedDataError` as soon as more bytes than this arrive.
        progress: called with each chunk's length.
        deadline: the operation's deadline, credited with every arrival and checked after
            it (:class:`~marl_minari.registry.deadline.DeadlineExceeded` once it has passed).
    """
    digests = MultiHash(algorithms)
    size = 0
    buffer = bytearray(CHUNK_SIZE)
    reader = getattr(source, "readinto1", None) or getattr(source, "readinto", None)
    with ThreadPoolExecutor(max_workers=1) as hasher, open(target, "wb", buffering=0) as out:
        while True:
            if reader is not None:
                count = fill_buffer(reader, buffer, deadline)
                chunk = memoryview(buffer)[:count]
            else:
                data = source.read(CHUNK_SIZE)
                count, chunk = len(data), memoryview(data)
                if deadline is not None:
                    deadline.credit(count)
                    deadline.check()
            if not count:
                break
            size += count
            if limit is not None and size > limit:
                raise CorruptedDataError(
                    f"more than the {limit} bytes the manifest records arrived for {target.name}"
                )
            pending = hasher.submit(digests.update, chunk)
            _write_all(out, chunk)
            pending.result()
            if progress is not None:
                progress(count)
    return size, digests.hexdigests()


def copy_file_and_hash(source: Path, target: Path, algorithms: Sequence[str], *,
                       limit: int | None = None, progress: Progress | None = None,
                       sync: bool = False, expect: StatKey | None = None) -> tuple[int, Digests]:
    """Copy a local file into ``target`` and hash it; ``(size, digests)``.

    The kernel copies the data (``copy_file_range``/``sendfile``: no trip through Python)
    while a second thread hashes the source through its own descriptor, so the copy costs
    about ``max(copy, hash)``. The source's identity (inode, size, mtime, ctime) is checked
    before and after: a file changed during the copy raises :class:`CorruptedDataError`, so
    the digests always describe the bytes written.

    Args:
        source: file to copy.
        target: file to create (truncated if it exists).
        algorithms: digests to compute; none when they are already known (see ``expect``).
        limit: a source larger than this is refused before anything is copied.
        progress: called with each chunk's length.
        sync: flush ``target`` to disk (``fsync``) before returning; the flush overlaps with
            the end of the hashing.
        expect: the identity the source had when its known digests were computed; a source
            that differs is refused before anything is copied.
    """
    with open(source, "rb", buffering=0) as src, open(source, "rb", buffering=0) as hashed:
        before = stat_key(os.fstat(src.fileno()))
        if expect is not None and before != expect:
            raise changed_since_hashed(source)
        size = before[2]
        if limit is not None and size > limit:
            raise CorruptedDataError(
                f"{source.name} has more than the {limit} bytes the manifest records"
            )
        stop = threading.Event()
        with ThreadPoolExecutor(max_workers=1) as hasher:
            pending = hasher.submit(hash_handle, hashed, algorithms, stop) if algorithms else None
            try:
                copied, written = _copy_range(src, target, size, progress, sync)
            except BaseException:
                stop.set()
                raise
            digests = pending.result()[1] if pending is not None else {}
        after = stat_key(os.fstat(src.fileno()))
    if after != before or written != copied:
        raise CorruptedDataError(f"{source} changed while it was being copied")
    return copied, digests


def _copy_range(source: io.FileIO, target: Path, size: int, progress: Progress | None,
                sync: bool) -> tuple[int, int]:
    """Copy ``size`` bytes of ``source`` into a new ``target``; ``(copied, target size)``."""
    with open(target, "wb", buffering=0) as out:
        copied = 0
        while copied < size:
            count = _kernel_copy(source, out, copied, min(CHUNK_SIZE, size - copied))
            if not count:
                break
            copied += count
            if progress is not None:
                progress(count)
        written = os.fstat(out.fileno()).st_size
        if sync:
            os.fsync(out.fileno())
    return copied, written


def _kernel_copy(source: Any, target: Any, offset: int, count: int) -> int:
    """Copy ``count`` bytes at ``offset`` of ``source`` to the end of ``target``."""
    global _COPY_FILE_RANGE
    if _COPY_FILE_RANGE:
        try:
            return os.copy_file_range(source.fileno(), target.fileno(), count, offset)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP,
                                 errno.ENOTSUP, errno.EBADF):
                raise
            _COPY_FILE_RANGE = False
    try:
        return os.sendfile(target.fileno(), source.fileno(), offset, count)
    except OSError as exc:
        if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
            raise
    data = os.pread(source.fileno(), count, offset)
    _write_all(target, memoryview(data))
    return len(data)


_COPY_FILE_RANGE = hasattr(os, "copy_file_range")


def _write_all(out: Any, chunk: memoryview) -> None:
    while chunk:
        written = out.write(chunk)
        chunk = chunk[written:]


def fill_buffer(read: Callable[[memoryview], int | None], buffer: bytearray,
          deadline: Deadline | None) -> int:
    """Read into ``buffer`` until it is full or the stream ends; the bytes read.

    ``read`` returns after each arrival (``readinto1``), so the deadline is checked even
    while a server sends one byte at a time, which a socket timeout never notices. It is
    checked at the end of the stream too: a connection the deadline's watchdog cut reads as
    an end, and must not pass for a complete file.
    """
    view = memoryview(buffer)
    filled = 0
    while filled < len(buffer):
        count = read(view[filled:]) or 0
        if deadline is not None:
            deadline.credit(count)
            deadline.check()
        if not count:
            break
        filled += count
    return filled


def read_small(source: Any, limit: int, deadline: Deadline | None) -> bytes:
    """Read a stream (``read1`` returns after each arrival) to its end, or to ``limit + 1``
    bytes, whichever comes first; the deadline is credited and checked after each arrival.

    For small objects: the caller refuses more than ``limit`` bytes (:func:`too_large`).
    """
    read = getattr(source, "read1", None) or source.read
    data = bytearray()
    while len(data) <= limit:
        chunk = read(min(SMALL_READ_SIZE, limit + 1 - len(data)))
        if deadline is not None:
            deadline.credit(len(chunk))
            deadline.check()
        if not chunk:
            break
        data += chunk
    return bytes(data)


ProgressArg = bool | Callable[[int], None]
"""``False``: silent; ``True``: tqdm bars; a callable: called with byte counts."""


def progress_reporter(progress: ProgressArg, total: int,
                      description: str) -> tuple[Progress | None, Callable[[], None]]:
    """``(update, close)`` for a transfer of ``total`` bytes, as ``progress`` asks."""
    if callable(progress):
        return progress, lambda: None
    if progress:
        return tqdm_progress(total, description)
    return None, lambda: None


def tqdm_progress(total: int, description: str) -> tuple[Progress, Callable[[], None]]:
    """A byte progress bar (shown only on a terminal): ``(update, close)``."""
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=description, unit="B", unit_scale=True, unit_divisor=1024,
               disable=None, leave=False)
    lock = threading.Lock()

    def update(count: int) -> None:
        with lock:
            bar.update(count)

    return update, bar.close


def episode_progress(total: int, description: str) -> tuple[Progress, Callable[[], None]]:
    """An episode progress bar (shown only on a terminal, and only once the work has taken a
    second): ``(update, close)``."""
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=description, unit="ep", disable=None, leave=False, delay=1.0)
    return bar.update, bar.close


def upload_algorithms(known: RememberedDigests | None) -> tuple[str, ...]:
    """The digests an upload computes on the way: none when they are remembered."""
    return () if known is not None else ALGORITHMS


def uploaded_digests(source: Path, size: int, computed: Digests,
                     known: RememberedDigests | None) -> FileDigests:
    """Size and digests of a file just uploaded: the remembered ones, or those computed.

    The upload has already checked that ``source`` kept the identity ``known`` was hashed
    with; the size is checked again here.
    """
    if known is None:
        return FileDigests(size, computed[SHA256], computed[BLAKE3])
    if size != known.digests.size:
        raise changed_since_hashed(source)
    return known.digests


def missing_remote_file(where: str) -> CorruptedDataError:
    """The error for a file the manifest lists but the remote does not have."""
    return CorruptedDataError(f"{where} is missing although the manifest lists it: the remote "
                              "dataset was damaged after publishing")


def wrong_size(where: str, found: int, recorded: int) -> CorruptedDataError:
    """The error for a remote file whose size differs from the manifest's."""
    return CorruptedDataError(f"{where} has {found} bytes, the manifest records {recorded}: the "
                              "remote file is truncated or was replaced after publishing")


def too_large(where: str, limit: int) -> CorruptedDataError:
    """The error for a small object (index, manifest, metadata) above its size cap."""
    return CorruptedDataError(f"{where} is larger than the {limit} bytes this package reads for "
                              "such a file: it is damaged or not a marl-minari registry file")
