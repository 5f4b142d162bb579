"""Peak resident memory of code run in a fresh Python process (Linux only).

The growth of the peak resident set (``VmHWM``) counts what HDF5, tensorstore, JAX and numpy
allocate natively, which ``tracemalloc`` cannot see; ``/proc/self/clear_refs`` restarts the
peak before each measured call, so one process can measure several calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

PRELUDE = r"""
import json, re, sys

def status(field):
    with open("/proc/self/status") as handle:
        return int(re.search(field + r":\s+(\d+) kB", handle.read()).group(1)) * 1024

def peak_growth(run):
    '''Bytes the peak resident set grew by while ``run()`` ran.'''
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")  # the peak resident set restarts from the current one
    before = status("VmRSS")
    run()
    return status("VmHWM") - before
"""
"""Defines ``status(field)`` and ``peak_growth(run)`` for the measured code."""


def require_peak_reset() -> None:
    """Skip the test where the peak resident set cannot be restarted."""
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("needs Linux /proc/self/clear_refs to restart the peak resident set")


def measure_in_child(code: str, *args: str) -> Any:
    """Run :data:`PRELUDE` + ``code`` with ``args`` in a fresh interpreter (this process's
    environment) and return the JSON its last line of output prints."""
    done = subprocess.run([sys.executable, "-c", PRELUDE + code, *args], capture_output=True,
                          text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
