"""A local Ray instance (2 CPUs) shared by the Ray tests of one module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    """``ray`` after ``ray.init(num_cpus=2)``, progress bars off; shut down at the end."""
    ray = pytest.importorskip("ray")
    from ray.data import DataContext

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False, ignore_reinit_error=True)
    context = DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    yield ray
    ray.shutdown()
