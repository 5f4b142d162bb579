"""subsample: whole-episode subsets (uniform up to a step budget, following a return profile,
matching another dataset's returns) written as new datasets with their provenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from synthetic import write_episodes, write_known_vault

import marl_minari as mm
from marl_minari.format.ids import dataset_dir


def team_returns(dataset: Any) -> list[float]:
    return [float(e.team_rewards.sum()) for e in dataset.iterate_episodes()]


def assert_episodes_copied(subset: Any, source: Any) -> None:
    """Every episode of ``subset`` is the source episode its provenance names, unchanged."""
    ids = subset.metadata["subset"]["episode_ids"]
    assert len(ids) == subset.total_episodes
    for mine, stored in zip(subset.iterate_episodes(), ids, strict=True):
        theirs = source[stored]
        assert (mine.seed, mine.total_steps) == (theirs.seed, theirs.total_steps)
        for agent in mine.possible_agents:
            np.testing.assert_array_equal(mine.observations[agent], theirs.observations[agent])
            np.testing.assert_array_equal(mine.actions[agent], theirs.actions[agent])
        np.testing.assert_array_equal(mine.team_rewards, theirs.team_rewards)


@pytest.fixture
def varied() -> Any:
    """30 episodes of 3 to 12 steps."""
    rng = np.random.default_rng(5)
    return write_episodes("tests/varied-v0", [int(x) for x in rng.integers(3, 13, 30)],
                          [float(x) for x in rng.normal(size=30)])


def test_uniform_subset_stays_within_one_episode_of_the_budget(varied: Any) -> None:
    subset = mm.subsample("tests/varied-v0", "tests/small-v0", max_steps=100, seed=3,
                          author="me")
    record = subset.metadata["subset"]
    assert record["rule"] == "uniform" and record["seed"] == 3
    assert record["source"] == "tests/varied-v0" and record["max_steps"] == 100
    assert 100 - 12 < subset.total_steps <= 100 == record["max_steps"]
    assert record["total_steps"] == subset.total_steps
    assert subset.metadata["author"] == ["me"]  # Minari keeps authors as a list
    ids = record["episode_ids"]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert_episodes_copied(subset, varied)
    # the same seed gives the same subset; another seed another one
    again = mm.subsample(varied, "tests/again-v0", max_steps=100, seed=3)
    other = mm.subsample(varied, "tests/other-v0", max_steps=100, seed=4)
    assert again.metadata["subset"]["episode_ids"] == ids
    assert other.metadata["subset"]["episode_ids"] != ids
    # a budget above the dataset takes every episode
    whole = mm.subsample(varied, "tests/whole-v0", max_steps=10**6)
    assert whole.metadata["subset"]["episode_ids"] == list(range(30))


@pytest.fixture
def ramp() -> Any:
    """40 episodes of 5 steps with team returns 0, 1, ..., 39."""
    return write_episodes("tests/ramp-v0", [5] * 40, [float(r) for r in range(40)])


def test_profile_subset_follows_the_histogram(ramp: Any) -> None:
    profile = ([0, 10, 20, 40], [1, 0, 3])
    subset = mm.subsample(ramp, "tests/shaped-v0", profile=profile, seed=1)
    returns = np.asarray(team_returns(subset))
    # the largest subset with a 1:0:3 histogram: 7 of the 10 low episodes, all 20 high ones
    assert np.histogram(returns, bins=[0, 10, 20, 40])[0].tolist() == [7, 0, 20]
    record = subset.metadata["subset"]
    assert record["rule"] == "profile"
    assert record["profile"] == {"bin_edges": [0.0, 10.0, 20.0, 40.0],
                                 "weights": [1.0, 0.0, 3.0]}
    assert_episodes_copied(subset, ramp)
    capped = mm.subsample(ramp, "tests/capped-v0", profile=profile, max_steps=50, seed=1)
    assert np.histogram(team_returns(capped), bins=[0, 10, 20, 40])[0].tolist() == [2, 0, 8]
    assert capped.total_steps == 50
    with pytest.raises(mm.InvalidOptionError, match=r"profile: bin 2 \[40, 50\]"):
        mm.subsample(ramp, "tests/bad-v0", profile=([0, 10, 40, 50], [1, 1, 1]))


def test_like_subset_matches_the_other_returns(ramp: Any) -> None:
    write_episodes("tests/few-v0", [4] * 5, [5.0, 5.005, 17.0, 17.0, 100.0])
    subset = mm.subsample(ramp, "tests/alike-v0", like="tests/few-v0", seed=2)
    # 5 and 17 match (each episode of the other dataset at most once); 100 has no match
    assert sorted(team_returns(subset)) == [5.0, 17.0]
    record = subset.metadata["subset"]
    assert record["rule"] == "like" and record["like"] == "tests/few-v0"
    assert record["tolerance"] == 0.01
    wider = mm.subsample(ramp, "tests/wider-v0", like="tests/few-v0", tolerance=1.0)
    assert sorted(team_returns(wider)) == [4.0, 5.0, 16.0, 17.0]


def test_a_vault_is_a_source(tmp_path: Path) -> None:
    write_known_vault(tmp_path / "vaults", "known", "Good")
    subset = mm.subsample(tmp_path / "vaults" / "known" / "Good", "tests/from-vault-v0",
                          max_steps=35, seed=0)
    # six episodes of 10 steps: three fit
    assert subset.total_episodes == 3 and subset.total_steps == 30
    assert subset.metadata["subset"]["source_name"] == str(
        (tmp_path / "vaults" / "known" / "Good").resolve())


@pytest.mark.parametrize(("options", "named"), [
    ({}, "needs a rule"),
    ({"profile": ([0, 1], [1]), "like": "tests/ramp-v0"}, "profile and like"),
    ({"max_steps": 0}, "max_steps"),
    ({"max_steps": 2}, "max_steps chose no episode"),
    ({"profile": ([0, 0, 1], [1, 1])}, "bin_edges"),
    ({"profile": ([0, 1, 2], [1])}, "one weight per bin"),
    ({"profile": ([0, 1], [-1])}, "weights"),
    ({"profile": "uniform"}, r"\(bin_edges, weights\)"),
    ({"profile": ([100, 200], [1])}, "bin 0"),
    ({"like": "tests/ramp-v0", "tolerance": -1}, "tolerance"),
    ({"max_steps": 10, "authr": "me"}, "unknown metadata 'authr'"),
])
def test_bad_options_are_named_and_nothing_is_written(ramp: Any, options: dict[str, Any],
                                                     named: str) -> None:
    with pytest.raises(mm.InvalidOptionError, match=named):
        mm.subsample(ramp, "tests/never-v0", **options)
    assert not dataset_dir("tests/never-v0").exists()


def test_existing_target_is_refused(ramp: Any) -> None:
    with pytest.raises(mm.DatasetExistsError):
        mm.subsample(ramp, "tests/ramp-v0", max_steps=10)
