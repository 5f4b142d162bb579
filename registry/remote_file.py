"""A published file read in place, by byte ranges, every byte verified against its manifest.

:class:`RemoteFile` is the remote supplier of :class:`marl_minari.storage.byte_ranges.ByteRanges`:
``read_ranges`` turns the ranges asked into the blocks that cover them (:mod:`.blocks`), takes
what it can from memory and from the on-disk :class:`~.block_cache.BlockCache`, fetches the
rest from the registry with the same backends, credentials and deadlines as downloads
(adjacent blocks coalesced into one request, several requests in flight), checks every block
against the range digests of the manifest, and only then caches and returns them. A block
that does not match is a :class:`~marl_minari.errors.CorruptedDataError` naming the file, the
range and the mirror; the blocks that matched stay cached and the rest of the file readable.

Two cases read the whole file first, with a warning, and then serve every range from the
verified local copy: a file whose manifest has no range digests (published before them), and
a server that ignores ``Range`` (answers HTTP 200 with the whole body).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import blake3
import numpy as np

from marl_minari.errors import CorruptedDataError, MarlMinariError
from marl_minari.format.header_template import rows_reader
from marl_minari.format.ids import parse_dataset_id

from .backend import Backend, RangesIgnored
from .block_memory import BlockMemory
from .blocks import (
    MIN_BLOCK_SIZE,
    Block,
    adjacent_runs,
    block_mismatch,
    covering_blocks,
    joined_windows,
    merged_ranges,
    run_matches,
)
from .deadline import Deadline
from .kinds import open_backend
from .manifest import FileEntry, Manifest
from .published import read_manifest
from .settings import RemoteSettings
from .stream_settings import StreamSettings, TransferCounts
from .stream_warnings import warn_uncached, warn_whole_download
from .whole_copy import check_blocks_of_whole, fetch_whole, whole_block


class RemoteFile:
    """One published file of one dataset version as a verified :class:`ByteRanges`.

    Args:
        remote: the registry (``file://``, ``s3://``, ``http(s)://``; may hold credentials,
            which no message shows).
        dataset_id: the published version.
        entry: the file's manifest entry (its size, digests and range digests).
        token: Minari's token (``http(s)://``: sent as a Bearer token).
        settings: caching and parallelism (:class:`StreamSettings`).
    """

    def __init__(self, remote: str, dataset_id: str, entry: FileEntry, *,
                 token: str | None = None, settings: StreamSettings | None = None) -> None:
        parse_dataset_id(dataset_id)
        self._remote = remote
        self._token = token
        self.dataset_id = dataset_id
        self.entry = entry
        self.settings = settings or StreamSettings()
        self.key = f"{dataset_id}/{entry.path}"
        self.size = entry.size
        self.counts = TransferCounts()
        self._setup()
        self.mirror = self._backend().location
        """The registry the bytes come from, without credentials."""
        self.name = f"{self.mirror}/{self.key}"

    def _setup(self) -> None:
        self._blocks = self.entry.blocks
        self._cache = self.settings.cache()
        self._memory = BlockMemory(len(self._blocks), self.settings.memory_bytes)
        self._lock = threading.Lock()
        self._whole_fd: int | None = None
        self._whole_temporary: Path | None = None
        self._failures = threading.local()
        self._backends = threading.local()
        self._pinned: str | None = None

    @property
    def fingerprint(self) -> str | None:
        """The BLAKE3 of the whole file as published (what the offset index records of the
        file it was written for), known without reading the file."""
        return self.entry.blake3

    @property
    def pinned_digest(self) -> str:
        """A digest of the manifest's digests every served byte is checked against (the
        range digests, also for a whole-file copy; else the whole-file digest): equal for
        two readers exactly when they are served the same bytes."""
        if self._pinned is None:
            entry = self.entry
            pins: list[Any] = [entry.size]
            if entry.block_size is not None and entry.block_blake3 is not None:
                pins += ["blocks", entry.block_size, list(entry.block_blake3)]
            else:
                pins += ["whole", entry.check_algorithm, entry.check_digest]
            self._pinned = blake3.blake3(json.dumps(pins).encode()).hexdigest()
        return self._pinned

    # ------------------------------------------------------------------ pickling (Ray)
    def __getstate__(self) -> dict[str, Any]:
        """What a worker needs to fetch the file itself: the remote, the entry, the settings;
        never the bytes, open files or locks."""
        return {"remote": self._remote, "token": self._token, "dataset_id": self.dataset_id,
                "entry": self.entry, "settings": self.settings, "mirror": self.mirror}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._remote, self._token = state["remote"], state["token"]
        self.dataset_id, self.entry = state["dataset_id"], state["entry"]
        self.settings, self.mirror = state["settings"], state["mirror"]
        self.key = f"{self.dataset_id}/{self.entry.path}"
        self.name = f"{self.mirror}/{self.key}"
        self.size = self.entry.size
        self.counts = TransferCounts()
        self._setup()

    # ------------------------------------------------------------------ ByteRanges
    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """The verified bytes of every ``(offset, length)`` range, in the order asked.

        Raises:
            CorruptedDataError: a range reaches past the file's end, or the remote's bytes do
                not match the manifest (the message names the file, the range and the mirror).
            RemoteError: the remote failed or the deadline of this read passed.
        """
        with self._failure_recorded():
            return self._read_ranges(ranges)

    def read_rows(self, addresses: np.ndarray, length: int) -> np.ndarray:
        """``length`` verified bytes at each of ``addresses``, as ``(len(addresses), length)``
        uint8 rows: :meth:`read_ranges` of those ranges, gathered by numpy from the blocks in
        memory (the many small structures the offset-index comparisons read at once).

        Raises:
            CorruptedDataError, RemoteError: as :meth:`read_ranges`.
        """
        with self._failure_recorded():
            return self._read_rows(np.asarray(addresses, dtype=np.int64).reshape(-1), length)

    def _read_rows(self, addresses: np.ndarray, length: int) -> np.ndarray:
        block_size = self.entry.block_size
        by_ranges = rows_reader(self._read_ranges)
        if (block_size is None or self._whole_fd is not None or not 0 < length <= block_size
                or not len(addresses) or int(addresses.min()) < 0
                or int(addresses.max()) + length > self.size):
            return by_ranges(addresses, length)  # which names a range outside the file
        touched = covering_blocks(
            np.stack([addresses, np.full(len(addresses), length)], axis=1), block_size)
        if len(touched) * block_size > self._memory.max_bytes:
            return by_ranges(addresses, length)  # memory would drop blocks before the gather
        absent = self._memory.absent(np.asarray(touched, dtype=np.int64))
        if len(absent):
            self._blocks_bytes(absent.tolist())  # kept in memory as they are verified
        rows, filled = self._memory.gather(addresses, length, block_size)
        rest = np.flatnonzero(~filled)  # rows over two buffers, or dropped by another thread
        if len(rest):
            rows[rest] = by_ranges(addresses[rest], length)
        return rows

    @property
    def failure(self) -> MarlMinariError | None:
        """The last error ``read_ranges`` raised in this thread (see :meth:`clear_failure`)."""
        return getattr(self._failures, "last", None)

    def clear_failure(self) -> None:
        """Forget :attr:`failure` (before an HDF5 call whose errors may hide one)."""
        self._failures.last = None

    @contextlib.contextmanager
    def one_operation(self) -> Iterator[None]:
        """Make the reads of this thread inside the block one operation: :attr:`failure` is
        cleared on entry, and once a read fails, every later read of the block raises that
        error again without a request.

        HDF5 reads again what failed, sometimes through calls that take its error for a
        missing object; against a stalled mirror each such read would wait out a deadline
        of its own. Blocks nest (the outermost one clears and ends).
        """
        depth = getattr(self._failures, "depth", 0)
        if depth == 0:
            self._failures.last = None
        self._failures.depth = depth + 1
        try:
            yield
        finally:
            self._failures.depth = depth

    @contextlib.contextmanager
    def _failure_recorded(self) -> Iterator[None]:
        failed = getattr(self._failures, "last", None)
        if failed is not None and getattr(self._failures, "depth", 0) > 0:
            raise failed
        try:
            yield
        except MarlMinariError as exc:
            # HDF5 turns an error raised inside its read callback into one of its own
            # ("episode_3 is missing"): the reader above it asks for this one instead.
            self._failures.last = exc
            raise

    def _read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        if self._whole_copy_needed(ranges):
            assert self._whole_fd is not None
            return [memoryview(os.pread(self._whole_fd, length, offset))
                    for offset, length in ranges]
        block_size = self._block_bytes()
        found = self._blocks_bytes(covering_blocks(ranges, block_size))
        views = {number: memoryview(data) for number, data in found.items()}
        out: list[memoryview] = []
        for offset, length in ranges:  # the common case, one block, costs one slice
            number = offset // block_size
            start = offset - number * block_size
            if start + length <= block_size:
                out.append(views[number][start:start + length] if length else memoryview(b""))
            else:
                out.append(self._assemble(found, offset, length))
        return out

    def read_windows(self, ranges: Sequence[tuple[int, int]]
                     ) -> Iterator[tuple[int, memoryview]]:
        """The verified bytes of the blocks covering every ``(offset, length)`` range, each
        block once, as ``(file offset, bytes)`` windows: the blocks kept in memory, then the
        disk cache's, read and hashed a run at a time into one reused window (a window's
        bytes are valid only until the next is asked for), then those fetched.

        Raises:
            CorruptedDataError, RemoteError: as :meth:`read_ranges`.
        """
        if self._whole_copy_needed(ranges):
            spans = merged_ranges(ranges)  # windows never overlap, though ranges may
            yield from zip((offset for offset, _ in spans), self.read_ranges(spans), strict=True)
            return
        absent: list[int] = []
        remembered: list[tuple[int, memoryview]] = []
        for number in covering_blocks(ranges, self._block_bytes()):
            data = self._memory.get(number)
            if data is None:
                absent.append(number)
            else:
                remembered.append((self._blocks[number].offset, memoryview(data)))
        yield from joined_windows(remembered)
        done: set[int] = set()
        for run, data in self._cache.verified_runs(
                self.pinned_digest, [self._blocks[n] for n in absent], self._blocks,
                self.settings.max_request_bytes, reuse=True):
            done.update(block.number for block in run)
            yield run[0].offset, data
        missing = [number for number in absent if number not in done]
        if missing:
            fetched = self._fetch(missing)
            yield from joined_windows((self._blocks[number].offset, memoryview(fetched[number]))
                                      for number in sorted(fetched))

    def _block_bytes(self) -> int:
        """Bytes of the blocks ranges are cut in (a file without range digests is one)."""
        return self.entry.block_size or max(1, self.size)

    def _whole_copy_needed(self, ranges: Sequence[tuple[int, int]]) -> bool:
        """Refuse ranges outside the file; ``True`` when they are read from the verified
        whole-file copy (made now where the manifest has no range digests)."""
        for offset, length in ranges:
            if offset < 0 or length < 0 or offset + length > self.size:
                raise CorruptedDataError(
                    f"{self.name}: range {offset}+{length} reaches past the file's {self.size} "
                    "bytes (the manifest's size): the data file's own structure points outside "
                    "it; the published dataset is damaged")
        if self._whole_fd is None and self._needs_whole_file():
            self._download_whole(None)
        return self._whole_fd is not None

    def prefetch(self, numbers: Sequence[int]) -> None:
        """Fetch (and verify and cache) the blocks ``numbers`` now, together: the blocks a
        reader is known to need next (the manifest's ``open_blocks``). Blocks the disk cache
        holds are left for the read, which checks them in the memory it copies from. The
        fetched blocks are written to the disk cache while the caller goes on: :meth:`settle`
        waits for them."""
        if self.entry.block_size is None or self._whole_fd is not None:
            return
        wanted = sorted(set(numbers))
        kept = self._memory.get_many(wanted)
        absent = [self._blocks[n] for n in wanted if n not in kept]
        held = self._cache.holds(self.pinned_digest, absent, self._blocks)
        with contextlib.suppress(RangesIgnored):  # cached blocks are read (and checked) later
            self._blocks_bytes([block.number for block in absent if block.number not in held],
                               settle=False)

    @property
    def block_size(self) -> int | None:
        """Bytes of the blocks ranges are verified in (``None``: verified whole)."""
        return None if self._whole_fd is not None else self.entry.block_size

    @property
    def prefetch_budget(self) -> int:
        """Bytes of ranges to :meth:`prefetch_ranges` at once: half the blocks kept in
        memory; ``0`` (do not) without a disk cache, where what memory drops is refetched."""
        return self.settings.memory_bytes // 2 if self._cache.max_bytes else 0

    def prefetch_ranges(self, ranges: Sequence[tuple[int, int]] | np.ndarray) -> None:
        """Fetch now, together, the blocks covering ``ranges`` (what the caller reads next:
        an episode reader's leaves, before HDF5 compares their index entries, reading object
        headers that mostly lie in the same blocks). Ranges outside the file are left to the
        read that follows, which names them. As for :meth:`prefetch`, :meth:`settle` waits
        for their cache writes."""
        if self.entry.block_size is None or self._whole_fd is not None:
            return
        block_size = self.entry.block_size
        asked = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
        asked = asked[(asked[:, 1] > 0) & (asked[:, 0] >= 0)
                      & (asked[:, 0] + asked[:, 1] <= self.size)]
        if not len(asked):
            return
        edges = np.zeros(len(self._blocks) + 1, dtype=np.int64)
        np.add.at(edges, asked[:, 0] // block_size, 1)
        np.add.at(edges, (asked[:, 0] + asked[:, 1] - 1) // block_size + 1, -1)
        self.prefetch(np.flatnonzero(np.cumsum(edges)[:-1] > 0).tolist())

    def settle(self) -> None:
        """Wait until the blocks this process fetched of the file are in the disk cache
        (:meth:`prefetch` leaves them to the cache writer); say once if the cache cannot be
        written."""
        self._cache.settle(self.pinned_digest)
        self._say_if_uncached()

    def close(self) -> None:
        """Release the whole-file copy, if one was made (a cached one stays cached)."""
        if self._whole_fd is not None:
            os.close(self._whole_fd)
            self._whole_fd = None
        if self._whole_temporary is not None:
            self._whole_temporary.unlink(missing_ok=True)
            self._whole_temporary = None

    def __enter__(self) -> RemoteFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ blocks
    def _needs_whole_file(self) -> bool:
        """A file larger than one block whose manifest has no range digests."""
        return self.entry.block_size is None and self.size > MIN_BLOCK_SIZE

    def _covering(self, offset: int, length: int) -> range:
        block_size = self.entry.block_size
        if block_size is None:
            return range(1)
        return range(offset // block_size, (offset + length - 1) // block_size + 1)

    def _assemble(self, found: dict[int, bytes | memoryview], offset: int,
                  length: int) -> memoryview:
        if not length:
            return memoryview(b"")
        pieces = []
        for number in self._covering(offset, length):
            block = self._blocks[number]
            start, end = max(offset, block.offset), min(offset + length, block.end)
            pieces.append(memoryview(found[number])[start - block.offset:end - block.offset])
        return pieces[0] if len(pieces) == 1 else memoryview(b"".join(pieces))

    def _blocks_bytes(self, numbers: list[int], *, settle: bool = True
                      ) -> dict[int, bytes | memoryview]:
        found = self._memory.get_many(numbers)
        absent = [number for number in numbers if number not in found]
        if absent:  # a buffer per fetched run's size: a remembered block keeps it alive
            cached = self._cache.read_blocks(self.pinned_digest, [self._blocks[n] for n in absent],
                                             self._blocks, self.settings.max_request_bytes)
            for number, data in cached.items():
                self._memory.put(number, data)
            found.update(cached)
            missing = [number for number in absent if number not in found]
            if missing:
                found.update(self._fetch(missing, settle=settle))
        return found

    def _fetch(self, missing: list[int], *, settle: bool = True
               ) -> dict[int, bytes | memoryview]:
        """Fetch, verify and keep in memory the blocks ``missing``; their cache writes are
        made by the cache writer, waited for (even when a block failed) unless ``settle``
        is false."""
        try:
            return self._fetch_runs(missing)
        finally:
            if settle:
                self.settle()

    def _fetch_runs(self, missing: list[int]) -> dict[int, bytes | memoryview]:
        backend = self._backend()
        # Adjacent blocks in one request each, up to its size.
        runs = adjacent_runs((self._blocks[n] for n in missing),
                             self.settings.max_request_bytes)
        try:
            if len(runs) == 1:
                results = [self._fetch_run(backend, runs[0])]
            else:
                with ThreadPoolExecutor(min(len(runs), self.settings.parallel_requests),
                                        thread_name_prefix="marl-minari-ranges") as pool:
                    results = list(pool.map(lambda run: self._fetch_run(backend, run), runs))
        except RangesIgnored as exc:
            self._download_whole(exc)
            assert self._whole_fd is not None
            return {number: os.pread(self._whole_fd, self._blocks[number].length,
                                     self._blocks[number].offset) for number in missing}
        found: dict[int, bytes | memoryview] = {}
        for result in results:
            found.update(result)
        return found

    def _fetch_run(self, backend: Backend, run: list[Block]) -> dict[int, bytes | memoryview]:
        """Fetch adjacent blocks in one request; verify, cache and return each.

        Blocks that match are kept even when another of the run does not, then the first
        one that does not match raises.
        """
        start, end = run[0].offset, run[-1].end
        data = backend.read_range(self.key, start, end - start)
        self.counts.add(len(data))
        view = memoryview(data)
        found: dict[int, bytes | memoryview] = {}
        bad: Block | None = None
        for block, good in zip(run, run_matches(run, view[:end - start]), strict=True):
            piece = view[block.offset - start:block.end - start]
            if not good:
                bad = bad or block
                continue
            found[block.number] = piece  # a view of the run's buffer: no copy
            self._memory.put(block.number, piece)
        self._cache.put_verified_soon(self.pinned_digest,
                                      [b for b in run if b.number in found], view, start)
        if bad is not None:
            received = max(0, min(len(data) - (bad.offset - start), bad.length))
            raise block_mismatch(self.name, self.mirror, bad, received)
        return found

    # ------------------------------------------------------------------ whole file
    def _download_whole(self, ignored: RangesIgnored | None) -> None:
        """Fetch and verify the whole file once; every range is then read from that copy."""
        with self._lock:
            if self._whole_fd is not None:
                return
            copy = self._cache.path(whole_block(self.entry))
            if copy is None:
                warn_whole_download(self.name, self.mirror, self.size, ignored is not None)
                copy, temporary = fetch_whole(self._backend(), self.key, self.entry,
                                              self._cache, f"{self.name} (from mirror "
                                              f"{self.mirror})", self.counts)
                if temporary:
                    self._whole_temporary = copy
                self._say_if_uncached()
            check_blocks_of_whole(copy, self.entry, self.name)
            self._whole_fd = os.open(copy, os.O_RDONLY)

    def _say_if_uncached(self) -> None:
        if self._cache.write_failure is not None:
            warn_uncached(self._cache.folder, self._cache.write_failure)

    def _backend(self) -> Backend:
        """The calling thread's backend, its deadline started afresh: each ``read_ranges``
        call is one operation (setting a backend up costs more than a small read: an HTTPS
        one loads the system's certificates)."""
        backend: Backend | None = getattr(self._backends, "backend", None)
        if backend is None:
            remote_settings = self.settings.remote or RemoteSettings.from_env()
            backend = open_backend(self._remote, token=self._token, settings=remote_settings,
                                   deadline=Deadline(remote_settings))
            self._backends.backend = backend
        else:
            backend.deadline.restart()
        return backend

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def open_remote_file(remote: str, dataset_id: str, path: str = "data/main_data.hdf5", *,
                     manifest: Manifest | None = None, token: str | None = None,
                     settings: StreamSettings | None = None) -> RemoteFile:
    """The published file ``path`` of ``dataset_id`` on ``remote``, read by verified ranges.

    Raises:
        DatasetNotFoundError: the version is not published.
        CorruptedDataError: the manifest is damaged or does not list ``path``.
        RemoteError: the registry failed.
    """
    settings = settings or StreamSettings()
    if manifest is None:
        manifest = read_manifest(open_backend(remote, token=token, settings=settings.remote),
                                 dataset_id)
    for entry in manifest.files:
        if entry.path == path:
            return RemoteFile(remote, dataset_id, entry, token=token, settings=settings)
    raise CorruptedDataError(f"the manifest of {dataset_id!r} does not list {path}: the "
                             "published dataset is incomplete; publish it again as a new version")


def read_whole(remote_file: RemoteFile) -> bytes:
    """Every byte of a (small) published file, verified."""
    if not remote_file.size:
        return b""
    (data,) = remote_file.read_ranges([(0, remote_file.size)])
    return bytes(data)
