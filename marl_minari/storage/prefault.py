"""Destination memory mapped before a bulk copy writes it (on the helper thread, while the
reader plans the copy).

New arrays of a few megabytes are fresh anonymous memory: each 4 KiB page costs a page fault
at its first write, and a pass that copies a file's bytes into new arrays spends about as long
in those faults as in the copy. ``madvise(MADV_POPULATE_WRITE)`` maps a whole array's pages
writable in one call, without touching their contents, at about two thirds of that cost
(``docs/benchmarks.md``).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any, Final

import numpy as np

from marl_minari.storage.helper_thread import helper_thread

MADV_POPULATE_WRITE: Final = 23
"""Linux 5.14 and later; older kernels refuse it (``EINVAL``) and the pages fault as before."""
PAGE: Final = 4096
CALL_BYTES: Final = 256 << 10
"""Bytes mapped per call: the process's memory map is held locked during a call, and the
reading thread waits for it whenever it allocates (``mmap``, ``brk``)."""

_MADVISE: Any = None


def _madvise() -> Any:
    """libc's ``madvise`` through ctypes on Linux; ``None`` elsewhere or where it is absent."""
    global _MADVISE
    if _MADVISE is None:
        _MADVISE = False
        if sys.platform.startswith("linux"):
            try:
                madvise = ctypes.CDLL(None, use_errno=True).madvise
            except (OSError, AttributeError):
                return None
            madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            madvise.restype = ctypes.c_int
            _MADVISE = madvise
    return _MADVISE or None


def populate_writable(arrays: Iterable[np.ndarray]) -> None:
    """Map every whole page of each of ``arrays`` writable now, contents unchanged (a page
    another thread is writing keeps what it writes); a no-op where the system cannot."""
    madvise = _madvise()
    if madvise is None:
        return
    for array in arrays:
        address = array.ctypes.data
        first = -(-address // PAGE) * PAGE
        last = (address + array.nbytes) // PAGE * PAGE
        for start in range(first, last, CALL_BYTES):
            madvise(start, min(CALL_BYTES, last - start), MADV_POPULATE_WRITE)  # or faulted


def populate_soon(arrays: list[np.ndarray]) -> Future[None] | None:
    """:func:`populate_writable` of ``arrays`` on the helper thread
    (:mod:`~marl_minari.storage.helper_thread`), begun now; ``None`` where there is none
    (then done now)."""
    helper = helper_thread()
    if helper is None:
        populate_writable(arrays)
        return None
    return helper.submit(populate_writable, arrays)
