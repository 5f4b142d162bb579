"""make_buffer: datasets and vaults combined into one device-resident Flashbax buffer."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import pytest
from adapter_helpers import write_vault
from flashbax.buffers.trajectory_buffer import TrajectoryBuffer, TrajectoryBufferState
from marl_minari.adapters import SOURCE_KEY, from_vault, make_buffer, sampling_table, to_vault
from scipy.stats import chisquare

from marl_minari.errors import IncompatibleSourcesError, InvalidOptionError


def test_dataset_and_vaults_sampled_under_jit(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=3, max_cycles=9)
    write_vault(vaults, "og", "u", streams=2, steps=20, max_cycles=6)
    to_vault(dataset, rel_dir=vaults, vault_name="ours", vault_uid="u")
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


def _episode_pieces(state: TrajectoryBufferState) -> list[tuple[int, int, int]]:
    """``(source, first, length)`` of every episode in the buffer, found from the stored
    ``terminals``/``truncations`` and ``source`` columns alone (a source's last piece may be
    an unfinished episode)."""
    experience = state.experience
    done = np.maximum(np.asarray(experience["terminals"][0]),
                      np.asarray(experience["truncations"][0])).max(-1) > 0
    source = np.asarray(experience[SOURCE_KEY][0])
    pieces, first = [], 0
    for t in range(len(source)):
        if done[t] or t + 1 == len(source) or source[t + 1] != source[t]:
            pieces.append((int(source[t]), first, t + 1 - first))
            first = t + 1
    return pieces


def _valid_starts(state: TrajectoryBufferState, length: int, period: int
                  ) -> dict[int, list[int]]:
    """Per source: every start of ``length`` steps inside one episode, every ``period`` steps
    from the episode's first step."""
    out: dict[int, list[int]] = {}
    for source, first, size in _episode_pieces(state):
        out.setdefault(source, []).extend(range(first, first + size - length + 1, period))
    return out


def _sampled_starts(buffer: TrajectoryBuffer, state: TrajectoryBufferState, draws: int
                    ) -> np.ndarray:
    """Start position of ``draws`` sampled sequences, found by their first observation."""
    observations = np.asarray(state.experience["observations"][0])
    position = {row.tobytes(): t for t, row in enumerate(observations)}
    assert len(position) == len(observations), "observations must tell the steps apart"
    sample = jax.jit(buffer.sample)
    starts = []
    for key in jax.random.split(jax.random.PRNGKey(7), draws // 500):
        first = np.asarray(sample(state, key).experience["observations"][:, 0])
        starts.extend(position[row.tobytes()] for row in first)
    return np.asarray(starts)


def _assert_uniform(counts: np.ndarray, expected: np.ndarray, what: str) -> None:
    """Chi-square goodness of fit; seeded draws, so a pass or fail is reproducible."""
    result = chisquare(counts, expected * counts.sum() / expected.sum())
    assert result.pvalue > 1e-3, (what, result, counts)


def test_sampling_distribution(recorded, vaults: Path) -> None:
    """Every valid start equally likely by default; ``weights`` pick the source, then a start
    uniformly inside it; ``period`` counts from each episode's first step."""
    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=7)
    write_vault(vaults, "og", "u", steps=17, max_cycles=5, seed=100)
    sources = [dataset, str(vaults / "og" / "u")]

    buffer, state = make_buffer(sources, sample_batch_size=500, sample_sequence_length=3)
    valid = _valid_starts(state, 3, 1)
    every = sorted(valid[0] + valid[1])
    assert np.array_equal(np.asarray(sampling_table(buffer).starts), every)
    drawn = _sampled_starts(buffer, state, 40_000)
    assert set(drawn.tolist()) == set(every)  # every valid start, nothing across an episode
    counts = np.asarray([np.sum(drawn == start) for start in every])
    _assert_uniform(counts, np.ones(len(every)), "every valid sequence equally likely")

    buffer, state = make_buffer(sources, sample_batch_size=500, sample_sequence_length=2,
                                weights=[1.0, 3.0])
    valid = _valid_starts(state, 2, 1)
    drawn = _sampled_starts(buffer, state, 40_000)
    from_vault_source = np.isin(drawn, valid[1])
    _assert_uniform(np.asarray([(~from_vault_source).sum(), from_vault_source.sum()]),
                    np.asarray([1.0, 3.0]), "source shares follow the weights")
    for source, starts in valid.items():
        counts = np.asarray([np.sum(drawn == start) for start in starts])
        _assert_uniform(counts, np.ones(len(starts)), f"uniform inside source {source}")

    for period in (2, 3):  # sampling draws from the start table, checked above
        periodic, state = make_buffer(sources, sample_batch_size=500,
                                      sample_sequence_length=2, period=period)
        valid = _valid_starts(state, 2, period)
        every = sorted(valid[0] + valid[1])
        table = sampling_table(periodic)
        assert np.array_equal(np.asarray(table.starts), every), period
        assert np.array_equal(np.asarray(table.source_offsets),
                              [0, len(valid[0]), len(every)]), period

    zero, only_vault = make_buffer(sources, sample_batch_size=32, sample_sequence_length=3,
                                   weights=[0.0, 1.0])
    batch = jax.jit(zero.sample)(only_vault, jax.random.PRNGKey(1)).experience
    assert np.all(np.asarray(batch[SOURCE_KEY]) == 1)


def test_boundaries_and_bad_weights(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=5)
    write_vault(vaults, "og", "u", steps=12, max_cycles=5)
    path = str(vaults / "og" / "u")
    inside, _ = make_buffer([dataset, path], sample_batch_size=8, sample_sequence_length=3)
    across, _ = make_buffer([dataset, path], sample_batch_size=8, sample_sequence_length=3,
                            respect_episode_boundaries=False)
    state, crossing = sampling_table(inside), sampling_table(across)
    # Without episode boundaries a sequence may cross episodes, never sources.
    source_lengths = [dataset.total_steps, 12]
    assert np.array_equal(np.asarray(crossing.starts), list(range(source_lengths[0] - 2)) + list(
        range(source_lengths[0], source_lengths[0] + source_lengths[1] - 2)))
    assert crossing.starts.shape[0] > state.starts.shape[0]
    with pytest.raises(ValueError, match="no sequence of 6 steps"):
        make_buffer([dataset, path], sample_batch_size=8, sample_sequence_length=6,
                    weights=[1.0, 1.0])
    with pytest.raises(ValueError, match="weights must be 2"):
        make_buffer([dataset, path], sample_batch_size=8, sample_sequence_length=2,
                    weights=[1.0])
    # Each was accepted and failed later inside JAX or numpy (4.5 at the first sample).
    for sizes in ({"sample_batch_size": 4.5}, {"sample_sequence_length": 2.0},
                  {"period": True}):
        with pytest.raises(InvalidOptionError, match="must be integers >= 1"):
            make_buffer([dataset, path], **{"sample_batch_size": 8,
                                            "sample_sequence_length": 2, **sizes})
    with pytest.raises(InvalidOptionError, match=r"weights must be 2 .* got \['a', 1.0\]"):
        make_buffer([dataset, path], sample_batch_size=8, sample_sequence_length=2,
                    weights=["a", 1.0])


def test_mismatched_sources_are_rejected(recorded, vaults: Path) -> None:
    spread = recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=4)
    speaker = recorded("mpe2/simple_speaker_listener_v4", episodes=1, max_cycles=4,
                       dataset_id="tests/speaker-v0")
    with pytest.raises(IncompatibleSourcesError,
                       match=r"source 1 \(dataset 'tests/speaker-v0'\).*different agents"):
        make_buffer([spread, speaker], sample_batch_size=2, sample_sequence_length=2)
    write_vault(vaults, "og", "u", steps=8, max_cycles=4)
    renamed = from_vault(rel_dir=vaults, vault_name="og", vault_uid="u",
                         dataset_id="tests/renamed-v0", agents=["x", "y", "z"])
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


def test_one_source_draws_every_valid_start_uniformly(recorded) -> None:
    """A single source skips the draw of a source: its starts are still every valid one,
    equally likely, and none crosses an episode boundary."""
    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=7)
    buffer, state = make_buffer([dataset], sample_batch_size=500, sample_sequence_length=3)
    every = _valid_starts(state, 3, 1)[0]
    assert np.array_equal(np.asarray(sampling_table(buffer).starts), every)
    drawn = _sampled_starts(buffer, state, 20_000)
    assert set(drawn.tolist()) == set(every)
    counts = np.asarray([np.sum(drawn == start) for start in every])
    _assert_uniform(counts, np.ones(len(every)), "one source: every valid start equally likely")
