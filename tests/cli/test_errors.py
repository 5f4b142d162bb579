"""The command line's one error policy, through the real command: for each mistake a user
makes, one ``error:`` line, no traceback, the documented exit code and nothing left behind."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from marl_minari.collectors.collect import collect

from marl_minari.cli.errors import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE

TRACER_ENV = textwrap.dedent("""
    from pathlib import Path

    from mpe2 import simple_spread_v3


    def make(**kwargs):
        Path("env-was-made").touch()
        return simple_spread_v3.parallel_env(max_cycles=3, **kwargs)
""")
"""An env entry point that leaves a file behind when it is called."""


@pytest.fixture
def taken(datasets_root: Path) -> str:
    """The id of an existing dataset."""
    collect("mpe2/simple_spread_v3", 1, dataset_id="cli/taken-v0", env_kwargs={"max_cycles": 3})
    return "cli/taken-v0"


@pytest.fixture
def tracer(workdir: Path) -> str:
    """``module:attr`` of an env that marks when it is made."""
    (workdir / "tracer_env.py").write_text(TRACER_ENV)
    return "tracer_env:make"


USAGE_CASES = {
    "env kwargs not JSON": (["collect", "--env-kwargs", "{max_cycles: 50}"],
                            ["'--env-kwargs'", "double-quoted keys"]),
    "env kwargs not an object": (["collect", "--env-kwargs", "[1]"],
                                 ["'--env-kwargs'", "not an object"]),
    "unknown api": (["collect", "--api", "turns"], ["'--api'", "'parallel', 'aec'"]),
    "collect into malformed id": (["collect", "--dataset-id", "foo"],
                                  ["'--dataset-id'", "malformed dataset id 'foo'"]),
    "convert dones": (["convert", "some/data-v0", "vaults/x/y", "--dones", "teams"],
                      ["'--dones'", "'team', 'agent'"]),
    "convert state": (["convert", "some/data-v0", "vaults/x/y", "--state", "foo"],
                      ["'--state'", "'auto', 'env', 'observations', 'none'"]),
    "recover into malformed id": (["recover", "some-folder", "x"], ["malformed dataset id"]),
    "unknown option": (["info", "--verbose", "x-v0"], ["No such option"]),
}


@pytest.mark.parametrize("case", USAGE_CASES)
def test_usage_errors_exit_2_before_any_work(case: str, cli: Callable, workdir: Path,
                                             datasets_root: Path, tree: Callable) -> None:
    args, fragments = USAGE_CASES[case]
    before = tree(workdir, datasets_root)
    cli(*args).assert_one_error(EXIT_USAGE, *fragments)
    assert tree(workdir, datasets_root) == before


FAILURE_CASES = {
    "missing dataset": (["info", "nope-v0"], ["'nope-v0' not found locally",
                                              "`marl-minari download nope-v0`"]),
    "neither a path nor an id": (["info", "foo"], ["no dataset folder or vault at foo",
                                                   "foo does not exist", "malformed dataset id"]),
    "check a missing path": (["check", "nowhere/at-all"],
                             ["no dataset folder or vault at nowhere/at-all",
                              "nowhere does not exist"]),
    "describe missing dataset": (["describe", "nope-v0"], ["nope-v0"]),
    "recover a folder that is no recording": (["recover", "not-a-recording", "x-v0"],
                                              ["not-a-recording"]),
    "env id typo": (["collect", "butterfly/pistonbal_v6"],
                    ["did you mean butterfly/pistonball_v6?"]),
    "turn-based env as parallel": (["collect", "classic/chess-v6", "--api", "parallel"],
                                   ["turn-based", "--api aec"]),
    "convert a missing dataset": (["convert", "nope-v0", "vaults/x/y"],
                                  ["'nope-v0' not found locally", "--download"]),
    "convert a mistyped vault path": (["convert", "vaults/nope/uid", "mpe2/x-v0"],
                                      ["no vault at vaults/nope/uid", "vaults does not exist"]),
    "export a missing dataset": (["export", "rllib", "nope-v0", "out"], ["nope-v0"]),
}


@pytest.mark.parametrize("case", FAILURE_CASES)
def test_failures_exit_1_with_one_line(case: str, cli: Callable, workdir: Path,
                                       datasets_root: Path, tree: Callable) -> None:
    args, fragments = FAILURE_CASES[case]
    before = tree(workdir, datasets_root)
    cli(*args).assert_one_error(EXIT_FAILURE, *fragments)
    assert tree(workdir, datasets_root) == before


def test_mistyped_vault_uid_lists_the_uids_there(cli: Callable, workdir: Path) -> None:
    for uid in ("Good", "Medium"):
        (workdir / "vaults" / "spread" / uid).mkdir(parents=True)
    cli("convert", "vaults/spread/Goood", "mpe2/x-v0").assert_one_error(
        EXIT_FAILURE, "no vault at vaults/spread/Goood", "vaults/spread holds Good, Medium")


def test_missing_dataset_suggests_close_local_ids(cli: Callable, taken: str) -> None:
    cli("convert", "cli/takn-v0", "vaults/x/y").assert_one_error(
        EXIT_FAILURE, "not found locally", f"did you mean {taken}?")


def test_collect_into_an_existing_id_fails_before_the_env_is_made(
        cli: Callable, taken: str, tracer: str, workdir: Path, datasets_root: Path,
        tree: Callable) -> None:
    before = tree(workdir, datasets_root)
    cli("collect", tracer, "--dataset-id", taken).assert_one_error(
        EXIT_FAILURE, f"dataset {taken!r} already exists", "--append")
    cli("collect", tracer, "--dataset-id", "cli/free-v0", "--append").assert_one_error(
        EXIT_FAILURE, "nothing to append to")
    cli("collect", tracer, "--dataset-id", "foo").assert_one_error(EXIT_USAGE, "malformed")
    assert not (workdir / "env-was-made").exists()
    assert tree(workdir, datasets_root) == before  # no journal, no dataset folder


def test_collect_appends_when_asked(cli: Callable, taken: str, tracer: str,
                                    workdir: Path) -> None:
    # The tracer's env is spread made by another entry point: another environment.
    cli("collect", tracer, "--dataset-id", taken, "--append").assert_one_error(
        EXIT_FAILURE, "differ in environment", "'entry_point': 'tracer_env:make'")
    assert cli("collect", tracer, "--dataset-id", "cli/traced-v0", "--episodes", "1").code == 0
    result = cli("collect", tracer, "--dataset-id", "cli/traced-v0", "--append",
                 "--episodes", "2")
    assert result.code == 0, result.stderr
    assert (workdir / "env-was-made").exists()
    assert "appended to cli/traced-v0: now 3 episodes" in result.stdout


def test_missing_optional_package_names_the_extra(cli: Callable, workdir: Path,
                                                  taken: str) -> None:
    hidden = workdir / "hide"
    hidden.mkdir()
    (hidden / "ray.py").write_text("raise ModuleNotFoundError(\"No module named 'ray'\", "
                                   "name='ray')\n")
    cli("export", "rllib", taken, "out", env={"PYTHONPATH": str(hidden)}).assert_one_error(
        EXIT_FAILURE, "'ray'", 'pip install "marl-minari[ray]"')


def test_debug_shows_the_traceback(cli: Callable) -> None:
    for result in (cli("--debug", "info", "nope-v0"),
                   cli("info", "nope-v0", env={"MARL_MINARI_DEBUG": "1"})):
        assert result.code == EXIT_FAILURE
        assert "Traceback" in result.stderr
        assert "DatasetNotFoundError" in result.stderr


def test_warnings_are_one_line_each(cli: Callable) -> None:
    result = cli("collect", "--episodes", "1", "--env-kwargs", '{"max_cycles": 2}')
    assert result.code == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line.lower()]
    assert warnings == ["warning: author, author_email, code_permalink not set: they help "
                        "others reuse and cite the dataset."]


def test_convert_downloads_only_when_asked(cli: Callable, taken: str, workdir: Path,
                                           datasets_root: Path, tmp_path: Path) -> None:
    from marl_minari import registry

    remote = (tmp_path / "registry").as_uri()
    registry.publish(taken, remote)
    shutil.rmtree(datasets_root / taken)
    env = {"MINARI_REMOTE": remote}
    cli("convert", taken, "vaults/minari/spread/taken.vlt/A", env=env).assert_one_error(
        EXIT_FAILURE, "not found locally", "--download")
    assert not (datasets_root / taken).exists()
    fetched = cli("convert", taken, "vaults/minari/spread/taken.vlt/A", "--download", env=env)
    assert fetched.code == 0, fetched.stderr
    assert (datasets_root / taken / "data" / "main_data.hdf5").is_file()
    assert (workdir / "vaults" / "minari" / "spread" / "taken.vlt" / "A").is_dir()


def test_ctrl_c_exits_130_and_keeps_the_finished_episodes(workdir: Path,
                                                          datasets_root: Path) -> None:
    import marl_minari as mm

    process = subprocess.Popen(
        [sys.executable, "-m", "marl_minari", "collect", "--episodes", "100000",
         "--env-kwargs", '{"max_cycles": 2}', "--dataset-id", "cli/interrupted-v0"],
        cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            r.episodes >= 3 for r in mm.list_recordings()):
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == EXIT_INTERRUPTED, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == "error: interrupted"
    assert "marl-minari recover" in stderr
    [kept] = mm.list_recordings()
    assert kept.episodes >= 3
    assert not (datasets_root / "cli" / "interrupted-v0").exists()


def test_notes_added_on_the_way_up_are_in_the_error_line() -> None:
    """What a failure left behind (a note added to the error) reaches the one line."""
    from marl_minari.cli.errors import explain
    from marl_minari.errors import InvalidOptionError, LockedError

    failed = LockedError("dataset 'x-v0' is being written\nby another process")
    failed.add_note("The subset 'y-v0' was written, its twin 'x-v0' was not.")
    assert explain(failed).format_message() == (
        "dataset 'x-v0' is being written by another process The subset 'y-v0' was written, "
        "its twin 'x-v0' was not.")
    usage = InvalidOptionError("bad")
    usage.add_note("see --help")
    assert explain(usage).format_message() == "bad see --help"
