"""Compare two or more datasets: return distributions (two-sample Kolmogorov-Smirnov against
the first, QQ plots), episode lengths, coverage and spaces, as a text report and one figure.

Each source is described once (:func:`~marl_minari.describe.describe`, streaming); what is
compared is read from the descriptions, so comparing costs one reading pass per source.
The Kolmogorov-Smirnov statistic is computed here with numpy (no SciPy): the largest gap
between the two empirical distribution functions of the episodes' team returns; its p-value
is the asymptotic one (Kolmogorov's distribution with Stephens' small-sample correction, as
in *Numerical Recipes*), good enough to tell "same distribution" from "clearly not" for tens
of episodes or more.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from marl_minari.describe import checks
from marl_minari.describe._describe import describe
from marl_minari.describe.results import DatasetDescription, require_statistics
from marl_minari.errors import EmptyDatasetError, InvalidOptionError
from marl_minari.extras import require

if TYPE_CHECKING:
    from matplotlib.figure import Figure

QUANTILES: Final = np.linspace(0.01, 0.99, 99)
"""The quantiles a QQ plot pairs (1% to 99%)."""
COMPARE_PANEL: Final = (420, 340)
"""Width and height in pixels (at ``dpi=100``) of one panel of :func:`plot_comparison`."""


def ks_two_sample(first: Sequence[float] | np.ndarray, second: Sequence[float] | np.ndarray
                  ) -> tuple[float, float]:
    """Two-sample Kolmogorov-Smirnov test: ``(statistic, asymptotic p-value)``.

    The statistic is ``max |F1(x) - F2(x)|`` over all x (the empirical distribution
    functions); ``(0.0, 1.0)`` when a sample is empty.
    """
    a = np.sort(np.asarray(first, dtype=np.float64))
    b = np.sort(np.asarray(second, dtype=np.float64))
    if not len(a) or not len(b):
        return 0.0, 1.0
    points = np.concatenate([a, b])
    gap = np.abs(np.searchsorted(a, points, side="right") / len(a)
                 - np.searchsorted(b, points, side="right") / len(b))
    statistic = float(gap.max())
    effective = math.sqrt(len(a) * len(b) / (len(a) + len(b)))
    return statistic, _kolmogorov_tail((effective + 0.12 + 0.11 / effective) * statistic)


def _kolmogorov_tail(x: float) -> float:
    """``P(K > x)`` of Kolmogorov's distribution: ``2 sum (-1)^(k-1) exp(-2 k^2 x^2)``."""
    if x < 0.2:
        return 1.0  # the series converges slowly here and the sum is 1 to 1e-8
    total = sum((-1) ** (k - 1) * math.exp(-2 * k * k * x * x) for k in range(1, 101))
    return float(min(1.0, max(0.0, 2 * total)))


@dataclass(frozen=True)
class ReturnTest:
    """How one dataset's episode returns compare with the first's.

    Attributes:
        statistic: the two-sample Kolmogorov-Smirnov statistic (0: same empirical
            distribution; 1: no overlap).
        pvalue: its asymptotic p-value.
        mean_difference: this dataset's mean team return minus the first's.
    """

    statistic: float
    pvalue: float
    mean_difference: float


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found: the descriptions, return tests against the first dataset,
    and how the spaces differ.

    Attributes:
        descriptions: one per source, in the order given.
        returns: per description after the first, its :class:`ReturnTest` against the first.
        space_differences: lines naming each agent set or space that differs from the first
            dataset's (empty when all agree).
        agent_returns: for zero-sum games only (:attr:`zero_sum`), per description after the
            first, ``{agent: ReturnTest}`` of each agent's episode returns against the first's
            (the agents both datasets have); empty otherwise.
    """

    descriptions: tuple[DatasetDescription, ...]
    returns: tuple[ReturnTest, ...]
    space_differences: tuple[str, ...]
    agent_returns: tuple[dict[str, ReturnTest], ...] = ()

    @property
    def zero_sum(self) -> bool:
        """Every episode of every dataset has team return 0 (a zero-sum game): team returns
        cannot differ, so :attr:`agent_returns` compares each agent's returns instead."""
        return bool(self.agent_returns)

    @property
    def labels(self) -> list[str]:
        """The datasets' short names, made unique with a position where two agree."""
        names = [d.label for d in self.descriptions]
        return [f"{n} [{i}]" if names.count(n) > 1 else n for i, n in enumerate(names)]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the descriptions without their per-episode arrays)."""
        return {"datasets": [d.to_dict() for d in self.descriptions],
                "returns_against_first": [
                    {"dataset": label, "ks_statistic": t.statistic, "ks_pvalue": t.pvalue,
                     "mean_difference": t.mean_difference}
                    for label, t in zip(self.labels[1:], self.returns, strict=True)],
                "zero_sum": self.zero_sum,
                "agent_returns_against_first": [
                    {"dataset": label, "agents": {
                        agent: {"ks_statistic": t.statistic, "ks_pvalue": t.pvalue,
                                "mean_difference": t.mean_difference}
                        for agent, t in tests.items()}}
                    for label, tests in zip(self.labels[1:], self.agent_returns,
                                            strict=self.zero_sum)],
                "space_differences": list(self.space_differences)}

    def to_text(self) -> str:
        """A short report: one row per dataset, the return tests, the space differences."""
        labels = self.labels
        width = max(12, *(len(n) for n in labels))
        lines = [f"{'dataset':<{width}} {'episodes':>9} {'steps':>10} {'length':>8} "
                 f"{'team return':>20} {'SACo':>7} {'OACo':>7}"]
        for label, d in zip(labels, self.descriptions, strict=True):
            c = d.coverage
            saco, oaco = ("-", "-") if c is None else (f"{c.saco:.4f}", f"{c.oaco:.4f}")
            values = d.episode_team_returns
            spread = f"{_mean(d):.3g} +- {values.std() if len(values) else math.nan:.3g}"
            lines.append(f"{label:<{width}} {d.total_episodes:>9,} {d.total_steps:>10,} "
                         f"{np.mean(d.episode_length_values) if d.total_episodes else 0:>8.1f} "
                         f"{spread:>20} {saco:>7} {oaco:>7}")
        if self.zero_sum:
            lines.append(f"team returns are 0 in every episode (a zero-sum game), so per-agent "
                         f"returns are compared against {labels[0]} (two-sample "
                         "Kolmogorov-Smirnov):")
            for label, tests in zip(labels[1:], self.agent_returns, strict=True):
                lines += [f"  {label}, {agent}: {_test_line(t)}" for agent, t in tests.items()]
        elif self.returns:
            lines.append(f"team returns against {labels[0]} (two-sample Kolmogorov-Smirnov):")
            lines += [f"  {label}: {_test_line(t)}"
                      for label, t in zip(labels[1:], self.returns, strict=True)]
        lines += (["spaces differ:", *(f"  {s}" for s in self.space_differences)]
                  if self.space_differences else ["spaces: the same agents and spaces"])
        return "\n".join(lines)


def compare(sources: Sequence[Any], *, coverage: bool = True,
            chunk_steps: int | None = None,
            vault_options: dict[str, Any] | None = None) -> Comparison:
    """Describe two or more datasets and compare them with the first.

    Args:
        sources: what :func:`~marl_minari.describe.describe` takes (ids, folders, vault
            folders, dataset objects), or descriptions already made.
        coverage: measure SACo and OACo too (reads the observations).
        chunk_steps: steps read at a time.
        vault_options: for vault sources, as :func:`~marl_minari.describe.describe`.

    Returns:
        The :class:`Comparison`.

    Raises:
        InvalidOptionError: fewer than two sources, one source given where the list of
            them goes (a string would be taken character by character), a metadata-only
            description among them.
        EmptyDatasetError: a dataset without episodes (named; nothing to compare its returns
            with), found as soon as it is described.
    """
    if isinstance(sources, (str, bytes, os.PathLike, DatasetDescription)):
        raise InvalidOptionError(
            f"compare takes a list of two or more sources, not one {type(sources).__name__} "
            f"({sources!r}): e.g. compare(['first-v0', 'second-v0'])")
    if len(sources) < 2:
        raise InvalidOptionError(f"compare needs at least two sources, got {len(sources)}")
    described: list[DatasetDescription] = []
    for source in sources:
        d = source if isinstance(source, DatasetDescription) else describe(
            source, coverage=coverage, chunk_steps=chunk_steps, vault_options=vault_options)
        require_statistics([d], "compare")
        # a test against no episodes would read "no evidence they differ": refused before
        # the other sources are read
        if not d.total_episodes:
            raise EmptyDatasetError(
                f"dataset {d.name!r} holds no episodes, so there are no returns to compare: "
                "record episodes into it first, or leave it out of the comparison")
        described.append(d)
    descriptions = tuple(described)
    first = descriptions[0]
    tests = tuple(_return_test(first.episode_team_returns, other.episode_team_returns)
                  for other in descriptions[1:])
    agent_tests: tuple[dict[str, ReturnTest], ...] = ()
    if _zero_sum(descriptions):
        agent_tests = tuple(_agent_tests(first, other) for other in descriptions[1:])
    return Comparison(descriptions, tests, tuple(_space_differences(descriptions)),
                      agent_tests)


def _return_test(first: np.ndarray, other: np.ndarray) -> ReturnTest:
    statistic, pvalue = ks_two_sample(first, other)
    mean = float(other.mean()) if len(other) else math.nan
    return ReturnTest(statistic, pvalue, mean - (float(first.mean()) if len(first) else math.nan))


def _zero_sum(descriptions: Sequence[DatasetDescription]) -> bool:
    """Every dataset has episodes, and every episode's team return is 0 (to rounding)."""
    return all(len(d.episode_team_returns) and bool(np.all(
        np.abs(d.episode_team_returns) <= 1e-9 * max(1.0, float(np.abs(
            d.episode_returns).max(initial=0.0))))) for d in descriptions)


def _agent_tests(first: DatasetDescription, other: DatasetDescription
                 ) -> dict[str, ReturnTest]:
    """Each agent's episode returns in ``other`` against ``first``'s (agents of both)."""
    theirs = {agent: i for i, agent in enumerate(other.possible_agents)}
    return {agent: _return_test(first.episode_returns[:, i],
                                other.episode_returns[:, theirs[agent]])
            for i, agent in enumerate(first.possible_agents) if agent in theirs}


def _test_line(test: ReturnTest) -> str:
    verdict = "differ" if test.pvalue < 0.05 else "no evidence they differ"
    return (f"KS {test.statistic:.3f}, p {test.pvalue:.3g} ({verdict}), "
            f"mean {test.mean_difference:+.3g}")


def _mean(d: DatasetDescription) -> float:
    values = d.episode_team_returns
    return float(values.mean()) if len(values) else math.nan


def _space_differences(descriptions: Sequence[DatasetDescription]) -> list[str]:
    first = descriptions[0]
    lines = []
    for index, other in enumerate(descriptions[1:], start=1):
        name = f"{other.label} [{index}]"
        if other.possible_agents != first.possible_agents:
            lines.append(f"{name}: agents {list(other.possible_agents)} vs "
                         f"{list(first.possible_agents)}")
            continue
        for key in ("observation_spaces", "action_spaces"):
            mine = first.metadata.get(key) or {}
            theirs = other.metadata.get(key) or {}
            for agent in first.possible_agents:
                if mine.get(agent) != theirs.get(agent):
                    lines.append(f"{name}: {key[:-1].replace('_', ' ')} of {agent!r} "
                                 f"{theirs.get(agent)} vs {mine.get(agent)}")
        if first.metadata.get("state_space") != other.metadata.get("state_space"):
            lines.append(f"{name}: state space {other.metadata.get('state_space')} vs "
                         f"{first.metadata.get('state_space')}")
    return lines


# ---------------------------------------------------------------------------- the figure
def draw_comparison(comparison: Comparison, *, dpi: int = 100) -> Figure:
    """The figure of :func:`plot_comparison`, not saved (Agg canvas; pyplot untouched)."""
    backend = require("matplotlib.backends.backend_agg", "plot", "plot_comparison")
    figures = require("matplotlib.figure", "plot", "plot_comparison")
    from matplotlib.lines import Line2D

    if not isinstance(comparison, Comparison):
        raise InvalidOptionError(
            f"plot_comparison takes what compare() returns, not a "
            f"{type(comparison).__name__}: e.g. plot_comparison(compare(['first-v0', "
            "'second-v0']), 'compare.png')")
    resolution = checks.dpi(dpi)

    labels = comparison.labels
    has_coverage = any(d.coverage is not None for d in comparison.descriptions)
    panels = 4 if has_coverage else 3
    width, height = COMPARE_PANEL
    legend_rows = math.ceil(len(labels) / 3)
    figure = figures.Figure(figsize=(panels * width / 100, (height + 60 + 22 * legend_rows) / 100),
                            dpi=resolution, layout="constrained")
    backend.FigureCanvasAgg(figure)
    figure.suptitle("Comparison of " + _joined(labels), fontsize=11)
    colors = [f"C{i % 10}" for i in range(len(labels))]
    axes = [figure.add_subplot(1, panels, i + 1) for i in range(panels)]
    _draw_returns(axes[0], comparison, colors)
    _draw_qq(axes[1], comparison, colors)
    _draw_lengths(axes[2], comparison, colors)
    if has_coverage:
        _draw_coverage(axes[3], comparison, colors)
    handles = [Line2D([], [], color=c, lw=6, label=n) for c, n in zip(colors, labels, strict=True)]
    figure.legend(handles=handles, loc="outside lower center", ncols=min(3, len(labels)),
                  fontsize=9, frameon=False)
    return figure


def plot_comparison(comparison: Comparison, path: str | os.PathLike[str], *,
                    dpi: int = 100) -> Path:
    """Save the comparison as a PNG of side-by-side panels, one colour per dataset.

    Panels: the team returns' empirical distribution functions (the KS statistic against the
    first in the legend's place of each line: the largest vertical gap), a QQ plot of each
    dataset's return quantiles against the first's (on the diagonal: same distribution),
    the episode lengths' distribution functions, and SACo / average OACo bars (when
    measured). Every panel is per dataset, never per agent, so it reads the same at 3 or 100
    agents.

    Missing parent folders of ``path`` are created.

    Raises:
        InvalidOptionError: ``comparison`` is not what :func:`compare` returns, ``dpi`` is not
            a positive number, or ``path`` is a folder or lies below a file.
        MissingExtraError: matplotlib is not installed (``pip install "marl-minari[plot]"``).
    """
    target = checks.output_file(path, "plot_comparison: path", "compare.png")
    figure = draw_comparison(comparison, dpi=dpi)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, format="png", dpi=dpi)
    return target


def _ecdf(ax: Any, values: np.ndarray, color: str, label: str) -> None:
    ordered = np.sort(values)
    shares = np.arange(1, len(ordered) + 1) / max(1, len(ordered))
    ax.step(ordered, shares, where="post", color=color, label=label, lw=1.5)


def _draw_returns(ax: Any, comparison: Comparison, colors: list[str]) -> None:
    for index, (d, color) in enumerate(zip(comparison.descriptions, colors, strict=True)):
        ks = "" if not index else f"KS {comparison.returns[index - 1].statistic:.2f}"
        _ecdf(ax, d.episode_team_returns, color, ks)
    ax.set_title("Team return per episode", fontsize=10)
    ax.set_xlabel("team return")
    ax.set_ylabel("share of episodes with return <= x")
    if len(comparison.descriptions) <= 8:
        ax.legend(fontsize=8, title="against the first", title_fontsize=8, loc="upper left")
    ax.grid(alpha=0.3)


def _draw_qq(ax: Any, comparison: Comparison, colors: list[str]) -> None:
    first = comparison.descriptions[0].episode_team_returns
    if not len(first):
        return
    reference = np.quantile(first, QUANTILES)
    low, high = float(reference.min()), float(reference.max())
    for d, color in zip(comparison.descriptions[1:], colors[1:], strict=True):
        if len(d.episode_team_returns):
            quantiles = np.quantile(d.episode_team_returns, QUANTILES)
            ax.plot(reference, quantiles, "o", ms=3, color=color)
            low, high = min(low, float(quantiles.min())), max(high, float(quantiles.max()))
    ax.plot([low, high], [low, high], color="0.5", lw=1, ls="--")
    ax.set_title("QQ plot of team returns", fontsize=10)
    ax.set_xlabel(f"quantiles of {comparison.labels[0]}"[:60])
    ax.set_ylabel("quantiles of the other dataset")
    ax.grid(alpha=0.3)


def _draw_lengths(ax: Any, comparison: Comparison, colors: list[str]) -> None:
    for d, color in zip(comparison.descriptions, colors, strict=True):
        _ecdf(ax, d.episode_length_values, color, d.label)
    ax.set_title("Episode length", fontsize=10)
    ax.set_xlabel("steps")
    ax.set_ylabel("share of episodes with length <= x")
    ax.grid(alpha=0.3)


def _draw_coverage(ax: Any, comparison: Comparison, colors: list[str]) -> None:
    count = len(comparison.descriptions)
    bar = 0.8 / count
    for index, (d, color) in enumerate(zip(comparison.descriptions, colors, strict=True)):
        c = d.coverage
        values = [0.0, 0.0] if c is None else [c.saco, c.oaco]
        bars = ax.bar(np.arange(2) + (index - (count - 1) / 2) * bar, values, bar, color=color)
        if count <= 6:
            ax.bar_label(bars, fmt="%.3f", fontsize=7)
    ax.set_xticks([0, 1], ["SACo (state, joint action)", "average OACo"], fontsize=9)
    ax.set_title("Coverage (distinct pairs / transitions)", fontsize=10)
    ax.set_ylabel("coverage")
    ax.set_ylim(0, 1.05)
    ax.grid(alpha=0.3, axis="y")


def _joined(labels: Sequence[str], limit: int = 90) -> str:
    text = ", ".join(labels)
    return text if len(text) <= limit else text[:limit - 1] + "…"
