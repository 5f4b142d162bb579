"""Files the format tests compare HDF5's answers on."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from marl_minari.format import layout


@pytest.fixture(scope="module")
def recorded_file(_recording_cache: Callable[..., tuple[Path, Any]]) -> tuple[Path, int]:
    """The data file of 5 recorded episodes of mpe2 ``simple_spread_v3``, and that count."""
    folder, _ = _recording_cache("mpe2/simple_spread_v3", 5, {}, {"max_cycles": 6})
    return folder / "data" / layout.MAIN_FILE_NAME, 5
