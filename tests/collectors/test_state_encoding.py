"""The global state of image envs is stored compactly, and plain Minari reads every encoding.

pistonball's state is a 560x880x3 render: JPEG by default (lossy, as Minari's image
observations), gzip/lzf (HDF5's built-in lossless filters) or raw when asked.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import h5py
import minari
import numpy as np
import pytest
from PIL import Image

import marl_minari as mm
from marl_minari.errors import InvalidOptionError
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir

_ids = itertools.count()
STATE = f"infos/{layout.INFOS_GROUP}/{layout.STATE}"


def _record(encoding: str | None, jpeg: bool = True) -> tuple[str, list[np.ndarray]]:
    """Two short pistonball episodes; returns the id and the states the env handed out."""
    env = mm.make_env("butterfly/pistonball_v6", n_pistons=3, max_cycles=3)
    collector = mm.ParallelDataCollector(env, state_encoding=encoding, jpeg_encoding=jpeg)
    states = []
    for seed in range(2):
        collector.reset(seed=seed)
        states.append(collector.state().copy())
        while collector.agents:
            collector.step({a: collector.action_space(a).sample() for a in collector.agents})
            states.append(collector.state().copy())
    dataset_id = f"tests/state-v{next(_ids)}"
    collector.create_dataset(dataset_id, algorithm_name="random", author="tests",
                             author_email="t@example.com", code_permalink="https://x.org",
                             description="state encodings")
    collector.close()
    return dataset_id, states


def _stored(dataset_id: str) -> h5py.File:
    return h5py.File(dataset_dir(dataset_id) / "data" / layout.MAIN_FILE_NAME, "r")


@pytest.mark.parametrize("encoding", ["gzip", "lzf", "raw"])
def test_lossless_encodings_read_back_exactly_in_ours_and_plain_minari(
        encoding: str, datasets_root: Path) -> None:
    dataset_id, states = _record(encoding)
    dataset = mm.load_dataset(dataset_id)
    assert dataset.metadata[layout.METADATA_KEY]["state_encoding"] == encoding
    ours = np.concatenate([dataset.episode(i).state for i in range(2)])
    np.testing.assert_array_equal(ours, np.stack(states))
    plain = list(minari.load_dataset(dataset_id).iterate_episodes())
    np.testing.assert_array_equal(
        np.concatenate([e.infos["marl"]["state"] for e in plain]), np.stack(states))
    np.testing.assert_array_equal(dataset.to_arrays().state, np.stack(states))
    with _stored(dataset_id) as file:
        assert file[f"episode_0/{STATE}"].compression == (None if encoding == "raw"
                                                          else encoding)


def test_default_state_of_an_image_env_is_jpeg(datasets_root: Path) -> None:
    dataset_id, states = _record(None)
    dataset = mm.load_dataset(dataset_id)
    assert dataset.spec.state_encoding == "jpeg"
    ours = np.concatenate([dataset.episode(i).state for i in range(2)])
    assert ours.shape == np.stack(states).shape and ours.dtype == np.uint8
    assert np.abs(ours.astype(int) - np.stack(states)).mean() < 6  # lossy, but close
    np.testing.assert_array_equal(dataset.to_arrays().state, ours)
    # Plain Minari hands out the JPEG bytes of infos (it decodes observations only).
    plain = next(minari.load_dataset(dataset_id).iterate_episodes())
    first = plain.infos["marl"]["state"][0]
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(first.tobytes()))),
                                  ours[0])
    with _stored(dataset_id) as file:
        assert file[f"episode_0/{STATE}"].size < 0.2 * dataset.episode(0).state.size


def test_no_jpeg_encoding_keeps_the_state_raw(datasets_root: Path) -> None:
    dataset_id, states = _record(None, jpeg=False)
    dataset = mm.load_dataset(dataset_id)
    assert dataset.spec.state_encoding == "raw"
    ours = np.concatenate([dataset.episode(i).state for i in range(2)])
    np.testing.assert_array_equal(ours, np.stack(states))


def test_jpeg_is_refused_for_a_state_that_is_no_image(datasets_root: Path) -> None:
    env = mm.make_env("mpe2/simple_spread_v3", max_cycles=3)
    with pytest.raises(InvalidOptionError, match="image-like"):
        mm.ParallelDataCollector(env, state_encoding="jpeg")
    with pytest.raises(InvalidOptionError, match="one of raw, jpeg, gzip, lzf"):
        mm.ParallelDataCollector(env, state_encoding="zstd")
