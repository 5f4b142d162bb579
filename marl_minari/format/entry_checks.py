"""Comparing offset-index entries with HDF5, many at once, one episode group at a time.

An entry may be read as bytes only after HDF5 itself says that ``episode_<e>/<path>`` is
stored contiguously at the indexed offset with the leaf's type and shape (``docs/format.md``,
"marl_minari_index.npz"). Opening each dataset by its full path from the root walks the
root's B-tree to the episode group again for every leaf; here each episode group is opened
once and its datasets are opened relative to it, which over a remote file (HDF5 reading its
metadata through Python byte callbacks) is what most of a comparison costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import h5py


class EntryCheck(NamedTuple):
    """One entry to compare: what the reader would read as ``rows`` rows of bytes."""

    episode_id: int
    path: bytes
    """The dataset's path under ``episode_<episode_id>``."""
    offset: int
    expected_type: h5py.h5t.TypeID
    shape: tuple[int, ...]


def compare_entries(file: h5py.File, checks: Sequence[EntryCheck]) -> list[bool]:
    """Whether each entry agrees with ``file`` (see :func:`agrees`), in the order given.

    Entries of one episode should be next to each other: its group is opened once per run of
    them. (Opening the groups on the way, ``infos/marl``, once per episode too costs more
    than it saves: ``benchmarks/bench_entry_checks.py``.)
    """
    results: list[bool] = []
    group: h5py.h5g.GroupID | None = None
    current = -1
    for check in checks:
        if check.episode_id != current:
            current = check.episode_id
            group = episode_group(file, current)
        results.append(group is not None and agrees(group, check))
    return results


def episode_group(file: h5py.File, episode_id: int) -> h5py.h5g.GroupID | None:
    """The low-level group ``episode_<episode_id>`` of ``file``; ``None`` if there is none."""
    try:
        found = h5py.h5o.open(file.id, b"episode_%d" % episode_id)
    except (KeyError, ValueError):
        return None
    return found if isinstance(found, h5py.h5g.GroupID) else None


def agrees(group: h5py.h5g.GroupID, check: EntryCheck) -> bool:
    """Whether ``check.path`` under ``group`` is a dataset stored contiguously at
    ``check.offset`` with exactly the expected type and shape.

    ``H5Dget_offset`` is defined only for contiguous storage in the file itself (none for
    chunked, compact, external or virtual datasets, or unallocated ones).
    """
    if check.offset < 0:
        return False
    try:
        dataset = h5py.h5d.open(group, check.path)  # a group or a missing path: KeyError
    except (KeyError, ValueError):
        return False
    return (dataset.get_offset() == check.offset
            and dataset.get_type().equal(check.expected_type)
            and dataset.get_space().get_simple_extent_dims() == check.shape)
