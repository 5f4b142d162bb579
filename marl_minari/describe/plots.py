"""Comparison plots of several descriptions on shared axes.

The figure is drawn on a :class:`matplotlib.figure.Figure` with its own Agg canvas, so the
user's pyplot backend and open figures are left alone. Which panels it holds is decided by
:func:`plot_panels`, which keeps the figure readable from 2 to 20+ agents: agents whose panels
would be identical share one, and beyond :data:`MANY_AGENTS` distinct panels the agents are
summarised side by side in one panel.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

import numpy as np

from marl_minari.describe import _draw, checks
from marl_minari.describe.results import ActionSummary, DatasetDescription, require_statistics
from marl_minari.errors import InvalidOptionError
from marl_minari.extras import require

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANEL_SIZE: Final = (400, 300)
"""Pixel width and height of one panel of :func:`plot_descriptions` (at ``dpi=100``)."""
PLOT_COLUMNS: Final = 4
"""Panels per row of :func:`plot_descriptions` (fewer when there are fewer panels)."""
MANY_ACTIONS: Final = 64
"""Above this many discrete actions, action frequencies are drawn as lines, not bars."""
MANY_AGENTS: Final = 6
"""Above this many distinct per-agent panels, agents are summarised in one panel instead."""
HEADER_HEIGHT: Final = 50
"""Pixels (at ``dpi=100``) above the panels for the figure title."""
LEGEND_ROW_HEIGHT: Final = 25
"""Pixels (at ``dpi=100``) per row of the figure legend, below the panels (drawn when
comparing datasets)."""
LEGEND_COLUMNS: Final = 3
"""Datasets per row of the figure legend."""

BIN_RULES: Final = ("auto", "fd", "doane", "scott", "stone", "rice", "sturges", "sqrt")
"""numpy's rules for choosing histogram bins from the data (``bins=`` of the plots)."""

PanelKind = Literal["lengths", "team", "coverage", "outcomes", "returns", "returns_by_agent",
                    "actions", "actions_by_agent"]


@dataclass(frozen=True)
class Panel:
    """One panel of the figure.

    Attributes:
        kind: what it shows: ``lengths`` and ``team`` (histograms over episodes),
            ``coverage`` (SACo and average OACo per dataset, when measured), ``outcomes``
            (win/draw/loss per agent of one dataset), ``returns`` and ``actions`` (one agent,
            or several whose statistics are identical in every dataset), ``returns_by_agent``
            and ``actions_by_agent`` (every agent side by side: one-dimensional continuous
            actions of all datasets in one panel, other actions one heat map per dataset).
        agents: the agents it covers.
        dataset: the index of the one description it shows (``None``: all of them).
    """

    kind: PanelKind
    agents: tuple[str, ...] = ()
    dataset: int | None = None


def plot_panels(descriptions: Sequence[DatasetDescription]) -> list[Panel]:
    """The panels :func:`plot_descriptions` draws, in order.

    Episode lengths; team returns (left out for zero-sum games, whose team return is always
    0); SACo and average OACo when any description has a coverage (``describe(...,
    coverage=True)``; one panel, per dataset, never per agent); win/draw/loss per agent for
    turn-based games (one panel per dataset); per-agent returns and per-agent actions. Agents
    whose returns (or action statistics) are identical in every description share one panel;
    with more than :data:`MANY_AGENTS` such panels, all agents are summarised in one panel
    (one-dimensional continuous actions of every dataset together; other actions one heat map
    per dataset: shares of action values, or mean action
    per dimension).
    """
    panels = [Panel("lengths")]
    if not all(d.team_return_always_zero for d in descriptions):
        panels.append(Panel("team"))
    if any(d.coverage is not None for d in descriptions):
        panels.append(Panel("coverage"))
    panels += [Panel("outcomes", d.possible_agents, k) for k, d in enumerate(descriptions)
               if d.has_outcomes]
    agents = _union_agents(descriptions)
    groups = _identical_groups(agents, [_returns_key(descriptions, a) for a in agents])
    if len(groups) <= MANY_AGENTS:
        panels += [Panel("returns", group) for group in groups]
    else:
        panels.append(Panel("returns_by_agent", tuple(agents)))
    groups = _identical_groups(agents, [_actions_key(descriptions, a) for a in agents])
    if len(groups) <= MANY_AGENTS:
        panels += [Panel("actions", group) for group in groups]
    else:
        # one-dimensional continuous actions fit side by side in one panel; others do not
        side_by_side = [_first_leaf_shape(d, agents) == ("continuous", 1) for d in descriptions]
        if any(side_by_side):
            panels.append(Panel("actions_by_agent", tuple(agents)))
        panels += [Panel("actions_by_agent", tuple(agents), k)
                   for k, shared in enumerate(side_by_side) if not shared]
    return panels


def plot_layout(descriptions: Sequence[DatasetDescription]) -> tuple[int, int]:
    """``(rows, columns)`` of the panel grid :func:`plot_descriptions` draws (see
    :func:`plot_panels`)."""
    panels = len(plot_panels(descriptions))
    columns = min(PLOT_COLUMNS, panels)
    return math.ceil(panels / columns), columns


def draw_descriptions(descriptions: Sequence[DatasetDescription], *,
                      labels: Sequence[str] | None = None, bins: int | str = "auto",
                      dpi: int = 100) -> Figure:
    """The figure of :func:`plot_descriptions`, not saved (a ``matplotlib.figure.Figure``
    with an Agg canvas; pyplot's state is not touched).

    Raises:
        InvalidOptionError: no descriptions, one description (or a dataset id) where the
            list goes, an item that is not a description, a metadata-only description
            (nothing to plot), not one label per description, ``bins`` neither a whole
            number >= 1 nor one of :data:`BIN_RULES`, or ``dpi`` not a positive number.
    """
    backend = require("matplotlib.backends.backend_agg", "plot", "plot_descriptions")
    figures = require("matplotlib.figure", "plot", "plot_descriptions")
    descriptions = checks.description_list(descriptions, "plot_descriptions")
    if not descriptions:
        raise InvalidOptionError("plot_descriptions needs at least one description")
    require_statistics(descriptions, "plot")
    names = (checks.labels_list(labels, len(descriptions), "description")
             or [d.label for d in descriptions])
    bins = checked_bins(bins)
    resolution = checks.dpi(dpi)
    panels = plot_panels(descriptions)
    rows, columns = plot_layout(descriptions)
    width, height = PANEL_SIZE
    compare = len(descriptions) > 1
    legend_rows = math.ceil(len(descriptions) / LEGEND_COLUMNS) if compare else 0
    header = HEADER_HEIGHT + LEGEND_ROW_HEIGHT * legend_rows
    figure = figures.Figure(figsize=(columns * width / 100, (rows * height + header) / 100),
                            dpi=resolution, layout="constrained")
    backend.FigureCanvasAgg(figure)
    figure.suptitle(_title(descriptions, names), fontsize=11)
    colors = [f"C{i % 10}" for i in range(len(descriptions))]
    style = _draw.Style(names=tuple(names), colors=tuple(colors), bins=bins)
    for index, panel in enumerate(panels):
        ax = figure.add_subplot(rows, columns, index + 1)
        _draw_panel(ax, panel, descriptions, style)
    if compare:
        from matplotlib.patches import Patch

        handles = [Patch(facecolor=c, edgecolor=c, label=n)
                   for c, n in zip(colors, names, strict=True)]
        figure.legend(handles=handles, loc="outside lower center",
                      ncols=min(LEGEND_COLUMNS, len(names)), fontsize=9, frameon=False)
    return figure


def plot_descriptions(descriptions: Sequence[DatasetDescription], path: str | os.PathLike[str],
                      *, labels: Sequence[str] | None = None, bins: int | str = "auto",
                      dpi: int = 100) -> Path:
    """Draw one or several descriptions on shared axes and save a PNG.

    The figure is titled with the dataset ids (a vault: ``vault_name/vault_uid``); comparing
    datasets adds one figure legend, one colour per dataset. Panels (see :func:`plot_panels`):
    histograms of episode lengths, team returns and per-agent returns (shared bins, as shares
    of episodes so datasets of different sizes compare), win/draw/loss of turn-based games,
    and per-agent action frequencies (discrete: grouped bars) or ranges (continuous: mean +-
    std with min..max whiskers per dimension). The image is ``columns * PANEL_SIZE[0]`` wide
    and ``rows * PANEL_SIZE[1]`` plus a header (title and legend) high at ``dpi=100`` (see
    :func:`plot_layout`), scaled by ``dpi / 100``. The user's matplotlib backend is untouched.

    Args:
        descriptions: what :func:`describe` returned, one per dataset.
        path: the PNG file to write (missing parent folders are created).
        labels: legend names (default: the dataset ids, or ``vault_name/vault_uid``).
        bins: histogram bins: a number, or a numpy rule (``"auto"``, ``"fd"``, ``"sturges"``
            ...); the number of bins never exceeds the episodes of the largest sample, and
            integer data (episode lengths) gets one bin per value when that fits.
        dpi: resolution.

    Returns:
        ``path``.

    Raises:
        InvalidOptionError: ``path`` is a folder or lies below a file, or an argument
            :func:`draw_descriptions` refuses.
        MissingExtraError: matplotlib is not installed (``pip install "marl-minari[plot]"``).
    """
    target = checks.output_file(path, "plot_descriptions: path", "figure.png")
    figure = draw_descriptions(descriptions, labels=labels, bins=bins, dpi=dpi)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target, format="png", dpi=dpi)
    return target


def checked_bins(bins: object) -> int | str:
    """``bins`` as the figures take it: a whole number >= 1 (numpy's integers too) or one of
    :data:`BIN_RULES`.

    Raises:
        InvalidOptionError: any other value (numpy takes no fractional count of bins).
    """
    if isinstance(bins, str) and bins in BIN_RULES:
        return bins
    if isinstance(bins, numbers.Integral) and not isinstance(bins, bool) and int(bins) >= 1:
        return int(bins)
    raise InvalidOptionError(
        f"bins={bins!r}: give a whole number of bins >= 1 or one of {', '.join(BIN_RULES)}")


def _draw_panel(ax: object, panel: Panel, descriptions: Sequence[DatasetDescription],
                style: _draw.Style) -> None:
    agents = panel.agents
    if panel.kind == "lengths":
        _draw.histogram(ax, [d.episode_length_values for d in descriptions], style,
                        "episode length", "steps")
    elif panel.kind == "team":
        _draw.histogram(ax, [d.episode_team_returns for d in descriptions], style,
                        "team return", "return")
    elif panel.kind == "coverage":
        _draw.coverage_bars(ax, descriptions, style)
    elif panel.kind == "outcomes":
        assert panel.dataset is not None
        _draw.outcomes(ax, descriptions[panel.dataset], style.names[panel.dataset])
    elif panel.kind == "returns":
        _draw.histogram(ax, [_agent_returns(d, agents[0]) for d in descriptions], style,
                        _group_title("return of", agents), "return")
        _draw.identical_note(ax, agents)
    elif panel.kind == "returns_by_agent":
        _draw.returns_by_agent(ax, agents, [[_agent_returns(d, a) for a in agents]
                                            for d in descriptions], style)
    elif panel.kind == "actions":
        _draw.action_panel(ax, _group_title("actions of", agents),
                           [_first_action(d, agents[0]) for d in descriptions], style,
                           MANY_ACTIONS)
        _draw.identical_note(ax, agents)
    elif panel.dataset is None:
        # the datasets with one-dimensional continuous actions (the others have heat maps)
        rows = [[_first_action(d, a) for a in agents]
                if _first_leaf_shape(d, agents) == ("continuous", 1) else [None] * len(agents)
                for d in descriptions]
        _draw.continuous_by_agent(ax, agents, rows, style)
    else:
        d = descriptions[panel.dataset]
        _draw.heat_by_agent(ax, agents, [_first_action(d, a) for a in agents],
                            style.names[panel.dataset])


def _title(descriptions: Sequence[DatasetDescription], names: Sequence[str]) -> str:
    if len(descriptions) == 1:
        d = descriptions[0]
        env = d.metadata.get("env")
        env_id = env.get("env_id") if isinstance(env, dict) else None
        parts = [f"{names[0]}", *([env_id] if env_id else []),
                 f"{d.total_episodes:,} episodes, {d.total_steps:,} steps, "
                 f"{len(d.possible_agents)} agent{'s' if len(d.possible_agents) != 1 else ''}"]
        return " | ".join(parts)
    if len(names) <= 3:
        return " vs ".join(names)
    return f"{len(names)} datasets compared"


def _group_title(what: str, agents: tuple[str, ...]) -> str:
    if len(agents) == 1:
        return f"{what} {agents[0]}"
    if len(agents) <= 3:
        return f"{what} {', '.join(agents)}"
    return f"{what} {len(agents)} agents"


def _union_agents(descriptions: Sequence[DatasetDescription]) -> list[str]:
    seen: dict[str, None] = {}
    for description in descriptions:
        for agent in description.possible_agents:
            seen.setdefault(agent, None)
    return list(seen)


def _identical_groups(agents: Sequence[str], keys: Sequence[object]) -> list[tuple[str, ...]]:
    """Agents grouped by equal keys, in first-seen order."""
    groups: dict[object, list[str]] = {}
    for agent, key in zip(agents, keys, strict=True):
        groups.setdefault(key, []).append(agent)
    return [tuple(group) for group in groups.values()]


def _agent_returns(d: DatasetDescription, agent: str) -> np.ndarray | None:
    if agent not in d.possible_agents or not d.episode_returns.size:
        return None
    return d.episode_returns[:, d.possible_agents.index(agent)]


def _returns_key(descriptions: Sequence[DatasetDescription], agent: str) -> object:
    values = [_agent_returns(d, agent) for d in descriptions]
    return tuple(None if v is None else np.asarray(v, dtype=np.float64).tobytes()
                 for v in values)


def _first_action(d: DatasetDescription, agent: str) -> ActionSummary | None:
    """The summary of the agent's first action leaf (the one the plots show)."""
    if agent not in d.possible_agents:
        return None
    actions = d.agent(agent).actions
    return actions[0] if actions else None


def _actions_key(descriptions: Sequence[DatasetDescription], agent: str) -> object:
    return tuple(_first_action(d, agent) for d in descriptions)


def _first_leaf_shape(d: DatasetDescription, agents: Sequence[str]) -> tuple[str, int] | None:
    """Kind and size (values or dimensions) of the first action leaf of the first of
    ``agents`` that ``d`` has."""
    for agent in agents:
        action = _first_action(d, agent)
        if action is not None:
            return action.kind, len(action.labels)
    return None
