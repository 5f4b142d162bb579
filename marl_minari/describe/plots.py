"""Comparison plots of several descriptions on shared axes."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from marl_minari.describe.results import ActionSummary, DatasetDescription

PANEL_SIZE: Final = (400, 300)
"""Pixel width and height of one panel of :func:`plot_descriptions` (at ``dpi=100``)."""
PLOT_COLUMNS: Final = 4
"""Panels per row of :func:`plot_descriptions` (fewer when there are fewer panels)."""
MANY_ACTIONS: Final = 64
"""Above this many discrete actions, action frequencies are drawn as lines, not bars."""


def plot_layout(descriptions: Sequence[DatasetDescription]) -> tuple[int, int]:
    """``(rows, columns)`` of the panel grid :func:`plot_descriptions` draws.

    Panels: episode lengths, team returns, then one return histogram per agent and one action
    panel per agent (agents of all descriptions, first-seen order).
    """
    panels = 2 + 2 * len(_union_agents(descriptions))
    columns = min(PLOT_COLUMNS, panels)
    return math.ceil(panels / columns), columns


def plot_descriptions(descriptions: Sequence[DatasetDescription], path: str | os.PathLike[str],
                      *, labels: Sequence[str] | None = None, bins: int = 30,
                      dpi: int = 100) -> Path:
    """Draw several descriptions side by side on shared axes and save a PNG.

    Every panel overlays all descriptions (one colour each): histograms of episode lengths,
    team returns and per-agent returns (shared bins, as shares of episodes so datasets of
    different sizes compare), and per-agent action frequencies (discrete: grouped bars) or
    ranges (continuous: mean +- std with min..max whiskers per dimension). The image is
    ``columns * PANEL_SIZE[0]`` x ``rows * PANEL_SIZE[1]`` pixels at ``dpi=100`` (see
    :func:`plot_layout`), scaled by ``dpi / 100``.

    Args:
        descriptions: what :func:`describe` returned, one per dataset.
        path: the PNG file to write (parent folders are created).
        labels: legend names (default: the descriptions' names).
        bins: histogram bins.
        dpi: resolution.

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    if not descriptions:
        raise ValueError("plot_descriptions needs at least one description")
    names = list(labels) if labels is not None else [d.name for d in descriptions]
    if len(names) != len(descriptions):
        raise ValueError(f"{len(names)} labels for {len(descriptions)} descriptions")
    rows, columns = plot_layout(descriptions)
    width, height = PANEL_SIZE
    figure = plt.figure(figsize=(columns * width / 100, rows * height / 100), dpi=dpi)
    try:
        axes = figure.subplots(rows, columns, squeeze=False).reshape(-1)
        colors = [f"C{i % 10}" for i in range(len(descriptions))]
        agents = _union_agents(descriptions)
        _histogram(axes[0], [d.episode_length_values for d in descriptions], names, colors,
                   bins, "episode length", "steps")
        _histogram(axes[1], [d.episode_team_returns for d in descriptions], names, colors,
                   bins, "team return", "return")
        for i, agent in enumerate(agents):
            values = [d.episode_returns[:, d.possible_agents.index(agent)]
                      if agent in d.possible_agents and d.episode_returns.size else None
                      for d in descriptions]
            _histogram(axes[2 + i], values, names, colors, bins, f"return of {agent}", "return")
            actions = [d.agent(agent).actions if agent in d.possible_agents else ()
                       for d in descriptions]
            _action_panel(axes[2 + len(agents) + i], agent, actions, names, colors)
        for ax in axes[2 + 2 * len(agents):]:
            ax.set_axis_off()
        figure.tight_layout()
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(target, format="png", dpi=dpi)
    finally:
        plt.close(figure)
    return target


def _union_agents(descriptions: Sequence[DatasetDescription]) -> list[str]:
    seen: dict[str, None] = {}
    for description in descriptions:
        for agent in description.possible_agents:
            seen.setdefault(agent, None)
    return list(seen)


def _histogram(ax: Any, samples: Sequence[np.ndarray | None], names: Sequence[str],
               colors: Sequence[str], bins: int, title: str, xlabel: str) -> None:
    present = [np.asarray(s, dtype=np.float64) for s in samples if s is not None and len(s)]
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("share of episodes", fontsize=8)
    ax.tick_params(labelsize=7)
    if not present:
        ax.text(0.5, 0.5, "no episodes", ha="center", va="center", transform=ax.transAxes)
        return
    everything = np.concatenate(present)
    low, high = float(everything.min()), float(everything.max())
    if low == high:
        low, high = low - 0.5, high + 0.5
    edges = np.linspace(low, high, bins + 1)
    for sample, name, color in zip(samples, names, colors, strict=True):
        if sample is None or not len(sample):
            continue
        values = np.asarray(sample, dtype=np.float64)
        ax.hist(values, bins=edges, weights=np.full(len(values), 1 / len(values)),
                histtype="stepfilled", alpha=0.35, color=color, edgecolor=color, label=name)
    if len(samples) > 1:
        ax.legend(fontsize=7)


def _action_panel(ax: Any, agent: str, per_dataset: Sequence[tuple[ActionSummary, ...]],
                  names: Sequence[str], colors: Sequence[str]) -> None:
    ax.tick_params(labelsize=7)
    first = next((actions[0] for actions in per_dataset if actions), None)
    leaf_note = ""
    if first is not None and first.path:
        leaf_note = f" [{first.path}]"
    ax.set_title(f"actions of {agent}{leaf_note}", fontsize=9)
    if first is None or first.kind == "text":
        ax.text(0.5, 0.5, "no action summary", ha="center", va="center", transform=ax.transAxes)
        return
    chosen = [next((a for a in actions if a.path == first.path and a.kind == first.kind), None)
              for actions in per_dataset]
    width = 0.8 / len(chosen)
    if first.kind == "continuous":
        ax.set_ylabel("action value", fontsize=8)
        for k, (summary, name, color) in enumerate(zip(chosen, names, colors, strict=True)):
            if summary is None or not summary.mean:
                continue
            x = np.arange(len(summary.mean)) - 0.4 + width * (k + 0.5)
            ax.vlines(x, summary.minimum, summary.maximum, color=color, linewidth=1)
            ax.errorbar(x, summary.mean, yerr=summary.std, fmt="o", color=color, markersize=3,
                        capsize=2, label=name)
        ax.set_xticks(range(len(first.labels)), first.labels, fontsize=7)
    else:
        ax.set_ylabel("share of actions" if first.kind != "binary" else "share set",
                      fontsize=8)
        many = len(first.labels) > MANY_ACTIONS
        for k, (summary, name, color) in enumerate(zip(chosen, names, colors, strict=True)):
            if summary is None:
                continue
            freq = summary.frequencies
            if many:
                ax.plot(np.arange(len(freq)), freq, color=color, linewidth=0.8, label=name)
            else:
                x = np.arange(len(freq)) - 0.4 + width * (k + 0.5)
                ax.bar(x, freq, width=width, color=color, alpha=0.8, label=name)
        if not many:
            step = max(1, math.ceil(len(first.labels) / 16))
            ticks = list(range(0, len(first.labels), step))
            ax.set_xticks(ticks, [first.labels[i] for i in ticks], fontsize=7,
                          rotation=90 if first.kind == "multi_discrete" else 0)
        else:
            ax.set_xlabel("action", fontsize=8)
    if len(chosen) > 1:
        ax.legend(fontsize=7)

