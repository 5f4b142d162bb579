"""Drawing one panel of the describe figure on a matplotlib ``Axes``.

Every dataset keeps one solid colour in every panel (outlines for overlaid histograms, side by
side bars otherwise), so the figure legend of :mod:`marl_minari.describe.plots` is the only
legend needed; panels carry none.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from marl_minari.describe.results import ActionSummary, DatasetDescription

MAX_BINS: Final = 50
"""Most histogram bins, whatever the rule says (panels are 400 pixels wide)."""
MANY_TICKS: Final = 16
"""Most tick labels on a categorical axis; beyond it every k-th is labelled."""
MANY_VALUE_LABELS: Final = 4
"""Up to this many datasets, the coverage bars carry their values."""
OUTCOME_COLORS: Final = {"wins": "#2ca02c", "draws": "#9e9e9e", "losses": "#d62728"}


@dataclass(frozen=True)
class Style:
    """What every panel shares: dataset names and colours (same order), histogram bins."""

    names: tuple[str, ...]
    colors: tuple[str, ...]
    bins: int | str


def _decorate(ax: Any, title: str, xlabel: str | None, ylabel: str | None) -> None:
    ax.set_title(title, fontsize=9)
    if xlabel:
        ax.set_xlabel(xlabel, fontsize=8)
    if ylabel:
        ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=8)


def bin_edges(samples: Sequence[np.ndarray], bins: int | str) -> np.ndarray:
    """Shared histogram edges for ``samples`` (non-empty arrays).

    A number gives that many equal bins; a numpy rule (``"auto"``: the larger of the
    Freedman-Diaconis and Sturges counts) is capped by the largest sample's size and
    :data:`MAX_BINS`; integer data gets bins of a whole number of values (one bin per value
    when they fit under that cap).
    """
    everything = np.concatenate([np.asarray(s, dtype=np.float64) for s in samples])
    low, high = float(everything.min()), float(everything.max())
    if isinstance(bins, int):
        if low == high:
            low, high = low - 0.5, high + 0.5
        return np.linspace(low, high, max(bins, 1) + 1)
    cap = max(1, min(MAX_BINS, max(len(s) for s in samples)))
    integers = bool(np.array_equal(everything, np.round(everything)))
    if integers and high - low + 1 <= cap:
        return np.arange(low - 0.5, high + 1.0)
    if low == high:
        return np.asarray([low - 0.5, high + 0.5])
    count = min(len(np.histogram_bin_edges(everything, bins=bins)) - 1, cap)
    if integers:
        # whole numbers of values per bin, each value inside a bin, not on an edge
        width = math.ceil((high - low + 1) / count)
        return low - 0.5 + width * np.arange(math.ceil((high - low + 1) / width) + 1)
    return np.linspace(low, high, count + 1)


def histogram(ax: Any, samples: Sequence[np.ndarray | None], style: Style, title: str,
              xlabel: str) -> None:
    """Shares of episodes per bin, one colour per dataset (outlines when overlaid)."""
    _decorate(ax, title, xlabel, "share of episodes")
    present = [np.asarray(s, dtype=np.float64) for s in samples if s is not None and len(s)]
    if not present:
        _empty(ax, "no episodes")
        return
    edges = bin_edges(present, style.bins)
    overlaid = len(samples) > 1
    for k, (sample, color) in enumerate(zip(samples, style.colors, strict=True)):
        if sample is None or not len(sample):
            continue
        values = np.asarray(sample, dtype=np.float64)
        weights = np.full(len(values), 1 / len(values))
        if overlaid:
            # later outlines are thinner, so equal histograms still show every colour
            ax.hist(values, bins=edges, weights=weights, histtype="step", color=color,
                    linewidth=1.2 + 1.6 * (len(samples) - 1 - k))
        else:
            ax.hist(values, bins=edges, weights=weights, color=color, edgecolor="white",
                    linewidth=0.5)


def identical_note(ax: Any, agents: Sequence[str]) -> None:
    """Say which agents a collapsed panel stands for."""
    if len(agents) < 2:
        return
    shown = _name_range(agents)
    ax.text(0.98, 0.97, f"identical for {len(agents)} agents:\n{shown}", ha="right",
            va="top", transform=ax.transAxes, fontsize=7,
            bbox={"facecolor": "white", "alpha": 0.8, "edgecolor": "none"})


def _name_range(agents: Sequence[str]) -> str:
    if len(agents) <= 3:
        return ", ".join(agents)
    return f"{agents[0]}, {agents[1]} ... {agents[-1]}"


def _agent_axis(ax: Any, agents: Sequence[str]) -> None:
    step = max(1, math.ceil(len(agents) / MANY_TICKS))
    ticks = list(range(0, len(agents), step))
    ax.set_xticks(ticks, [agents[i] for i in ticks], fontsize=7,
                  rotation=90 if len(agents) > 4 else 0)
    ax.set_xlim(-0.6, len(agents) - 0.4)


def returns_by_agent(ax: Any, agents: Sequence[str],
                     per_dataset: Sequence[Sequence[np.ndarray | None]], style: Style) -> None:
    """Every agent's returns side by side: median (dot), quartiles (thick) and range (thin)."""
    _decorate(ax, f"return per episode, {len(agents)} agents", None, "return")
    width = 0.8 / len(per_dataset)
    for k, (samples, color) in enumerate(zip(per_dataset, style.colors, strict=True)):
        shown = {i: sample for i, sample in enumerate(samples)
                 if sample is not None and len(sample)}
        if not shown:
            continue
        # rows: minimum, lower quartile, median, upper quartile, maximum
        q = np.stack([np.percentile(s, [0, 25, 50, 75, 100]) for s in shown.values()], axis=1)
        x = np.asarray(list(shown)) - 0.4 + width * (k + 0.5)
        ax.vlines(x, q[0], q[4], color=color, linewidth=0.8)
        ax.vlines(x, q[1], q[3], color=color, linewidth=4)
        ax.plot(x, q[2], "o", color=color, markersize=3, markeredgecolor="white",
                markeredgewidth=0.5)
    _agent_axis(ax, agents)
    ax.text(0.01, 0.99, "dot: median, bar: quartiles, line: range", ha="left", va="top",
            transform=ax.transAxes, fontsize=6, color="dimgray")


def action_panel(ax: Any, title: str, chosen: Sequence[ActionSummary | None], style: Style,
                 many_actions: int) -> None:
    """One agent's first action leaf in every dataset: grouped bars of frequencies
    (a line above ``many_actions`` values) or per-dimension mean +- std with min..max."""
    first = next((a for a in chosen if a is not None), None)
    if first is not None and first.path:
        title = f"{title} [{first.path}]"
    _decorate(ax, title, None, None)
    if first is None or first.kind == "text":
        _empty(ax, "no action summary")
        return
    # a leaf of another kind cannot share these axes; say so rather than drop it silently
    other = [f"{name} ({a.kind})" for a, name in zip(chosen, style.names, strict=True)
             if a is not None and (a.path, a.kind) != (first.path, first.kind)]
    if other:
        ax.text(0.01, 0.99, "not shown: " + ", ".join(other), ha="left", va="top",
                transform=ax.transAxes, fontsize=6, color="dimgray")
    chosen = [a if a is not None and a.path == first.path and a.kind == first.kind else None
              for a in chosen]
    width = 0.8 / len(chosen)
    if first.kind == "continuous":
        ax.set_ylabel("action value", fontsize=8)
        for k, (summary, color) in enumerate(zip(chosen, style.colors, strict=True)):
            if summary is None or not summary.mean:
                continue
            x = np.arange(len(summary.mean)) - 0.4 + width * (k + 0.5)
            ax.vlines(x, summary.minimum, summary.maximum, color=color, linewidth=1)
            ax.errorbar(x, summary.mean, yerr=summary.std, fmt="o", color=color, markersize=3,
                        capsize=2)
        _label_axis(ax, first.labels, rotate=False)
        return
    ax.set_ylabel("share of actions" if first.kind != "binary" else "share set", fontsize=8)
    many = len(first.labels) > many_actions
    for k, (summary, color) in enumerate(zip(chosen, style.colors, strict=True)):
        if summary is None:
            continue
        freq = summary.frequencies
        if many:
            ax.plot(np.arange(len(freq)), freq, color=color, linewidth=0.8)
        else:
            x = np.arange(len(freq)) - 0.4 + width * (k + 0.5)
            ax.bar(x, freq, width=width, color=color)
    if many:
        ax.set_xlabel("action", fontsize=8)
    else:
        _label_axis(ax, first.labels, rotate=first.kind == "multi_discrete")


def _label_axis(ax: Any, labels: Sequence[str], *, rotate: bool) -> None:
    step = max(1, math.ceil(len(labels) / MANY_TICKS))
    ticks = list(range(0, len(labels), step))
    ax.set_xticks(ticks, [labels[i] for i in ticks], fontsize=7, rotation=90 if rotate else 0)


def continuous_by_agent(ax: Any, agents: Sequence[str],
                        per_dataset: Sequence[Sequence[ActionSummary | None]],
                        style: Style) -> None:
    """Continuous actions of every agent side by side: per dimension mean +- std (dot and
    bar) and min..max (thin line), dimensions next to each other within an agent's slot."""
    dims = max((len(a.mean) for row in per_dataset for a in row
                if a is not None and a.kind == "continuous"), default=0)
    title = f"actions, {len(agents)} agents" + (f" ({dims} dimensions each)" if dims > 1 else "")
    _decorate(ax, title, None, "action value")
    if dims == 0:
        _empty(ax, "no continuous actions")
        return
    shown = [k for k, row in enumerate(per_dataset)
             if any(a is not None and a.kind == "continuous" for a in row)]
    width = 0.8 / (len(shown) * dims)
    for place, k in enumerate(shown):
        color = style.colors[k]
        for i, summary in enumerate(per_dataset[k]):
            if summary is None or summary.kind != "continuous" or not summary.mean:
                continue
            slot = place * dims + np.arange(len(summary.mean))
            x = i - 0.4 + width * (slot + 0.5)
            ax.vlines(x, summary.minimum, summary.maximum, color=color, linewidth=0.8)
            ax.errorbar(x, summary.mean, yerr=summary.std, fmt="o", color=color,
                        markersize=2.5, elinewidth=2, capsize=0)
    _agent_axis(ax, agents)


def heat_by_agent(ax: Any, agents: Sequence[str], actions: Sequence[ActionSummary | None],
                  name: str) -> None:
    """A heat map of one dataset's actions, agents (rows) by action values (discrete kinds:
    share of actions) or by dimensions (continuous: mean action)."""
    present = [a for a in actions if a is not None and a.kind != "text"]
    continuous = bool(present) and present[0].kind == "continuous"
    what = "mean action" if continuous else "share of actions"
    _decorate(ax, f"{'mean actions' if continuous else 'actions'} by agent: {name}", None, None)
    present = [a for a in present if (a.kind == "continuous") == continuous]
    if not present:
        _empty(ax, "no action summary")
        return
    labels = max((a.labels for a in present), key=len)
    grid = np.full((len(agents), len(labels)), np.nan)
    for i, summary in enumerate(actions):
        if summary is not None and summary in present:
            values = np.asarray(summary.mean) if continuous else summary.frequencies
            grid[i, :len(values)] = values
    image = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest",
                      **({} if continuous else {"vmin": 0.0}))
    _label_axis(ax, labels, rotate=len(labels) > 8)
    step = max(1, math.ceil(len(agents) / MANY_TICKS))
    rows = list(range(0, len(agents), step))
    ax.set_yticks(rows, [agents[i] for i in rows], fontsize=6)
    colorbar = ax.figure.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    colorbar.ax.tick_params(labelsize=6)
    colorbar.set_label(what, fontsize=7)


def coverage_bars(ax: Any, descriptions: Sequence[DatasetDescription], style: Style) -> None:
    """SACo and average OACo of every dataset, side by side; the OACo bar's whisker spans
    the agents' OACo (lowest to highest), so the panel reads alike at 3 or 100 agents."""
    _decorate(ax, "coverage: distinct pairs / steps", None, "coverage")
    measured = [(k, d.coverage) for k, d in enumerate(descriptions) if d.coverage is not None]
    width = 0.8 / len(descriptions)
    top = 0.0
    for k, coverage in measured:
        x = np.asarray([0.0, 1.0]) - 0.4 + width * (k + 0.5)
        values = [coverage.saco, coverage.oaco]
        ax.bar(x, values, width=width * 0.9, color=style.colors[k])
        per_agent = list(coverage.agents.values())
        high = max(per_agent, default=coverage.oaco)
        if len(per_agent) > 1:
            ax.vlines(x[1], min(per_agent), high, color="black", linewidth=0.8)
        top = max(top, coverage.saco, high)
        if len(descriptions) <= MANY_VALUE_LABELS:
            # above the bar, and above the OACo whisker
            for xi, value, at in zip(x, values, [coverage.saco, high], strict=True):
                ax.text(xi, max(value, at), f"{value:.3g}", ha="center", va="bottom",
                        fontsize=6)
    if not measured:
        _empty(ax, "no coverage measured")
    agents = max((len(c.agents) for _, c in measured), default=0)
    ax.set_xticks([0, 1], ["SACo\n(state, joint action)",
                           f"OACo\n(mean of {agents} agent{'s' if agents != 1 else ''})"],
                  fontsize=7)
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylim(0, max(top, 1e-3) * 1.25)  # room for the notes
    ax.set_yticks([t for t in ax.get_yticks() if t <= min(1.0, top * 1.25)])  # none above 1
    without_state = [style.names[k] for k, c in measured if c.state_source != "state"]
    notes = ["whisker: agents' lowest to highest OACo"] if agents > 1 else []
    if without_state:
        which = ("all" if len(without_state) == len(measured) else ", ".join(without_state)
                 if len(without_state) == 1 else f"{len(without_state)} of {len(measured)}")
        notes.append(f"no state ({which}): joint observation in its place")
    if notes:
        ax.text(0.01, 0.99, "\n".join(notes), ha="left", va="top", transform=ax.transAxes,
                fontsize=6, color="dimgray")


def outcomes(ax: Any, description: DatasetDescription, name: str) -> None:
    """Win, draw and loss shares of every agent of one turn-based dataset (stacked bars)."""
    agents = [a for a in description.agents if a.outcome is not None]
    games = max((a.outcome.games for a in agents if a.outcome is not None), default=0)
    _decorate(ax, f"outcomes of {games} games: {name}", None, "share of games")
    if not games:
        _empty(ax, "no terminated games")
        return
    x = np.arange(len(agents))
    bottom = np.zeros(len(agents))
    played = np.asarray([max(getattr(a.outcome, "games", 0), 1) for a in agents])
    for key, color in OUTCOME_COLORS.items():
        counts = np.asarray([getattr(a.outcome, key) for a in agents], dtype=np.float64)
        shares = counts / played
        ax.bar(x, shares, bottom=bottom, color=color, width=0.6, label=key)
        for xi, b, s in zip(x, bottom, shares, strict=True):
            if s >= 0.08:
                ax.text(xi, b + s / 2, f"{key[0].upper()} {s:.0%}", ha="center", va="center",
                        fontsize=7, color="white")
        bottom += shares
    ax.set_ylim(0, 1)
    _agent_axis(ax, [a.name for a in agents])
