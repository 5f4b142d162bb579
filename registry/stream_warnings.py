"""What reading in place tells its user when it cannot read as it should: a file that had to
be downloaded whole first, a cache folder that cannot be written. Reading goes on; each says
what to change."""

from __future__ import annotations

import threading
from pathlib import Path

from marl_minari.user_warnings import warn

_UNCACHED_FOLDERS: set[str] = set()
"""Block cache folders this process has said cannot be written."""
_UNCACHED_LOCK = threading.Lock()


class StreamingWarning(UserWarning):
    """A remote file had to be downloaded whole before it could be read by ranges, or its
    verified blocks cannot be kept in the block cache."""


def warn_whole_download(name: str, mirror: str, size: int, ranges_ignored: bool) -> None:
    """Say that the published file ``name`` (``size`` bytes) was downloaded whole and
    verified before any of it was read: ``mirror`` ignores ``Range`` (``ranges_ignored``),
    or its manifest has no range digests."""
    if ranges_ignored:
        reason = (f"{mirror} ignores HTTP Range requests, so {name} ({size} bytes) was "
                  "downloaded whole and verified before any of it was read; serve the registry "
                  "from a host that honours Range (nginx, a CDN, S3) to read it in place")
    else:
        reason = (f"{name} was published without range digests, so it ({size} bytes) was "
                  "downloaded whole and verified before any of it was read; publish the "
                  "dataset again as a new version (-vN+1) with this marl-minari to read it in "
                  "place")
    warn(reason, StreamingWarning)


def warn_uncached(folder: Path, failure: OSError) -> None:
    """Say, once per process and folder, that the block cache at ``folder`` cannot be
    written (``failure``): reading goes on without it."""
    with _UNCACHED_LOCK:
        if str(folder) in _UNCACHED_FOLDERS:
            return
        _UNCACHED_FOLDERS.add(str(folder))
    warn(
        f"the block cache at {folder} cannot be written "
        f"({failure.strerror or type(failure).__name__}): streamed files are read without it, "
        "so each pass fetches their blocks again; set MARL_MINARI_CACHE to a folder this user "
        "can write, or MARL_MINARI_CACHE_BYTES=0 to read without a disk cache",
        StreamingWarning)


def warn_own_small_files_folder(cache_folder: Path, own: Path, failure: OSError) -> None:
    """Say that ``cache_folder`` cannot be written (``failure``), so a streamed version's
    small files are kept in ``own``, a folder of this process's."""
    warn(
        f"the cache folder {cache_folder} cannot be written "
        f"({failure.strerror or type(failure).__name__}): a streamed dataset's metadata and "
        f"offset index are kept in {own} for this process only; set MARL_MINARI_CACHE to a "
        "folder this user can write", StreamingWarning)
