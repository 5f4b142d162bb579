"""Looking up objects in an HDF5 file someone else wrote without leaving that file.

HDF5 follows an external link by opening the file it names, wherever that is, before the
caller can look at what it found: a FIFO there blocks the reader forever, and any file named
is opened on the user's machine. Every lookup of a path in a dataset's file goes through
here. Under :data:`_LINK_ACCESS` an external link opens an empty buffer in memory instead of
the file it names, so the lookup fails as for a missing object, and :func:`link_out` tells
the two apart for the error. (h5py exposes neither HDF5's external-link callback nor a link
limit of 0, which would refuse such links outright.)
"""

from __future__ import annotations

import atexit
import io
from pathlib import Path
from typing import Final

import h5py

from marl_minari.errors import ForeignStorageError

_IN_FILE_LINKS: Final = (h5py.h5l.TYPE_HARD, h5py.h5l.TYPE_SOFT)
_SOFT_LINK_HOPS: Final = 16
"""Soft links followed in a row, HDF5's own limit (``H5L_NUM_LINKS``): a cycle ends there."""


def _link_access() -> h5py.h5p.PropLAID:
    nowhere = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    nowhere.set_fileobj_driver(h5py.h5fd.fileobj_driver, io.BytesIO())
    access = h5py.h5p.create(h5py.h5p.LINK_ACCESS)
    access.set_elink_fapl(nowhere)
    return access


_LINK_ACCESS: Final = _link_access()
# Released while Python still runs: HDF5 freeing it during the interpreter's teardown drops
# the buffer's last reference from C after Python's own state is gone (a crash at exit, seen
# with torch imported). Handlers run last in, first out, so this one runs after any that a
# recorder or a user registers later and that may still read a file.
atexit.register(_LINK_ACCESS.close)


def open_in_file(loc: h5py.h5g.GroupID, path: bytes
                 ) -> h5py.h5g.GroupID | h5py.h5d.DatasetID | None:
    """The group or dataset at ``path`` under ``loc`` (a file or group id); ``None`` if there
    is none in ``loc``'s own file (missing, another kind of object, behind a link to another
    file, which is never opened, or behind more soft links in a row than HDF5 follows)."""
    try:
        # Nothing opened this way can be in another file, so its file number (1.3-1.9 us
        # per call, a tenth of a comparison) is not looked at.
        found = h5py.h5o.open(loc, path, lapl=_LINK_ACCESS)
    except (KeyError, ValueError, RuntimeError):  # RuntimeError: a cycle of soft links
        return None
    return found if isinstance(found, (h5py.h5g.GroupID, h5py.h5d.DatasetID)) else None


def group_in_file(loc: h5py.h5g.GroupID, path: bytes) -> h5py.h5g.GroupID | None:
    """:func:`open_in_file`, a group only."""
    found = open_in_file(loc, path)
    return found if isinstance(found, h5py.h5g.GroupID) else None


def dataset_in_file(loc: h5py.h5g.GroupID, path: bytes) -> h5py.h5d.DatasetID | None:
    """:func:`open_in_file`, a dataset only."""
    found = open_in_file(loc, path)
    return found if isinstance(found, h5py.h5d.DatasetID) else None


def hard_link_address(loc: h5py.h5g.GroupID, path: bytes) -> int | None:
    """The address of the object header that ``path`` under ``loc`` names by a hard link (its
    last part: a soft link is not followed, the groups on the way may be reached by any link
    in the file); ``None`` when there is none in ``loc``'s own file. Reads link records only:
    nothing is opened."""
    try:
        link = loc.links.get_info(path, lapl=_LINK_ACCESS)
    except (KeyError, ValueError, RuntimeError):
        return None
    return int(link.u) if link.type == h5py.h5l.TYPE_HARD else None


def link_out(loc: h5py.h5g.GroupID, path: bytes, _hops: int = 0) -> str | None:
    """The first part of ``path`` under ``loc`` that is a link out of the file (external or
    user-defined), as a path under ``loc``; ``None`` when the path reaches no such link (it
    may still be missing). A soft link on the way is followed by its target's path, and is
    named with what it leads through (``a/b -> c``). Reads link records only: nothing a link
    names is opened."""
    parts = [part for part in path.split(b"/") if part]
    current: h5py.h5g.GroupID | None = loc
    for depth, part in enumerate(parts):
        if current is None or not current.links.exists(part):  # one name: nothing followed
            return None
        kind = current.links.get_info(part).type
        here = b"/".join(parts[:depth + 1]).decode(errors="replace")
        if kind == h5py.h5l.TYPE_SOFT and _hops < _SOFT_LINK_HOPS:
            target = current.links.get_val(part)
            start = h5py.h5g.open(current, b"/") if target.startswith(b"/") else current
            through = link_out(start, target, _hops + 1)
            if through is not None:
                return f"{here} -> {through}"
        elif kind not in _IN_FILE_LINKS:
            return here
        current = group_in_file(current, part) if depth + 1 < len(parts) else None
    return None


def refuse(h5_path: Path, name: str, what: str) -> ForeignStorageError:
    """The error for HDF5 object ``name`` of ``h5_path`` that ``what`` (keeps its data
    elsewhere, is a link to another file...)."""
    return ForeignStorageError(
        f"{h5_path}: HDF5 object {name!r} {what}; marl-minari never reads files outside a "
        "dataset's own main_data.hdf5. Do not use this dataset, or rewrite it without "
        "external storage, external links and virtual datasets (e.g. h5repack, or re-record)."
    )


def refuse_link_out(loc: h5py.h5g.GroupID, path: bytes, h5_path: Path, prefix: str = ""
                    ) -> None:
    """Raise :class:`ForeignStorageError` if ``path`` under ``loc`` leads through a link
    out of the file (``prefix``: ``loc``'s own path, for the message)."""
    found = link_out(loc, path)
    if found is not None:
        raise refuse(h5_path, f"{prefix}{found}", "is an external (or user-defined) link to "
                     "another file")
