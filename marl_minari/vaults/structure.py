"""The experience leaves of a Flashbax vault: their store names, and what ``metadata.json``
claims about them (``structure_shape``, ``structure_dtype``), parsed and checked in one place.

Nothing here opens a store; :class:`marl_minari.vaults.store.VaultReader` compares the claims
with the stored arrays before anything is sized by them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from marl_minari.errors import CorruptedDataError
from marl_minari.format.spaces import leaves


@dataclass(frozen=True)
class LeafInfo:
    """One experience leaf of a vault.

    Attributes:
        path: tree path (``("infos", "legals")``).
        shape: ``(B, T_struct, ...)`` as recorded in ``structure_shape`` (``T_struct`` is the
            writing buffer's time axis, not the vault's length).
        dtype: numpy dtype name.
    """

    path: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str

    @property
    def name(self) -> str:
        """Store name (``infos.legals.``)."""
        return leaf_name(self.path)

    @property
    def row_shape(self) -> tuple[int, ...]:
        """Shape of one time step of one stream."""
        return self.shape[2:]

    @property
    def row_bytes(self) -> int:
        """Bytes of one time step of one stream."""
        return int(np.prod(self.row_shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def leaf_name(path: tuple[str, ...]) -> str:
    """The store name of an experience leaf, as Flashbax spells it (``("infos", "legals")``
    -> ``"infos.legals."``)."""
    return "".join(f"{part}." for part in path)


def flatten_structure(tree: Mapping[str, Any]) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Yield ``(path, leaf)`` of a nested dict (``structure_shape``/``structure_dtype``), the
    path as a tuple of keys (:func:`marl_minari.format.spaces.leaves` with the parts split)."""
    for path, leaf in leaves(dict(tree)):
        yield tuple(path.split("/")), leaf


_SHAPE_TEXT = re.compile(r"\(\s*(?:\d+\s*(?:,\s*\d+\s*)*,?\s*)?\)")


def parse_shape(text: str) -> tuple[int, ...]:
    """``"(1, 200, 3)"`` -> ``(1, 200, 3)`` (how Flashbax stores shapes: ``str(tuple)``).

    Raises:
        ValueError: ``text`` is not a tuple of non-negative integers written that way.
    """
    if not isinstance(text, str) or not _SHAPE_TEXT.fullmatch(text.strip()):
        raise ValueError(f"{text!r} is not a shape written as a tuple of integers")
    cleaned = text.strip().strip("()").replace(" ", "")
    return tuple(int(part) for part in cleaned.split(",") if part)


def claimed_leaves(meta_path: Path, metadata: Any) -> tuple[LeafInfo, ...]:
    """The experience leaves ``metadata.json`` claims (``structure_shape`` and
    ``structure_dtype``), each checked: a shape of at least ``(B, T)`` whose dimensions are
    integers >= 1, every leaf with the same ``B``, and a numeric or bool dtype. Nothing here
    is compared with the stores yet (:meth:`VaultReader.check_stores` does) or evaluated.

    Raises:
        CorruptedDataError: naming ``meta_path`` and the key.
    """
    try:
        shapes = dict(flatten_structure(metadata["structure_shape"]))
        dtypes = dict(flatten_structure(metadata["structure_dtype"]))
    except (KeyError, TypeError, AttributeError) as exc:
        raise CorruptedDataError(f"{meta_path} is not a Flashbax vault's metadata: {exc}") \
            from exc
    if not shapes:
        raise CorruptedDataError(f"{meta_path}: structure_shape lists no arrays")
    unshaped = sorted(".".join(path) for path in dtypes.keys() - shapes.keys())
    if unshaped:
        raise CorruptedDataError(f"{meta_path}: structure_dtype {unshaped[0]!r} has no shape "
                                 "in structure_shape (the two trees name the same leaves)")
    found: list[LeafInfo] = []
    for path, text in shapes.items():
        key = ".".join(path)
        try:
            shape = parse_shape(text)
        except ValueError as exc:
            raise CorruptedDataError(f"{meta_path}: structure_shape {key!r}: {exc}, as "
                                     "Flashbax writes it, e.g. '(1, 200, 3)'") from exc
        if len(shape) < 2 or min(shape) < 1:
            raise CorruptedDataError(
                f"{meta_path}: structure_shape {key!r} is {shape}; an experience leaf is shaped "
                "(B, T, ...) with every dimension at least 1")
        if found and shape[0] != found[0].shape[0]:
            raise CorruptedDataError(
                f"{meta_path}: structure_shape {key!r} has {shape[0]} streams but "
                f"{'.'.join(found[0].path)!r} {found[0].shape[0]}: every leaf of a vault shares "
                "its batch axis")
        found.append(LeafInfo(path, shape, _claimed_dtype(meta_path, key, dtypes.get(path))))
    return tuple(found)


def _claimed_dtype(meta_path: Path, key: str, value: Any) -> str:
    """The numpy name of a leaf's claimed dtype, numeric or bool."""
    try:
        dtype = np.dtype(value) if isinstance(value, str) else None
    except TypeError:
        dtype = None
    if dtype is None or dtype.kind not in "biuf":
        raise CorruptedDataError(
            f"{meta_path}: structure_dtype {key!r} is {value!r}; a vault leaf's dtype is the "
            "name of a numeric or bool numpy dtype, such as 'float32'")
    return dtype.name
