"""Fixtures of the adapter tests: a plain Minari dataset, vault folders (recorded datasets,
cached per session, come from the root conftest's ``recorded``).

Also makes ``adapter_helpers`` importable in any import mode.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


@pytest.fixture
def cartpole_dataset(datasets_root: Path, record_cartpole: Callable[..., Any]) -> Any:
    """A plain single-agent Minari dataset recorded with Minari's own ``DataCollector``."""
    return record_cartpole("tests/cartpole-v0", record_infos=True)


@pytest.fixture
def vaults(tmp_path: Path) -> Path:
    """An empty folder for vaults."""
    path = tmp_path / "vaults"
    path.mkdir()
    return path
