"""The offset index: byte offsets of contiguous HDF5 datasets, written, parsed and verified here.

``marl_minari_index.npz`` beside ``main_data.hdf5`` lets readers copy contiguous datasets
straight out of a memory map instead of opening each one through HDF5. It is a cache, never a
source of truth: a reader trusts it only after the checks of :func:`load` (``docs/format.md``,
"marl_minari_index.npz"), and reads through h5py whenever anything disagrees. The index is
bound to the file's bytes by their BLAKE3 digest, so any write to the file after indexing
(deleting an episode, rewriting a dataset in place) invalidates it, whatever the file's size.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import blake3
import h5py
import numpy as np

from marl_minari.format import layout
from marl_minari.format.digests import BLAKE3, hash_file, remembered_digests, stat_key

INDEX_VERSION: Final = 2
"""Version 1 indexes (bound to the file size only) are ignored: readers use HDF5 for them."""

SEAL_ATTRIBUTE: Final = "marl_minari_index_blake3"
"""Root attribute of ``main_data.hdf5``: BLAKE3 of the index's content (:func:`content_digest`),
so an index edited after the file was written is never trusted."""

logger = logging.getLogger(__name__)
_FINGERPRINTS: dict[tuple[str, tuple[int, ...]], str] = {}
_FINGERPRINTS_LOCK = threading.Lock()


@dataclass(frozen=True)
class OffsetIndex:
    """A parsed index.

    Attributes:
        steps: ``(E,)`` ``total_steps`` of every episode.
        offsets: ``{path: (E,) int64}`` byte offset of ``episode_<e>/<path>`` in the file,
            ``-1`` where that dataset is absent or not stored contiguously.
        file_size: bytes of ``main_data.hdf5`` when the index was written.
        fingerprint: BLAKE3 hex digest of ``main_data.hdf5`` when the index was written.
    """

    steps: np.ndarray
    offsets: dict[str, np.ndarray]
    file_size: int
    fingerprint: str


def seal(file: h5py.File, offsets: dict[str, list[int]], steps: list[int]) -> None:
    """Record the digest of the index about to be written in ``file`` (still open)."""
    file.attrs[SEAL_ATTRIBUTE] = content_digest(
        np.asarray(steps, dtype=np.int64),
        {p: np.asarray(o, dtype=np.int64) for p, o in offsets.items()})


def content_digest(steps: np.ndarray, offsets: dict[str, np.ndarray]) -> str:
    """BLAKE3 of the index's paths, steps and offsets (little-endian int64, paths sorted)."""
    digest = blake3.blake3(json.dumps(sorted(offsets)).encode())
    digest.update(np.asarray(steps, dtype="<i8").tobytes())
    for path in sorted(offsets):
        digest.update(np.asarray(offsets[path], dtype="<i8").tobytes())
    return digest.hexdigest()


def write(h5_path: Path, offsets: dict[str, list[int]], steps: list[int]) -> None:
    """Write the index of the closed file ``h5_path`` (sealed by :func:`seal`) beside it,
    atomically."""
    paths = sorted(offsets)
    header = {"version": INDEX_VERSION, "file_size": h5_path.stat().st_size,
              "blake3": fingerprint(h5_path), "paths": paths}
    arrays: dict[str, Any] = {
        f"o{i}": np.asarray(offsets[p], dtype=np.int64) for i, p in enumerate(paths)}
    target = h5_path.parent / layout.INDEX_FILE_NAME
    temporary = target.with_name(f"{target.name}.{uuid.uuid4().hex}.tmp")
    with open(temporary, "wb") as handle:
        np.savez(handle, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                 steps=np.asarray(steps, dtype=np.int64), **arrays)
    os.replace(temporary, target)


def read(data_path: Path) -> OffsetIndex | None:
    """Parse the index in ``data_path``; ``None`` if it is absent, damaged or of another
    version (nothing is checked against the HDF5 file here: see :func:`load`)."""
    path = Path(data_path) / layout.INDEX_FILE_NAME
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as stored:
            header = json.loads(stored["header"].tobytes())
            paths = header["paths"]
            steps = np.asarray(stored["steps"], dtype=np.int64)
            offsets = {str(p): np.asarray(stored[f"o{i}"], dtype=np.int64)
                       for i, p in enumerate(paths)}
        digest, file_size = header["blake3"], header["file_size"]
        if (header["version"] != INDEX_VERSION or not isinstance(digest, str)
                or not isinstance(file_size, int)):
            return None
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        logger.debug("ignoring the offset index %s: %s", path, exc)
        return None
    if steps.ndim != 1 or any(o.shape != steps.shape for o in offsets.values()):
        return None
    return OffsetIndex(steps, offsets, file_size, digest)


def load(data_path: Path, file: h5py.File, total_episodes: int,
         total_steps: int) -> OffsetIndex | None:
    """The index of ``data_path`` if every cheap check passes, else ``None``.

    Checks, in order of cost: it was written for a file of this size, covers
    ``total_episodes`` episodes summing to ``total_steps``; every offset is ``-1`` or inside
    the file; the file
    holds the digest of exactly this index (:func:`seal`), and the file's BLAKE3 equals the
    one the index was written for (so neither was changed since); the first, middle and last
    episodes' offsets equal HDF5's storage offsets. :func:`mismatches` checks every entry
    (the conformance check does).
    """
    index = read(data_path)
    if index is None:
        return None
    h5_path = Path(data_path) / layout.MAIN_FILE_NAME
    size = h5_path.stat().st_size
    if (index.file_size != size or len(index.steps) != total_episodes
            or int(index.steps.sum()) != total_steps
            or not _offsets_plausible(index, size)
            or file.attrs.get(SEAL_ATTRIBUTE) != content_digest(index.steps, index.offsets)
            or fingerprint(h5_path) != index.fingerprint):
        return None
    sample = sorted({0, total_episodes // 2, total_episodes - 1} - {-1})
    if mismatches(index, file, sample):
        return None
    return index


def dataset_id(group: h5py.Group, path: str) -> h5py.h5d.DatasetID | None:
    """The low-level dataset at ``path`` under ``group``; ``None`` if there is none there.

    About ten times cheaper than ``group.get(path)``, which builds a high-level object (and
    its file object) per call: what checking every dataset of every episode adds up to.
    """
    try:
        found = h5py.h5o.open(group.id, path.encode())
    except (KeyError, ValueError):
        return None
    return found if isinstance(found, h5py.h5d.DatasetID) else None


def mismatches(index: OffsetIndex, file: h5py.File,
               episode_ids: Any) -> list[str]:
    """Index entries of ``episode_ids`` that disagree with the HDF5 file (one low-level call
    per dataset), as ``"episode_<e>/<path>: ..."`` lines; empty when all agree."""
    found = []
    for episode_id in episode_ids:
        group = file.get(f"episode_{episode_id}")
        if not isinstance(group, h5py.Group):
            found.append(f"episode_{episode_id}: missing from the file")
            continue
        if group.attrs.get("total_steps") != index.steps[episode_id]:
            found.append(f"episode_{episode_id}: total_steps differs from the index")
        for path, offsets in index.offsets.items():
            expected = int(offsets[episode_id])
            if expected < 0:
                continue
            dataset = dataset_id(group, path)
            actual = None if dataset is None else dataset.get_offset()
            if actual != expected:
                found.append(f"episode_{episode_id}/{path}: index says offset {expected}, "
                             f"the file {actual}")
    return found


def fingerprint(h5_path: Path) -> str:
    """BLAKE3 of the file: remembered by the dataset when still valid, else hashed (once per
    file state and process)."""
    h5_path = Path(h5_path)
    key = (str(h5_path.resolve()), stat_key(os.stat(h5_path)))
    with _FINGERPRINTS_LOCK:
        known = _FINGERPRINTS.get(key)
    if known is not None:
        return known
    remembered = remembered_digests(h5_path.parent.parent).get(
        f"data/{h5_path.name}")
    if remembered is not None and remembered.stat == key[1]:
        digest = remembered.digests.blake3
    else:
        digest = hash_file(h5_path, (BLAKE3,))[1][BLAKE3]
        if stat_key(os.stat(h5_path)) != key[1]:  # written while hashed: do not remember
            return digest
    with _FINGERPRINTS_LOCK:
        _FINGERPRINTS[key] = digest
    return digest


def _offsets_plausible(index: OffsetIndex, file_size: int) -> bool:
    # Not "growing with the episode id": HDF5 reuses free space, so a later episode's small
    # dataset can sit before an earlier one's.
    return all(not ((offsets < -1).any() or (offsets >= file_size).any())
               for offsets in index.offsets.values())
