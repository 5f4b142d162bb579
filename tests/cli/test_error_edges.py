"""The error policy at its edges, through the real command: Ctrl-C while serving, a closed
stdout, a progress bar cut short, empty and missing names, empty data, repeated warnings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pytest
from synthetic import write_episodes
from typer.testing import CliRunner

import marl_minari as mm
from marl_minari.cli import app
from marl_minari.cli.errors import EXIT_FAILURE, EXIT_PIPE_CLOSED, EXIT_USAGE
from marl_minari.format.ids import dataset_dir


@pytest.fixture
def small() -> str:
    """A dataset of three 5-step episodes."""
    write_episodes("cli/small-v0", [5, 5, 5], [1.0, 2.0, 3.0])
    return "cli/small-v0"


@pytest.mark.parametrize("arguments", [["info", "cli/small-v0"], ["--help"], []])
def test_closed_stdout_exits_141_without_an_error_line(arguments: list[str], small: str,
                                                        workdir: Path) -> None:
    """``marl-minari info ID | head -1``: the reader is gone before the command writes (its
    end of the pipe is closed before the command starts, so every write meets it closed).
    The help is written while the command line is parsed, before any command runs."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        completed = subprocess.run(
            [sys.executable, "-m", "marl_minari", *arguments], cwd=workdir,
            stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert completed.returncode == EXIT_PIPE_CLOSED, completed.stderr
    assert completed.stderr == ""  # neither an error line nor Python's own complaint


def test_an_error_after_a_progress_bar_starts_its_own_line(small: str, cli: Callable,
                                                           datasets_root: Path) -> None:
    """stderr is a pipe here, as in CI logs or ``2>file``: the bar that the failure cuts
    short ends its line, the error line follows, and no bar is drawn after it."""
    with h5py.File(dataset_dir(small) / "data" / "main_data.hdf5", "a") as data:
        del data["episode_1/actions/a"]
        data["episode_1/actions/a"] = np.zeros(7, np.int64)
    result = cli("describe", small)
    assert result.code == EXIT_FAILURE, result.stderr
    lines = result.stderr.split("\n")  # a log viewer breaks lines at \n only
    starting = [line for line in lines if line.startswith("error:")]
    assert len(starting) == 1, result.stderr
    assert "episode_1/actions/a" in starting[0]
    assert result.stderr.count("error:") == 1
    assert [line for line in lines if line.strip()][-1] == starting[0]  # nothing redrawn
    assert "describe cli/small-v0" in result.stderr  # there was a bar to end


NAMED_COMMANDS = {
    "info": ["info", ""],
    "check": ["check", ""],
    "view": ["view", "", "--out", "page.html"],
    "view --compare": ["view", "cli/small-v0", "--compare", "", "--out", "page.html"],
    "compare": ["compare", "cli/small-v0", ""],
    "subset": ["subset", "", "cli/sub-v0", "--max-steps", "5"],
    "subset --like": ["subset", "cli/small-v0", "cli/sub-v0", "--like", ""],
    "combine": ["combine", "cli/small-v0", "", "--dataset-id", "cli/both-v0"],
    "convert": ["convert", "", "vaults/x/y"],
    "convert target": ["convert", "cli/small-v0", ""],
    "vault-info": ["vault-info", ""],
    "export": ["export", "rllib", "", "out"],
    "export out": ["export", "rllib", "cli/small-v0", ""],
    "recover": ["recover", "", "cli/recovered-v0"],
}


@pytest.mark.parametrize("case", NAMED_COMMANDS)
def test_an_empty_name_is_a_usage_error(case: str, small: str, workdir: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty argument (an unset shell variable) is refused, not read as the current
    folder (which would be read, or converted, or written into)."""
    monkeypatch.chdir(workdir)
    result = CliRunner().invoke(app, NAMED_COMMANDS[case])
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == EXIT_USAGE, result.output
    assert len(lines) == 1 and lines[0].startswith("error: ") and "is empty" in lines[0]
    assert list(workdir.iterdir()) == []


@pytest.mark.parametrize("command", [["info"], ["check"], ["view", "--out", "page.html"],
                                     ["subset", "--max-steps", "5", "--seed", "0"],
                                     ["export", "rllib"]])
def test_a_mistyped_path_names_the_nearest_folder(command: list[str], cli: Callable,
                                                  workdir: Path) -> None:
    for uid in ("Good", "Medium"):
        (workdir / "vaults" / "spread.vlt" / uid).mkdir(parents=True)
    name, *options = command
    arguments = [name, "vaults/spread.vlt/Goood"]
    if name == "subset":
        arguments.append("cli/sub-v0")
    if name == "export":
        arguments = ["export", "rllib", "vaults/spread.vlt/Goood", "out"]
    result = cli(*arguments, *options)
    result.assert_one_error(EXIT_FAILURE, "no dataset folder or vault at vaults/spread.vlt/Goood",
                            "vaults/spread.vlt holds Good, Medium")
    assert sorted(p.name for p in workdir.iterdir()) == ["vaults"]


@pytest.fixture
def empty() -> str:
    """A dataset that holds no episodes."""
    write_episodes("cli/empty-v0", [], [])
    return "cli/empty-v0"


def test_subset_of_an_empty_dataset_is_a_failure_of_the_data(empty: str, small: str) -> None:
    for arguments, fragment in (
            ([empty, "cli/sub-v0", "--max-steps", "5"],
             f"dataset {empty!r} holds no episodes"),
            ([small, "cli/sub-v0", "--like", empty],
             f"the --like dataset {empty!r} holds no episodes")):
        result = CliRunner().invoke(app, ["subset", *arguments])
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == EXIT_FAILURE, result.output
        assert len(lines) == 1 and lines[0].startswith(f"error: {fragment}"), lines
        assert "loosen" not in lines[0]
        assert not dataset_dir("cli/sub-v0").exists()
    # From Python too: the same error class, not "max_steps chose no episode; loosen it"
    with pytest.raises(mm.EmptyDatasetError, match=f"the source dataset {empty!r} .* holds no "
                                                    "episodes"):
        mm.subsample(empty, "cli/sub-v0", max_steps=5)


@pytest.mark.parametrize(("arguments", "fragment"), [
    (["cli/sub-v0"], "give a rule"),
    (["cli/sub-v0", "--bin-edges", "0,1", "--weights", "1", "--like", "cli/small-v0"],
     "two rules"),
    (["cli/sub-v0", "--max-steps", "5", "--seed", "-1"], "'--seed'"),
    (["cli/sub-v0", "--like", "cli/small-v0", "--tolerance", "-1"], "'--tolerance'"),
    (["sub"], "malformed dataset id 'sub'"),
    (["cli/sub-v0", "--like", "cli/small-v0", "--like-id", "twin"],
     "malformed dataset id 'twin'"),
])
def test_a_wrong_subset_command_line_is_one_whatever_the_dataset_holds(
        empty: str, small: str, arguments: list[str], fragment: str) -> None:
    """The command line is checked before the dataset is opened: exit 2, not the empty
    dataset's exit 1."""
    result = CliRunner().invoke(app, ["subset", empty, *arguments])
    assert result.exit_code == EXIT_USAGE, result.output
    assert fragment in result.stderr


def test_a_warning_is_printed_once(small: str, cli: Callable) -> None:
    """``check`` reads the dataset more than once; what is wrong with it is said once."""
    metadata_file = dataset_dir(small) / "data" / "metadata.json"
    metadata = json.loads(metadata_file.read_text())
    del metadata["marl_minari"]
    metadata_file.write_text(json.dumps(metadata))
    result = cli("check", small)
    assert result.code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, result.stderr
    assert "read as single-agent" in warnings[0]
