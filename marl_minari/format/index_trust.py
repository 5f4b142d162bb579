"""When a reader may read an offset-index entry as bytes: :func:`trusted_leaves`.

An entry is trusted when HDF5 says ``episode_<e>/<path>`` is stored contiguously at the
indexed offset, with exactly the leaf's type and shape (then its bytes are that dataset's, as
h5py would read them): :mod:`.entry_checks` compares them, a whole read's entries at once, one
episode group at a time. What was compared is remembered, per process, under the identity of
the bytes compared:

* a local file: its state (device, inode, size, times), so a write starts afresh;
* a published file read by ranges (``docs/registry.md``, *Reading in place*): the digests
  that every byte it serves was verified against (:class:`PublishedBytes`), in this process
  and in a record on disk beside the stream's verified small files
  (:mod:`.comparison_record`), so another pass, process or Ray task on the machine compares
  nothing again;
* any other byte supplier: nothing, each reader compares again.

Every entry is trusted at once only when the file is, to the byte, the one a local writer
indexed: the digests sidecar it wrote describes the file's current state with the digest the
index was written for. Nothing an index author writes decides that.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import h5py
import numpy as np
from numpy.typing import DTypeLike

from marl_minari.format import comparison_record, entry_checks
from marl_minari.format.comparison_record import PublishedBytes
from marl_minari.format.digests import remembered_digests, stat_key
from marl_minari.format.entry_checks import LeafChecks, RawFile
from marl_minari.format.offset_index import (
    OffsetIndex,
    file_state,
    mismatches,
    sampled_episodes,
)

_BINDINGS: dict[tuple[Any, ...], _Binding] = {}
_BINDINGS_KEPT: Final = 64
_BINDINGS_LOCK = threading.Lock()
_UNSAVED: dict[tuple[Any, ...], tuple[_Binding, str]] = {}
"""The bindings of published files, kept until exit so that their last results are written."""


@dataclass(frozen=True)
class LeafEntries:
    """The entries of one leaf a read would take as bytes.

    Attributes:
        path: the leaf's path under ``episode_<e>``.
        episode_ids: ``(n,)`` the episodes.
        dtype, row_shape: how the bytes would be read.
        rows: ``(n,)`` rows of each episode's dataset.
    """

    path: str
    episode_ids: np.ndarray
    dtype: DTypeLike
    row_shape: tuple[int, ...]
    rows: np.ndarray


class _Binding:
    """What one process knows of one index against one state of its bytes."""

    def __init__(self, published: PublishedBytes | None = None,
                 checked: dict[tuple[str, str], np.ndarray] | None = None) -> None:
        self.lock = threading.Lock()
        self.published = published
        self.whole_file: bool | None = None  # None: not decided yet (see trusted_leaves)
        self.checked = checked or {}
        """``(path, leaf signature)`` -> per episode: 1 agrees, -1 differs, 0 not compared."""
        self.compared = 0
        self.unsaved = 0
        """Comparisons this process made, and those not yet in the record on disk."""

    def remember(self, index_content: str, new: int) -> None:
        """Count ``new`` comparisons; write the record when they grew what this process
        compared by an eighth or more (a pass read one episode at a time then writes it a
        logarithmic number of times; what is left is written at exit)."""
        self.compared += new
        self.unsaved += new
        if self.published is not None and self.unsaved and self.unsaved * 8 >= self.compared:
            self.save(index_content)

    def save(self, index_content: str) -> None:
        if self.published is not None and self.unsaved:
            comparison_record.save(self.published, index_content, self.checked)
            self.unsaved = 0


def trusted(index: OffsetIndex, file: h5py.File, path: str, episode_ids: np.ndarray,
            dtype: DTypeLike, row_shape: tuple[int, ...], rows: np.ndarray, *,
            published: PublishedBytes | None = None) -> np.ndarray:
    """:func:`trusted_leaves` of one leaf."""
    (found,) = trusted_leaves(index, file, [LeafEntries(
        path, np.asarray(episode_ids, dtype=np.int64), dtype, row_shape,
        np.asarray(rows, dtype=np.int64))], published=published)
    return found


def whole_file_trusted(index: OffsetIndex, file: h5py.File, *,
                       local: bool | None = None) -> bool:
    """Every entry of ``index`` may be read from ``file``'s bytes: the file is, to the byte,
    the one a local writer indexed (the module's docstring), decided once per state of the
    file and process. ``local`` says whether ``file`` is a local file (h5py's own driver)
    when the caller knows it (its driver is then not asked again); ``None``: ask."""
    if local is False or (local is None and file.driver == "fileobj"):
        return False
    binding = _binding(file, index, None, local=True)
    with binding.lock:
        if binding.whole_file is None:
            binding.whole_file = (index.fingerprint is not None
                                  and _remembered_by_writer(file) == index.fingerprint)
        return binding.whole_file


def sample_agrees(index: OffsetIndex, file: h5py.File, *,
                  published: PublishedBytes | None = None, local: bool | None = None) -> bool:
    """The last of the checks that let a reader use ``index`` at all (``docs/format.md``):
    the entries of the sampled episodes (:func:`~.offset_index.sampled_episodes`) agree with
    HDF5. Answered without reading the file where it is already known for these bytes: the
    whole file is trusted (:func:`whole_file_trusted`), or every sampled entry was compared
    before and agreed (remembered as :func:`trusted_leaves` remembers, for a published file
    on disk too); otherwise compared now (:func:`~.offset_index.mismatches`).

    Args:
        published, local: as for :func:`trusted_leaves`.
    """
    if local is None:
        local = file.driver != "fileobj"
    if whole_file_trusted(index, file, local=local):
        return True
    episodes = sampled_episodes(len(index.steps))
    binding = _binding(file, index, published, local=local)
    with binding.lock:
        agreed: dict[str, np.ndarray] = {}
        for (path, _), state in binding.checked.items():
            known = agreed.setdefault(path, np.zeros(len(episodes), dtype=bool))
            known |= state[episodes] == 1
        if all(path in agreed and bool(agreed[path][offsets[episodes] >= 0].all())
               for path, offsets in index.offsets.items()):
            return True
    return not mismatches(index, file, episodes)


def trusted_leaves(index: OffsetIndex, file: h5py.File, leaves: Sequence[LeafEntries], *,
                   published: PublishedBytes | None = None,
                   local: bool | None = None,
                   before_comparing: Callable[[], object] | None = None,
                   raw: RawFile | None = None) -> list[np.ndarray]:
    """For each leaf, ``(len(episode_ids),)`` bool: which of its entries may be read from the
    file's bytes as ``rows[i]`` rows of ``dtype`` and ``row_shape``.

    Entries not compared before are compared with HDF5 together, each episode group opened
    once (see the module docstring for what is remembered, and where).

    Args:
        file: open on the file the caller reads the bytes from (its identity, not its path,
            keys what this process remembers of a local file).
        published: the digests that pin every byte of ``file`` when it is a published file
            read through a verifying byte supplier; ``None`` otherwise.
        local: ``file`` is a local file, when the caller knows (see
            :func:`whole_file_trusted`).
        before_comparing: called once before any entry is compared with HDF5, not at all
            when every answer is known (a remote supplier prefetches the blocks HDF5 reads).
        raw: the bytes HDF5 reads ``file`` from, when it reads them through a supplier
            (``RangesFile``): entries are then compared against header templates too
            (:func:`~.entry_checks.compare_entries`); a local file's are found without it.
    """
    if local is None:
        local = file.driver != "fileobj"
    binding = _binding(file, index, published, local=local)
    with binding.lock:
        if binding.whole_file is None:
            binding.whole_file = (local and index.fingerprint is not None
                                  and _remembered_by_writer(file) == index.fingerprint)
        if binding.whole_file:
            return [np.ones(len(leaf.episode_ids), dtype=bool) for leaf in leaves]
        states: list[tuple[np.ndarray, np.ndarray]] = []
        checks: list[LeafChecks] = []
        for leaf in leaves:
            ids = np.asarray(leaf.episode_ids, dtype=np.int64)
            rows = np.asarray(leaf.rows, dtype=np.int64)
            dtype = np.dtype(leaf.dtype)
            extra = rows - index.steps[ids]
            # Rows are a leaf's steps, or steps + 1: the record keys the leaf by that, so that
            # an entry is never taken as compared for another shape.
            uniform = not extra.size or bool((extra == extra[0]).all())
            signature = f"{dtype.str}{leaf.row_shape}+{int(extra[0]) if extra.size else 0}"
            key = (leaf.path, signature)
            state = (binding.checked.setdefault(key, np.zeros(len(index.steps), dtype=np.int8))
                     if uniform else np.zeros(len(index.steps), dtype=np.int8))
            states.append((state, ids))
            todo = np.flatnonzero(state[ids] == 0)
            episodes = ids[todo]
            checks.append(LeafChecks(
                leaf.path.encode(), h5py.h5t.py_create(dtype), tuple(leaf.row_shape), episodes,
                index.offsets[leaf.path][episodes].astype(np.int64), rows[todo]))
        count = sum(len(leaf_checks.episode_ids) for leaf_checks in checks)
        if count and before_comparing is not None:
            before_comparing()
        for (state, _), leaf_checks, agreed in zip(
                states, checks, entry_checks.compare_leaves(file, checks, raw), strict=True):
            state[leaf_checks.episode_ids] = np.where(agreed, 1, -1)
        binding.remember(index.content, count)
        return [state[ids] == 1 for state, ids in states]


def _remembered_by_writer(file: h5py.File) -> str | None:
    """BLAKE3 of the file ``file`` has open as the digests sidecar of its dataset remembers
    it, if the sidecar describes the file's current state and its path still names that file;
    else ``None``."""
    if file.driver == "fileobj":  # not a local file: no writer of ours left it here
        return None
    h5_path = Path(file.filename)
    try:
        state = file_state(file)
        if stat_key(os.stat(h5_path)) != state:
            return None
    except OSError:
        return None
    remembered = remembered_digests(h5_path.parent.parent).get(f"data/{h5_path.name}")
    if remembered is None or remembered.stat != state:
        return None
    return remembered.digests.blake3


def _binding(file: h5py.File, index: OffsetIndex, published: PublishedBytes | None, *,
             local: bool) -> _Binding:
    """The process's binding of ``index`` to the bytes of ``file``: to the current state of a
    local file (a write to the file, or another index, starts a new one), to the digests of a
    published one (its record on disk read once), fresh for any other supplier."""
    if not local:
        if published is None:
            # A supplier that does not pin its bytes by digest: nothing identifies them, so
            # each reader compares its entries again.
            return _Binding()
        key: tuple[Any, ...] = ("published", published.identity, index.content)
    else:
        key, published = (file_state(file), index.content), None
    with _BINDINGS_LOCK:
        found = _BINDINGS.get(key)
        if found is None:
            while len(_BINDINGS) >= _BINDINGS_KEPT:
                del _BINDINGS[next(iter(_BINDINGS))]
            found = _BINDINGS[key] = _Binding(published, None if published is None else
                                              comparison_record.load(
                                                  published, index.content, len(index.steps)))
            if published is not None:
                _UNSAVED[key] = (found, index.content)
        return found


@atexit.register
def _save_remembered() -> None:
    """Write what the published files' bindings compared since their last record."""
    for binding, content in list(_UNSAVED.values()):
        with binding.lock:
            binding.save(content)
