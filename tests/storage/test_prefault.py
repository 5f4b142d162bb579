"""Destination arrays populated before a bulk copy: every page mapped in one call, nothing in
them changed."""

from __future__ import annotations

import ctypes
import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from marl_minari.storage import prefault


def _system_maps_on_request() -> bool:
    """Whether this system honours ``MADV_POPULATE_WRITE`` (Linux 5.14 and later, and not
    every sandbox), asked of libc directly, not through the code under test."""
    if not sys.platform.startswith("linux"):
        return False
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    page = mmap.mmap(-1, mmap.PAGESIZE, flags=mmap.MAP_PRIVATE)
    view = np.frombuffer(page, dtype=np.uint8)
    try:
        return madvise(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(mmap.PAGESIZE),
                       ctypes.c_int(23)) == 0
    finally:
        del view
        page.close()


pytestmark = pytest.mark.skipif(not _system_maps_on_request(),
                                reason="this system does not honour MADV_POPULATE_WRITE")


def _anonymous_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    raise AssertionError("no RssAnon in /proc/self/status")


def test_every_page_of_a_new_array_is_mapped_and_its_contents_kept() -> None:
    size = 16 << 20
    kept = np.arange(size // 8, dtype=np.int64)  # written: its pages are already mapped
    memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE)  # new memory: no page mapped yet
    fresh = np.frombuffer(memory, dtype=np.uint8)
    before = _anonymous_kib()
    prefault.populate_writable([kept, fresh])
    grown = _anonymous_kib() - before
    assert grown >= (size >> 10) - 8  # all but the partial pages at the ends
    np.testing.assert_array_equal(kept, np.arange(size // 8, dtype=np.int64))
    assert not fresh.any()
    del fresh
    memory.close()

