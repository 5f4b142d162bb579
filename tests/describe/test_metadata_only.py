"""``describe(source, statistics=False)``: the metadata-only description (agents, spaces, env,
size, counts and episode lengths) agrees with the full one, says what it left out, and every
consumer that needs statistics refuses it by name."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from marl_minari.describe import compare, dataset_card, describe, plot_descriptions
from marl_minari.errors import InvalidOptionError

DATASET = "mpe2/spread/metadata-only-v0"


@pytest.fixture
def spread(recorded: Callable[..., Any]) -> str:
    recorded("mpe2/simple_spread_v3", 4, DATASET, max_cycles=10)
    return DATASET


def test_it_agrees_with_the_full_description_on_what_it_holds(spread: str) -> None:
    full = describe(spread)
    meta = describe(spread, statistics=False)
    assert full.statistics and not meta.statistics
    assert meta.possible_agents == full.possible_agents
    assert (meta.total_episodes, meta.total_steps) == (full.total_episodes, full.total_steps)
    assert meta.episode_lengths == full.episode_lengths
    np.testing.assert_array_equal(meta.episode_length_values, full.episode_length_values)
    assert meta.metadata == full.metadata  # env, spaces, size, authors...
    assert meta.agents == ()
    document = json.loads(meta.to_json())
    assert document["statistics"] is False and json.loads(full.to_json())["statistics"] is True
    for key in ("team_returns", "terminated_episodes", "inactive_share", "zero_sum"):
        assert document[key] is None, key
    assert document["episode_lengths"] == full.episode_lengths.to_dict()


def test_its_text_shows_spaces_and_size_and_says_how_to_read_the_rest(spread: str) -> None:
    text = describe(spread, statistics=False).to_text()
    meta = describe(spread).metadata
    for agent in ("agent_0", "agent_1", "agent_2"):
        assert f"spaces {agent}: observation {meta['observation_spaces'][agent]}" in text
    assert f"size           {meta['dataset_size']} MB" in text
    assert "not read (metadata only)" in text and "--no-statistics" in text
    assert "team return" not in text


def test_coverage_and_compare_need_the_statistics_pass(spread: str) -> None:
    with pytest.raises(InvalidOptionError, match="coverage reads every episode"):
        describe(spread, statistics=False, coverage=True)
    with pytest.raises(InvalidOptionError, match="no statistics to compare"):
        compare([spread, describe(spread, statistics=False)], coverage=False)


def test_plots_refuse_it_and_its_card_holds_no_statistics(spread: str, tmp_path: Path
                                                          ) -> None:
    pytest.importorskip("matplotlib")
    meta = describe(spread, statistics=False)
    with pytest.raises(InvalidOptionError, match=f"{DATASET}: a metadata-only description"):
        plot_descriptions([describe(spread), meta], tmp_path / "plot.png")
    card = dataset_card(meta, tmp_path / "README.md").read_text()
    assert not (tmp_path / "statistics.png").exists()  # no figure by default
    assert "| Episodes | 4 |" in card and "length (steps)" in card
    assert "### Returns" not in card and "were not read" in card


def test_the_command_writes_its_card_without_a_figure(spread: str, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from marl_minari.cli import app

    pytest.importorskip("matplotlib")  # the figure a full card would get
    card = tmp_path / "README.md"
    result = CliRunner().invoke(app, ["describe", spread, "--no-statistics", "--card",
                                      str(card)])
    assert result.exit_code == 0, result.output
    assert "were not read" in card.read_text()
    assert not (tmp_path / "statistics.png").exists()
