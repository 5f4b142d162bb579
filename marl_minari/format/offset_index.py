"""The offset index: byte offsets of contiguous HDF5 datasets, written, parsed and verified here.

``marl_minari_index.npz`` beside ``main_data.hdf5`` lets readers copy contiguous datasets
straight out of a memory map instead of opening each one through HDF5. It is a cache, never a
source of truth: a reader uses it only after the cheap checks of :func:`load` (``docs/format.md``,
"marl_minari_index.npz"), and reads through h5py whenever anything disagrees.

Before an entry's bytes are read, :mod:`marl_minari.format.index_trust` binds it to the file,
at a cost that follows the read: each entry read is compared with HDF5's own storage offset,
dtype and shape of that dataset (a few low-level opens, once per process and file state, or
per published file), so reading one episode of a copied, downloaded or streamed dataset costs
a few such opens, never a pass over the whole file. Every
entry is trusted at once only for a file that a local writer indexed and left unchanged (its
digests sidecar describes the file's current state): never on the word of the index itself,
whose header anyone who forges the index also writes.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import uuid
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import blake3
import h5py
import numpy as np

from marl_minari.format import layout
from marl_minari.format.digests import (
    BLAKE3,
    StatKey,
    hash_file,
    remember_digests,
    remembered_digests,
    stat_key,
)
from marl_minari.format.entry_checks import (
    ReadAs,
    episode_group,
    layout_mismatches,
    read_as_stored,
    read_count,
    stored_offset,
)
from marl_minari.format.in_file import dataset_in_file

INDEX_VERSION: Final = 2
"""Version 1 indexes (bound to the file size only) are ignored: readers use HDF5 for them."""

SEAL_ATTRIBUTE: Final = "marl_minari_index_blake3"
"""Root attribute of ``main_data.hdf5``: BLAKE3 of the index's content (:func:`content_digest`),
so an index edited after the file was written is never trusted."""

VERIFY_STEP_EPISODES: Final = 2048
"""Episodes :func:`verify_or_drop` compares between two reports to its ``progress``: each
step resolves its paths from the root again, so fewer, larger steps cost less (a download of
2,000 episodes: a median of 0.44 s against 0.52 s with steps of 256)."""

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
        fingerprint: BLAKE3 hex digest of ``main_data.hdf5`` when the index was written, as
            its header claims (so only ever compared with a digest a local writer
            remembered); ``None`` when the writer did not hash the file (an append).
        content: :func:`content_digest` of the index as read (what :func:`seal` stored).
    """

    steps: np.ndarray
    offsets: dict[str, np.ndarray]
    file_size: int
    fingerprint: str | None
    content: str


def seal(file: h5py.File, offsets: dict[str, list[int]] | dict[str, np.ndarray],
         steps: list[int] | np.ndarray) -> None:
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


def write(h5_path: Path, offsets: dict[str, list[int]] | dict[str, np.ndarray],
          steps: list[int] | np.ndarray, *, hashed: bool = True) -> None:
    """Write the index of the closed file ``h5_path`` (sealed by :func:`seal`) beside it,
    atomically; ``hashed=False`` leaves the file's digest out (``null``), which an append
    does so that its cost does not grow with the file."""
    paths = sorted(offsets)
    header = {"version": INDEX_VERSION, "file_size": h5_path.stat().st_size,
              "blake3": fingerprint(h5_path) if hashed else None, "paths": paths}
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
        if (header["version"] != INDEX_VERSION or not isinstance(digest, (str, type(None)))
                or not isinstance(file_size, int)):
            return None
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile) as exc:
        logger.debug("ignoring the offset index %s: %s", path, exc)
        return None
    if steps.ndim != 1 or any(o.shape != steps.shape for o in offsets.values()):
        return None
    return OffsetIndex(steps, offsets, file_size, digest, content_digest(steps, offsets))


def load(data_path: Path, file: h5py.File, total_episodes: int,
         total_steps: int, *, file_size: int | None = None,
         sample: bool = True) -> OffsetIndex | None:
    """The index of ``data_path`` if every cheap check passes, else ``None``.

    Checks, in order of cost: it was written for a file of this size and covers
    ``total_episodes`` episodes of no negative length summing to ``total_steps``; every
    offset is ``-1`` or inside the file; the file holds the digest of exactly this index
    (:func:`seal`, so the index was not edited); with ``sample``, the first, middle and last
    episodes' offsets equal HDF5's storage offsets (``sample=False`` reads nothing of the
    file beyond its root attributes: for episode lengths alone, read from a remote file, or
    for a reader that answers the sample from what it remembers,
    :func:`~marl_minari.format.index_trust.sample_agrees`).
    None of this grows with the number of episodes beyond reading the index itself, and
    nothing here reads the whole file: an entry is bound to the file by
    :func:`~marl_minari.format.index_trust.trusted_leaves`
    before its bytes are read (so an episode deleted since is never read through the index),
    and :func:`mismatches` checks every entry (the conformance check does).

    ``file_size``: the data file's size when ``file`` is not the local ``main_data.hdf5`` of
    ``data_path`` (a remote file read by ranges; the index is still read from ``data_path``).
    """
    index = read(data_path)
    if index is None:
        return None
    size = (Path(data_path) / layout.MAIN_FILE_NAME).stat().st_size if file_size is None \
        else file_size
    if (index.file_size != size or len(index.steps) != total_episodes
            or int(index.steps.sum()) != total_steps or bool((index.steps < 0).any())
            or not _offsets_plausible(index, size)
            or file.attrs.get(SEAL_ATTRIBUTE) != index.content):
        return None
    if sample and mismatches(index, file, sampled_episodes(total_episodes)):
        return None
    return index


def sampled_episodes(total_episodes: int) -> list[int]:
    """The episodes whose entries :func:`load`'s sample compares with HDF5: the first, the
    middle and the last."""
    return sorted({0, total_episodes // 2, total_episodes - 1} - {-1})


def verify_or_drop(data_path: Path, total_episodes: int, total_steps: int,
                   read_as: Mapping[str, ReadAs | None], *,
                   progress: Callable[[int], None] | None = None) -> bool:
    """Check the index in ``data_path`` against its HDF5 file, deleting it where it is wrong.

    For a dataset arriving from elsewhere (a download) before it is installed: its installer
    may vouch for an index only once every entry agrees (see
    :mod:`~marl_minari.format.index_trust`) as readers that trust it whole would read it. The
    cheap checks of :func:`load` run first (an index failing them is deleted); then every
    entry of every episode is compared with HDF5, offset, type and shape
    (:func:`~marl_minari.format.entry_checks.layout_mismatches`), whatever their number (once
    here, so that no later reader pays for it), and the index is deleted if any disagrees.

    Args:
        read_as: how readers read the spec's leaves (the dataset's own, from its metadata:
            :func:`marl_minari.storage.reader_state.spec_read_as`); every other path is
            read as its first entry is stored.
        progress: called with the number of episodes compared since its last call.

    Returns:
        ``True``: every entry agrees. ``False``: no index is left.
    """
    index_path = Path(data_path) / layout.INDEX_FILE_NAME
    if not index_path.exists():
        return False
    try:
        with h5py.File(Path(data_path) / layout.MAIN_FILE_NAME, "r") as file:
            index = load(Path(data_path), file, total_episodes, total_steps)
            wrong = (["fails the cheap checks"] if index is None
                     else whole_file_mismatches(index, file, read_as, progress))
    except (OSError, ValueError, KeyError) as exc:
        wrong = [f"cannot be compared with the data file ({exc})"]
    if wrong:
        logger.warning("dropping %s: %s", index_path, "; ".join(wrong[:3]))
        index_path.unlink(missing_ok=True)
        return False
    return True


def whole_file_mismatches(index: OffsetIndex, file: h5py.File,
                          read_as: Mapping[str, ReadAs | None],
                          progress: Callable[[int], None] | None = None) -> list[str]:
    """Every entry of every episode that a reader trusting the whole index would misread,
    as lines (:func:`~marl_minari.format.entry_checks.layout_mismatches`: the offset, type and
    shape of each, ``read_as`` giving the spec's leaves); empty when none. In steps of
    episodes reported to ``progress``; stops at the first step that finds any.

    The file may be vouched for (:func:`vouch`) only when this is empty."""
    layouts, wrong = read_as_stored(file, index.offsets, read_as)
    if wrong:
        return wrong
    total = len(index.steps)
    for start in range(0, total, VERIFY_STEP_EPISODES):
        stop = min(start + VERIFY_STEP_EPISODES, total)
        wrong = layout_mismatches(file, index.steps, index.offsets, layouts, range(start, stop))
        if wrong:
            return wrong
        if progress is not None:
            progress(stop - start)
    return []


def vouch(data_path: Path, index: OffsetIndex | None = None,
          state: StatKey | None = None) -> bool:
    """Remember the data file of ``data_path`` as its local writer does (the digests
    sidecar), after the caller compared every entry of its index with it as readers read them
    and found no :func:`whole_file_mismatches` (a download, the conformance check; the writer
    remembers what it wrote itself). Readers then
    trust the whole index at once (:mod:`~marl_minari.format.index_trust`) while the file
    stays in this state.

    Args:
        index: the index that was compared (default: the one in ``data_path``).
        state: the file's :func:`file_state` when it was compared; it is remembered only if
            it is still in that state when hashed.

    Returns:
        Whether readers now trust the whole index: the sidecar describes the file's current
        state with the digest the index was written for. ``False`` where the folder cannot be
        written, the file changed, or the index has no digest (written by an append).
    """
    main = f"data/{layout.MAIN_FILE_NAME}"
    index = index if index is not None else read(data_path)
    folder = Path(data_path).parent
    known = remembered_digests(folder).get(main)
    if known is None or (state is not None and known.stat != state):
        remember_digests(folder, [f"data/{name}" for name in (
            layout.MAIN_FILE_NAME, layout.METADATA_FILE_NAME, layout.INDEX_FILE_NAME)
            if (Path(data_path) / name).is_file()],
            expected=None if state is None else {main: state})
        known = remembered_digests(folder).get(main)
    return (index is not None and index.fingerprint is not None and known is not None
            and known.digests.blake3 == index.fingerprint
            and (state is None or known.stat == state))


def extendable(index: OffsetIndex | None, file: h5py.File,
               episodes: int) -> OffsetIndex | None:
    """``index`` cut to its first ``episodes`` entries, if it was written with ``file`` (its
    seal), for an append to extend; else ``None``.

    Nothing here reads the episodes: entries that a later write outdated are caught where
    they are read (:mod:`~marl_minari.format.index_trust`), as for any index.
    """
    if (index is None or len(index.steps) < episodes
            or file.attrs.get(SEAL_ATTRIBUTE) != index.content):
        return None
    steps = index.steps[:episodes]
    offsets = {path: found[:episodes] for path, found in index.offsets.items()}
    return OffsetIndex(steps, offsets, index.file_size, None, content_digest(steps, offsets))


def joined(previous: OffsetIndex, offsets: dict[str, list[int]],
           steps: list[int]) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The entries of ``previous`` followed by those of the episodes written after it
    (``-1`` where a path exists on one side only)."""
    before, after = len(previous.steps), len(steps)
    merged = {}
    for path in previous.offsets.keys() | offsets.keys():
        old = previous.offsets.get(path)
        new = offsets.get(path)
        merged[path] = np.concatenate([
            np.full(before, -1, dtype=np.int64) if old is None else old,
            np.full(after, -1, dtype=np.int64) if new is None else np.asarray(new, np.int64)])
    return merged, np.concatenate([previous.steps, np.asarray(steps, dtype=np.int64)])


def dataset_id(group: h5py.Group, path: str) -> h5py.h5d.DatasetID | None:
    """The low-level dataset at ``path`` under ``group``; ``None`` if there is none there.

    About ten times cheaper than ``group.get(path)``, which builds a high-level object (and
    its file object) per call: what checking every dataset of every episode adds up to.
    """
    return dataset_in_file(group.id, path.encode())


def mismatches(index: OffsetIndex, file: h5py.File,
               episode_ids: Any) -> list[str]:
    """Index entries of ``episode_ids`` whose offset is not HDF5's (one low-level open per
    dataset), and episodes whose ``total_steps`` is not the index's, as
    ``"episode_<e>/<path>: ..."`` lines; empty when all agree.

    Offsets alone: what :func:`load`'s sample compares before an index is used at all. A
    whole file is trusted only after :func:`verify_or_drop`, which also compares each
    entry's type and shape.
    """
    found = []
    paths = [(path, path.encode(), offsets) for path, offsets in index.offsets.items()]
    total_steps = np.empty(1, dtype=np.int64)
    for episode_id in episode_ids:
        group = episode_group(file, episode_id)
        if group is None:
            found.append(f"episode_{episode_id}: missing from the file")
            continue
        if (read_count(group, total_steps) is None
                or total_steps[0] != index.steps[episode_id]):
            found.append(f"episode_{episode_id}: total_steps differs from the index")
        for path, encoded, offsets in paths:
            expected = int(offsets[episode_id])
            if expected < 0:
                continue
            actual = _offset(group, encoded)
            if actual != expected:
                found.append(f"episode_{episode_id}/{path}: index says offset {expected}, "
                             f"the file {actual}")
    return found


def _offset(group: h5py.h5g.GroupID, path: bytes) -> int | None:
    """HDF5's storage offset of the dataset ``path`` under ``group``; ``None`` if it is not
    a dataset stored contiguously in the file."""
    found = dataset_in_file(group, path)
    return None if found is None else stored_offset(found)


def file_state(file: h5py.File) -> StatKey:
    """``stat_key`` of the file ``file`` has open (not of whatever its path names now)."""
    return stat_key(os.fstat(file.id.get_vfd_handle()))


def fingerprint(h5_path: Path) -> str:
    """BLAKE3 of the file: remembered by the dataset when still valid, else hashed (once per
    file state and process)."""
    h5_path = Path(h5_path)
    state = stat_key(os.stat(h5_path))
    known = _cached_fingerprint(h5_path, state)
    if known is not None:
        return known
    digest = hash_file(h5_path, (BLAKE3,))[1][BLAKE3]
    if stat_key(os.stat(h5_path)) != state:  # written while hashed: do not remember
        return digest
    with _FINGERPRINTS_LOCK:
        _FINGERPRINTS[(str(h5_path.resolve()), state)] = digest
    return digest


def _cached_fingerprint(h5_path: Path, state: tuple[int, ...]) -> str | None:
    """BLAKE3 of the file at ``h5_path`` in stat state ``state``, if this process hashed it
    in that state or the dataset's remembered digests describe that state; else ``None``."""
    key = (str(h5_path.resolve()), state)
    with _FINGERPRINTS_LOCK:
        known = _FINGERPRINTS.get(key)
    if known is not None:
        return known
    remembered = remembered_digests(h5_path.parent.parent).get(f"data/{h5_path.name}")
    if remembered is None or remembered.stat != state:
        return None
    with _FINGERPRINTS_LOCK:
        _FINGERPRINTS[key] = remembered.digests.blake3
    return remembered.digests.blake3


def _offsets_plausible(index: OffsetIndex, file_size: int) -> bool:
    # Not "growing with the episode id": HDF5 reuses free space, so a later episode's small
    # dataset can sit before an earlier one's.
    return all(not ((offsets < -1).any() or (offsets >= file_size).any())
               for offsets in index.offsets.values())
