"""Gymnasium spaces as Minari's HDF5 format stores them: checks, fill values, stacking.

A *tree* is what a space's samples look like once stacked over time: a numpy array for a leaf
space, a ``dict`` for :class:`~gymnasium.spaces.Dict`, a ``tuple`` for
:class:`~gymnasium.spaces.Tuple`. Text leaves are object arrays of ``str``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.errors import LayoutError, StepDataError, UnsupportedSpaceError

Tree = Any
"""A numpy array, or a dict / tuple of trees."""

_LEAF_SPACES = (spaces.Box, spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary, spaces.Text)


def check_storable(space: spaces.Space, where: str) -> None:
    """Raise :class:`UnsupportedSpaceError` if Minari's HDF5 format cannot store ``space``.

    Args:
        space: the space to check (nested Dict/Tuple spaces are checked recursively).
        where: what the space belongs to, for the message (e.g. ``"observation_space('a')"``).
    """
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            if not isinstance(key, str) or "/" in key or key in ("", ".", ".."):
                raise UnsupportedSpaceError(
                    f"{where}: Dict key {key!r} cannot name an HDF5 group; use non-empty string "
                    "keys without '/'."
                )
            check_storable(sub, f"{where}[{key!r}]")
    elif isinstance(space, spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            check_storable(sub, f"{where}[{i}]")
    elif not isinstance(space, _LEAF_SPACES):
        raise UnsupportedSpaceError(
            f"{where} is a {type(space).__name__}, which Minari cannot store. Supported spaces: "
            "Box, Discrete, MultiDiscrete, MultiBinary, Text, and Dict/Tuple of them. Wrap the "
            "environment to expose one of these (e.g. pad a Sequence into a Box)."
        )


def leaf_dtype(space: spaces.Space) -> np.dtype:
    """The numpy dtype a leaf space is stored with (Discrete as int64, like Minari)."""
    if isinstance(space, spaces.Discrete):
        return np.dtype(np.int64)
    if isinstance(space, spaces.Text):
        return np.dtype(object)
    assert space.dtype is not None
    return np.dtype(space.dtype)


def leaf_shape(space: spaces.Space) -> tuple[int, ...]:
    """The per-row shape of a leaf space's samples."""
    if isinstance(space, (spaces.Discrete, spaces.Text)):
        return ()
    assert space.shape is not None
    return tuple(space.shape)


def is_image_space(space: spaces.Space) -> bool:
    """Minari's rule for spaces it JPEG-encodes when ``jpeg_encoding`` is on."""
    return (
        isinstance(space, spaces.Box)
        and len(space.shape) in (2, 3)
        and space.shape[0] >= 32
        and space.shape[1] >= 32
        and space.dtype == np.uint8
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 255))
    )


def fill_rows(space: spaces.Space, rows: int) -> Tree:
    """A tree of ``rows`` fill-value rows (zeros, ``False`` or ``""``) for ``space``."""
    if isinstance(space, spaces.Dict):
        return {key: fill_rows(sub, rows) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(fill_rows(sub, rows) for sub in space.spaces)
    if isinstance(space, spaces.Text):
        return np.full((rows,), "", dtype=object)
    return np.zeros((rows, *leaf_shape(space)), dtype=leaf_dtype(space))


def stack(space: spaces.Space, values: Sequence[Any], where: str) -> Tree:
    """Stack per-row samples of ``space`` into a tree; ``None`` rows get the fill value.

    Args:
        space: the space every non-``None`` value belongs to.
        values: one sample (or ``None``) per row.
        where: what is being stacked, for error messages.

    Raises:
        StepDataError: a value does not fit the space's structure or shape; the message names
            the row.
    """
    if isinstance(space, spaces.Dict):
        out = {}
        for key, sub in space.spaces.items():
            out[key] = stack(sub, [_child(v, key, where, i) for i, v in enumerate(values)],
                             f"{where}[{key!r}]")
        return out
    if isinstance(space, spaces.Tuple):
        return tuple(
            stack(sub, [_child(v, j, where, i) for i, v in enumerate(values)], f"{where}[{j}]")
            for j, sub in enumerate(space.spaces)
        )
    return _stack_leaf(space, values, where)


def _child(value: Any, key: Any, where: str, row: int) -> Any:
    if value is None:
        return None
    try:
        return value[key]
    except (KeyError, IndexError, TypeError) as exc:
        raise StepDataError(f"{where}, row {row}: value has no entry {key!r}: {value!r}") from exc


def _stack_leaf(space: spaces.Space, values: Sequence[Any], where: str) -> np.ndarray:
    dtype = leaf_dtype(space)
    if isinstance(space, spaces.Text):
        return np.array(["" if v is None else str(v) for v in values], dtype=object)
    shape = leaf_shape(space)
    if not len(values):
        return np.zeros((0, *shape), dtype=dtype)
    if any(v is None for v in values):
        fill = np.zeros(shape, dtype=dtype)
        values = [fill if v is None else v for v in values]
    try:
        out = np.asarray(values)
    except (ValueError, TypeError) as exc:
        raise StepDataError(f"{where}: values do not stack as {shape} {dtype}: {exc}") from exc
    if out.shape[1:] != shape:
        check_row_shapes(values, shape, where)
        raise StepDataError(f"{where}: values stack as {out.shape[1:]}, not the space's {shape}")
    return cast_leaf(out, dtype, where)


def cast_leaf(values: np.ndarray, dtype: np.dtype, where: str) -> np.ndarray:
    """``values`` as ``dtype``, the dtype their leaf space stores (:func:`leaf_dtype`).

    HDF5 stores whatever dtype it is given, and Minari reads back what was stored, so a leaf
    is cast before it is written, by :func:`lossless_cast`'s rule: a value may be rounded to
    the nearest value of a float dtype (a float32 space holds float32 values) and nothing
    else, so an action of 2.5 for a ``Discrete`` space, 300 for a ``uint8`` one or a NaN for
    an integer one is refused rather than stored as another value.

    Raises:
        StepDataError: a value the dtype cannot hold; the message names ``where``, the first
            such row and the value it would have become.
    """
    if values.dtype == dtype:
        return values
    if values.dtype.kind not in "biufc":
        raise StepDataError(f"{where}: {values.dtype} values cannot be stored as the space's "
                            f"{dtype}; pass numbers")
    out, first = lossless_cast(values, dtype)
    if first is None:
        return out
    raise StepDataError(
        f"{where}, row {first[0]}: {values.dtype} value {values[first].item()!r} does not fit "
        f"the space's {dtype} (it would be stored as {out[first].item()!r}); pass values the "
        "space holds, or declare the space with the dtype the data has")


def cast_stored(stored: np.ndarray, dtype: np.dtype, where: str, *,
                typed_by: str = "space") -> np.ndarray:
    """A leaf read as it is stored, in another dtype than its space's (a dataset another
    writer made), as ``dtype``, by the writers' rule (:func:`lossless_cast`); ``typed_by``
    names what gives the leaf ``dtype`` in messages (``"layout"`` for its own columns).

    Raises:
        LayoutError: a value the space's dtype cannot hold, or values that are not numbers;
            the message names ``where``, the first such row and the value it would become.
    """
    if stored.dtype.kind not in "biufc":
        raise LayoutError(
            f"{where} stores {stored.dtype} values where its {typed_by} holds {dtype} numbers; "
            "read what it stores with minari.load_dataset, or write the dataset again with "
            "spaces that describe its values")
    out, first = lossless_cast(stored, dtype)
    if first is None:
        return out
    fix = ("spaces of the data's dtype" if typed_by == "space"
           else "values of the layout's types")
    raise LayoutError(
        f"{where}, row {first[0]}: stored {stored.dtype} value {stored[first].item()!r} does "
        f"not fit the {typed_by}'s {dtype} (it would be read as {out[first].item()!r}); the "
        f"dataset's values do not fit its {typed_by}'s types (marl-minari check says so): "
        f"read what it stores with minari.load_dataset, or write the dataset again with {fix}")


def lossless_cast(values: np.ndarray, dtype: np.dtype
                  ) -> tuple[np.ndarray, tuple[int, ...] | None]:
    """``(values as dtype, None)``, or with the index of the first value the cast changed
    other than by rounding to a float dtype (an overflow to infinity, a truncation, a
    wrap-around, a NaN made an integer): the one rule by which values of another dtype
    become a space's, on writing and on reading (``values`` are numbers)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        out = values.astype(dtype)
        if np.can_cast(values.dtype, dtype, "safe"):
            return out, None
        if dtype.kind == "f" and values.dtype.kind in "biuf":
            lost = np.isfinite(values) & ~np.isfinite(out)  # rounded, but not overflowed
        else:
            lost = out.astype(values.dtype) != values  # NaN != NaN: a NaN is lost too
            if dtype.kind in "iu" and values.dtype.kind in "iu":
                # -1 as uint64, 2**63 + 1 as int64: wrapped, yet they cast back unchanged
                info = np.iinfo(dtype)
                lost |= (values < info.min) | (values > info.max)
    if not lost.any():
        return out, None
    return out, tuple(int(i) for i in np.unravel_index(int(np.argmax(lost)), lost.shape))


def check_row_shapes(values: Sequence[Any], shape: tuple[int, ...], where: str) -> None:
    """Raise :class:`StepDataError` naming the first row (not ``None``) not of ``shape``."""
    for row, value in enumerate(values):
        if value is not None and np.shape(value) != shape:
            raise StepDataError(
                f"{where}, row {row}: shape {np.shape(value)} does not match the space's "
                f"{shape}."
            )


def leaves(tree: Tree, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
    """Yield ``(path, array)`` for every leaf, paths joined by ``/`` as HDF5 groups are.

    Tuple children are named ``_index_i``, as Minari names them.
    """
    if isinstance(tree, dict):
        for key, sub in tree.items():
            yield from leaves(sub, f"{prefix}/{key}" if prefix else str(key))
    elif isinstance(tree, tuple):
        for i, sub in enumerate(tree):
            yield from leaves(sub, f"{prefix}/_index_{i}" if prefix else f"_index_{i}")
    else:
        yield prefix, tree


def leaf_spaces(space: spaces.Space, prefix: str = "") -> Iterator[tuple[str, spaces.Space]]:
    """Yield ``(path, leaf_space)`` in the same order and naming as :func:`leaves`."""
    if isinstance(space, spaces.Dict):
        for key, sub in space.spaces.items():
            yield from leaf_spaces(sub, f"{prefix}/{key}" if prefix else key)
    elif isinstance(space, spaces.Tuple):
        for i, sub in enumerate(space.spaces):
            yield from leaf_spaces(sub, f"{prefix}/_index_{i}" if prefix else f"_index_{i}")
    else:
        yield prefix, space


def build_tree(space: spaces.Space, by_path: dict[str, np.ndarray], prefix: str = "") -> Tree:
    """Inverse of :func:`leaves`: assemble a tree for ``space`` from ``{path: array}``."""
    if isinstance(space, spaces.Dict):
        return {
            key: build_tree(sub, by_path, f"{prefix}/{key}" if prefix else key)
            for key, sub in space.spaces.items()
        }
    if isinstance(space, spaces.Tuple):
        return tuple(
            build_tree(sub, by_path, f"{prefix}/_index_{i}" if prefix else f"_index_{i}")
            for i, sub in enumerate(space.spaces)
        )
    return by_path[prefix]


def map_tree(fn: Any, tree: Tree) -> Tree:
    """Apply ``fn`` to every leaf array of ``tree``, keeping its structure."""
    if isinstance(tree, dict):
        return {key: map_tree(fn, sub) for key, sub in tree.items()}
    if isinstance(tree, tuple):
        return tuple(map_tree(fn, sub) for sub in tree)
    return fn(tree)


def rows_outside(space: spaces.Space, tree: Tree) -> np.ndarray:
    """``(rows,)`` bool: which stacked rows of ``tree`` are not in ``space`` (Discrete,
    MultiDiscrete, MultiBinary and Box values out of range, NaN in a Box; Text rows pass)."""
    if isinstance(space, spaces.Dict):
        parts = [rows_outside(sub, tree[key]) for key, sub in space.spaces.items()]
    elif isinstance(space, spaces.Tuple):
        parts = [rows_outside(sub, tree[i]) for i, sub in enumerate(space.spaces)]
    else:
        return _leaf_rows_outside(space, np.asarray(tree))
    return np.logical_or.reduce(parts) if parts else np.zeros(tree_rows(tree), dtype=bool)


def _leaf_rows_outside(space: spaces.Space, values: np.ndarray) -> np.ndarray:
    flat = values.reshape(len(values), -1)
    if isinstance(space, spaces.Discrete):
        low: Any = int(space.start)
        high: Any = low + int(space.n) - 1
    elif isinstance(space, spaces.MultiDiscrete):
        low = np.asarray(space.start).reshape(1, -1)
        high = low + np.asarray(space.nvec).reshape(1, -1) - 1
    elif isinstance(space, spaces.MultiBinary):
        low, high = 0, 1
    elif isinstance(space, spaces.Box):
        if _holds_every_value(space, flat.dtype):  # images: no pixel to compare
            return np.zeros(len(values), dtype=bool)
        low, high = space.low.reshape(1, -1), space.high.reshape(1, -1)
    else:
        return np.zeros(len(values), dtype=bool)
    inside = (flat >= low) & (flat <= high)  # NaN is never inside
    return np.asarray(~inside.all(axis=1))


def _holds_every_value(space: spaces.Box, dtype: np.dtype) -> bool:
    """Whether every value of the integer ``dtype`` lies within the box's bounds."""
    if dtype.kind not in "iu":
        return False
    limits = np.iinfo(dtype)
    return bool((space.low <= limits.min).all() and (space.high >= limits.max).all())


def tree_rows(tree: Tree) -> int:
    """Number of rows of a tree (of its first leaf)."""
    return len(next(leaves(tree))[1])


def concat_trees(trees: Sequence[Tree]) -> Tree:
    """Concatenate trees of one structure leaf by leaf (along the first axis)."""
    first = trees[0]
    if isinstance(first, dict):
        return {k: concat_trees([t[k] for t in trees]) for k in first}
    if isinstance(first, tuple):
        return tuple(concat_trees([t[i] for t in trees]) for i in range(len(first)))
    return np.concatenate(trees)


def nest(flat: Mapping[str, Any] | Mapping[tuple[str, ...], Any]) -> Any:
    """``{"a/b": x}`` (or ``{("a", "b"): x}``) -> ``{"a": {"b": x}}``: trees with no space to
    follow (infos, vault structures). A single leaf at the empty path is returned as is."""
    out: dict[str, Any] = {}
    for path, value in flat.items():
        parts = tuple(path.split("/")) if isinstance(path, str) else tuple(path)
        if parts in ((), ("",)):
            return value
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out
