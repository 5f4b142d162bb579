"""Destination arrays populated before a bulk copy: every page mapped in one call, nothing in
them changed."""

from __future__ import annotations

import mmap
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from marl_minari.storage import prefault


def _kernel_has_populate_write() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    major, minor = (int(part) for part in re.findall(r"\d+", os.uname().release)[:2])
    return (major, minor) >= (5, 14)


pytestmark = pytest.mark.skipif(not _kernel_has_populate_write(),
                                reason="madvise(MADV_POPULATE_WRITE) is Linux 5.14's")


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

