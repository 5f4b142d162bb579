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
    ({"max_steps": 2}, r"shortest [1-9]\d* steps"),
    ({"max_steps": 10, "seed": -1}, "seed must be an integer >= 0"),
    ({"max_steps": 10, "seed": "x"}, "seed must be an integer >= 0"),
    ({"max_steps": 10, "seed": 1.5}, "seed must be an integer >= 0"),
    ({"max_steps": 10, "author": 123}, "metadata author=123 is not a string"),
    ({"max_steps": 10, "requirements": "numpy"}, "metadata requirements='numpy' is not a list"),
    ({"max_steps": 10, "ref_min_score": "low"}, "metadata ref_min_score='low' is not a finite"),
    ({"max_steps": 10, "description": 5}, "metadata description=5 is not a string"),
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


# ------------------------------------------------------------------ pairs (like_dataset_id)
TOLERANCE = 0.05


def returns_by_id(dataset: Any) -> dict[int, float]:
    return {int(i): float(dataset[int(i)].team_rewards.sum()) for i in dataset.episode_indices}


@pytest.fixture
def two_sources() -> tuple[Any, Any]:
    """Two datasets of overlapping return distributions (returns on a 0.1 grid, many ties)."""
    rng = np.random.default_rng(11)
    a = write_episodes("tests/a-v0", [int(x) for x in rng.integers(3, 9, 50)],
                       [round(float(x), 1) for x in rng.normal(0.0, 1.0, 50)])
    b = write_episodes("tests/b-v0", [int(x) for x in rng.integers(3, 9, 60)],
                       [round(float(x), 1) for x in rng.normal(0.5, 1.0, 60)])
    return a, b


def test_like_pair_writes_both_sides_with_matched_returns(two_sources: tuple[Any, Any]
                                                          ) -> None:
    a, b = two_sources
    mine, twin = mm.subsample(a, "tests/a-sim-v0", like="tests/b-v0",
                              like_dataset_id="tests/b-sim-v0", tolerance=TOLERANCE, seed=0,
                              author="me")
    assert mine.total_episodes == twin.total_episodes
    assert mine.total_episodes > 20  # the distributions overlap: most episodes match
    mine_returns, twin_returns = np.sort(team_returns(mine)), np.sort(team_returns(twin))
    assert np.abs(mine_returns - twin_returns).max() <= TOLERANCE + 1e-9
    # each episode's partner is named, and its return is within the tolerance
    record, other = mine.metadata["subset"], twin.metadata["subset"]
    assert (record["twin"], other["twin"]) == ("tests/b-sim-v0", "tests/a-sim-v0")
    assert (record["source"], record["like"]) == ("tests/a-v0", "tests/b-v0")
    assert (other["source"], other["like"]) == ("tests/b-v0", "tests/a-v0")
    assert record["rule"] == other["rule"] == "like" and record["seed"] == other["seed"] == 0
    assert other["tolerance"] == TOLERANCE and twin.metadata["author"] == ["me"]
    a_returns, b_returns = returns_by_id(a), returns_by_id(b)
    pairs = dict(zip(record["episode_ids"], record["twin_episode_ids"], strict=True))
    assert dict(zip(other["twin_episode_ids"], other["episode_ids"], strict=True)) == pairs
    assert len(set(pairs.values())) == len(pairs)
    assert all(abs(a_returns[x] - b_returns[y]) <= TOLERANCE + 1e-9 for x, y in pairs.items())
    assert other["episode_ids"] == sorted(pairs.values())
    assert other["total_steps"] == twin.total_steps
    assert_episodes_copied(mine, a)
    assert_episodes_copied(twin, b)
    # the one-sided call chooses the same episodes of a
    alone = mm.subsample(a, "tests/a-alone-v0", like=b, tolerance=TOLERANCE, seed=0)
    assert alone.metadata["subset"]["episode_ids"] == record["episode_ids"]
    assert "twin" not in alone.metadata["subset"]
    # reproducible: the same seed, the same pairs; another seed breaks b's ties otherwise
    again = mm.subsample(a, "tests/a-again-v0", like=b, like_dataset_id="tests/b-again-v0",
                         tolerance=TOLERANCE, seed=0)[0].metadata["subset"]
    assert again["twin_episode_ids"] == record["twin_episode_ids"]
    assert again["episode_ids"] == record["episode_ids"]
    reseeded = mm.subsample(a, "tests/a-seed1-v0", like=b, like_dataset_id="tests/b-seed1-v0",
                            tolerance=TOLERANCE, seed=1)[1].metadata["subset"]
    assert reseeded["episode_ids"] != other["episode_ids"]


def test_max_steps_caps_both_sides_of_a_pair() -> None:
    """The twin's episodes are twice as long: the twin's steps stop the pair."""
    rng = np.random.default_rng(2)
    short = write_episodes("tests/short-v0", [5] * 30, [float(x) for x in rng.permutation(30)])
    write_episodes("tests/long-v0", [10] * 30, [float(x) for x in range(30)])
    mine, twin = mm.subsample(short, "tests/short-cap-v0", like="tests/long-v0",
                              like_dataset_id="tests/long-cap-v0", max_steps=64, seed=3)
    assert mine.total_episodes == twin.total_episodes == 6
    assert (mine.total_steps, twin.total_steps) == (30, 60)
    assert sorted(team_returns(mine)) == sorted(team_returns(twin))
    # one-sided, only the subset's own steps count
    alone = mm.subsample(short, "tests/short-alone-v0", like="tests/long-v0", max_steps=64)
    assert alone.total_steps == 60


def test_a_vault_is_either_side_of_a_pair(tmp_path: Path) -> None:
    """The known vault's six episodes all return 10 (agent 0's rewards): ties, broken by the
    seed."""
    vault = tmp_path / "vaults" / "known" / "Good"
    write_known_vault(tmp_path / "vaults", "known", "Good")
    write_episodes("tests/near-v0", [4] * 5, [10.0, 10.004, 3.0, 9.999, 20.0])
    mine, twin = mm.subsample(vault, "tests/vault-sim-v0", like="tests/near-v0",
                              like_dataset_id="tests/near-sim-v0", seed=0)
    assert mine.total_episodes == twin.total_episodes == 3
    assert team_returns(mine) == [10.0] * 3
    assert sorted(team_returns(twin)) == pytest.approx([9.999, 10.0, 10.004])
    assert mine.total_steps == 30 and mine.metadata["subset"]["source_name"] == str(
        vault.resolve())
    # the vault as the other side: its matched episodes are the twin, chosen by the seed
    chosen = set()
    for seed in range(4):
        _, from_vault = mm.subsample("tests/near-v0", f"tests/near-{seed}-v0", like=vault,
                                     like_dataset_id=f"tests/vault-{seed}-v0", seed=seed)
        assert from_vault.total_episodes == 3 and from_vault.total_steps == 30
        chosen.add(tuple(from_vault.metadata["subset"]["episode_ids"]))
    assert len(chosen) > 1


@pytest.mark.parametrize(("options", "error", "named"), [
    ({"like_dataset_id": "tests/b-sim-v0", "max_steps": 10}, mm.InvalidOptionError,
     "give like= too"),
    ({"like": "tests/b-v0", "like_dataset_id": "tests/a-sim-v0"}, mm.InvalidOptionError,
     "need two ids"),
    ({"like": "tests/b-v0", "like_dataset_id": "tests/b-v0"}, mm.DatasetExistsError,
     "'tests/b-v0' already exists"),
    ({"like": "tests/b-v0", "like_dataset_id": "no version"}, mm.InvalidDatasetIdError,
     "no version"),
])
def test_pair_mistakes_write_nothing(two_sources: tuple[Any, Any], options: dict[str, Any],
                                     error: type[Exception], named: str) -> None:
    with pytest.raises(error, match=named):
        mm.subsample("tests/a-v0", "tests/a-sim-v0", seed=0, **options)
    assert not dataset_dir("tests/a-sim-v0").exists()
    assert not dataset_dir("tests/b-sim-v0").exists()


def test_an_existing_first_id_writes_no_twin(two_sources: tuple[Any, Any]) -> None:
    with pytest.raises(mm.DatasetExistsError, match="'tests/b-v0' already exists"):
        mm.subsample("tests/a-v0", "tests/b-v0", like="tests/a-v0",
                     like_dataset_id="tests/b-sim-v0")
    assert not dataset_dir("tests/b-sim-v0").exists()


def test_a_failed_second_write_leaves_the_first_and_says_how_to_finish(
        two_sources: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process holds the twin's lock (a failure no check before writing can see): the
    first subset stays, complete, and the same call writes the same pair once it is gone."""
    import subprocess
    import sys

    import minari

    child = Path(__file__).resolve().parents[1] / "support" / "durability_child.py"
    holder = subprocess.Popen([sys.executable, str(child), "hold-lock", "tests/b-sim-v0",
                               "unused", "0"], text=True, stdout=subprocess.PIPE)
    options: dict[str, Any] = {"like": "tests/b-v0", "like_dataset_id": "tests/b-sim-v0",
                               "tolerance": TOLERANCE, "seed": 5}
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        monkeypatch.setenv("MARL_MINARI_LOCK_TIMEOUT", "0.2")
        with pytest.raises(mm.LockedError) as raised:
            mm.subsample("tests/a-v0", "tests/a-sim-v0", **options)
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert "'tests/a-sim-v0' was written, its twin 'tests/b-sim-v0' was not" in " ".join(
        raised.value.__notes__)
    half = mm.load_dataset("tests/a-sim-v0").metadata["subset"]
    assert half["twin"] == "tests/b-sim-v0" and not dataset_dir("tests/b-sim-v0").exists()
    minari.delete_dataset("tests/a-sim-v0")
    mine, twin = mm.subsample("tests/a-v0", "tests/a-sim-v0", **options)
    assert mine.metadata["subset"]["twin_episode_ids"] == half["twin_episode_ids"]
    assert mine.metadata["subset"]["episode_ids"] == half["episode_ids"]
