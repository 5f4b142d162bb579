"""What importing marl_minari changes in Minari, missing optional packages, and --help."""

from __future__ import annotations

import subprocess
import sys

import pytest
from marl_minari.registry.api import KINDS

from marl_minari import registry


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)


def test_import_registers_the_remote_kinds_and_nothing_else() -> None:
    done = _run(
        "import minari\n"
        "from minari.storage.remotes import _registry\n"
        "before = dict(_registry)\n"
        "import marl_minari\n"
        "added = sorted(set(_registry) - set(before))\n"
        "assert all(_registry[k] is v for k, v in before.items()), 'replaced a Minari kind'\n"
        "print(added)\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['file', 'http', 'https', 's3']"


def test_register_remote_kinds_is_idempotent_and_leaves_foreign_kinds() -> None:
    from minari.storage.remotes import _registry

    saved = dict(_registry)
    try:
        for kind in KINDS:
            del _registry[kind]
        registry.register_remote_kinds()
        registry.register_remote_kinds()
        assert {kind: _registry[kind] for kind in KINDS} == KINDS

        def foreign() -> type:
            raise AssertionError("never called")

        _registry["s3"] = foreign
        with pytest.warns(UserWarning, match="'s3' is registered by another package"):
            registry.register_remote_kinds()
        assert _registry["s3"] is foreign
    finally:
        _registry.clear()
        _registry.update(saved)


MISSING_BOTO3 = "import sys\nsys.modules['boto3'] = None  # as without marl-minari[s3]\n"


def test_s3_without_boto3_is_a_remote_error_with_the_install_line() -> None:
    done = _run(MISSING_BOTO3 + (
        "from marl_minari import registry\n"
        "from marl_minari.errors import RemoteError\n"
        "for call in (lambda: registry.list_datasets('s3://bucket-name/r'),\n"
        "             lambda: registry.download('team/data-v0', 's3://bucket-name/r'),\n"
        "             lambda: registry.publish('team/data-v0', 's3://bucket-name/r')):\n"
        "    try:\n"
        "        call()\n"
        "    except RemoteError as exc:\n"
        "        print(exc)\n"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and all('pip install "marl-minari[s3]"' in line for line in lines)


@pytest.mark.parametrize("command", [["remote", "list"], ["download", "team/data-v0"],
                                     ["publish", "team/data-v0"]])
def test_cli_s3_without_boto3_prints_one_error_line(command: list[str]) -> None:
    argv = ["marl-minari", *command, "--remote", "s3://bucket-name/r"]
    done = _run(MISSING_BOTO3 + f"sys.argv = {argv!r}\nfrom marl_minari.cli import main\nmain()\n")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "marl-minari[s3]" in done.stderr


@pytest.mark.parametrize("command", [["publish"], ["download"], ["remote", "list"], ["remote"]])
def test_registry_commands_help(command: list[str]) -> None:
    # The --remote help names s3://bucket and a prefix; rich must not read it as markup.
    argv = ["marl-minari", *command, "--help"]
    done = _run(f"import sys\nsys.argv = {argv!r}\nfrom marl_minari.cli import main\nmain()\n")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if command != ["remote"]:
        assert "s3://bucket[/prefix]" in done.stdout
