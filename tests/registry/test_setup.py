"""What importing marl_minari changes in Minari (nothing), registering the remote kinds on
request, missing optional packages, and --help."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from marl_minari.registry.minari_remote import MINARI_FACTORIES

from marl_minari import registry


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, **env})


def test_importing_changes_nothing_in_minari() -> None:
    # Every public module a user may import, the command line's included.
    done = _run(
        "import minari\n"
        "from minari.storage.remotes import _registry\n"
        "before = dict(_registry)\n"
        "import marl_minari, marl_minari.registry, marl_minari.sources, marl_minari.cli\n"
        "import marl_minari.adapters, marl_minari.collectors, marl_minari.describe\n"
        "assert dict(_registry) == before, sorted(set(_registry) ^ set(before))\n"
        "print(sorted(_registry))\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['gcp', 'hf']"


def test_registering_lets_minari_functions_use_a_file_remote(
        registry_dir: Path, small_dataset: Callable[..., str]) -> None:
    dataset_id = small_dataset()
    registry.publish(dataset_id)
    code = (
        "import minari\n"
        "from marl_minari import registry\n"
        f"remote = 'file://{registry_dir}'\n"
        "try:\n"
        "    minari.list_remote_datasets(remote_path=remote)\n"
        "except KeyError:\n"
        "    print('result: unknown before')\n"
        "registry.register_remote_kinds()\n"
        "print('result:', sorted(minari.list_remote_datasets(remote_path=remote)))\n"
        f"minari.delete_dataset({dataset_id!r})\n"
        f"minari.download_dataset({dataset_id!r})\n"
        f"print('result:', minari.load_dataset({dataset_id!r}).total_episodes)\n")
    done = _run(code, MINARI_REMOTE=f"file://{registry_dir}")
    assert done.returncode == 0, done.stderr
    results = [line for line in done.stdout.splitlines() if line.startswith("result:")]
    assert results == ["result: unknown before", f"result: [{dataset_id!r}]", "result: 2"]


def test_register_remote_kinds_is_idempotent_and_leaves_foreign_kinds() -> None:
    from minari.storage.remotes import _registry

    saved = dict(_registry)
    try:
        for kind in MINARI_FACTORIES:
            _registry.pop(kind, None)
        registry.register_remote_kinds()
        registry.register_remote_kinds()
        assert {kind: _registry[kind] for kind in MINARI_FACTORIES} == MINARI_FACTORIES
        assert _registry["hf"] is saved["hf"] and _registry["gcp"] is saved["gcp"]

        def foreign() -> type:
            raise AssertionError("never called")

        _registry["s3"] = foreign
        with pytest.warns(UserWarning, match="'s3' is registered by another package") as said:
            registry.register_remote_kinds()
        assert [w.filename for w in said] == [__file__]
        assert _registry["s3"] is foreign
    finally:
        _registry.clear()
        _registry.update(saved)


MISSING_BOTO3 = "import sys\nsys.modules['boto3'] = None  # as without marl-minari[s3]\n"


def test_s3_without_boto3_names_the_extra() -> None:
    done = _run(MISSING_BOTO3 + (
        "from marl_minari import registry\n"
        "from marl_minari.errors import MissingExtraError\n"
        "for call in (lambda: registry.list_datasets('s3://bucket-name/r'),\n"
        "             lambda: registry.download('team/data-v0', 's3://bucket-name/r'),\n"
        "             lambda: registry.publish('team/data-v0', 's3://bucket-name/r'),\n"
        "             lambda: registry.open_remote('s3://bucket-name/r')):\n"
        "    try:\n"
        "        call()\n"
        "    except MissingExtraError as exc:\n"
        "        print(exc)\n"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 4, done.stdout
    assert all(line.startswith("an s3:// remote needs boto3") for line in lines), lines
    assert all('pip install "marl-minari[s3]"' in line for line in lines), lines


@pytest.mark.parametrize("command", [["remote", "list"], ["download", "team/data-v0"],
                                     ["publish", "team/data-v0"]])
def test_cli_s3_without_boto3_prints_one_error_line(command: list[str]) -> None:
    argv = ["marl-minari", *command, "--remote", "s3://bucket-name/r"]
    done = _run(MISSING_BOTO3 + f"sys.argv = {argv!r}\nfrom marl_minari.cli import main\nmain()\n")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert 'pip install "marl-minari[s3]"' in lines[0]


@pytest.mark.parametrize("command", [["publish"], ["download"], ["remote", "list"], ["remote"]])
def test_registry_commands_help(command: list[str]) -> None:
    # The --remote help names s3://bucket and a prefix; rich must not read it as markup.
    argv = ["marl-minari", *command, "--help"]
    done = _run(f"import sys\nsys.argv = {argv!r}\nfrom marl_minari.cli import main\nmain()\n")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    if command != ["remote"]:
        assert "s3://bucket[/prefix]" in done.stdout
