"""compare: return distributions (numpy two-sample KS, QQ), lengths, coverage and spaces of
two or more datasets, as text, JSON and one figure."""

from __future__ import annotations

import dataclasses
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from synthetic import AGENTS, episode_with, spec_of, write_episodes

import marl_minari as mm
from marl_minari.describe import compare, ks_two_sample, plot_comparison
from marl_minari.errors import InvalidOptionError


def test_ks_statistic_by_hand() -> None:
    assert ks_two_sample([1, 2, 3], [4, 5, 6])[0] == 1.0
    assert ks_two_sample([1, 2, 3, 4], [3, 4, 5, 6])[0] == 0.5  # F1(2) = 0.5, F2(2) = 0
    assert ks_two_sample([1, 1, 2], [1, 2, 2])[0] == pytest.approx(1 / 3)  # ties
    assert ks_two_sample([1, 2, 3], [3, 2, 1]) == (0.0, 1.0)
    assert ks_two_sample([], [1.0]) == (0.0, 1.0)


def test_ks_pvalue_against_the_asymptotic_distribution() -> None:
    rng = np.random.default_rng(0)
    same = ks_two_sample(rng.normal(size=400), rng.normal(size=300))
    shifted = ks_two_sample(rng.normal(size=400), rng.normal(0.5, size=300))
    assert same[1] > 0.05 > 1e-4 > shifted[1]
    # Kolmogorov's distribution: P(K > 1.36) is 0.049 (the 5% critical value)
    n = 10_000
    statistic = 1.36 / np.sqrt(n * n / (2 * n))
    a = np.arange(n) / n
    b = a + statistic  # shifted by exactly ``statistic``: the largest gap
    d, p = ks_two_sample(a, b)
    assert d == pytest.approx(statistic, abs=2 / n)
    assert p == pytest.approx(0.049, abs=0.004)


def test_compare_reports_returns_lengths_coverage_and_spaces(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    write_episodes("tests/expert-v0", [10] * 40, list(rng.normal(10, 1, 40)))
    write_episodes("tests/expert2-v0", [10] * 40, list(rng.normal(10, 1, 40)))
    write_episodes("tests/random-v0", [6] * 30, list(rng.normal(0, 1, 30)))
    write_episodes("tests/three-v0", [6] * 5, [0.0] * 5, agents=("a", "b", "c"))
    result = compare(["tests/expert-v0", "tests/expert2-v0", "tests/random-v0",
                      "tests/three-v0"])
    assert [t.statistic for t in result.returns][1:] == [1.0, 1.0]
    assert result.returns[0].statistic < 0.4 and result.returns[0].pvalue > 0.01
    assert result.returns[1].mean_difference == pytest.approx(
        np.mean(result.descriptions[2].episode_team_returns)
        - np.mean(result.descriptions[0].episode_team_returns))
    assert all(d.coverage is not None for d in result.descriptions)
    assert result.space_differences == (
        "tests/three-v0 [3]: agents ['a', 'b', 'c'] vs ['a', 'b']",)
    text = result.to_text()
    assert "tests/random-v0: KS 1.000" in text and "(differ)" in text
    assert "spaces differ:" in text and "SACo" in text
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["returns_against_first"][1]["ks_statistic"] == 1.0
    with pytest.raises(InvalidOptionError, match="at least two"):
        compare(["tests/expert-v0"])


def png_size(path: Path) -> tuple[int, int]:
    with path.open("rb") as f:
        header = f.read(24)
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


@pytest.mark.parametrize("agents", [3, 20, 100])
def test_comparison_figure(tmp_path: Path, agents: int) -> None:
    pytest.importorskip("matplotlib")
    names = tuple(f"agent_{i}" for i in range(agents))
    rng = np.random.default_rng(agents)
    write_episodes("tests/good-v0", list(rng.integers(5, 15, 30)), list(rng.normal(5, 1, 30)),
                   agents=names)
    write_episodes("tests/poor-v0", list(rng.integers(3, 9, 30)), list(rng.normal(2, 2, 30)),
                   agents=names)
    result = compare(["tests/good-v0", "tests/poor-v0"])
    path = plot_comparison(result, tmp_path / f"compare-{agents}.png")
    # four panels side by side, the same size whatever the number of agents
    assert png_size(path) == (4 * 420, 340 + 60 + 22)


def _zero_sum(dataset_id: str, first_wins: list[bool]) -> None:
    """Episodes where agent 'a' gets +1 and 'b' -1 (or the reverse): team return 0."""
    episodes = []
    for i, wins in enumerate(first_wins):
        episode = episode_with(4, 0.0, i)
        rewards = np.zeros_like(episode.rewards)
        rewards[-1] = [1.0, -1.0] if wins else [-1.0, 1.0]
        episodes.append(dataclasses.replace(episode, rewards=rewards))
    mm.write_dataset(dataset_id, episodes, spec_of(AGENTS), fsync=False)


def test_zero_sum_games_compare_per_agent_returns() -> None:
    """Team returns of a zero-sum game are always 0 (a KS test on them always says p = 1):
    each agent's returns are compared instead, and the report says so."""
    _zero_sum("tests/always-v0", [True] * 30)
    _zero_sum("tests/half-v0", [i % 2 == 0 for i in range(30)])
    result = compare(["tests/always-v0", "tests/half-v0"], coverage=False)
    assert result.zero_sum and result.returns[0].pvalue == 1.0
    tests = result.agent_returns[0]
    assert list(tests) == ["a", "b"]
    assert tests["a"].statistic == pytest.approx(0.5) and tests["a"].pvalue < 0.05
    assert tests["a"].mean_difference == pytest.approx(-1.0)
    assert tests["b"].mean_difference == pytest.approx(1.0)
    text = result.to_text()
    assert "a zero-sum game), so per-agent returns are compared" in text
    assert "tests/half-v0, a: KS 0.500" in text and "(differ)" in text
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["zero_sum"] is True
    assert payload["agent_returns_against_first"][0]["agents"]["a"]["ks_statistic"] == 0.5
    # a game whose team returns vary is compared on them, as before
    write_episodes("tests/team-v0", [4] * 10, [float(i) for i in range(10)])
    team = compare(["tests/team-v0", "tests/always-v0"], coverage=False)
    assert not team.zero_sum and team.agent_returns == ()
    assert "team returns against tests/team-v0" in team.to_text()


@pytest.mark.parametrize("sources", ["tests/first-v0", Path("tests/first-v0"), b"ab"])
def test_one_source_where_the_list_goes_is_refused(sources: object) -> None:
    with pytest.raises(InvalidOptionError, match="list of two or more sources"):
        compare(sources)  # type: ignore[arg-type]
