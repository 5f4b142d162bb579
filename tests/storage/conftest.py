"""Fixtures shared by the storage tests."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from immutable import chattr


@pytest.fixture
def immutable() -> Iterator[list[Path]]:
    """Paths the test made immutable (``chattr +i``) and adds here are made mutable again
    after it; the test is skipped where the file system has no immutable attribute."""
    probe = Path(os.environ["MINARI_DATASETS_PATH"]) / "probe"
    probe.touch()
    try:
        chattr("+i", probe)
        chattr("-i", probe)
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"chattr +i is not available on this file system: {exc}")
    finally:
        probe.unlink()
    paths: list[Path] = []
    yield paths
    for path in paths:
        chattr("-i", path)
