"""Copying the step rows of per-observation arrays: every row but each episode's final one.

A chunk of episodes holds ``T_e + 1`` observation rows per episode and ``T_e`` step rows; the
view (:func:`marl_minari.vaults.view.view_rows`) keeps, for every step, the observation its
action was taken from. :class:`StepRows` copies those rows into a destination, often a
strided window of a buffer (one agent's columns of the interleaved ``(S, N, O)`` layout).
When every episode of the chunk has the same length (recordings with a fixed horizon), the
source is seen as ``(E, T + 1, ...)`` and the destination as ``(E, T, ...)``: one strided copy,
with no index array and no gathered temporary. Otherwise the rows are gathered.
"""

from __future__ import annotations

import numpy as np


class StepRows:
    """Selects the step rows of a chunk whose episodes have ``lengths`` steps.

    Args:
        lengths: ``(E,)`` steps of each episode of the chunk.
        obs_rows: ``(S,)`` observation row of every step (``MultiAgentArrays.obs_rows``).
    """

    def __init__(self, lengths: np.ndarray, obs_rows: np.ndarray) -> None:
        self.rows = obs_rows
        self.steps = len(obs_rows)
        lengths = np.asarray(lengths)
        self._uniform = bool(len(lengths)) and bool((lengths == lengths[0]).all())
        self._episodes = len(lengths)
        self._length = int(lengths[0]) if self._uniform else 0

    def take(self, values: np.ndarray) -> np.ndarray:
        """``values[obs_rows]``: the step rows as a new array."""
        if self._uniform:
            out = np.empty((self.steps, *values.shape[1:]), dtype=values.dtype)
            self.copy(values, out)
            return out
        return values[self.rows]

    def copy(self, values: np.ndarray, target: np.ndarray) -> None:
        """Write the step rows of ``values`` (``(S + E, ...)``) into ``target`` (``(S, ...)``,
        any strides, the same number of values per row), cast as ``np.copyto`` would with
        ``casting="unsafe"``."""
        split = _split_rows(target, self._episodes, self._length) if (
            self._uniform and self._length) else None
        if split is not None:
            source = values.reshape(self._episodes, self._length + 1, -1)[:, :self._length]
            np.copyto(*_as_rows(split, source), casting="unsafe")
        elif target.flags.c_contiguous and target.dtype == values.dtype:
            # "clip": the rows are valid by construction, and numpy buffers a take that
            # checks bounds.
            np.take(values.reshape(len(values), -1), self.rows, axis=0,
                    out=target.reshape(self.steps, -1), mode="clip")
        else:
            np.copyto(target, values[self.rows].reshape(target.shape), casting="unsafe")


def _split_rows(target: np.ndarray, episodes: int, length: int) -> np.ndarray | None:
    """``target`` (``(E * T, ...)``) seen as ``(E, T, values per row)`` without a copy (writes
    must land), or ``None`` where a row's values are not evenly strided."""
    try:
        inner = target.reshape(len(target), -1, copy=False)
        return inner.reshape(episodes, length, inner.shape[1], copy=False)
    except ValueError:
        return None


def _as_rows(target: np.ndarray, source: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``target`` and ``source`` (``(E, T, values per row)``) seen with one opaque item per row
    where the copy is of plain bytes (one dtype, each row's values contiguous in both): numpy
    copies an item with one ``memcpy``, about 1.5x faster than its strided loop over a short
    row's values (18 floats of an agent's observation); as they are otherwise."""
    width = target.shape[-1] * target.itemsize
    if (target.dtype != source.dtype or not width or target.strides[-1] != target.itemsize
            or source.strides[-1] != source.itemsize):
        return target, source
    row = np.dtype((np.void, width))
    return target.view(row), source.view(row)


def integers_fit(values: np.ndarray, dtype: np.dtype) -> bool | None:
    """Whether integer ``values`` all fit the integer ``dtype`` (two reductions, no compare of
    a cast copy); ``None`` where either is not of integers (compare after the cast)."""
    if values.dtype.kind not in "iu" or dtype.kind not in "iu":
        return None
    if not values.size or np.can_cast(values.dtype, dtype):
        return True
    limits = np.iinfo(dtype)
    return bool(values.min() >= limits.min and values.max() <= limits.max)
