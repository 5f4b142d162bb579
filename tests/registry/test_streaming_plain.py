"""Plain single-agent Minari datasets published on a registry read in place: the same
episodes as the downloaded copy, every byte verified against the published block digests,
HDF5 reading the file over verified byte ranges (plain datasets have no offset index)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from foreign_storage import SECRET, external_link, external_storage
from random_play import play_random_episodes
from range_servers import RangeHandler, range_handler
from registry_helpers import cached_block_numbers

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import CorruptedDataError, LayoutError
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir
from marl_minari.sources.streaming import StreamingSource

PLAIN = "single/cartpole-v0"


pytestmark = pytest.mark.usefixtures("block_cache")  # the default cache, per test


class SplitCartPole:
    """CartPole with a Dict observation and nested infos, recorded by Minari's own
    ``DataCollector``: a plain dataset of nested groups."""

    @staticmethod
    def make() -> Any:
        import gymnasium as gym
        from gymnasium import spaces

        class Split(gym.Wrapper[Any, Any, Any, Any]):
            def __init__(self, env: Any) -> None:
                super().__init__(env)
                box = env.observation_space
                self.observation_space = spaces.Dict({
                    "cart": spaces.Box(box.low[:2], box.high[:2], dtype=box.dtype),
                    "pole": spaces.Box(box.low[2:], box.high[2:], dtype=box.dtype)})
                self.steps = 0

            def observe(self, observation: Any) -> dict[str, Any]:
                return {"cart": observation[:2], "pole": observation[2:]}

            def reset(self, **kwargs: Any) -> Any:
                observation, _ = self.env.reset(**kwargs)
                self.steps = 0
                return self.observe(observation), {"steps": 0, "pole": {"angle": 0.0}}

            def step(self, action: Any) -> Any:
                observation, reward, terminated, truncated, _ = self.env.step(action)
                self.steps += 1
                info = {"steps": self.steps, "pole": {"angle": float(observation[2])}}
                return self.observe(observation), reward, terminated, truncated, info

        return Split(gym.make("CartPole-v1"))


@pytest.fixture
def published(registry_dir: Path) -> int:
    """A plain dataset (Dict observations, nested infos) published on the default registry;
    the local copy is removed (what streams can only come from the registry). Its data
    file's size."""
    import minari

    collector = minari.DataCollector(SplitCartPole.make(), record_infos=True)
    play_random_episodes(collector, 40)
    collector.create_dataset(PLAIN, algorithm_name="random", description="split CartPole")
    collector.close()
    registry.publish(PLAIN, allow_single_agent=True)
    size = (dataset_dir(PLAIN) / "data" / layout.MAIN_FILE_NAME).stat().st_size
    shutil.rmtree(dataset_dir(PLAIN))
    return size


@pytest.fixture
def served(published: int, registry_dir: Path,
           thread_server: Callable[[Path, type[Any]], str]) -> tuple[str, type[RangeHandler]]:
    handler = range_handler("PlainHandler", RangeHandler)
    return f"{thread_server(registry_dir, handler)}/{PLAIN}", handler


def assert_same_tree(got: Any, expected: Any) -> None:
    if isinstance(expected, dict):
        assert set(got) == set(expected)
        for key in expected:
            assert_same_tree(got[key], expected[key])
    else:
        np.testing.assert_array_equal(got, expected)


def test_a_plain_dataset_streams_the_episodes_of_its_download(
        served: tuple[str, type[RangeHandler]]) -> None:
    url, _ = served
    source = mm.open_source(url, streaming=True)
    assert isinstance(source, StreamingSource)
    assert source.kind == "single_agent" and source.spec.possible_agents == ("agent_0",)
    streamed = source.read(np.arange(40))
    without_observations = source.read([3, 9], observations=False)
    attributes = source.episode_attributes(range(40))
    assert not dataset_dir(PLAIN).exists()
    local = mm.open_source(url)  # downloaded and verified
    assert not isinstance(local, StreamingSource) and local.kind == "single_agent"
    assert source.spec == local.spec and source.total_steps == local.total_steps
    expected = local.read(np.arange(40))
    for name in ("episode_ids", "episode_lengths", "rewards", "terminations", "truncations",
                 "active", "acted", "team_rewards"):
        np.testing.assert_array_equal(getattr(streamed, name), getattr(expected, name))
    assert_same_tree(streamed.observations, expected.observations)
    assert_same_tree(streamed.actions, expected.actions)
    assert expected.agent_infos is not None
    assert_same_tree(streamed.agent_infos, expected.agent_infos)
    assert attributes == local.episode_attributes(range(40))
    assert without_observations.observations == {"agent_0": {}}
    np.testing.assert_array_equal(without_observations.team_rewards,
                                  local.read([3, 9]).team_rewards)
    assert mm.describe(source).episode_length_values.tolist() == (
        mm.describe(local).episode_length_values.tolist())


def test_one_plain_episode_moves_a_part_of_the_file(
        served: tuple[str, type[RangeHandler]], published: int) -> None:
    url, handler = served
    source = mm.open_source(url, streaming=True)
    assert isinstance(source, StreamingSource)
    source.read([20])
    moved = sum(length for path, _, length in handler.served if path.endswith(".hdf5"))
    assert moved < published / 2, (moved, published)


def test_a_tampered_plain_block_is_refused(served: tuple[str, type[RangeHandler]],
                                           registry_dir: Path, block_cache: Path) -> None:
    import h5py

    url, _ = served
    source = mm.open_source(url, streaming=True)
    assert isinstance(source, StreamingSource)
    published = registry_dir / PLAIN / "data" / layout.MAIN_FILE_NAME
    with h5py.File(published, "r") as file:
        offset = file["episode_39/observations/pole"].id.get_chunk_info(0).byte_offset
    block_size = source.remote_file.entry.block_size
    assert offset is not None and block_size is not None
    assert offset // block_size not in cached_block_numbers(block_cache)
    data = bytearray(published.read_bytes())
    data[offset] ^= 0xFF
    published.write_bytes(bytes(data))
    with pytest.raises(CorruptedDataError, match=r"bytes \d+-\d+ \(block \d+\) from mirror"):
        source.read([39])
    source.read([0])  # the rest stays readable


def test_load_dataset_streaming_of_a_plain_dataset_points_to_open_source(
        served: tuple[str, type[RangeHandler]]) -> None:
    url, _ = served
    with pytest.raises(LayoutError, match=r"open_source\(url, streaming=True\)"):
        mm.load_dataset(url, streaming=True)


@pytest.mark.parametrize("tamper", [external_link, external_storage])
def test_a_streamed_plain_episode_pointing_outside_its_file_is_refused(
        record_cartpole: Callable[..., Any], registry_dir: Path, tmp_path: Path,
        tamper: Callable[[Any, str, Path], None], monkeypatch: pytest.MonkeyPatch) -> None:
    import h5py

    from marl_minari.errors import ForeignStorageError
    from marl_minari.storage import check

    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET)
    record_cartpole("trust/cartpole-v0", 3)
    with h5py.File(dataset_dir("trust/cartpole-v0") / "data" / layout.MAIN_FILE_NAME,
                   "r+") as file:
        tamper(file, "episode_1/rewards", secret)
    with monkeypatch.context() as hostile:  # a publisher whose tools check nothing
        hostile.setattr(check, "check_data_folder", lambda *args, **kwargs: None)
        registry.publish("trust/cartpole-v0", allow_single_agent=True)
    source = mm.open_source(f"file://{registry_dir}/trust/cartpole-v0", streaming=True)
    with pytest.raises(ForeignStorageError, match="episode_1/rewards"):
        source.read([1])
    with pytest.raises(ForeignStorageError, match="episode_1/rewards"):
        source.read([1], observations=False)
    source.read([0])


@pytest.mark.parametrize("damage", ["missing", "extra"])
def test_a_streamed_plain_episode_unlike_its_spaces_names_the_episode(
        registry_dir: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    import h5py
    import minari

    from marl_minari.storage import check

    collector = minari.DataCollector(SplitCartPole.make())
    play_random_episodes(collector, 3)
    collector.create_dataset("trust/split-v0", algorithm_name="random")
    collector.close()
    with h5py.File(dataset_dir("trust/split-v0") / "data" / layout.MAIN_FILE_NAME,
                   "r+") as file:
        group = file["episode_1/observations"]
        if damage == "missing":
            del group["pole"]
        else:
            group["elbow"] = group["pole"][()]
    with monkeypatch.context() as hostile:  # a publisher whose tools check nothing
        hostile.setattr(check, "check_data_folder", lambda *args, **kwargs: None)
        registry.publish("trust/split-v0", allow_single_agent=True)
    source = mm.open_source(f"file://{registry_dir}/trust/split-v0", streaming=True)
    with pytest.raises(CorruptedDataError, match="episode_1 does not hold the columns"):
        source.read([1])
    source.read([0, 2])
