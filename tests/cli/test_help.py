"""``--help`` of every command and subcommand, and the generated reference in docs/cli.md."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from marl_minari.cli import app
from marl_minari.cli import errors as cli_errors
from marl_minari.cli import reference as cli_reference
from marl_minari.cli.app import FIRST_EXAMPLE

DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def command_paths(command: object, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and group of the app, as the words that invoke it."""
    yield path
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from command_paths(sub, (*path, name))


ALL_COMMANDS = list(command_paths(typer.main.get_command(app)))


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(path) for path in ALL_COMMANDS}
    assert {"", "collect", "info", "recover", "convert", "vault-info", "describe", "publish",
            "download", "remote", "remote list", "export", "export rllib"} <= names


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda p: " ".join(p) or "marl-minari")
def test_help_of_every_command(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="marl-minari")
    assert result.exit_code == 0, result.output
    assert f"Usage: {' '.join(('marl-minari', *path))} " in result.output
    assert not result.stderr and "Traceback" not in result.output


def test_help_of_the_installed_command(cli: Callable) -> None:
    """The real entry point, in a subprocess, including a help text with brackets."""
    result = cli("publish", "--help")
    assert result.code == 0, result.stderr
    assert "s3://bucket[/prefix]" in result.stdout


def test_every_command_and_option_is_in_docs_cli_md() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert text == cli_reference.updated(text), (
        "docs/cli.md is out of date: run python -m marl_minari.cli.reference")
    for path in ALL_COMMANDS[1:]:
        assert f"## `marl-minari {' '.join(path)}`" in text, path


def test_docs_cli_md_is_whole() -> None:
    """The whole file, not only the generated part: the hand-written head (title, the command
    table with every command, checks before work, the exit codes of ``cli/errors.py``) comes
    first, then the marker once, then the generated reference once."""
    text = DOCS.read_text(encoding="utf-8")
    head = cli_reference.hand_written_part(text)
    assert text.startswith("# The `marl-minari` command\n\n")
    assert text.count("## Command reference") == 1
    assert "**Usage**" not in head
    for section in ("## Checks before work", "## Errors and exit codes",
                    "## Regenerating the reference"):
        assert head.count(section) == 1, section
    table = [line for line in head.splitlines() if line.startswith("| `")]
    for name in typer.main.get_command(app).commands:
        assert any(line.startswith(f"| `{name}") or f"`{name} " in line.split("|")[1]
                   for line in table), f"docs/cli.md's command table misses {name}"
    codes = {int(line.split("|")[1]) for line in head.splitlines()
             if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    assert codes == {cli_errors.EXIT_OK, cli_errors.EXIT_FAILURE, cli_errors.EXIT_USAGE,
                     cli_errors.EXIT_INTERRUPTED, cli_errors.EXIT_PIPE_CLOSED}


def test_the_reference_command_keeps_the_head_and_refuses_a_file_without_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    copy = tmp_path / "cli.md"
    head = cli_reference.hand_written_part(DOCS.read_text(encoding="utf-8"))
    copy.write_text(f"{head}{cli_reference.MARKER}\n\nstale\n", encoding="utf-8")
    cli_reference.main([str(copy)])
    assert copy.read_text(encoding="utf-8") == DOCS.read_text(encoding="utf-8")
    assert capsys.readouterr().out == ""          # nothing a redirect could write into a file
    copy.write_text("", encoding="utf-8")         # what `... > docs/cli.md` leaves to read
    with pytest.raises(SystemExit, match="marker"):
        cli_reference.main([str(copy)])
    assert copy.read_text(encoding="utf-8") == ""


def test_no_arguments_prints_the_help_and_exits_2(cli: Callable) -> None:
    result = cli()
    assert result.code == 2
    assert "Usage: marl-minari" in result.stdout and "collect" in result.stdout


MISSING = "tests/missing-v0"
MISSING_DATASET_ARGS: dict[str, list[str]] = {
    "info": [MISSING], "check": [MISSING], "describe": [MISSING],
    "combine": [MISSING, MISSING, "--dataset-id", "tests/new-v0"],
    "convert": [MISSING], "publish": [MISSING, "--remote", "registry"],
    "subset": [MISSING, "tests/new-v0", "--max-steps", "5"], "compare": [MISSING, MISSING],
    "export rllib": [MISSING, "out"], "view": [MISSING, "--out", "page.html"],
}
"""Every command that reads a local dataset, with arguments naming one that does not exist."""
NO_LOCAL_DATASET = {"", "collect", "recover", "vault-info", "download", "remote",
                    "remote list", "export"}
"""The commands (and groups) that read no local dataset by id."""


def _options(path: tuple[str, ...]) -> set[str]:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return {o for p in command.params for o in (*p.opts, *p.secondary_opts)
            if o.startswith("--")}


def test_every_command_is_asked_about_missing_datasets() -> None:
    assert {" ".join(p) for p in ALL_COMMANDS} == set(MISSING_DATASET_ARGS) | NO_LOCAL_DATASET


@pytest.mark.parametrize("name", sorted(MISSING_DATASET_ARGS))
def test_the_missing_dataset_hint_names_only_options_the_command_has(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tuple(name.split())
    result = CliRunner().invoke(app, [*path, *MISSING_DATASET_ARGS[name]],
                                prog_name="marl-minari")
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 1 and len(errors) == 1, result.output
    assert f"{MISSING!r} not found locally" in errors[0]
    assert f"`marl-minari download {MISSING}`" in errors[0]  # a command every user has
    named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", errors[0]))
    assert named <= _options(path), (named, errors[0])
    assert ("--download" in named) == ("--download" in _options(path))


def _command(path: tuple[str, ...]) -> Any:
    command: Any = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


@pytest.mark.parametrize("path", [p for p in ALL_COMMANDS if p not in (
    (), ("export",), ("remote",))], ids=" ".join)
def test_every_argument_is_named_in_one_style(path: tuple[str, ...]) -> None:
    """Upper-case metavars (DATASET, DATASET_ID, ENV_ID...) everywhere, in the usage line as
    in the argument list."""
    command = _command(path)
    arguments = [p for p in command.params if p.param_type_name == "argument"]
    for argument in arguments:
        assert re.fullmatch(r"[A-Z][A-Z_]*", argument.metavar or ""), (path, argument.name)
    result = CliRunner().invoke(app, [*path, "--help"], prog_name="marl-minari")
    usage = result.output.splitlines()[0]
    names = re.findall(r"[{\[]([^}\]]+)[}\]]", usage.split("[OPTIONS]", 1)[-1])
    assert names == [a.metavar for a in arguments], usage


def test_top_level_help_gives_each_command_its_whole_line_and_a_first_example() -> None:
    result = CliRunner().invoke(app, ["--help"], prog_name="marl-minari",
                                env={"COLUMNS": "80"})
    flat = " ".join(result.output.split())
    for path in ALL_COMMANDS[1:]:
        if len(path) > 1:
            continue
        line = " ".join(_command(path).help.split("\n\n")[0].split())
        assert line.endswith(".") and f"{path[0]} {line}" in flat, (path, line)
    assert " ".join(FIRST_EXAMPLE.split()) in flat


def test_the_first_example_runs(cli: Callable) -> None:
    for line in FIRST_EXAMPLE.splitlines():
        words = line.split()
        assert words[0] == "marl-minari"
        result = cli(*words[1:])
        assert result.code == 0, result.stderr
    assert "agent_0" in result.stdout
