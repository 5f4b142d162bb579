"""Waiting for the filesystem's clock, without guessing how long one of its ticks lasts."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path


def after_last_change(*paths: Path) -> None:
    """Return once a file written now beside the first of ``paths`` (files) gets a later
    modification time than the last change (ctime) of every one of them.

    A digest remembered in the same clock tick as a file's last write is never trusted (the
    racy-clean rule of ``marl_minari.format.digests``), and a write in the same tick as a
    recorded ``stat`` can leave it unchanged; a fixed sleep guesses at the tick of the
    filesystem (nanoseconds on ext4, seconds on some), this asks the filesystem itself.
    """
    latest = max(os.stat(path).st_ctime_ns for path in paths)
    probe = paths[0].parent / f".tick-{uuid.uuid4().hex}"
    try:
        while True:
            probe.write_bytes(b"")
            if probe.stat().st_mtime_ns > latest:
                return
            time.sleep(0.001)
    finally:
        probe.unlink(missing_ok=True)
