"""Refuse HDF5 data stored outside the dataset's own file.

HDF5 can keep a dataset's bytes in other files (external storage, ``H5Pset_external``), make a
group member point into another file (external links) or assemble a dataset from other files'
datasets (virtual datasets). A dataset from someone else that uses any of these would make us
read files of the author's choosing on the user's machine (``/etc/passwd`` as "observations").
The layout never needs them, so readers, converters and publish refuse them: per dataset where
h5py reads one (:func:`check_dataset`), or over a whole file (:func:`check_file`).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import h5py

from marl_minari.errors import CorruptedDataError
from marl_minari.format.digests import stat_key
from marl_minari.format.in_file import refuse
from marl_minari.storage.datafile import hdf5_errors

_CHECKED: set[tuple[str, tuple[int, ...]]] = set()
_CHECKED_LOCK = threading.Lock()
_ALLOWED_LINKS = (h5py.h5l.TYPE_HARD, h5py.h5l.TYPE_SOFT)


def check_dataset(dataset_id: h5py.h5d.DatasetID, file_id: h5py.h5f.FileID, h5_path: Path,
                  name: str) -> None:
    """Raise :class:`ForeignStorageError` unless dataset ``name`` (opened from ``file_id``) lives
    in that file: not reached through an external link, no external storage, no virtual
    source in another file."""
    if h5py.h5i.get_file_id(dataset_id).fileno != file_id.fileno:
        raise refuse(h5_path, name, "is reached through an external link into another file")
    if dataset_id.get_offset() is not None:  # contiguous bytes of this file: nothing else
        return
    plist = dataset_id.get_create_plist()
    if plist.get_external_count():
        raise refuse(h5_path, name, "keeps its data in external files")
    if plist.get_layout() == h5py.h5d.VIRTUAL:
        for i in range(plist.get_virtual_count()):
            if plist.get_virtual_filename(i) != ".":
                raise refuse(h5_path, name, "is a virtual dataset reading "
                             f"{plist.get_virtual_filename(i)!r}")


def check_file(file: h5py.File, h5_path: Path) -> None:
    """Check every link and dataset of ``file`` (see :func:`check_dataset`).

    A full walk costs about a millisecond per few datasets, so a file is walked once per
    process for as long as it stays unchanged (same device, inode, size, mtime and ctime).

    Raises:
        ForeignStorageError: naming the first offending HDF5 path.
    """
    h5_path = Path(h5_path)
    key = (str(h5_path.resolve()), stat_key(os.stat(h5_path)))
    with _CHECKED_LOCK:
        if key in _CHECKED:
            return
    datasets: list[bytes] = []
    with hdf5_errors(h5_path):
        _walk(file, h5_path, datasets)
    with _CHECKED_LOCK:
        _CHECKED.add(key)


def _walk(file: h5py.File, h5_path: Path, datasets: list[bytes]) -> None:
    check_links(file, h5_path)

    def visit_object(name: bytes, info: h5py.h5o.ObjInfo) -> None:
        if info.type == h5py.h5o.TYPE_DATASET:
            datasets.append(name)

    h5py.h5o.visit(file.id, visit_object, info=True)
    for name in datasets:  # no link out of the file anywhere (above): h5d.open stays inside
        check_dataset(h5py.h5d.open(file.id, name), file.id, h5_path,
                      name.decode(errors="replace"))


def check_links(group: h5py.Group, h5_path: Path) -> None:
    """Raise :class:`ForeignStorageError` if any link under ``group`` leads to another file
    (HDF5's own walks skip such links, so data behind them would silently go missing)."""

    def foreign(name: bytes, info: h5py.h5l.LinkInfo) -> bytes | None:
        # A value other than None ends the walk (raising inside HDF5's callback is unsafe).
        return name if info.type not in _ALLOWED_LINKS else None

    found = group.id.links.visit(foreign, info=True)
    if found is not None:
        raise refuse(h5_path, f"{group.name.rstrip('/')}/{found.decode(errors='replace')}",
                     "is an external (or user-defined) link to another file")


def check_path(h5_path: Path) -> None:
    """:func:`check_file` on the HDF5 file at ``h5_path``.

    Raises:
        ForeignStorageError: the file refers to data outside itself.
        CorruptedDataError: HDF5 cannot open it.
    """
    try:
        file = h5py.File(h5_path, "r")
    except OSError as exc:
        raise CorruptedDataError(f"{h5_path} is damaged and cannot be opened ({exc})") from exc
    with file:
        check_file(file, Path(h5_path))
