"""The dataset-tool commands: ``describe --coverage``, ``subset`` and ``compare``, run as a
user runs them, and their one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from synthetic import write_episodes
from typer.testing import CliRunner

import marl_minari as mm
from marl_minari.cli import app
from marl_minari.cli.errors import EXIT_USAGE
from marl_minari.format.ids import dataset_dir


@pytest.fixture
def ramp() -> None:
    """40 episodes of 5 steps with team returns 0..39, and a second dataset of 5 episodes."""
    write_episodes("cli/ramp-v0", [5] * 40, [float(r) for r in range(40)])
    write_episodes("cli/few-v0", [4] * 5, [5.0, 6.0, 17.0, 17.0, 100.0])


def test_describe_with_coverage(ramp: None) -> None:
    result = CliRunner().invoke(app, ["describe", "cli/ramp-v0", "--coverage", "--json"])
    assert result.exit_code == 0, result.output
    coverage = json.loads(result.stdout)["coverage"]
    # random float observations: every (observation, action) and joint row is distinct
    assert coverage["saco"] == coverage["oaco"] == 1.0
    assert coverage["state_source"] == "joint_observation" and coverage["transitions"] == 200
    assert coverage["state_frequencies"] == {"counts": [1], "pairs": [200]}
    assert coverage["agent_frequencies"]["a"] == {"counts": [1], "pairs": [200]}
    plain = CliRunner().invoke(app, ["describe", "cli/ramp-v0", "--json"])
    assert json.loads(plain.stdout)["coverage"] is None


def test_describe_coverage_plot(ramp: None, tmp_path: Path) -> None:
    """--coverage-plot measures coverage without --coverage and draws every dataset."""
    from matplotlib.image import imread

    target = tmp_path / "out" / "pairs.png"
    target.parent.mkdir()  # the command writes into an existing folder
    result = CliRunner().invoke(app, ["describe", "cli/ramp-v0", "--compare", "cli/few-v0",
                                      "--coverage-plot", str(target)])
    assert result.exit_code == 0, result.output
    assert f"coverage plot written to {target}" in result.output
    assert "coverage       SACo" in result.output
    assert imread(target).shape[1] == 960


def test_subset_commands(ramp: None) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["subset", "cli/ramp-v0", "cli/small-v0", "--max-steps", "52",
                                 "--seed", "4", "--author", "me"])
    assert result.exit_code == 0, result.output
    assert "cli/small-v0: 10 episodes, 50 steps (uniform, seed 4)" in result.output
    assert mm.load_dataset("cli/small-v0").metadata["subset"]["seed"] == 4
    shaped = runner.invoke(app, ["subset", "cli/ramp-v0", "cli/shaped-v0", "--bin-edges",
                                 "0,10,20,40", "--weights", "1,0,3"])
    assert shaped.exit_code == 0, shaped.output
    returns = [e.team_rewards.sum() for e in mm.load_dataset("cli/shaped-v0")
               .iterate_episodes()]
    assert np.histogram(returns, bins=[0, 10, 20, 40])[0].tolist() == [7, 0, 20]
    alike = runner.invoke(app, ["subset", "cli/ramp-v0", "cli/alike-v0", "--like", "cli/few-v0"])
    assert alike.exit_code == 0, alike.output
    assert mm.load_dataset("cli/alike-v0").total_episodes == 3  # 5, 6 and 17
    pair = runner.invoke(app, ["subset", "cli/ramp-v0", "cli/ramp-sim-v0", "--like",
                               "cli/few-v0", "--like-id", "cli/few-sim-v0", "--seed", "1"])
    assert pair.exit_code == 0, pair.output
    assert "cli/ramp-sim-v0: 3 episodes, 15 steps (like, seed 1) from cli/ramp-v0" in pair.output
    assert "cli/few-sim-v0: 3 episodes, 12 steps (like, seed 1) from cli/few-v0" in pair.output
    twin = mm.load_dataset("cli/few-sim-v0")
    assert sorted(e.team_rewards.sum() for e in twin.iterate_episodes()) == [5.0, 6.0, 17.0]
    assert twin.metadata["subset"]["twin"] == "cli/ramp-sim-v0"


@pytest.mark.parametrize(("arguments", "message"), [
    (["--bin-edges", "0,1"], "--bin-edges and --weights go together"),
    (["--bin-edges", "0,x", "--weights", "1"], "--bin-edges takes numbers"),
    ([], "give a rule: --max-steps N, --bin-edges with --weights, or --like OTHER"),
    (["--bin-edges", "0,1", "--weights", "1", "--like", "cli/few-v0"],
     "--bin-edges/--weights and --like are two rules"),
    (["--max-steps", "2"], "max_steps chose no episode"),
    (["--max-steps", "10", "--like-id", "cli/twin-v0"], "--like-id names the subset of the "
                                                       "--like dataset: give --like too"),
    (["--like", "cli/few-v0", "--like-id", "cli/never-v0"], "need two ids"),
])
def test_subset_mistakes_are_one_error_line(ramp: None, arguments: list[str],
                                            message: str) -> None:
    result = CliRunner().invoke(app, ["subset", "cli/ramp-v0", "cli/never-v0", *arguments])
    assert result.exit_code == EXIT_USAGE, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0]
    assert not dataset_dir("cli/never-v0").exists()


def test_an_existing_twin_id_is_one_error_line_and_writes_nothing(ramp: None) -> None:
    result = CliRunner().invoke(app, ["subset", "cli/ramp-v0", "cli/never-v0", "--like",
                                      "cli/few-v0", "--like-id", "cli/few-v0"])
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: dataset 'cli/few-v0' already exists")
    assert not dataset_dir("cli/never-v0").exists()


def test_compare_command(ramp: None, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    plot = tmp_path / "compare.png"
    result = CliRunner().invoke(app, ["compare", "cli/ramp-v0", "cli/few-v0", "--plot",
                                      str(plot)])
    assert result.exit_code == 0, result.output
    assert "cli/few-v0: KS" in result.stdout and "SACo" in result.stdout
    assert plot.stat().st_size > 0
    as_json = CliRunner().invoke(app, ["compare", "cli/ramp-v0", "cli/few-v0", "--json",
                                       "--no-coverage"])
    payload = json.loads(as_json.stdout)
    assert payload["datasets"][0]["coverage"] is None
    one = CliRunner().invoke(app, ["compare", "cli/ramp-v0"])
    assert one.exit_code == EXIT_USAGE and "at least two" in one.stderr


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"not JSON: bare {name}")


def test_describe_and_compare_json_is_valid_json_with_null_for_nan(ramp: None) -> None:
    """Returns of a dataset whose rewards hold NaN: null in the JSON, never a bare NaN."""
    write_episodes("cli/nan-v0", [5] * 3, [1.0, float("nan"), 2.0])
    described = CliRunner().invoke(app, ["describe", "cli/nan-v0", "--json"])
    assert described.exit_code == 0, described.output
    payload = json.loads(described.stdout, parse_constant=_refuse_constant)
    assert payload["team_returns"]["mean"] is None
    compared = CliRunner().invoke(app, ["compare", "cli/few-v0", "cli/nan-v0", "--json",
                                        "--no-coverage"])
    assert compared.exit_code == 0, compared.output
    json.loads(compared.stdout, parse_constant=_refuse_constant)


@pytest.mark.parametrize("command", [
    ["describe", "cli/few-v0", "--coverage-plot"], ["describe", "cli/few-v0", "--plot"],
    ["compare", "cli/few-v0", "cli/ramp-v0", "--plot"]])
def test_an_output_file_that_is_a_folder_is_refused_before_the_report(
        ramp: None, tmp_path: Path, command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, str(tmp_path)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert result.stdout == ""  # no report printed before the error
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "is a folder" in lines[0] and str(tmp_path) in lines[0]
