"""Spaces as Minari's HDF5 format stores them: checks, fill values, stacking, leaf paths."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from marl_strategies import assert_tree_equal, nested_spaces, sample
from minari.dataset.minari_storage import is_image_space as minari_is_image_space

from marl_minari.errors import StepDataError, UnsupportedSpaceError
from marl_minari.format.spaces import (
    build_tree,
    cast_leaf,
    check_storable,
    fill_rows,
    is_image_space,
    leaf_dtype,
    leaf_spaces,
    leaves,
    map_tree,
    stack,
    tree_rows,
)

PROPERTY = settings(max_examples=25, deadline=None)


@pytest.mark.parametrize(
    "space",
    [
        spaces.Sequence(spaces.Discrete(3)),
        spaces.Graph(node_space=spaces.Box(0, 1, (2,)), edge_space=None),
        spaces.OneOf([spaces.Discrete(2), spaces.Discrete(3)]),
    ],
)
def test_spaces_minari_cannot_store_are_refused_naming_where(space: spaces.Space) -> None:
    with pytest.raises(UnsupportedSpaceError, match=rf"observation_space\('a'\) is a "
                                                    rf"{type(space).__name__}"):
        check_storable(space, "observation_space('a')")


def test_unsupported_space_nested_in_dict_and_tuple_names_its_path() -> None:
    space = spaces.Dict({"ok": spaces.Discrete(2),
                         "inner": spaces.Tuple((spaces.Discrete(2), spaces.Sequence(
                             spaces.Discrete(2))))})
    with pytest.raises(UnsupportedSpaceError, match=r"obs\['inner'\]\[1\] is a Sequence"):
        check_storable(space, "obs")


@pytest.mark.parametrize("key", ["a/b", "", ".", ".."])
def test_dict_keys_that_cannot_name_an_hdf5_group_are_refused(key: str) -> None:
    with pytest.raises(UnsupportedSpaceError, match="cannot name an HDF5 group"):
        check_storable(spaces.Dict({key: spaces.Discrete(2)}), "obs")


@PROPERTY
@given(nested_spaces)
def test_every_generated_space_is_storable(space: spaces.Space) -> None:
    check_storable(space, "x")  # raises if not


def test_fill_rows_are_zeros_false_and_empty_strings() -> None:
    space = spaces.Dict({
        "box": spaces.Box(-1, 1, (2,), dtype=np.float32),
        "disc": spaces.Discrete(4, start=2),
        "md": spaces.MultiDiscrete([2, 3]),
        "mb": spaces.MultiBinary(3),
        "text": spaces.Text(5),
        "tup": spaces.Tuple((spaces.Discrete(2), spaces.Box(0, 1, (1,), dtype=bool))),
    })
    filled = fill_rows(space, 3)
    assert_tree_equal(filled, {
        "box": np.zeros((3, 2), np.float32),
        "disc": np.zeros(3, np.int64),
        "md": np.zeros((3, 2), np.int64),
        "mb": np.zeros((3, 3), np.int8),
        "text": np.array(["", "", ""], dtype=object),
        "tup": (np.zeros(3, np.int64), np.zeros((3, 1), bool)),
    })


def test_stack_fills_missing_rows_and_casts_to_the_space_dtype() -> None:
    space = spaces.Dict({"pos": spaces.Box(-5, 5, (2,), dtype=np.float32),
                         "id": spaces.Discrete(3)})
    out = stack(space, [{"pos": [1.0, 2.0], "id": 2}, None, {"pos": (3, 4), "id": np.int8(1)}],
                "obs")
    assert_tree_equal(out, {"pos": np.array([[1, 2], [0, 0], [3, 4]], np.float32),
                            "id": np.array([2, 0, 1], np.int64)})


def test_stack_names_the_row_with_the_wrong_shape() -> None:
    space = spaces.Box(0, 1, (2,), dtype=np.float32)
    with pytest.raises(StepDataError, match=r"obs of 'a', row 0: shape \(3,\)"):
        stack(space, [np.zeros(3), np.zeros(3)], "obs of 'a'")
    with pytest.raises(StepDataError, match=r"obs of 'a': values do not stack"):
        stack(space, [np.zeros(2), np.zeros(3)], "obs of 'a'")


def test_stack_stores_rows_as_the_space_says_and_refuses_values_it_cannot_hold() -> None:
    """A recorder stacks what the env hands out as the space's dtype: rounded to a float
    dtype, otherwise unchanged or refused (2.5 for a Discrete space was stored as 2)."""
    rows = stack(spaces.Box(-1, 1, (2,), dtype=np.float32), [np.full(2, 0.1), None], "obs")
    assert rows.dtype == np.float32
    np.testing.assert_array_equal(rows, [[np.float32(0.1)] * 2, [0, 0]])
    assert stack(spaces.Discrete(3), [2.0, 1.0], "act").dtype == np.int64
    with pytest.raises(StepDataError, match=r"act, row 1: float64 value 2\.5 does not fit the "
                                            r"space's int64 \(it would be stored as 2\)"):
        stack(spaces.Discrete(3), [1.0, 2.5], "act")


@pytest.mark.parametrize(("values", "dtype", "became"), [
    (np.array([1, 2**63 + 1], dtype=np.uint64), np.int64, "-9223372036854775807"),
    (np.array([1, -1], dtype=np.int64), np.uint64, "18446744073709551615"),
    (np.array([1, -1], dtype=np.int8), np.uint8, "255"),
    (np.array([1, 300], dtype=np.int64), np.uint8, "44"),
], ids=["uint64-to-int64", "int64-to-uint64", "int8-to-uint8", "int64-to-uint8"])
def test_an_integer_that_wraps_is_refused_though_it_casts_back(
        values: np.ndarray, dtype: type, became: str) -> None:
    """Between integer dtypes of one size a wrapped value casts back unchanged (-1 as
    uint64 and back is -1): the rule compares with the dtype's range too."""
    with pytest.raises(StepDataError, match=rf"act, row 1: .* \(it would be stored as "
                                            rf"{became}\)"):
        cast_leaf(values, np.dtype(dtype), "act")
    assert cast_leaf(values[:1], np.dtype(dtype), "act").dtype == dtype


def test_stack_of_no_rows_has_the_space_s_row_shape() -> None:
    empty = stack(spaces.Box(-1, 1, (2, 3), dtype=np.float32), [], "act")
    assert empty.shape == (0, 2, 3) and empty.dtype == np.float32


def test_stack_names_a_missing_dict_key() -> None:
    space = spaces.Dict({"x": spaces.Discrete(2), "y": spaces.Discrete(2)})
    with pytest.raises(StepDataError, match=r"obs, row 1: value has no entry 'y'"):
        stack(space, [{"x": 0, "y": 1}, {"x": 1}], "obs")


def test_stack_refuses_values_that_do_not_convert() -> None:
    with pytest.raises(StepDataError, match="do not stack"):
        stack(spaces.Box(0, 1, (2,)), [np.zeros(2), "not a number"], "obs")


@PROPERTY
@given(nested_spaces, st.integers(1, 4), st.integers(0, 2**31 - 1))
def test_leaves_and_build_tree_are_inverse_and_follow_leaf_spaces(space: spaces.Space,
                                                                  rows: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = [sample(space, rng) if rng.random() < 0.7 else None for _ in range(rows)]
    tree = stack(space, values, "x")
    assert tree_rows(tree) == rows
    flat = dict(leaves(tree))
    assert list(flat) == [path for path, _ in leaf_spaces(space)]
    for path, leaf in leaf_spaces(space):
        assert flat[path].dtype == leaf_dtype(leaf)
    assert_tree_equal(build_tree(space, flat), tree)
    for k, value in enumerate(values):
        row = map_tree(lambda a, k=k: a[k], tree)
        expected = map_tree(lambda a: a[0], fill_rows(space, 1)) if value is None else value
        assert space.contains(row) or value is None
        _assert_row_equals(row, expected)


def _assert_row_equals(actual: object, expected: object) -> None:
    if isinstance(expected, dict):
        for key in expected:
            _assert_row_equals(actual[key], expected[key])  # type: ignore[index]
    elif isinstance(expected, tuple):
        for a, e in zip(actual, expected, strict=True):  # type: ignore[call-overload]
            _assert_row_equals(a, e)
    elif isinstance(expected, str):
        assert actual == expected
    else:
        np.testing.assert_array_equal(actual, expected)


@PROPERTY
@given(st.lists(st.integers(1, 70), min_size=1, max_size=4),
       st.sampled_from([np.uint8, np.float32, np.int64]), st.booleans())
def test_image_rule_matches_minari(shape: list[int], dtype: type, full_range: bool) -> None:
    space = spaces.Box(0, 255 if full_range else 200, shape=tuple(shape), dtype=dtype)
    assert is_image_space(space) == minari_is_image_space(space)
