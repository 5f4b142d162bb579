"""Recordings in progress: a durable, append-only journal of finished episodes.

A recorder appends every finished episode to ``episodes.journal`` in its recording folder
(``<datasets root>/.marl_minari/recordings/<name>/``) before control returns to the caller, so
a killed process loses at most the episode it was in. Each journal record is framed and
checksummed: a record cut short by a kill fails its check and is ignored, and everything
before it is intact. :func:`recover_recording` (``marl-minari recover``) turns the finished
episodes of a recording into a dataset that ``minari.load_dataset`` opens.

Record layout: ``MAGIC (4 bytes) | header length (u32) | payload length (u64) | CRC-32 of
header and payload (u32) | header (JSON) | payload`` (little endian). The header lists the
leaves (HDF5 path, dtype, shape), the step count, seed, options and text leaves; the payload
is the leaves' bytes back to back.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marl_minari.episode import MultiAgentEpisode
from marl_minari.errors import CorruptedDataError, DatasetNotFoundError
from marl_minari.spec import MultiAgentSpec
from marl_minari.writer import LeafEpisode, append_to_dataset, episode_leaves, staging_root
from marl_minari.writer import write_dataset as _write_dataset

MAGIC = b"MMEP"
_FRAME = struct.Struct("<4sIQI")
JOURNAL_NAME = "episodes.journal"
SPEC_NAME = "recording.json"


def recordings_root() -> Path:
    """Folder holding all recordings in progress (hidden from Minari's listings)."""
    path = staging_root() / "recordings"
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass(frozen=True)
class RecordingInfo:
    """A recording folder and what it holds."""

    path: Path
    episodes: int
    steps: int
    created: float
    env: str


class Recording:
    """A recording folder: its spec and its episode journal.

    Args:
        spec: agents and spaces of the episodes.
        jpeg_encoding: passed on to the dataset created from it.
        path: the folder; a new one under :func:`recordings_root` by default.
    """

    def __init__(self, spec: MultiAgentSpec, *, jpeg_encoding: bool = True,
                 path: Path | None = None) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        self.path = Path(path) if path is not None else (
            recordings_root() / f"{stamp}-{uuid.uuid4().hex[:8]}")
        self.path.mkdir(parents=True, exist_ok=True)
        self.spec = spec
        self.jpeg_encoding = jpeg_encoding
        _atomic_write(self.path / SPEC_NAME, json.dumps({
            "spec": spec.to_json(), "jpeg_encoding": jpeg_encoding, "created": time.time()}))
        self.episodes = _trim_journal(self.path / JOURNAL_NAME)
        self._journal = open(self.path / JOURNAL_NAME, "ab", buffering=0)  # noqa: SIM115

    @classmethod
    def open(cls, path: Path) -> Recording:
        """Open an existing recording folder (to recover it).

        Raises:
            DatasetNotFoundError: ``path`` is not a recording folder.
        """
        path = Path(path)
        try:
            meta = json.loads((path / SPEC_NAME).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise DatasetNotFoundError(f"{path} is not a recording folder ({exc})") from exc
        return cls(MultiAgentSpec.from_json(meta["spec"]), jpeg_encoding=meta["jpeg_encoding"],
                   path=path)

    def append(self, episode: MultiAgentEpisode) -> None:
        """Append one finished episode; it is in the file when this returns."""
        self._journal.write(encode_record(episode))
        self.episodes += 1

    def read(self) -> Iterator[LeafEpisode]:
        """Every complete episode in the journal, in order (a torn tail is skipped)."""
        return read_journal(self.path / JOURNAL_NAME)

    def write_dataset(self, dataset_id: str, **metadata: Any) -> Path:
        """Write the journal's episodes as a new dataset, then start an empty journal."""
        target = _write_dataset(dataset_id, self.read(), self.spec, total=self.episodes,
                                jpeg_encoding=self.jpeg_encoding, **metadata)
        self._restart_journal()
        return target

    def add_to_dataset(self, dataset_id: str,
                       episode_metadata: list[dict[str, Any]] | None = None) -> Path:
        """Append the journal's episodes to an existing dataset, then empty the journal."""
        target = append_to_dataset(dataset_id, self.read(), self.spec,
                                   episode_metadata=episode_metadata)
        self._restart_journal()
        return target

    def close(self, *, keep: bool) -> None:
        """Close the journal; delete the folder unless ``keep`` or it holds episodes."""
        self._journal.close()
        if not keep and self.episodes == 0:
            shutil.rmtree(self.path, ignore_errors=True)

    def _restart_journal(self) -> None:
        self._journal.close()
        os.replace(self.path / JOURNAL_NAME, self.path / (JOURNAL_NAME + ".done"))
        self._journal = open(self.path / JOURNAL_NAME, "ab", buffering=0)  # noqa: SIM115
        (self.path / (JOURNAL_NAME + ".done")).unlink()
        self.episodes = 0


def encode_record(episode: MultiAgentEpisode) -> bytes:
    """One journal record for ``episode``."""
    leaves, texts, chunks = [], {}, []
    for path, array in episode_leaves(episode):
        if array.dtype == object:
            texts[path] = [str(v) for v in array]
            continue
        array = np.ascontiguousarray(array)
        leaves.append([path, array.dtype.str, list(array.shape)])
        chunks.append(array.tobytes())
    header = json.dumps({
        "leaves": leaves, "texts": texts, "steps": episode.total_steps,
        "seed": episode.seed, "options": episode.options,
    }, default=_jsonable).encode()
    payload = b"".join(chunks)
    crc = zlib.crc32(header + payload)
    return _FRAME.pack(MAGIC, len(header), len(payload), crc) + header + payload


def _records(path: Path) -> Iterator[tuple[int, bytes, int]]:
    """``(end offset, body, header length)`` of each intact record, up to the first damaged."""
    end = 0
    with open(path, "rb") as handle:
        while True:
            frame = handle.read(_FRAME.size)
            if len(frame) < _FRAME.size:
                return
            magic, header_len, payload_len, crc = _FRAME.unpack(frame)
            if magic != MAGIC:
                return
            body = handle.read(header_len + payload_len)
            if len(body) < header_len + payload_len or zlib.crc32(body) != crc:
                return
            end += _FRAME.size + len(body)
            yield end, body, header_len


def _complete_records(path: Path) -> tuple[int, int]:
    """``(bytes, records)`` of the complete, intact records at the start of a journal."""
    ends = [end for end, _, _ in _records(path)]
    return (ends[-1] if ends else 0), len(ends)


def _trim_journal(path: Path) -> int:
    """Cut a damaged tail off an existing journal before appending to it.

    Records appended after a torn one would be unreadable (reading stops at the first damaged
    record), so the tail is moved to ``episodes.journal.damaged`` and the journal cut back to
    its last complete record. Returns the number of complete records.
    """
    if not path.exists():
        return 0
    length, count = _complete_records(path)
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
    for _, body, header_len in _records(path):
        yield _decode(json.loads(body[:header_len]), body[header_len:])


def _decode(header: dict[str, Any], payload: bytes) -> LeafEpisode:
    leaves: list[tuple[str, np.ndarray]] = []
    offset = 0
    for path, dtype, shape in header["leaves"]:
        array = np.frombuffer(payload, dtype=np.dtype(dtype), count=int(np.prod(shape)),
                              offset=offset).reshape(shape)
        leaves.append((path, array))
        offset += array.nbytes
    for path, values in header["texts"].items():
        leaves.append((path, np.array(values, dtype=object)))
    return LeafEpisode(leaves, header["steps"], header["seed"], header["options"])


def list_recordings() -> list[RecordingInfo]:
    """Recordings under :func:`recordings_root` that still hold finished episodes."""
    found = []
    for folder in sorted(recordings_root().iterdir()):
        journal = folder / JOURNAL_NAME
        if not journal.exists():
            continue
        steps = [json.loads(body[:header_len])["steps"] for _, body, header_len
                 in _records(journal)]
        if not steps:
            continue
        try:
            meta = json.loads((folder / SPEC_NAME).read_text())
            env = json.loads(meta["spec"])["marl"].get("env") or {}
        except (OSError, json.JSONDecodeError, KeyError):
            meta, env = {"created": folder.stat().st_mtime}, {}
        found.append(RecordingInfo(folder, len(steps), sum(steps),
                                   meta.get("created", 0.0),
                                   env.get("env_id") or env.get("entry_point") or "unknown"))
    return found


def recover_recording(path: str | Path, dataset_id: str, **metadata: Any) -> Path:
    """Turn the finished episodes of a (possibly killed) recording into a dataset.

    Args:
        path: the recording folder (see :func:`list_recordings`).
        dataset_id: id of the new dataset.
        **metadata: Minari metadata, as for ``create_dataset``.

    Returns:
        The new dataset's folder. The recording folder is removed once the dataset exists.

    Raises:
        CorruptedDataError: the recording holds no complete episode.
    """
    recording = Recording.open(Path(path))
    if recording.episodes == 0:
        recording.close(keep=True)
        raise CorruptedDataError(f"recording {path} holds no complete episode to recover")
    target = recording.write_dataset(dataset_id, **metadata)
    recording.close(keep=False)
    shutil.rmtree(recording.path, ignore_errors=True)
    return target


def _atomic_write(path: Path, text: str) -> None:
    temporary = path.with_suffix(path.suffix + ".tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
