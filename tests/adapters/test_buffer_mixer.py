"""Offline meets online: ``make_buffer``'s buffer in Flashbax's own ``make_mixer`` with a live
``make_trajectory_buffer``, in a jitted loop whose proportions change over training, and the
offline-to-online example of docs/adapters.md run as written."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import flashbax as fbx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from adapter_helpers import write_vault
from flashbax.buffers.trajectory_buffer import TrajectoryBufferState
from marl_minari.adapters import SOURCE_KEY, make_buffer

from marl_minari.errors import ReadOnlyBufferError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "adapters.md"
SEQUENCE = 4
BATCH = 32
ONLINE = 7  # the ``source`` the online steps carry: no offline source has it


def _mixer_shares(batch: int, proportions: list[float]) -> list[int]:
    """How many rows of a batch ``make_mixer`` takes from each buffer (its own rounding)."""
    total = sum(proportions)
    sizes = [int(p / total * batch) for p in proportions]
    sizes[0] += batch - sum(sizes)
    return sizes


def test_make_buffer_state_is_the_exact_type_flashbax_mixes(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=9)
    write_vault(vaults, "og", "u", streams=2, steps=20, max_cycles=6)
    offline, offline_state = make_buffer([dataset, str(vaults / "og" / "u")],
                                         sample_batch_size=BATCH,
                                         sample_sequence_length=SEQUENCE)
    assert type(offline_state) is TrajectoryBufferState
    timestep = jax.tree.map(lambda x: x[0, 0], offline_state.experience)
    online = fbx.make_trajectory_buffer(add_batch_size=1, sample_batch_size=BATCH,
                                        sample_sequence_length=SEQUENCE, period=1,
                                        min_length_time_axis=SEQUENCE, max_size=4096)
    online_state = online.init(timestep)

    def collect(state: Any, key: jax.Array, count: jax.Array) -> Any:
        steps = jax.tree.map(lambda x: jnp.zeros((1, SEQUENCE, *x.shape), x.dtype), timestep)
        # Online rows are told apart by their source and numbered by their observations.
        steps[SOURCE_KEY] = jnp.full((1, SEQUENCE), ONLINE, jnp.int32)
        numbers = count * SEQUENCE + jnp.arange(SEQUENCE, dtype=jnp.float32)
        steps["observations"] = jnp.broadcast_to(
            -1.0 - numbers[None, :, None, None], steps["observations"].shape)
        del key
        return online.add(state, steps)

    added = 0
    for proportions in ([0.75, 0.25], [0.5, 0.5], [0.1, 0.9]):
        mixer = fbx.make_mixer([offline, online], BATCH, proportions)

        @jax.jit
        def train_step(offline_state: Any, online_state: Any, key: jax.Array,
                       count: jax.Array, mixer: Any = mixer) -> tuple[Any, Any]:
            collect_key, sample_key = jax.random.split(key)
            online_state = collect(online_state, collect_key, count)
            sample = mixer.sample([offline_state, online_state], sample_key)
            return online_state, sample.experience

        offline_rows, _ = _mixer_shares(BATCH, proportions)
        for step in range(3):
            online_state, batch = train_step(offline_state, online_state,
                                             jax.random.PRNGKey(100 * added + step),
                                             jnp.float32(added))
            added += 1
            source = np.asarray(batch[SOURCE_KEY])
            assert source.shape == (BATCH, SEQUENCE)
            # Offline rows first, as many as the proportions give; online rows after.
            assert (source[:offline_rows] < 2).all() and (source[offline_rows:] == ONLINE).all()
            # Offline sequences stay inside one source and one episode.
            assert (source[:offline_rows] == source[:offline_rows, :1]).all()
            done = np.maximum(np.asarray(batch["terminals"][:offline_rows]),
                              np.asarray(batch["truncations"][:offline_rows])).max(-1)
            assert not done[:, :-1].any()
            # Online rows are steps added so far, consecutive within a sequence.
            numbers = -1.0 - np.asarray(batch["observations"][offline_rows:, :, 0, 0])
            assert (numbers >= 0).all() and (numbers < added * SEQUENCE).all()
            assert (np.diff(numbers, axis=1) == 1).all()
        assert bool(mixer.can_sample([offline_state, online_state]))


def test_add_and_init_name_what_to_use_instead(recorded) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=5)
    offline, state = make_buffer([dataset], sample_batch_size=2, sample_sequence_length=2)
    with pytest.raises(ReadOnlyBufferError, match="make_mixer"):
        offline.add(state, state.experience)
    with pytest.raises(ReadOnlyBufferError, match="make_trajectory_buffer"):
        offline.init(state.experience)


def test_docs_offline_to_online_example_runs(tmp_path: Path, datasets_root: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """The offline-to-online block of docs/adapters.md, as written, in a fresh folder."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S)
    example = next(block for block in blocks if "make_mixer" in block)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, str(DOCS), "exec"), {"__name__": "docs_example"})  # noqa: S102
    shares = [line.split() for line in capsys.readouterr().out.splitlines() if line]
    assert [float(share[0]) for share in shares] == [0.9, 0.5, 0.1]
    for wanted, measured in ((float(a), float(b)) for a, b in shares):
        assert abs(measured - wanted) < 0.02, shares  # the mixer's integer split of 64
    assert os.path.isdir(tmp_path / "vaults")
    del datasets_root
