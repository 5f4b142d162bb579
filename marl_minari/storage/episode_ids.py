"""Episode ids and positions a user passes, checked once for every reader.

Minari's readers take stored episode ids as integers and positions (``dataset[i]``) as one
integer counted from either end. A float (``1.5``), a boolean mask or a string would be
turned into some other episode by numpy's casts, so they are refused by name here.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

from marl_minari.errors import EpisodeIndexError, InvalidOptionError


def episode_ids(values: Iterable[Any] | np.ndarray, stored: int | None) -> np.ndarray:
    """``values`` as ``int64`` stored episode ids, each in ``0..stored - 1`` (``None``: the
    count is not known here, only their type is checked).

    Raises:
        InvalidOptionError: a value is not an integer (a float, a bool of a mask, a string).
        EpisodeIndexError: an id outside the stored episodes.
    """
    given = values if isinstance(values, np.ndarray) else list(values)
    array = np.asarray(given)
    if array.size and (array.dtype.kind not in "iu" or array.ndim != 1):
        hint = (" (a boolean mask: pass np.flatnonzero(mask))" if array.dtype.kind == "b"
                else "")
        raise InvalidOptionError(
            f"episode ids must be a flat sequence of integers, got {array.dtype} values "
            f"{array.reshape(-1)[:5].tolist()}{hint}")
    ids = array.astype(np.int64).reshape(-1)
    if ids.size and stored is not None and (int(ids.min()) < 0 or int(ids.max()) >= stored):
        raise EpisodeIndexError(
            f"episode ids must lie in 0..{stored - 1}, got {sorted(set(ids.tolist()))[:5]}")
    return ids


def episode_position(index: Any, count: int) -> int:
    """``index`` of ``dataset[index]`` as a position in ``0..count - 1`` (negative ones count
    from the end, as Minari's).

    Raises:
        InvalidOptionError: ``index`` is not an integer (a float, a slice, a string).
        EpisodeIndexError: it is outside ``-count..count - 1``.
    """
    if isinstance(index, (bool, np.bool_)) or not isinstance(index, numbers.Integral):
        raise InvalidOptionError(
            f"dataset[{index!r}]: an episode is chosen by one integer position; for several, "
            "use iterate_episodes(ids) or to_arrays(ids)")
    position = int(index)
    if not -count <= position < count:
        raise EpisodeIndexError(
            f"episode {index} out of range: the dataset holds {count} episodes "
            f"(indices {-count}..{count - 1})")
    return position % count


def episode_count(value: Any, name: str) -> int:
    """``value`` as a count of episodes (``sample_episodes(n)``, split sizes).

    Raises:
        InvalidOptionError: not a non-negative integer.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral) or (
            value < 0):
        raise InvalidOptionError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)
