"""Consumers of a source on a streaming one: coverage (``describe(coverage=True)``),
``compare`` and the TorchRL loader run on ``open_source(url, streaming=True)`` over a real
HTTP server on 127.0.0.1, and give what the same call gives on the downloaded dataset."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from range_servers import RangeHandler, range_handler

import marl_minari as mm
from marl_minari import registry
from marl_minari.describe import compare
from marl_minari.format.ids import dataset_dir
from marl_minari.sources.streaming import StreamingSource

DATASET = "mpe2/spread/streamed-v0"


pytestmark = pytest.mark.usefixtures("block_cache")  # the default cache, per test


@pytest.fixture
def url(streamable: Path, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> str:
    """The published dataset's URL on a range-honouring HTTP server; the local copy it was
    published from is removed, so what streams can only come from the server."""
    shutil.rmtree(dataset_dir(DATASET))
    handler = range_handler("ConsumersHandler", RangeHandler)
    return f"{thread_server(registry_dir, handler)}/{DATASET}"


def streaming(url: str) -> StreamingSource:
    source = mm.open_source(url, streaming=True)
    assert isinstance(source, StreamingSource)
    return source


def downloaded(url: str, dataset_id: str = DATASET) -> Any:
    """The same dataset downloaded (and verified) from the same URL."""
    source = mm.open_source(url)
    assert not isinstance(source, StreamingSource)
    assert dataset_dir(dataset_id).is_dir()
    return source


def same_description(got: Any, expected: Any) -> None:
    """Equal descriptions, but for the name (a URL either way) and the provenance of where
    the bytes were read."""
    ignored = {"name", "metadata"}
    for field in dataclasses.fields(expected):
        if field.name in ignored:
            continue
        mine, theirs = getattr(got, field.name), getattr(expected, field.name)
        if isinstance(theirs, np.ndarray):
            np.testing.assert_array_equal(mine, theirs, err_msg=field.name)
        else:
            assert mine == theirs, field.name


def test_coverage_of_a_streaming_source_is_that_of_the_download(url: str) -> None:
    streamed = mm.describe(streaming(url), coverage=True)
    assert not dataset_dir(DATASET).exists()  # streaming downloaded nothing
    local = mm.describe(downloaded(url), coverage=True)
    assert streamed.coverage is not None and streamed.coverage.state_pairs > 0
    same_description(streamed, local)


def test_compare_of_streaming_sources_is_that_of_the_downloads(
        url: str, record_parallel: Callable[..., Any]) -> None:
    record_parallel("mpe2/simple_spread_v3", 4, max_cycles=25, dataset_id="mpe2/spread/other-v0")
    streamed = compare([streaming(url), "mpe2/spread/other-v0"])
    assert not dataset_dir(DATASET).exists()
    local = compare([downloaded(url), "mpe2/spread/other-v0"])
    assert streamed.returns == local.returns
    assert streamed.space_differences == local.space_differences == ()
    for got, expected in zip(streamed.descriptions, local.descriptions, strict=True):
        same_description(got, expected)


def test_the_torchrl_loader_reads_a_streaming_source_as_the_download(
        url: str, tmp_path: Path) -> None:
    pytest.importorskip("torchrl")
    from marl_minari.adapters import to_tensordict

    streamed = to_tensordict(streaming(url), path=tmp_path / "streamed", chunk_steps=60)
    assert not dataset_dir(DATASET).exists()
    local = to_tensordict(downloaded(url), path=tmp_path / "local", chunk_steps=60)
    assert streamed.batch_size == local.batch_size and streamed.batch_size[0] > 0
    assert set(streamed.keys(True, True)) == set(local.keys(True, True))
    for key in local.keys(True, True):
        assert (streamed[key] == local[key]).all(), key


def test_a_torchrl_buffer_mixes_a_streaming_and_a_local_source(
        url: str, record_parallel: Callable[..., Any], tmp_path: Path) -> None:
    pytest.importorskip("torchrl")
    from marl_minari.adapters import make_torchrl_buffer

    record_parallel("mpe2/simple_spread_v3", 3, max_cycles=25, dataset_id="mpe2/spread/local-v0")
    remote = streaming(url)
    buffer = make_torchrl_buffer([remote, "mpe2/spread/local-v0"], batch_size=8,
                                 scratch_dir=tmp_path / "scratch")
    assert len(buffer) == remote.total_steps + mm.open_source(
        "mpe2/spread/local-v0").total_steps
    assert not dataset_dir(DATASET).exists()


LONG = "mpe2/spread/long-v0"


@pytest.fixture
def long_episodes(record_parallel: Callable[..., Any], registry_dir: Path) -> Path:
    """Ten published episodes of about 16 blocks each; the local data file. Choosing by
    returns reads each episode's reward column and the HDF5 metadata binding its index entry:
    a few blocks of each episode (all of an episode shorter than a few blocks)."""
    record_parallel("mpe2/simple_spread_v3", 10, max_cycles=2000, dataset_id=LONG)
    registry.publish(LONG)
    return dataset_dir(LONG) / "data" / "main_data.hdf5"


@pytest.mark.parametrize("rule", ["profile", "like"])
def test_a_subset_by_returns_moves_the_reward_column_and_the_chosen_episodes(
        rule: str, long_episodes: Path, registry_dir: Path, tmp_path: Path,
        thread_server: Callable[[Path, type[Any]], str],
        record_parallel: Callable[..., Any]) -> None:
    size = long_episodes.stat().st_size
    local_returns = mm.open_source(LONG).team_returns()
    shutil.rmtree(dataset_dir(LONG))
    handler = range_handler("ReturnsHandler", RangeHandler)
    url = f"{thread_server(registry_dir, handler)}/{LONG}"
    if rule == "profile":
        middle = float(np.median(local_returns))
        options: dict[str, Any] = {
            "profile": ([float(local_returns.min()), middle, float(local_returns.max())],
                        [1.0, 0.0]), "max_steps": 2000}
    else:
        record_parallel("mpe2/simple_spread_v3", 2, max_cycles=2000,
                        dataset_id="mpe2/spread/like-v0")
        options = {"like": "mpe2/spread/like-v0", "tolerance": 1e9, "max_steps": 2000}
    streamed = mm.subsample(streaming(url), "mpe2/spread/streamed-subset-v0", seed=5,
                            **options)
    moved = sum(length for path, _, length in handler.served if path.endswith(".hdf5"))
    chosen = streamed.metadata["subset"]["episode_ids"]
    assert len(chosen) == 1
    assert moved < 0.5 * size, (moved, size)
    assert not dataset_dir(LONG).exists()
    np.testing.assert_array_equal(streaming(url).team_returns(), local_returns)
    local = mm.subsample(downloaded(url, LONG), "mpe2/spread/local-subset-v0", seed=5,
                         **options)
    assert local.metadata["subset"]["episode_ids"] == chosen
    got, expected = streamed.to_arrays(), local.to_arrays()
    np.testing.assert_array_equal(got.team_rewards, expected.team_rewards)
    for agent in expected.possible_agents:
        np.testing.assert_array_equal(got.observations[agent], expected.observations[agent])
