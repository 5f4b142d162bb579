"""``--streaming`` on the reading commands (``describe``, ``subset``, ``compare``, ``view``):
a registry URL is read in place from a real HTTP server on 127.0.0.1, nothing is downloaded,
and mistakes are one ``error:`` line with the documented exit code."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from range_servers import RangeHandler, range_handler
from registry_helpers import entry_of, manifest_document
from typer.testing import CliRunner

import marl_minari as mm
from marl_minari import registry
from marl_minari.cli.app import app
from marl_minari.cli.errors import EXIT_FAILURE, EXIT_USAGE
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir

DATASET = "mpe2/spread/streamed-cli-v0"
LOCAL = "mpe2/spread/local-cli-v0"
MAIN_PATH = f"data/{layout.MAIN_FILE_NAME}"


pytestmark = pytest.mark.usefixtures("block_cache")  # the default cache, per test


@pytest.fixture
def served(record_parallel: Callable[..., Any], registry_dir: Path,
           thread_server: Callable[[Path, type[Any]], str]
           ) -> tuple[str, type[RangeHandler], Any]:
    """``(url, handler, local description)``: 12 episodes published on a server that logs
    every range, the local copy described, then removed."""
    record_parallel("mpe2/simple_spread_v3", 12, max_cycles=25, dataset_id=DATASET)
    registry.publish(DATASET)
    description = mm.describe(DATASET)
    shutil.rmtree(dataset_dir(DATASET))
    handler = range_handler("CliRanges")
    return f"{thread_server(registry_dir, handler)}/{DATASET}", handler, description


def run(*args: str) -> Any:
    return CliRunner().invoke(app, list(args))


def data_blocks(handler: type[RangeHandler], block_size: int) -> set[int]:
    return {number for path, offset, length in handler.served if path.endswith(MAIN_PATH)
            for number in range(offset // block_size, (offset + length - 1) // block_size + 1)}


def test_describe_streaming_reads_in_place_and_metadata_only_fetches_no_episode(
        served: tuple[str, type[RangeHandler], Any], registry_dir: Path) -> None:
    url, handler, local = served
    entry = entry_of(manifest_document(registry_dir, DATASET), MAIN_PATH)
    result = run("describe", url, "--streaming", "--no-statistics", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["statistics"] is False and document["team_returns"] is None
    assert (document["total_episodes"], document["total_steps"]) == (12, local.total_steps)
    assert data_blocks(handler, entry["block_size"]) <= set(entry["open_blocks"])
    assert not dataset_dir(DATASET).exists()  # read in place, nothing downloaded

    result = run("describe", url, "--streaming")
    assert result.exit_code == 0, result.output
    assert result.stdout == local.to_text() + "\n"  # the same statistics as the local copy
    assert not dataset_dir(DATASET).exists()


def test_subset_compare_and_view_read_a_url_in_place(
        served: tuple[str, type[RangeHandler], Any], record_parallel: Callable[..., Any],
        tmp_path: Path) -> None:
    url, _, local = served
    result = run("subset", url, "mpe2/spread/chosen-v0", "--max-steps", "50", "--streaming")
    assert result.exit_code == 0, result.output
    subset = mm.load_dataset("mpe2/spread/chosen-v0")
    assert subset.total_episodes == 2 and subset.metadata["subset"]["source_name"] == url

    record_parallel("mpe2/simple_spread_v3", 3, max_cycles=25, dataset_id=LOCAL)
    result = run("compare", url, LOCAL, "--streaming", "--no-coverage", "--json")
    assert result.exit_code == 0, result.output
    compared = json.loads(result.stdout)
    assert [d["total_episodes"] for d in compared["datasets"]] == [12, 3]

    page = tmp_path / "page.html"
    result = run("view", url, "--streaming", "--out", str(page))
    assert result.exit_code == 0, result.output
    assert DATASET in page.read_text()
    assert f"marl-minari view {url} --streaming" in page.read_text()  # how to see them all
    assert not dataset_dir(DATASET).exists()  # every command read in place


def test_streaming_errors_are_one_line_with_the_documented_code(
        served: tuple[str, type[RangeHandler], Any], tmp_path: Path) -> None:
    url, _, _ = served
    absent = url.replace(DATASET, "mpe2/spread/absent-v0")
    result = run("describe", absent, "--streaming")
    assert result.exit_code == EXIT_FAILURE, result.output
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "no registry along" in line and "absent-v0" in line
    result = run("describe", url, "--streaming", "--no-statistics", "--plot",
                 str(tmp_path / "plot.png"))
    assert result.exit_code == EXIT_USAGE, result.output
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error:")]
    assert "--plot needs the episodes read: drop --no-statistics" in line
