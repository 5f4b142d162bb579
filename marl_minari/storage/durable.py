"""Flushing written data to stable storage: the one place the library calls ``fsync``.

A write that survives a killed process can still be lost to an OS crash or a power cut while
it sits in the page cache. Files are ``fsync``-ed before the rename that publishes them, and
the folder holding a renamed entry afterwards (a rename is only durable once its folder is).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Literal

Durability = Literal["episode", "none"]
"""How often a recorder flushes to stable storage.

``"episode"`` (default): the journal is ``fdatasync``-ed after every finished episode and
datasets are ``fsync``-ed before their creation or append is reported. ``"none"``: the
operating system decides (a killed process still loses nothing; an OS crash may).
"""

DURABILITIES: tuple[Durability, ...] = ("episode", "none")


def sync_handle(handle: IO[bytes]) -> None:
    """Push an open file's data to the disk (``fdatasync`` where the OS has it)."""
    handle.flush()
    getattr(os, "fdatasync", os.fsync)(handle.fileno())


def sync_file(path: Path) -> None:
    """``fsync`` one file by path."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_folder(path: Path) -> None:
    """``fsync`` a folder, so the entries created or renamed in it survive a crash.

    Windows cannot open folders; there the rename's own durability is all there is.
    """
    flag = getattr(os, "O_DIRECTORY", None)
    if flag is None:
        return
    fd = os.open(path, os.O_RDONLY | flag)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sync_tree(root: Path) -> None:
    """``fsync`` every file under ``root``, then every folder, deepest first."""
    folders = [root]
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir():
            folders.append(path)
        elif path.is_file():
            sync_file(path)
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        sync_folder(folder)
