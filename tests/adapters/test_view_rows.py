"""View rows built into given arrays (a buffer's windows) equal the rows built anew."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from marl_minari.format.spaces import leaves
from marl_minari.vaults.step_rows import StepRows
from marl_minari.vaults.view import view_rows
from marl_minari.vaults.view_plan import OBSERVATIONS, plan_from_spec


@pytest.mark.parametrize("state", ["auto", "observations"])
def test_rows_written_into_windows_equal_new_rows(record_parallel: Callable[..., Any],
                                                  state: str) -> None:
    dataset, _ = record_parallel("mpe2/simple_spread_v3", 3, max_cycles=7,
                                 dataset_id="tests/view-rows-v0")
    arrays = dataset.to_arrays()
    info_paths = {a: {p for p, _ in leaves(t)} for a, t in (arrays.agent_infos or {}).items()}
    plan = plan_from_spec(dataset.spec, info_paths, state=state)  # type: ignore[arg-type]
    expected = view_rows(plan, arrays)
    steps = int(arrays.episode_lengths.sum())
    # Windows of a larger array, holding a value no row has: every element must be written.
    holders = {path: np.full((steps + 4, *shape), 7, dtype=dtype)
               for path, (shape, dtype) in plan.keys().items()}
    windows = {path: array[2:2 + steps] for path, array in holders.items()}
    view_rows(plan, arrays, windows)
    assert windows.keys() == expected.keys()
    for path, rows in expected.items():
        assert windows[path].dtype == rows.dtype, path
        np.testing.assert_array_equal(windows[path], rows, err_msg=str(path))
        assert (holders[path][:2] == 7).all() and (holders[path][-2:] == 7).all()
    assert expected[OBSERVATIONS].shape == (steps, *plan.obs_shape)


@pytest.mark.parametrize("lengths", [[5, 5, 5], [3, 7, 1, 4], [6]])
def test_step_rows_copy_the_rows_each_action_was_taken_from(lengths: list[int]) -> None:
    """Equal episode lengths take the one-strided-copy way, mixed ones the gather: both leave
    out each episode's final row, into any destination (a strided window of interleaved
    agent columns, with a cast) and as a new array."""
    episode_lengths = np.asarray(lengths, dtype=np.int64)
    obs_rows = np.arange(sum(lengths)) + np.repeat(np.arange(len(lengths)), lengths)
    rows = StepRows(episode_lengths, obs_rows)
    values = np.arange((sum(lengths) + len(lengths)) * 6, dtype=np.float64).reshape(-1, 2, 3)
    expected = values[obs_rows].reshape(len(obs_rows), 6)
    holder = np.full((len(obs_rows), 3, 8), -1.0, dtype=np.float32)  # (S, N, O), agent 1
    rows.copy(values, holder[:, 1, 1:7])
    np.testing.assert_array_equal(holder[:, 1, 1:7], expected)
    assert (holder[:, [0, 2]] == -1).all() and (holder[:, 1, [0, 7]] == -1).all()
    contiguous = np.empty((len(obs_rows), 2, 3), dtype=np.float64)
    rows.copy(values, contiguous)
    np.testing.assert_array_equal(contiguous.reshape(len(obs_rows), 6), expected)
    np.testing.assert_array_equal(rows.take(values), values[obs_rows])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_step_rows_copied_into_strided_columns(dtype: type) -> None:
    # Two 2-step episodes: observation rows 0, 1 (2 is the final one) and 3, 4 (5 final).
    values = np.arange(18, dtype=np.float32).reshape(6, 3)
    wide = np.zeros((4, 6), dtype=dtype)
    StepRows(np.array([2, 2]), np.array([0, 1, 3, 4])).copy(values, wide[:, ::2])
    np.testing.assert_array_equal(wide[:, ::2], values[[0, 1, 3, 4]])
    assert not wide[:, 1::2].any()


@pytest.mark.parametrize("action_dtype", [np.int64, np.uint64, np.float64])
def test_actions_that_do_not_fit_or_belong_to_an_idle_agent_are_refused(
        record_parallel: Callable[..., Any], action_dtype: type) -> None:
    import dataclasses

    from marl_minari.errors import StepDataError

    dataset, _ = record_parallel("mpe2/simple_spread_v3", 2, max_cycles=5,
                                 dataset_id="tests/view-actions-v0")
    arrays = dataset.to_arrays()
    plan = plan_from_spec(dataset.spec, {})
    agent = arrays.possible_agents[1]
    actions = {a: np.asarray(v).astype(action_dtype) for a, v in arrays.actions.items()}
    rows = view_rows(plan, dataclasses.replace(arrays, actions=actions))  # they fit: kept
    np.testing.assert_array_equal(rows[("actions",)][:, 1], arrays.actions[agent])
    too_large = dict(actions, **{agent: actions[agent].copy()})
    too_large[agent][3] = 2**40 if action_dtype != np.float64 else 0.5
    with pytest.raises(StepDataError, match=f"actions of '{agent}' do not fit"):
        view_rows(plan, dataclasses.replace(arrays, actions=too_large))
    # An agent that did not act keeps action 0 in the view: any other action is refused.
    acted = arrays.acted.copy()
    acted[2, 1] = False
    with pytest.raises(StepDataError, match=f"agent '{agent}' did not act at step row 2"):
        view_rows(plan, dataclasses.replace(arrays, actions=dict(
            actions, **{agent: np.where(np.arange(len(acted)) == 2, 1, actions[agent])}),
            acted=acted))
