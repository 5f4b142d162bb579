"""A dataset's files are regular files: anything else in their place (a FIFO, a device, a
folder, from an untrusted archive) is refused before it is read, since reading it could
block forever for a writer or never end."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from marl_minari.errors import CorruptedDataError


def not_regular(path: Path | str, mode: int) -> CorruptedDataError:
    """The error for a dataset file ``path`` whose ``st_mode`` is ``mode``, not a regular
    file's."""
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode)
            else "a device or socket")
    return CorruptedDataError(
        f"{path} is {kind}, not a regular file; a dataset's files are regular files: restore "
        "the dataset from a copy or re-create it")


def read_regular(path: Path) -> bytes:
    """The bytes of the regular file ``path``, opened without blocking so that a FIFO in its
    place is refused rather than waited on.

    Raises:
        CorruptedDataError: ``path`` is not a regular file.
        OSError: it cannot be opened or read.
    """
    handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(handle).st_mode
        if not stat.S_ISREG(mode):
            raise not_regular(path, mode)
        with os.fdopen(handle, "rb", closefd=False) as file:
            return file.read()
    finally:
        os.close(handle)
