"""The recording journal's file format: framed, checksummed records of finished episodes.

Record layout: ``MAGIC (4 bytes) | header length (u32) | payload length (u64) | CRC-32 of
header and payload (u32) | header (JSON) | payload`` (little endian). The header lists the
leaves (HDF5 path, dtype, shape), the step count, seed, options, text leaves, the episode's
metadata, and the record's id: the journal's id and the record's number in it. The payload is
the leaves' bytes back to back. A leaf the dataset stores as JPEG frames (image observations
with ``jpeg_encoding``, a ``"jpeg"`` state) is encoded once, here: its header entry carries a
fourth item, the byte length of each row's JPEG file, and its payload is those files back to
back (``create_dataset`` copies them as they are). A record cut short by a kill fails its
check and is ignored, and everything before it is intact.
"""

from __future__ import annotations

import functools
import json
import math
import os
import struct
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from marl_minari.format.jpeg import FrameRows, JpegFrames, encode
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.episode_writer import Leaf, LeafEpisode, episode_leaves

MAGIC = b"MMEP"
FRAME = struct.Struct("<4sIQI")
"""The fixed-size frame before every record's header and payload."""
_JOIN_BELOW = 1 << 20


def encode_record(episode: MultiAgentEpisode, journal: str = "", seq: int = 0,
                  metadata: dict[str, Any] | None = None) -> bytes:
    """One journal record for ``episode``: record ``seq`` of journal ``journal``."""
    return b"".join(record_parts(episode, journal, seq, metadata))


def record_parts(episode: MultiAgentEpisode, journal: str = "", seq: int = 0,
                 metadata: dict[str, Any] | None = None,
                 jpeg: frozenset[str] = frozenset()) -> list[bytes | memoryview]:
    """The record of :func:`encode_record` as buffers to write one after the other.

    The leaves' bytes are not copied: an image episode is hundreds of MB, and joining it
    into one ``bytes`` (and that again with its header) cost more than writing it. Leaves
    named in ``jpeg`` are stored as JPEG frames (see the module's docs).
    """
    leaves: list[list[Any]] = []
    texts: dict[str, list[str]] = {}
    views: list[memoryview] = []
    for path, array in episode_leaves(episode):
        if isinstance(array, np.ndarray) and array.dtype == object:
            texts[path] = [str(v) for v in array]
            continue
        entry: list[Any] = [path, array.dtype.str, list(array.shape)]
        if path in jpeg:
            frames = encode(array).frames
            entry.append([len(frame) for frame in frames])
            views.extend(frame.data for frame in frames)
        else:
            if isinstance(array, FrameRows):
                array = array.stack()
            views.append(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
        leaves.append(entry)
    header = json.dumps({
        "leaves": leaves, "texts": texts, "steps": episode.total_steps,
        "seed": episode.seed, "options": episode.options, "metadata": metadata,
        "journal": journal, "seq": seq,
    }, default=_jsonable).encode()
    crc = zlib.crc32(header)
    for view in views:
        crc = zlib.crc32(view, crc)
    frame = FRAME.pack(MAGIC, len(header), sum(v.nbytes for v in views), crc)
    return [frame, header, *views]


def write_all(handle: Any, parts: list[bytes | memoryview]) -> None:
    """Write every byte of ``parts`` (an unbuffered file may write less than asked).

    Small records are joined first: one system call costs less than copying a few KB.
    """
    if sum(memoryview(part).nbytes for part in parts) < _JOIN_BELOW:
        parts = [b"".join(parts)]
    for part in parts:
        view = memoryview(part).cast("B")
        while view.nbytes:
            view = view[handle.write(view):]


def records(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """``(end offset, body, header length)`` of each intact record, up to the first damaged."""
    end = 0
    with open(path, "rb") as handle:
        while True:
            frame = handle.read(FRAME.size)
            if len(frame) < FRAME.size:
                return
            magic, header_len, payload_len, crc = FRAME.unpack(frame)
            if magic != MAGIC:
                return
            body = handle.read(header_len + payload_len)
            if len(body) < header_len + payload_len or zlib.crc32(body) != crc:
                return
            end += FRAME.size + len(body)
            yield end, body, header_len


def _completerecords(path: Path) -> tuple[int, int]:
    """``(bytes, records)`` of the complete, intact records at the start of a journal."""
    ends = [end for end, _, _ in records(path)]
    return (ends[-1] if ends else 0), len(ends)


def trim_journal(path: Path) -> int:
    """Cut a damaged tail off an existing journal before appending to it.

    Records appended after a torn one would be unreadable (reading stops at the first damaged
    record), so the tail is moved to ``episodes.journal.damaged`` and the journal cut back to
    its last complete record. Returns the number of complete records.
    """
    if not path.exists():
        return 0
    length, count = _completerecords(path)
    if path.stat().st_size > length:
        with open(path, "rb") as handle:
            handle.seek(length)
            tail = handle.read()
        with open(path.with_name(path.name + ".damaged"), "ab") as damaged:
            damaged.write(tail)
        os.truncate(path, length)
    return count


def read_journal(path: Path) -> Iterator[LeafEpisode]:
    """Decode the complete records of a journal file; stop at the first damaged one."""
    for _, body, header_len in records(path):
        yield _decode(json.loads(body[:header_len]), body[header_len:])


def _decode(header: dict[str, Any], payload: bytes) -> LeafEpisode:
    leaves: list[tuple[str, Leaf]] = []
    offset = 0
    for path, dtype, shape, *jpeg in header["leaves"]:
        if jpeg:
            frames = []
            for length in jpeg[0]:
                frames.append(np.frombuffer(payload, np.uint8, count=length, offset=offset))
                offset += length
            leaves.append((path, JpegFrames(np.dtype(dtype), tuple(shape), frames)))
            continue
        array = np.frombuffer(payload, dtype=_dtype(dtype), count=math.prod(shape),
                              offset=offset).reshape(shape)
        leaves.append((path, array))
        offset += array.nbytes
    for path, values in header["texts"].items():
        leaves.append((path, np.array(values, dtype=object)))
    return LeafEpisode(leaves, header["steps"], header["seed"], header["options"],
                       header.get("metadata"))


@functools.lru_cache(maxsize=64)
def _dtype(name: str) -> np.dtype:
    # Parsing a dtype string costs more than reading a short leaf; a journal has few of them.
    return np.dtype(name)


def headers(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON header of every intact record of a journal."""
    if path.exists():
        for _, body, header_len in records(path):
            yield json.loads(body[:header_len])


def record_id(header: dict[str, Any], position: int) -> tuple[str, int]:
    """``(journal id, number)`` of a record (records of early journals carry neither)."""
    return str(header.get("journal", "")), int(header.get("seq", position))


def journal_position(path: Path) -> tuple[str, int]:
    """The journal's id and the number its next record gets (a fresh id when it is empty)."""
    last = None
    for position, header in enumerate(headers(path)):
        last = record_id(header, position)
    return (uuid.uuid4().hex, 0) if last is None else (last[0], last[1] + 1)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def record_leaves(path: Path) -> int:
    """How many datasets the first record of a journal has (an episode's leaves, text leaves
    included); 0 for an empty journal."""
    for header in headers(path):
        return len(header["leaves"]) + len(header["texts"])
    return 0
