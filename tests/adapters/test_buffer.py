"""make_buffer: datasets and vaults combined into one device-resident Flashbax buffer."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from adapter_helpers import write_vault
from flashbax.buffers.trajectory_buffer import TrajectoryBuffer, TrajectoryBufferState
from marl_minari.adapters import SOURCE_KEY, from_vault, make_buffer, to_vault

from marl_minari.errors import IncompatibleSourcesError


def test_dataset_and_vaults_sampled_under_jit(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=3, max_cycles=9)
    write_vault(vaults, "og", "u", streams=2, steps=20, max_cycles=6)
    to_vault(dataset, vaults, "ours", "u")
    sources = [dataset, str(vaults / "og" / "u"), str(vaults / "ours" / "u")]
    buffer, state = make_buffer(sources, sample_batch_size=64, sample_sequence_length=4)
    assert isinstance(buffer, TrajectoryBuffer)
    assert isinstance(state, TrajectoryBufferState)
    total = dataset.total_steps + 2 * 20 + dataset.total_steps
    assert state.experience["observations"].shape == (1, total, 3, 18)
    assert state.experience["observations"].devices() == {jax.devices()[0]}
    source = np.asarray(state.experience[SOURCE_KEY][0])
    np.testing.assert_array_equal(np.bincount(source), [dataset.total_steps, 40,
                                                        dataset.total_steps])

    sample = jax.jit(buffer.sample)
    batch = sample(state, jax.random.PRNGKey(0)).experience
    assert batch["observations"].shape == (64, 4, 3, 18)
    assert batch["actions"].shape == (64, 4, 3) and batch["actions"].dtype == np.int32
    for key in ("rewards", "terminals", "truncations"):
        assert batch[key].shape == (64, 4, 3)
    assert batch["infos"]["legals"].shape == (64, 4, 3, 5)
    assert batch["infos"]["state"].shape == (64, 4, 54)
    assert batch[SOURCE_KEY].shape == (64, 4)
    done = np.maximum(np.asarray(batch["terminals"]), np.asarray(batch["truncations"])).max(-1)
    assert not done[:, :-1].any()  # never across an episode boundary
    sources_seen = np.asarray(batch[SOURCE_KEY])
    assert (sources_seen == sources_seen[:, :1]).all()
    assert set(np.unique(sources_seen)) == {0, 1, 2}
    assert bool(buffer.can_sample(state))
    with pytest.raises(NotImplementedError, match="read-only"):
        buffer.add(state, batch)


def test_weights_and_boundaries(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=5)
    write_vault(vaults, "og", "u", steps=12, max_cycles=5)
    path = str(vaults / "og" / "u")
    buffer, state = make_buffer([dataset, path], sample_batch_size=32,
                                sample_sequence_length=3, weights=[0.0, 1.0])
    batch = jax.jit(buffer.sample)(state, jax.random.PRNGKey(1)).experience
    assert np.all(np.asarray(batch[SOURCE_KEY]) == 1)
    _, crossing = make_buffer([dataset, path], sample_batch_size=8, sample_sequence_length=3,
                              respect_episode_boundaries=False)
    assert crossing.starts.shape[0] > state.starts.shape[0]
    _, sparse = make_buffer([dataset], sample_batch_size=8, sample_sequence_length=3,
                            period=2)
    assert np.all(np.diff(np.asarray(sparse.starts)) >= 1)
    assert sparse.starts.shape[0] < state.source_offsets[1]
    with pytest.raises(ValueError, match="no sequence of 6 steps"):
        make_buffer([dataset, path], sample_batch_size=8, sample_sequence_length=6,
                    weights=[1.0, 1.0])
    with pytest.raises(ValueError, match="weights must be 2"):
        make_buffer([dataset, path], sample_batch_size=8, sample_sequence_length=2,
                    weights=[1.0])


def test_mismatched_sources_are_rejected(recorded, vaults: Path) -> None:
    spread = recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=4)
    speaker = recorded("mpe2/simple_speaker_listener_v4", episodes=1, max_cycles=4,
                       dataset_id="tests/speaker-v0")
    with pytest.raises(IncompatibleSourcesError,
                       match=r"source 1 \(dataset 'tests/speaker-v0'\).*different agents"):
        make_buffer([spread, speaker], sample_batch_size=2, sample_sequence_length=2)
    write_vault(vaults, "og", "u", steps=8, max_cycles=4)
    renamed = from_vault(vaults, "og", "u", "tests/renamed-v0", agents=["x", "y", "z"])
    with pytest.raises(IncompatibleSourcesError, match="different agents"):
        make_buffer([spread, renamed], sample_batch_size=2, sample_sequence_length=2)
    write_vault(vaults, "smac", "u", kind="smac", steps=8)
    with pytest.raises(IncompatibleSourcesError, match=r"\['episode_return'\] is in only one"):
        make_buffer([str(vaults / "og" / "u"), str(vaults / "smac" / "u")],
                    sample_batch_size=2, sample_sequence_length=2)
    write_vault(vaults, "smac", "plain", kind="smac", steps=8, extra_key=False)
    with pytest.raises(IncompatibleSourcesError,
                       match=r"differ in 'observations': per-step shape \(3, 6\) float32 "
                             r"vs \(3, 18\) float32"):
        make_buffer([spread, str(vaults / "smac" / "plain")], sample_batch_size=2,
                    sample_sequence_length=2)
