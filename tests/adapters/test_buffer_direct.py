"""make_buffer reads the leaves its buffer keeps as stored (the recorded global state) straight
from the file into the buffer's arrays; every other leaf goes through a chunk and its rows.

The buffer must hold exactly the view's rows either way: the direct read writes only each
episode's step rows (the final observation row left out), whether the offset index places the
leaf or HDF5 reads it, and a destination that cannot hold the stored values as they are is
left to the rows.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from adapter_helpers import synthetic_dataset
from marl_minari.adapters import make_buffer

import marl_minari as mm
from marl_minari.format import layout
from marl_minari.format.spaces import leaves
from marl_minari.sources import open_source
from marl_minari.storage.reader_state import ReadScratch
from marl_minari.vaults.step_rows import StepRows
from marl_minari.vaults.structure import leaf_name
from marl_minari.vaults.view import view_rows
from marl_minari.vaults.view_plan import plan_from_spec

STATE_LEAF = "infos/marl/state"
EPISODES, STEPS, STATE_SIZE = 6, 7, 12


@pytest.fixture(params=["indexed", "no index"])
def dataset(request: pytest.FixtureRequest) -> mm.MultiAgentDataset:
    """Six 7-step episodes with a 12-float recorded state, read through the offset index or,
    without one, through HDF5."""
    written = synthetic_dataset("direct/state-v0", EPISODES, steps=STEPS, obs_dim=4)
    if request.param == "no index":
        (written.data_path / layout.INDEX_FILE_NAME).unlink()
        written = mm.load_dataset("direct/state-v0")
    return written


def _expected_state(dataset: mm.MultiAgentDataset) -> np.ndarray:
    arrays = dataset.to_arrays()
    assert arrays.state is not None
    return StepRows(arrays.episode_lengths, arrays.obs_rows).take(arrays.state)


def test_a_pass_writes_the_step_rows_into_the_callers_array(dataset) -> None:
    target = np.full((EPISODES * STEPS, STATE_SIZE), np.nan, dtype=np.float32)
    scratch = ReadScratch({STATE_LEAF: target})
    # 10-step chunks: every chunk's rows go after the one before's, across episodes.
    for arrays in open_source(dataset).chunks(10, scratch=scratch):
        assert scratch.written == {STATE_LEAF}
        assert arrays.state is not None and len(arrays.state) == arrays.episode_lengths.sum()
    np.testing.assert_array_equal(target, _expected_state(dataset))


def test_a_destination_of_another_dtype_is_left_to_the_rows(dataset) -> None:
    target = np.full((EPISODES * STEPS, STATE_SIZE), np.nan, dtype=np.float64)
    scratch = ReadScratch({STATE_LEAF: target})
    for arrays in open_source(dataset).chunks(10, scratch=scratch):
        assert scratch.written == frozenset()
        assert arrays.state is not None  # every observation row, as without a destination
        assert len(arrays.state) == arrays.episode_lengths.sum() + len(arrays.episode_lengths)
    assert np.isnan(target).all()


def test_a_pass_past_the_callers_rows_is_refused(dataset) -> None:
    scratch = ReadScratch({STATE_LEAF: np.zeros((STEPS, STATE_SIZE), dtype=np.float32)})
    with pytest.raises(ValueError, match="more steps than the 7 rows"):
        list(open_source(dataset).chunks(2 * STEPS, scratch=scratch))


@pytest.mark.parametrize("chunk_steps", [None, 10])
def test_the_buffer_holds_the_view_rows(dataset, chunk_steps: int | None) -> None:
    _, state = make_buffer([dataset], sample_batch_size=2, sample_sequence_length=2,
                           chunk_steps=chunk_steps)
    arrays = dataset.to_arrays()
    plan = plan_from_spec(dataset.spec, {agent: {path for path, _ in leaves(tree)}
                                         for agent, tree in (arrays.agent_infos or {}).items()})
    expected = view_rows(plan, arrays)
    got = {leaf_name(tuple(getattr(k, "key", k) for k in path))[:-1]: np.asarray(value)[0]
           for path, value in jax.tree_util.tree_leaves_with_path(state.experience)}
    for key, rows in expected.items():
        np.testing.assert_array_equal(got[leaf_name(key)[:-1]], rows, err_msg=str(key))
    np.testing.assert_array_equal(got["infos.state"], _expected_state(dataset))

