"""Range digests: the BLAKE3 of every fixed-size block of a published file.

A reader that fetches a few byte ranges of a large file cannot check them against the file's
whole digest. So a publish also records, for every file larger than :data:`MIN_BLOCK_SIZE`,
the BLAKE3 of each block of ``block_size`` bytes (the last block is shorter), in the file's
manifest entry (``docs/registry.md``, *Range digests*). A range is then verified block by block,
and every byte a streaming reader returns chains to the manifest. Files no larger than one
block are verified as one block, by their whole digest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Final, NamedTuple

import blake3
import numpy as np

from marl_minari.errors import CorruptedDataError
from marl_minari.format.digests import BLAKE3, new_hash
from marl_minari.storage.byte_ranges import holds_its_views
from marl_minari.storage.helper_thread import helper_thread

MIN_BLOCK_SIZE: Final = 64 << 10
"""Smallest block (and the largest file published without block digests)."""
MAX_BLOCK_SIZE: Final = 64 << 20
"""Largest block a reader accepts."""
SHARED_HASHING_BLOCKS: Final = 8
"""Blocks a run needs for half of them to be hashed on a second thread (fewer cost less
than handing them over)."""
TARGET_BLOCKS: Final = 4096
"""A publish picks the smallest power-of-two block size (at least :data:`MIN_BLOCK_SIZE`)
that cuts a file into at most this many blocks: the digests of a file stay under about
270 KB of manifest, and one block stays a small part of the file."""


def block_size_for(size: int) -> int:
    """The block size a publish uses for a file of ``size`` bytes."""
    block = MIN_BLOCK_SIZE
    while block < MAX_BLOCK_SIZE and -(-size // block) > TARGET_BLOCKS:
        block *= 2
    return block


def block_count(size: int, block_size: int) -> int:
    """Blocks of ``block_size`` bytes covering ``size`` bytes (the last may be shorter)."""
    return -(-size // block_size)


def block_digests(path: Path, block_size: int) -> tuple[int, str, tuple[str, ...]]:
    """``(size, whole-file BLAKE3, BLAKE3 of each block)`` of a local file, read once."""
    whole = new_hash(BLAKE3)
    blocks: list[str] = []
    size = 0
    buffer = bytearray(block_size)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as handle:
        while True:
            filled = 0
            while filled < block_size and (count := handle.readinto(view[filled:])):
                filled += count
            if not filled:
                break
            whole.update(view[:filled])
            blocks.append(blake3.blake3(view[:filled]).hexdigest())
            size += filled
            if filled < block_size:
                break
    return size, whole.hexdigest(), tuple(blocks)


class Block(NamedTuple):
    """One verifiable piece of a published file: bytes ``[offset, offset + length)``, whose
    ``algorithm`` digest (``blake3``, or ``sha256`` for a whole file of an old manifest) the
    manifest records. (A named tuple: a file's hundreds of blocks are made at every open, at
    less than half the cost of frozen dataclasses.)"""

    number: int
    offset: int
    length: int
    algorithm: str
    digest: str

    @property
    def end(self) -> int:
        """The offset just past the block."""
        return self.offset + self.length


def blocks_of(size: int, block_size: int | None, digests: Sequence[str] | None,
              whole_algorithm: str, whole_digest: str) -> tuple[Block, ...]:
    """The blocks of a file of ``size`` bytes: its range digests when the manifest has them,
    otherwise the whole file as one block checked by its whole digest."""
    if block_size is None or digests is None:
        return (Block(0, 0, size, whole_algorithm, whole_digest),)
    return tuple(Block(number, number * block_size,
                       min(block_size, size - number * block_size), BLAKE3, digest)
                 for number, digest in enumerate(digests))


def adjacent_runs(blocks: Iterable[Block], max_bytes: int | None = None,
                  same: Callable[[Block], object] | None = None) -> list[list[Block]]:
    """``blocks`` (in order) cut into runs of adjacent ones: a run ends where the next block
    does not follow the last, where it would pass ``max_bytes`` (a run holds one block at
    least), or where ``same`` gives it another value than the run's first block."""
    runs: list[list[Block]] = []
    for block in blocks:
        last = runs[-1] if runs else None
        if (last is not None and last[-1].number == block.number - 1
                and (max_bytes is None or block.end - last[0].offset <= max_bytes)
                and (same is None or same(block) == same(last[0]))):
            last.append(block)
        else:
            runs.append([block])
    return runs


def covering_blocks(ranges: Sequence[tuple[int, int]] | np.ndarray, block_size: int) -> list[int]:
    """The numbers, in order and once each, of the blocks of ``block_size`` bytes that the
    non-empty ``(offset, length)`` ranges touch (sorted without :func:`numpy.unique`, whose
    first call imports :mod:`numpy.ma`)."""
    asked = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)
    asked = asked[asked[:, 1] > 0]
    first = asked[:, 0] // block_size
    last = (asked[:, 0] + asked[:, 1] - 1) // block_size
    wide = np.flatnonzero(last - first > 1)  # ranges over three blocks or more: rare
    numbers = np.sort(np.concatenate(
        [first, last, *(np.arange(first[i], last[i] + 1) for i in wide.tolist())]))
    return numbers[np.concatenate([numbers[:1] == numbers[:1], numbers[1:] != numbers[:-1]])
                   ].tolist()


def run_matches(run: Sequence[Block], data: bytes | memoryview) -> list[bool]:
    """Whether each block of ``run`` (adjacent blocks) matches its bytes in ``data`` (the
    run's bytes, from its first block's offset on): its length and its digest. Range digests
    (BLAKE3) are hashed one block after the other in a loop that does nothing else (a long
    run's first half on a second thread meanwhile, where there is a second CPU), and the
    digests compared as one list."""
    base = run[0].offset
    if len(data) == run[-1].end - base and all(block.algorithm == BLAKE3 for block in run):
        view = memoryview(data)
        spans = [(block.offset - base, block.end - base) for block in run]
        helper = helper_thread() if len(run) >= SHARED_HASHING_BLOCKS else None
        if helper is None:
            found = _blake3_hexdigests(view, spans)
        else:  # BLAKE3 lets go of the GIL: the two halves are hashed at once
            half = len(spans) // 2
            first = helper.submit(_blake3_hexdigests, view, spans[:half])
            found = _blake3_hexdigests(view, spans[half:])
            found = first.result() + found
        if found == [block.digest for block in run]:
            return [True] * len(run)
        return [digest == block.digest for digest, block in zip(found, run, strict=True)]
    return [len(data) >= block.end - base and _matches_one(
        block, memoryview(data)[block.offset - base:block.end - base]) for block in run]


def _blake3_hexdigests(view: memoryview, spans: Sequence[tuple[int, int]]) -> list[str]:
    """BLAKE3 of ``view[start:end]`` for every ``(start, end)`` of ``spans``, in a loop that
    does nothing else."""
    return [blake3.blake3(view[start:end]).hexdigest() for start, end in spans]


def _matches_one(block: Block, data: bytes | memoryview) -> bool:
    digest = new_hash(block.algorithm)
    digest.update(data)
    return len(data) == block.length and digest.hexdigest() == block.digest


def joined_windows(pieces: Iterable[tuple[int, memoryview]]) -> Iterator[tuple[int, memoryview]]:
    """``(file offset, bytes)`` pieces in file order, with those that follow each other in
    the file and in one buffer (the blocks of one fetched or cached run) joined into one
    window: a pass over blocks kept in memory is a few windows, not one per block."""
    owner: object = None
    base = first = start = end = 0
    for offset, view in pieces:
        address = np.frombuffer(view, dtype=np.uint8).ctypes.data if len(view) else -1
        if view.obj is owner and owner is not None and offset == first + end - start \
                and address == base + end:
            end += len(view)
            continue
        if owner is not None:
            yield first, memoryview(owner).cast("B")[start:end]  # type: ignore[arg-type]
        owner = view.obj if holds_its_views(view.obj) else None
        if owner is None:
            yield offset, view
            continue
        base = np.frombuffer(owner, dtype=np.uint8).ctypes.data  # type: ignore[call-overload]
        first, start, end = offset, address - base, address - base + len(view)
    if owner is not None:
        yield first, memoryview(owner).cast("B")[start:end]  # type: ignore[arg-type]


def merged_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The non-empty ``(offset, length)`` ranges sorted, with those that overlap or touch
    merged: the same bytes, each once."""
    merged: list[list[int]] = []
    for offset, length in sorted(r for r in ranges if r[1] > 0):
        if merged and offset <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], offset + length)
        else:
            merged.append([offset, offset + length])
    return [(start, end - start) for start, end in merged]


_DIGEST_LABELS: Final = {"sha256": "SHA-256", "blake3": "BLAKE3"}


def block_mismatch(name: str, mirror: str, bad: Block, received: int) -> CorruptedDataError:
    """The error for block ``bad`` of the file ``name``, of which ``mirror`` sent
    ``received`` bytes that do not match the manifest."""
    what = (f"only {received} of its {bad.length} bytes arrived" if received < bad.length
            else f"its {_DIGEST_LABELS[bad.algorithm]} differs from the manifest's")
    return CorruptedDataError(
        f"{name}: bytes {bad.offset}-{bad.end - 1} (block {bad.number}) from mirror {mirror} "
        f"do not match the manifest ({what}): the mirror serves modified or truncated data. "
        "Nothing unverified was kept, and the rest of the file stays readable; read it from "
        "another mirror, or ask the registry's owner to restore the file as published")
