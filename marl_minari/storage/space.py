"""Room to write: space is claimed before HDF5 writes a dataset, so a full disk or a file-size
limit ends in a typed error with every recorded episode still recoverable.

libhdf5 caches writes and reports a failed one only when it flushes, later, if at all: on a
full disk (or past ``RLIMIT_FSIZE``) a writer went on "writing", then crashed inside the
library. So before a dataset is written, the bytes it will need (an upper estimate) are
allocated for real in the folder it is written to, then released for it; and a journal append
that the OS refuses is reported as such.
"""

from __future__ import annotations

import errno
import os
import shutil
import uuid
from pathlib import Path
from typing import Final

from marl_minari.errors import StorageFullError

NO_ROOM: Final = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
"""What the OS answers when a disk is full, a file would pass ``RLIMIT_FSIZE``, or a quota is
spent."""

DATASET_BYTES_PER_LEAF: Final = 640
"""Upper estimate of HDF5's own bytes per dataset of an episode (object header and link;
measured at about 450 for a recording of mpe2 simple_spread)."""
DATASET_BYTES_PER_EPISODE: Final = 4096
"""Upper estimate of HDF5's bytes per episode group (and its attributes)."""
DATASET_BYTES_FIXED: Final = 1 << 20
"""Headroom of every dataset file (superblock, root group, free-space slack)."""


def dataset_bytes(payload: int, episodes: int, leaves_per_episode: int) -> int:
    """An upper estimate of the size of a dataset file holding ``payload`` bytes of arrays in
    ``episodes`` episodes of ``leaves_per_episode`` datasets each."""
    return (payload + episodes * (leaves_per_episode * DATASET_BYTES_PER_LEAF
                                  + DATASET_BYTES_PER_EPISODE) + DATASET_BYTES_FIXED)


def claim(folder: Path, nbytes: int, what: str) -> None:
    """Check that ``nbytes`` can be written into one file in ``folder``, by allocating them.

    The allocation is released before this returns: it only proves that the disk, the quota
    and the process's file-size limit allow it now.

    Raises:
        StorageFullError: they do not; the message says how much was needed and where.
    """
    probe = Path(folder) / f".space-{uuid.uuid4().hex}.tmp"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise refusal(exc, folder, what, nbytes) from exc
    try:
        os.posix_fallocate(fd, 0, max(nbytes, 1))
    except OSError as exc:
        if exc.errno not in NO_ROOM and _free(folder) >= nbytes:
            return  # the file system cannot preallocate; its free space says there is room
        raise refusal(exc, folder, what, nbytes) from exc
    finally:
        os.close(fd)
        probe.unlink(missing_ok=True)


def refusal(exc: OSError, folder: Path, what: str, nbytes: int | None = None) -> Exception:
    """:class:`StorageFullError` for an OS refusal that means "no room", else ``exc``."""
    if exc.errno not in NO_ROOM:
        return exc
    needed = "" if nbytes is None else f" (about {nbytes / 1e6:,.1f} MB needed, "
    needed += "" if nbytes is None else f"{_free(folder) / 1e6:,.1f} MB free there)"
    cause = {errno.EFBIG: "a file would pass this process's file-size limit (ulimit -f)",
             errno.EDQUOT: "the disk quota is spent"}.get(exc.errno or 0, "the disk is full")
    return StorageFullError(
        f"no room to write {what} in {folder}: {cause}{needed}. Free some space or raise the "
        "limit, or write elsewhere (MINARI_DATASETS_PATH).")


def _free(folder: Path) -> int:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return 0
