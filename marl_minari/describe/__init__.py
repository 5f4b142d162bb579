"""Describe a dataset: statistics, comparison plots and a dataset card.

:func:`describe` streams over a source in chunks of whole episodes and returns a
:class:`DatasetDescription`: episode counts and lengths, per-agent and team returns, per-agent
action frequencies (discrete) or ranges (continuous), the share of inactive agent-steps and how
episodes ended; with ``coverage=True`` also OG-MARL's SACo and OACo (:class:`Coverage`,
:mod:`marl_minari.describe.coverage`). Sources: a dataset id, a ``minari.MinariDataset``, a
:class:`~marl_minari.MultiAgentDataset` (multi-agent layout or plain single-agent Minari
datasets, the latter seen as one agent ``agent_0``) or a Flashbax vault folder (read through
:mod:`marl_minari.adapters`).

:func:`plot_descriptions` draws several descriptions side by side on shared axes (compare
expert, medium and random data before combining them); :func:`dataset_card` writes a Hugging
Face style ``README.md`` with the metadata, the statistics and the plot. A ``README.md`` in a
dataset's folder (``marl_minari.format.ids.dataset_dir(id) / "README.md"``) is published with it.
:func:`plot_coverage` draws the count frequencies of a coverage (how many distinct pairs occur
once, twice, ...: does a dataset repeat a few transitions or cover many?).
:func:`compare` sets two or more datasets side by side (returns with a two-sample
Kolmogorov-Smirnov test and QQ plot, lengths, coverage, spaces; :func:`plot_comparison`).
"""

from __future__ import annotations

from marl_minari.describe._describe import describe
from marl_minari.describe._sources import SINGLE_AGENT
from marl_minari.describe.card import CARD_PLOT_NAME, card_plot_path, dataset_card, size_category
from marl_minari.describe.compare import (
    Comparison,
    ReturnTest,
    compare,
    draw_comparison,
    ks_two_sample,
    plot_comparison,
)
from marl_minari.describe.coverage_plot import draw_coverage, plot_coverage
from marl_minari.describe.coverage_results import CountFrequencies, Coverage
from marl_minari.describe.plots import (
    MANY_ACTIONS,
    MANY_AGENTS,
    PANEL_SIZE,
    PLOT_COLUMNS,
    Panel,
    draw_descriptions,
    plot_descriptions,
    plot_layout,
    plot_panels,
)
from marl_minari.describe.results import (
    ActionKind,
    ActionSummary,
    AgentDescription,
    DatasetDescription,
    Outcome,
    SourceKind,
    Summary,
)
from marl_minari.sources import DEFAULT_CHUNK_STEPS

__all__ = [
    "CARD_PLOT_NAME", "DEFAULT_CHUNK_STEPS", "MANY_ACTIONS", "MANY_AGENTS", "PANEL_SIZE",
    "PLOT_COLUMNS", "SINGLE_AGENT", "ActionKind", "ActionSummary", "AgentDescription",
    "Comparison", "CountFrequencies", "Coverage", "DatasetDescription", "Outcome", "Panel",
    "ReturnTest", "SourceKind", "Summary", "card_plot_path", "compare", "dataset_card",
    "describe", "draw_comparison", "draw_coverage", "draw_descriptions", "ks_two_sample",
    "plot_comparison", "plot_coverage", "plot_descriptions", "plot_layout", "plot_panels",
    "size_category",
]
