"""The coverage panel of the describe figure: SACo and average OACo per dataset, present when
a description has a coverage and absent otherwise, alike at 3, 20 and 100 agents."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from marl_minari.describe import describe, draw_descriptions, plot_descriptions, plot_panels

Recorder = Callable[..., tuple[Any, list[dict[str, Any]]]]


def coverage_axes(figure: Any) -> list[Any]:
    return [ax for ax in figure.axes if ax.get_title().startswith("coverage")]


def bar_heights(ax: Any) -> list[float]:
    return [float(patch.get_height()) for patch in ax.patches]


@pytest.mark.parametrize("agents", [3, 20, 100])
def test_coverage_panel_per_dataset(record_parallel: Recorder, tmp_path: Path,
                                    agents: int) -> None:
    pytest.importorskip("matplotlib")
    cycles = 6 if agents < 100 else 2
    record_parallel("mpe2/simple_spread_v3", episodes=2, dataset_id="tests/a-v0", N=agents,
                    max_cycles=cycles)
    record_parallel("mpe2/simple_spread_v3", episodes=2, dataset_id="tests/b-v0", N=agents,
                    max_cycles=cycles, collector_record_state=False)
    measured = [describe("tests/a-v0", coverage=True), describe("tests/b-v0", coverage=True)]
    plain = [describe("tests/a-v0"), describe("tests/b-v0")]
    assert "coverage" in [p.kind for p in plot_panels(measured)]
    assert "coverage" not in [p.kind for p in plot_panels(plain)]
    assert coverage_axes(draw_descriptions(plain)) == []
    figure = draw_descriptions(measured)
    assert len(figure.axes) == len(draw_descriptions(plain).axes) + 1
    (ax,) = coverage_axes(figure)
    # two bars per dataset, SACo then OACo, in the dataset's colour
    expected = [value for d in measured if d.coverage is not None
                for value in (d.coverage.saco, d.coverage.oaco)]
    np.testing.assert_allclose(bar_heights(ax), expected)
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "SACo\n(state, joint action)", f"OACo\n(mean of {agents} agents)"]
    notes = " ".join(t.get_text() for t in ax.texts)
    assert "whisker: agents' lowest to highest OACo" in notes
    assert "no state (tests/b-v0): joint observation in its place" in notes
    # the per-agent spread is one whisker per dataset, whatever the number of agents
    assert len(ax.collections) == 2
    # one dataset alone gets the panel too, without the comparison's legend
    alone = draw_descriptions(measured[:1])
    assert len(coverage_axes(alone)) == 1 and alone.legends == []
    plot_descriptions(measured, tmp_path / f"coverage-{agents}.png")
