"""Count frequencies of coverage (how often each distinct pair occurs) and their plot: exact on
a dataset whose repeats are known, consistent with the coverage, drawn readably at 3 and 100
agents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from synthetic import write_known_vault, write_repeating_dataset, write_skewed_dataset

from marl_minari.describe import (
    CountFrequencies,
    Coverage,
    dataset_card,
    describe,
    draw_coverage,
    plot_coverage,
)
from marl_minari.describe.coverage_plot import FEW_AGENTS, PANEL_SIZE, binned, count_bins
from marl_minari.describe.distinct import DistinctCounter, row_digests
from marl_minari.errors import InvalidOptionError


def frequencies(counts: list[int], pairs: list[int]) -> CountFrequencies:
    return CountFrequencies(np.array(counts), np.array(pairs))


def consistent(coverage: Coverage) -> None:
    """Every table's count frequencies add up to its distinct pairs and to the transitions."""
    assert coverage.state_frequencies.distinct == coverage.state_pairs
    assert coverage.state_frequencies.transitions == coverage.transitions
    for agent, counted in coverage.agent_frequencies.items():
        assert counted.distinct == coverage.agent_pairs[agent]
        assert counted.transitions == coverage.transitions


@pytest.mark.parametrize("chunk_steps", [7, 1000])
def test_known_repeats(chunk_steps: int) -> None:
    dataset = write_repeating_dataset("repeat/known-v0")
    coverage = describe(dataset, coverage=True, chunk_steps=chunk_steps).coverage
    assert coverage is not None and coverage.transitions == 14
    assert coverage.state_source == "joint_observation"
    # agent a: pairs seen 5, 3, 3, 1, 1, 1 times; agent b: 2 pairs, 7 times each
    assert coverage.agent_frequencies == {"a": frequencies([1, 3, 5], [3, 2, 1]),
                                          "b": frequencies([7], [2])}
    # joint: (0, 0) 3 times, three pairs twice, five once
    assert coverage.state_frequencies == frequencies([1, 2, 3], [5, 3, 1])
    consistent(coverage)
    assert coverage.state_frequencies.most == 3
    as_json = coverage.to_dict()
    assert as_json["state_frequencies"] == {"counts": [1, 2, 3], "pairs": [5, 3, 1]}
    assert as_json["agent_frequencies"]["b"] == {"counts": [7], "pairs": [2]}


def test_card_says_how_pairs_repeat(tmp_path: Path) -> None:
    description = describe(write_repeating_dataset("repeat/card-v0"), coverage=True)
    card = dataset_card(description, tmp_path / "README.md", plot=False).read_text()
    # 5 of the 9 joint pairs occur once, (0, 0) three times
    assert "pairs, 56% occur once; the most repeated occurs 3 times." in card
    assert "| `a` | 6 | 0.4286 | 3 | 5 times |" in card
    assert "| `b` | 2 | 0.1429 | 0 | 7 times |" in card


def test_known_vault_frequencies(tmp_path: Path) -> None:
    """The vault of known coverage: every pair occurs equally often (60 steps / pairs)."""
    write_known_vault(tmp_path / "vaults", "known", "Good")
    coverage = describe(tmp_path / "vaults" / "known" / "Good", coverage=True,
                        chunk_steps=15).coverage
    assert coverage is not None
    assert coverage.state_frequencies == frequencies([6], [10])
    assert coverage.agent_frequencies == {"agent_0": frequencies([10], [6]),
                                          "agent_1": frequencies([15], [4]),
                                          "agent_2": frequencies([6], [10])}
    consistent(coverage)


def test_counter_frequencies_equal_numpy_unique() -> None:
    """Across many merges (small pending limit), the occurrences equal np.unique's counts."""
    rng = np.random.default_rng(2)
    rows = rng.zipf(1.5, (20_000, 2)) % 40
    counter = DistinctCounter(pending_limit=500)
    for start in range(0, len(rows), 777):
        counter.add(row_digests([rows[start:start + 777]]))
    _, counts = np.unique(rows, axis=0, return_counts=True)
    expected = np.unique(counts, return_counts=True)
    occurrences, distinct = counter.count_frequencies()
    assert np.array_equal(occurrences, expected[0]) and np.array_equal(distinct, expected[1])
    assert int((occurrences * distinct).sum()) == 20_000 == counter.rows
    assert int(distinct.sum()) == counter.count()


def test_bins() -> None:
    assert list(count_bins(3)) == [1, 2, 3, 4]
    edges = count_bins(100_000)
    assert edges[0] == 1 and edges[-1] == 100_001 and len(edges) <= 41
    assert np.all(np.diff(edges) >= 1)
    counted = frequencies([1, 2, 50_000, 100_000], [7, 1, 2, 1])
    assert binned(counted, edges).sum() == 11 and binned(counted, edges)[0] == 7


@pytest.mark.parametrize("agents", [3, 100])
def test_plot_writes_a_readable_png(agents: int, tmp_path: Path) -> None:
    description = describe(write_skewed_dataset(f"skew/n{agents}-v0", agents), coverage=True)
    assert description.coverage is not None
    consistent(description.coverage)
    target = plot_coverage(description, tmp_path / "deep" / "pairs.png")
    height, width = imread(target).shape[:2]
    assert width == 2 * PANEL_SIZE[0] and PANEL_SIZE[1] < height < PANEL_SIZE[1] + 100
    figure = draw_coverage(description)
    joint, per_agent = figure.axes
    assert joint.get_xscale() == per_agent.get_xscale() == "log"
    assert joint.get_yscale() == "log" and joint.get_ylim() == per_agent.get_ylim()
    assert f"skew/n{agents}-v0" in figure.get_suptitle()
    assert "SACo" in joint.get_title() and "OACo" in per_agent.get_title()
    legend = [t.get_text() for t in per_agent.get_legend().get_texts()]
    if agents <= FEW_AGENTS:
        assert legend == [f"agent_{i}" for i in range(agents)]
        assert len(per_agent.get_lines()) == agents
    else:  # a median and a band, never one entry per agent
        assert legend == [f"fewest..most of {agents} agents", "median agent"]


def test_several_datasets_and_bare_coverages(tmp_path: Path) -> None:
    one = describe(write_skewed_dataset("skew/a-v0", 4), coverage=True)
    two = describe(write_repeating_dataset("repeat/b-v0"), coverage=True)
    assert one.coverage is not None
    figure = draw_coverage([one, two])
    assert len(figure.axes[0].get_lines()) == 2  # one joint curve per dataset
    names = [t.get_text() for t in figure.legends[0].get_texts()]
    assert names[0].startswith("skew/a-v0 (SACo") and names[1].startswith("repeat/b-v0")
    bare = draw_coverage(one.coverage, labels=["mine"])
    assert "mine" in bare.get_suptitle()


def test_refusals() -> None:
    plain = describe(write_repeating_dataset("repeat/plain-v0"))
    with pytest.raises(InvalidOptionError, match="coverage=True"):
        draw_coverage(plain)
    with pytest.raises(InvalidOptionError, match="at least one"):
        draw_coverage([])
    covered = describe("repeat/plain-v0", coverage=True)
    with pytest.raises(InvalidOptionError, match="2 labels for 1"):
        draw_coverage(covered, labels=["x", "y"])
