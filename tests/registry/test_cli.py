"""The registry commands: publish, remote list, download."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import minari
import pytest
import typer
from typer.testing import CliRunner

from marl_minari.cli.errors import CommandGroup
from marl_minari.cli.registry import register


@pytest.fixture
def app() -> typer.Typer:
    application = typer.Typer(no_args_is_help=True, cls=CommandGroup)
    register(application)
    return application


def test_publish_list_download(app: typer.Typer, registry_dir: Path,
                               small_dataset: Callable[..., str], tmp_path: Path) -> None:
    runner = CliRunner()
    dataset_id = small_dataset()
    result = runner.invoke(app, ["publish", dataset_id])
    assert result.exit_code == 0, result.output
    assert f"published  {dataset_id}" in result.output

    other = tmp_path / "second-registry"
    result = runner.invoke(app, ["publish", dataset_id, "--remote", str(other)])
    assert result.exit_code == 0, result.output
    assert (other / dataset_id / "manifest.json").exists()

    result = runner.invoke(app, ["remote", "list"])
    assert result.exit_code == 0, result.output
    assert dataset_id in result.output and "KiB" in result.output

    result = runner.invoke(app, ["publish", dataset_id])  # same files again: success
    assert result.exit_code == 0, result.output
    assert f"unchanged  {dataset_id}  (already published with the same files)" in result.output

    minari.delete_dataset(dataset_id)
    result = runner.invoke(app, ["download", dataset_id, "-r", f"file://{other}"])
    assert result.exit_code == 0, result.output
    assert minari.load_dataset(dataset_id).total_episodes == 2
    result = runner.invoke(app, ["download", dataset_id])
    assert result.exit_code == 1 and "--force" in result.output
    result = runner.invoke(app, ["download", dataset_id, "--force"])
    assert result.exit_code == 0, result.output


def test_list_empty_and_bad_id(app: typer.Typer, registry_dir: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["remote", "list"])  # the default registry is not there yet
    assert result.exit_code == 1 and "does not exist" in result.output, result.output
    registry_dir.mkdir()
    result = runner.invoke(app, ["remote", "list"])
    assert result.exit_code == 0 and "no datasets" in result.output, result.output
    result = runner.invoke(app, ["download", "../../etc/x-v0"])
    assert result.exit_code == 2 and "malformed dataset id" in result.output


def test_download_takes_a_dataset_url(app: typer.Typer, registry_dir: Path,
                                      small_dataset: Callable[..., str],
                                      http_server: Callable[[Path], str]) -> None:
    """The URL a user copies (the registry followed by the id, as ``open_source`` takes it)
    downloads like the id with ``--remote``; a URL naming no published dataset is one
    ``error:`` line."""
    runner = CliRunner()
    dataset_id = small_dataset()
    assert runner.invoke(app, ["publish", dataset_id]).exit_code == 0
    minari.delete_dataset(dataset_id)
    url = http_server(registry_dir)
    result = runner.invoke(app, ["download", f"{url}/{dataset_id}"])
    assert result.exit_code == 0, result.output
    assert f"downloaded {dataset_id} to" in result.output
    assert minari.load_dataset(dataset_id).total_episodes == 2
    result = runner.invoke(app, ["download", f"{url}/mpe2/spread/other-v0"])
    assert result.exit_code == 1 and result.output.startswith("error: no registry along")
