"""combine_datasets: multi-agent datasets combined into one, checked and complete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest

import marl_minari as mm


def _assert_same_episode(a: Any, b: Any) -> None:
    assert a.total_steps == b.total_steps and (a.seed, a.options) == (b.seed, b.options)
    for agent in a.possible_agents:
        np.testing.assert_array_equal(a.observations[agent], b.observations[agent])
        np.testing.assert_array_equal(a.actions[agent], b.actions[agent])
    np.testing.assert_array_equal(a.rewards, b.rewards)
    np.testing.assert_array_equal(a.active, b.active)
    np.testing.assert_array_equal(a.episode_truncations, b.episode_truncations)


def test_combined_dataset_keeps_agents_seeds_and_parts(record_parallel: Any,
                                                       datasets_root: Path) -> None:
    first, _ = record_parallel("mpe2/simple_spread_v3", 2, dataset_id="mpe2/spread/a-v0",
                               max_cycles=4)
    second, _ = record_parallel("mpe2/simple_spread_v3", 3, dataset_id="mpe2/spread/b-v0",
                                max_cycles=4)
    # A namespace that does not exist yet (Minari's own combine fails there).
    combined = mm.combine_datasets(["mpe2/spread/a-v0", second], "newns/deep/both-v0")
    assert (datasets_root / "newns" / "deep" / "both-v0").is_dir()
    assert combined.possible_agents == first.possible_agents
    assert combined.total_episodes == 5
    assert combined.total_steps == first.total_steps + second.total_steps
    assert combined.metadata["combined_datasets"] == ["mpe2/spread/a-v0", "mpe2/spread/b-v0"]
    parts = [*first.iterate_episodes(), *second.iterate_episodes()]
    assert [e.seed for e in combined.iterate_episodes()] == [0, 1, 0, 1, 2]
    for mine, part in zip(combined.iterate_episodes(), parts, strict=True):
        _assert_same_episode(mine, part)
    assert minari.load_dataset("newns/deep/both-v0").total_episodes == 5
    with pytest.raises(mm.DatasetExistsError):
        mm.combine_datasets([first], "newns/deep/both-v0")


def test_parts_that_differ_are_refused_naming_the_difference(
        record_parallel: Any, record_tictactoe: Any, datasets_root: Path) -> None:
    spread, _ = record_parallel("mpe2/simple_spread_v3", 1, dataset_id="tests/spread-v0",
                                max_cycles=3)
    longer, _ = record_parallel("mpe2/simple_spread_v3", 1, dataset_id="tests/longer-v0",
                                max_cycles=5)
    speaker, _ = record_parallel("mpe2/simple_speaker_listener_v4", 1,
                                 dataset_id="tests/speaker-v0", max_cycles=3)
    with pytest.raises(mm.IncompatibleSourcesError, match=r"'tests/speaker-v0'.*agents"):
        mm.combine_datasets([spread, speaker], "tests/bad-v0")
    with pytest.raises(mm.IncompatibleSourcesError, match=r"differ in environment"):
        mm.combine_datasets([spread, longer], "tests/bad-v0")
    tictactoe = record_tictactoe("tests/tictactoe-v0", 1)
    with pytest.raises(mm.IncompatibleSourcesError, match=r"differ in agents"):
        mm.combine_datasets([spread, tictactoe], "tests/bad-v0")
    assert not (datasets_root / "tests" / "bad-v0").exists()


def test_default_and_explicit_env_arguments_combine(record_parallel: Any,
                                                    datasets_root: Path) -> None:
    """A dataset whose descriptor holds only the given arguments (``{}``, as recorded before
    arguments were completed) and one made with the default spelled out name the same env."""
    import dataclasses

    from marl_minari.envs.make import describe_env

    made = describe_env(mm.make_env("mpe2/simple_spread_v3"), "parallel")
    record_parallel("mpe2/simple_spread_v3", 1, dataset_id="tests/old-v0",
                    collector_env_descriptor=dataclasses.replace(made, kwargs={}))
    record_parallel("mpe2/simple_spread_v3", 1, dataset_id="tests/new-v0", max_cycles=25)
    assert mm.load_dataset("tests/old-v0").spec.env.kwargs == {}
    both = mm.combine_datasets(["tests/old-v0", "tests/new-v0"], "tests/both-kwargs-v0")
    assert both.total_episodes == 2
    record_parallel("mpe2/simple_spread_v3", 1, dataset_id="tests/other-v0", max_cycles=24)
    with pytest.raises(mm.IncompatibleSourcesError, match="differ in environment"):
        mm.combine_datasets(["tests/old-v0", "tests/other-v0"], "tests/bad-kwargs-v0")


def test_combine_command(record_parallel: Any, datasets_root: Path) -> None:
    from typer.testing import CliRunner

    from marl_minari.cli import app

    record_parallel("mpe2/simple_spread_v3", 1, dataset_id="tests/one-v0", max_cycles=3)
    record_parallel("mpe2/simple_spread_v3", 2, dataset_id="tests/two-v0", max_cycles=3)
    runner = CliRunner()
    done = runner.invoke(app, ["combine", "tests/one-v0", "tests/two-v0",
                               "--dataset-id", "tests/both-v0"])
    assert done.exit_code == 0, done.output
    assert "3 episodes" in done.output
    assert mm.load_dataset("tests/both-v0").metadata["combined_datasets"] == [
        "tests/one-v0", "tests/two-v0"]
    again = runner.invoke(app, ["combine", "tests/one-v0", "--dataset-id", "tests/both-v0"])
    assert again.exit_code == 1 and "already exists" in again.output


def test_datasets_combined_by_plain_minari_read_as_multi_agent(record_parallel: Any,
                                                                datasets_root: Path) -> None:
    import shutil

    from marl_minari.format.recovered_layout import SingleAgentReadingWarning
    from marl_minari.sources import open_source

    first, _ = record_parallel("mpe2/simple_spread_v3", 1, dataset_id="tests/one-v0",
                               max_cycles=3)
    second, _ = record_parallel("mpe2/simple_spread_v3", 2, dataset_id="tests/two-v0",
                                max_cycles=3)
    minari.combine_datasets([first.minari, second.minari], "tests/plain-v0")
    combined = mm.load_dataset("tests/plain-v0")
    assert combined.possible_agents == first.possible_agents
    parts = [*first.iterate_episodes(), *second.iterate_episodes()]
    for mine, part in zip(combined.iterate_episodes(), parts, strict=True):
        np.testing.assert_array_equal(mine.rewards, part.rewards)
    assert open_source("tests/plain-v0").multi_agent

    shutil.rmtree(datasets_root / "tests" / "two-v0")  # a part no longer local
    with pytest.warns(SingleAgentReadingWarning, match=r"'tests/plain-v0'.*single-agent"):
        source = open_source("tests/plain-v0")
    assert not source.multi_agent
