"""Count-frequency plots of coverage: how often the distinct pairs behind SACo and OACo occur.

OG-MARL's ``vault_utils`` draws, beside SACo and OACo, how many distinct pairs occur once,
twice, ... times: a dataset that repeats a few transitions has a few pairs with large counts,
one that covers many has most pairs at count 1. :func:`plot_coverage` draws that from the
:class:`~marl_minari.describe.CountFrequencies` of a :class:`~marl_minari.describe.Coverage`,
on a :class:`matplotlib.figure.Figure` with its own Agg canvas (pyplot's state and the user's
backend are left alone).

Both axes are logarithmic. Counts are grouped in bins one count wide while there are at most
:data:`BINS` counts, geometrically wider beyond (a point then stands for the distinct pairs
whose count falls in its bin), so that a long tail of counts stays one readable line and the
curves of all datasets and agents share bins.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from marl_minari.describe import checks
from marl_minari.describe.coverage_results import CountFrequencies, Coverage
from marl_minari.describe.results import DatasetDescription
from marl_minari.errors import InvalidOptionError
from marl_minari.extras import require

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BINS: Final = 40
"""Most bins of counts on the x axis (one count wide while the counts are few)."""
FEW_AGENTS: Final = 8
"""Up to this many agents (one dataset), each agent has its own curve and legend entry;
beyond it (or when comparing datasets) agents are summarised: mean over agents and a
min..max band."""
FLOOR: Final = 0.5
"""Bottom of the y axes (a count of pairs is 1 or more; the agents' band reaching it means
that some agent has no pair with those counts)."""
PANEL_SIZE: Final = (480, 360)
"""Pixel width and height of each of the two panels (at ``dpi=100``)."""

CoverageLike = DatasetDescription | Coverage


def draw_coverage(items: CoverageLike | Sequence[CoverageLike], *,
                  labels: Sequence[str] | None = None, dpi: int = 100) -> Figure:
    """The figure of :func:`plot_coverage`, not saved (a ``matplotlib.figure.Figure`` with an
    Agg canvas; pyplot's state is not touched).

    Raises:
        InvalidOptionError: nothing to draw, an item that is neither a description nor a
            coverage (a dataset id: describe it first), a description without coverage, not
            one label per item, or ``dpi`` not a positive number.
        MissingExtraError: matplotlib is not installed.
    """
    backend = require("matplotlib.backends.backend_agg", "plot", "plot_coverage")
    figures = require("matplotlib.figure", "plot", "plot_coverage")
    coverages, names = _coverages(items, labels)
    resolution = checks.dpi(dpi)
    width, height = PANEL_SIZE
    several = len(coverages) > 1
    legend_rows = -(-len(names) // 3) if several else 0
    figure = figures.Figure(figsize=(2 * width / 100, (height + 50 + 22 * legend_rows) / 100),
                            dpi=resolution, layout="constrained")
    backend.FigureCanvasAgg(figure)
    figure.suptitle(_title(coverages, names), fontsize=11)
    joint, agents = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    frequencies = [c.state_frequencies for c in coverages]
    frequencies += [f for c in coverages for f in c.agent_frequencies.values()]
    edges = count_bins(max((f.most for f in frequencies), default=1))
    colors = [f"C{i % 10}" for i in range(len(coverages))]
    for coverage, color in zip(coverages, colors, strict=True):
        _curve(joint, edges, coverage.state_frequencies, color, lw=1.8)
    sources = {c.state_source for c in coverages}
    state = ("state or joint observation" if len(sources) > 1
             else "state" if sources == {"state"} else "joint observation")
    most = int(edges[-1]) - 1
    single = coverages[0]
    _decorate(joint, "(state, joint action) pairs" + _value(coverages, "SACo", "saco")
              + ("" if several else _note([single.state_frequencies])),
              f"times a ({state}, joint action) pair occurs", most)
    if not several and len(single.agent_frequencies) <= FEW_AGENTS:
        for index, (agent, freq) in enumerate(single.agent_frequencies.items()):
            _curve(agents, edges, freq, f"C{index % 10}", label=agent)
        if single.agent_frequencies:
            agents.legend(fontsize=8, loc="upper right", title="agent", title_fontsize=8)
    else:
        for coverage, color in zip(coverages, colors, strict=True):
            _band(agents, edges, list(coverage.agent_frequencies.values()), color,
                  len(coverages) == 1)
    _decorate(agents, "(observation, action) pairs per agent"
              + _value(coverages, "average OACo", "oaco")
              + ("" if several else _note(list(single.agent_frequencies.values()))),
              "times an agent's (observation, action) pair occurs", most)
    if several:
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], color=color, lw=4,
                          label=f"{name} (SACo {c.saco:.3g}, OACo {c.oaco:.3g})")
                   for color, name, c in zip(colors, names, coverages, strict=True)]
        figure.legend(handles=handles, loc="outside lower center", ncols=min(3, len(names)),
                      fontsize=9, frameon=False)
    _share_y(joint, agents)
    return figure


def plot_coverage(items: CoverageLike | Sequence[CoverageLike],
                  path: str | os.PathLike[str], *, labels: Sequence[str] | None = None,
                  dpi: int = 100) -> Path:
    """Save count-frequency plots of a coverage as a PNG: how many distinct pairs occur once,
    twice, ... times (log axes; OG-MARL's count-frequency plot).

    Left: the (state, joint action) pairs behind SACo. Right: each agent's (observation,
    action) pairs behind OACo, one curve per agent up to :data:`FEW_AGENTS` agents, else the
    mean over agents with a band from the agent with the fewest pairs at that count to the one
    with the most (so 100 agents read like 3). Several datasets are drawn in one colour each
    (joint curve; agents' mean and band) with a figure legend. The image is
    ``2 * PANEL_SIZE[0]`` pixels wide at ``dpi=100``, scaled by ``dpi / 100``.

    Args:
        items: a description made with ``describe(..., coverage=True)`` or its
            :class:`~marl_minari.describe.Coverage`, or a sequence of them (compared).
        path: the PNG file to write (missing parent folders are created).
        labels: one name per item (default: the dataset ids; ``dataset k`` for a bare
            coverage).
        dpi: resolution.

    Returns:
        ``path``.

    Raises:
        InvalidOptionError: ``path`` is a folder or lies below a file, or an argument
            :func:`draw_coverage` refuses.
        MissingExtraError: matplotlib is not installed (``pip install "marl-minari[plot]"``).
    """
    target = checks.output_file(path, "plot_coverage: path", "pairs.png")
    figure = draw_coverage(items, labels=labels, dpi=dpi)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, format="png", dpi=dpi)
    return target


def count_bins(most: int, bins: int = BINS) -> np.ndarray:
    """Integer edges of the count bins ``[e0, e1), [e1, e2) ...`` covering counts 1..``most``:
    one count wide while that fits in ``bins`` bins, then geometrically wider."""
    if most <= bins:
        return np.arange(1, most + 2, dtype=np.int64)
    edges = np.unique(np.floor(np.geomspace(1, most + 1, bins + 1)).astype(np.int64))
    edges[-1] = most + 1
    return edges


def binned(frequencies: CountFrequencies, edges: np.ndarray) -> np.ndarray:
    """Distinct pairs whose count falls in each bin ``[e_k, e_k+1)`` of ``edges``."""
    bin_of = np.searchsorted(edges, frequencies.counts, side="right") - 1
    pairs = np.bincount(bin_of, weights=frequencies.pairs, minlength=len(edges) - 1)
    return pairs[:len(edges) - 1]


def _centres(edges: np.ndarray) -> np.ndarray:
    """Where each bin is drawn: its one count, or the geometric mean of its first and last."""
    return np.sqrt(edges[:-1] * (edges[1:] - 1.0))


def _curve(ax: Any, edges: np.ndarray, frequencies: CountFrequencies, color: str, *,
           label: str | None = None, lw: float = 1.2) -> None:
    values = binned(frequencies, edges)
    shown = values > 0  # an empty bin is no point (log axis); the line joins its neighbours
    ax.plot(_centres(edges)[shown], values[shown], "o-", color=color, lw=lw, ms=3,
            label=label)


def _band(ax: Any, edges: np.ndarray, frequencies: list[CountFrequencies], color: str,
          labelled: bool) -> None:
    """The median agent's curve and a band from the fewest to the most pairs any agent has
    in each bin; where some agent has none, the band reaches the bottom of the axis."""
    if not frequencies:
        return
    values = np.stack([binned(f, edges) for f in frequencies])
    # the lower median is one agent's count: a whole number of pairs, never 0.5
    centres = _centres(edges)
    median = np.quantile(values, 0.5, axis=0, method="lower")
    low, high = values.min(axis=0), values.max(axis=0)
    shown = high > 0
    ax.fill_between(centres[shown], np.maximum(low[shown], FLOOR), high[shown], color=color,
                    alpha=0.18, lw=0,
                    label=f"fewest..most of {len(frequencies)} agents" if labelled else None)
    ax.plot(centres[median > 0], median[median > 0], "o-", color=color, lw=1.5, ms=3,
            label="median agent" if labelled else None)
    if labelled:
        ax.legend(fontsize=8, loc="upper right")


def _decorate(ax: Any, title: str, xlabel: str, most: int) -> None:
    from matplotlib import ticker

    ax.set_xscale("log")
    ax.set_yscale("log")
    # counts are whole numbers: label 1, 2, 5, 10 ... as such (not 2x10^0); decades only
    # when 1, 2, 5 would crowd
    ax.xaxis.set_major_locator(ticker.LogLocator(subs=(1.0, 2.0, 5.0) if most < 300
                                                 else (1.0,)))
    for axis in (ax.xaxis, ax.yaxis):
        axis.set_major_formatter(ticker.FuncFormatter(_number))
        axis.set_minor_formatter(ticker.NullFormatter())
    ax.set_xlim(0.7, 1.5 * max(most, 7))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=9)
    ax.set_ylabel("distinct pairs occurring that many times", fontsize=9)
    ax.grid(alpha=0.3, which="both")


def _note(frequencies: Sequence[CountFrequencies]) -> str:
    """A second title line: distinct pairs, the share seen once, the most repeated."""
    distinct = [f.distinct for f in frequencies]
    if not distinct or not max(distinct):
        return ""
    once = sum(f.once for f in frequencies) / sum(distinct)
    most = max(f.most for f in frequencies)
    pairs = (f"{distinct[0]:,} distinct" if len(distinct) == 1
             else f"{min(distinct):,}..{max(distinct):,} distinct per agent")
    repeats = f"max {most:,} times" if most > 1 else "none repeats"
    return f"\n{pairs}, {once:.0%} seen once, {repeats}"


def _share_y(*axes: Any) -> None:
    """One y range for both panels, so their heights compare: from :data:`FLOOR` to twice the
    highest point drawn."""
    highs = [float(np.max(line.get_ydata())) for ax in axes for line in ax.get_lines()
             if len(line.get_ydata())]
    highs += [float(c.get_datalim(ax.transData).y1) for ax in axes for c in ax.collections]
    for ax in axes:
        ax.set_ylim(FLOOR, 2 * max([10.0, *highs]))


def _number(value: float, _position: object = None) -> str:
    return f"{value:,.0f}" if value >= 1 else f"{value:g}"


def _value(coverages: Sequence[Coverage], title: str, name: str) -> str:
    """``": SACo 0.82"`` for one dataset (several: in the legend instead)."""
    return f": {title} {getattr(coverages[0], name):.3g}" if len(coverages) == 1 else ""


def _title(coverages: Sequence[Coverage], names: Sequence[str]) -> str:
    if len(coverages) > 1:
        return "How often pairs repeat: " + ", ".join(names)[:100]
    c = coverages[0]
    agents = len(c.agent_frequencies)
    return (f"How often pairs repeat: {names[0]} | {c.transitions:,} transitions, {agents} "
            f"agent{'s' if agents != 1 else ''}")


def _coverages(items: CoverageLike | Sequence[CoverageLike], labels: Sequence[str] | None
               ) -> tuple[list[Coverage], list[str]]:
    if isinstance(items, (str, bytes, os.PathLike)):
        raise InvalidOptionError(
            f"plot_coverage takes a description made with coverage=True, not the "
            f"{type(items).__name__} {items!r}: e.g. plot_coverage(describe({items!r}, "
            "coverage=True), 'pairs.png')")
    many = list(items) if isinstance(items, Sequence) else [items]
    if not many:
        raise InvalidOptionError("plot_coverage needs at least one description or coverage")
    coverages: list[Coverage] = []
    names: list[str] = []
    for index, item in enumerate(many):
        if not isinstance(item, (DatasetDescription, Coverage)):
            raise InvalidOptionError(
                f"plot_coverage: item {index} is a {type(item).__name__}, not a description "
                "or a coverage: pass what describe(..., coverage=True) returns")
        if isinstance(item, DatasetDescription):
            if item.coverage is None:
                raise InvalidOptionError(
                    f"{item.label} was described without coverage: describe it with "
                    "coverage=True (marl-minari describe --coverage)")
            coverages.append(item.coverage)
            names.append(item.label)
        else:
            coverages.append(item)
            names.append(f"dataset {index}")
    return coverages, checks.labels_list(labels, len(coverages), "coverage") or names
