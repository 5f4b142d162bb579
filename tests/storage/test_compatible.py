"""One rule, every door: an append (Python and ``collect --append``) and a combine refuse the
same mixes of episodes (API, agents, spaces, state, reward aggregation, environment) with the
same typed error, and change nothing."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from marl_minari.collectors.collect import collect

import marl_minari as mm
from marl_minari.format.ids import dataset_dir
from marl_minari.storage.recording import list_recordings, recover_recording
from marl_minari.storage.writer import append_to_dataset

SPREAD = "mpe2/simple_spread_v3"
BASE: dict[str, Any] = {"env_kwargs": {"max_cycles": 3}}
"""The dataset every mix is appended to: simple_spread, parallel, state recorded."""

MIXES: dict[str, tuple[dict[str, Any], str]] = {
    "api": ({"api": "aec"}, "differ in api: 'aec' vs 'parallel'"),
    "agents": ({"env_kwargs": {"max_cycles": 3, "N": 2}}, "differ in agents"),
    "spaces": ({"env_kwargs": {"max_cycles": 3, "continuous_actions": True}},
               "differ in action space of 'agent_0'"),
    "state": ({"record_state": False},
              "differ in global state: 'not recorded' vs 'recorded'"),
    "reward aggregation": ({"reward_aggregation": "mean"},
                           "differ in reward aggregation: 'mean' vs 'sum'"),
    "environment": ({"env_kwargs": {"max_cycles": 4}}, "differ in environment"),
}
"""How the new episodes differ from ``BASE``, and what the refusal says."""


def _record(recording_path: Path, *, api: str = "parallel", env_kwargs: dict[str, Any],
            record_state: bool = True, reward_aggregation: str = "sum",
            episodes: int = 2) -> Any:
    """A collector holding ``episodes`` finished random episodes of simple_spread."""
    if api == "parallel":
        collector: Any = mm.ParallelDataCollector(
            mm.make_env(SPREAD, **env_kwargs), record_state=record_state,
            reward_aggregation=reward_aggregation, recording_path=recording_path)
        for seed in range(episodes):
            collector.reset(seed=seed)
            while collector.agents:
                collector.step({a: collector.action_space(a).sample() for a in collector.agents})
        return collector
    collector = mm.AECDataCollector(
        mm.make_env(SPREAD, api="aec", **env_kwargs), record_state=record_state,
        reward_aggregation=reward_aggregation, recording_path=recording_path)
    for seed in range(episodes):
        collector.reset(seed=seed)
        for agent in collector.agent_iter():
            _, _, terminated, truncated, _ = collector.last()
            collector.step(None if terminated or truncated
                           else collector.action_space(agent).sample())
    return collector


def _snapshot(dataset_id: str) -> dict[str, bytes]:
    """Every file of the dataset's folder, by relative path."""
    folder = dataset_dir(dataset_id)
    return {str(p.relative_to(folder)): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def base(tmp_path: Path) -> Callable[[], dict[str, bytes]]:
    """Create ``tests/base-v0`` from ``BASE``; returns a function snapshotting it."""
    collector = _record(tmp_path / "base-recording", **BASE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collector.create_dataset("tests/base-v0")
    collector.close()
    return lambda: _snapshot("tests/base-v0")


@pytest.mark.parametrize("mix", list(MIXES))
def test_python_append_refuses_each_mix_and_keeps_the_episodes(
        mix: str, base: Callable[[], dict[str, bytes]], tmp_path: Path) -> None:
    options, message = MIXES[mix]
    before = base()
    late = _record(tmp_path / "late", **{**BASE, **options})
    kept = late.recording_path
    with pytest.raises(mm.IncompatibleSourcesError, match=message) as refused:
        late.add_to_dataset("tests/base-v0")
    assert base() == before
    # The error says where the episodes are and the command that makes a dataset of them.
    assert f"marl-minari recover {kept} NEW_DATASET_ID" in str(refused.value)
    with pytest.warns(UserWarning, match="2 recorded episode"):
        late.close()
    recover_recording(kept, "tests/late-v0")
    assert mm.load_dataset("tests/late-v0").total_episodes == 2
    assert mm.load_dataset("tests/base-v0").total_episodes == 2


@pytest.mark.parametrize("mix", list(MIXES))
def test_combine_refuses_each_mix_with_the_same_words(
        mix: str, base: Callable[[], dict[str, bytes]], tmp_path: Path) -> None:
    options, message = MIXES[mix]
    before = base()
    other = _record(tmp_path / "other", **{**BASE, **options})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        other.create_dataset("tests/other-v0")
    other.close()
    other_before = _snapshot("tests/other-v0")
    with pytest.raises(mm.IncompatibleSourcesError, match=message):
        mm.combine_datasets(["tests/base-v0", "tests/other-v0"], "tests/both-v0")
    assert not dataset_dir("tests/both-v0").exists()
    assert base() == before and _snapshot("tests/other-v0") == other_before


@pytest.mark.parametrize("mix", [m for m in MIXES if m != "reward aggregation"])
def test_collect_append_refuses_before_recording(
        mix: str, base: Callable[[], dict[str, bytes]]) -> None:
    options, message = MIXES[mix]
    before = base()
    with pytest.raises(mm.IncompatibleSourcesError, match=message):
        collect(SPREAD, 2, dataset_id="tests/base-v0", append=True, **{**BASE, **options})
    assert base() == before
    # nothing was played: no recording holds episodes
    assert list_recordings() == []


def test_the_same_episodes_are_appended(base: Callable[[], dict[str, bytes]],
                                        tmp_path: Path) -> None:
    """The rule refuses differences only: episodes recorded as the dataset was append."""
    late = _record(tmp_path / "same", **BASE, episodes=3)
    grown = late.add_to_dataset("tests/base-v0")
    late.close()
    assert grown.total_episodes == 5
    assert grown.episode_seeds() == [0, 1, 0, 1, 2]


def test_the_file_writer_refuses_an_episode_of_the_other_api(
        base: Callable[[], dict[str, bytes]], tmp_path: Path) -> None:
    """A caller that hands the writer a spec that does not describe its episodes (episodes
    of both APIs, or a spec made by hand) is refused per episode: by write_dataset (nothing
    written) and by append_to_dataset (the dataset unchanged)."""
    turns = _record(tmp_path / "turns", api="aec", **BASE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        turns.create_dataset("tests/turns-v0")
    turns.close()
    parallel = mm.load_dataset("tests/base-v0")
    turn_based = mm.load_dataset("tests/turns-v0")
    mixed = [*parallel.iterate_episodes(), *turn_based.iterate_episodes()]
    with pytest.raises(mm.IncompatibleSourcesError,
                       match=r"episode 2 \(seed 0\) was recorded through the 'aec' API and "
                             r"the dataset's api is 'parallel'"):
        mm.write_dataset("tests/mixed-v0", mixed, parallel.spec)
    assert not dataset_dir("tests/mixed-v0").exists()
    before = base()
    with pytest.raises(mm.IncompatibleSourcesError, match="recorded through the 'aec' API"):
        append_to_dataset("tests/base-v0", turn_based.iterate_episodes(), parallel.spec)
    assert base() == before
