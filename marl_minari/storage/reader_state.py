"""What an :class:`~marl_minari.storage.episode_reader.EpisodeReader` keeps between reads:
the leaves it found in a file, the offset index it checked (and the files' identity it was
checked on), and the memory a pass in chunks reads every chunk into."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from marl_minari.format import layout, offset_index
from marl_minari.format.digests import stat_key


@dataclass(frozen=True)
class Leaf:
    """One array of an episode group, as a read lays it out."""

    path: str
    dtype: np.dtype
    row_shape: tuple[int, ...]
    per_obs: bool
    jpeg: bool = False
    text: bool = False
    drop: Literal["first", "last"] | None = None
    """The row of every episode the arrays leave out (stored rows are ``T + 1``)."""

    @property
    def row_bytes(self) -> int:
        """Bytes of one row."""
        return self.dtype.itemsize * math.prod(self.row_shape)

    def kept_rows(self, lengths: np.ndarray) -> np.ndarray:
        """Rows of every episode in the output array."""
        return lengths if self.drop is not None or not self.per_obs else lengths + 1


@dataclass
class IndexCache:
    """The last checked offset index and the identity of the files it was checked on."""

    key: tuple[Any, ...] | None = None
    index: offset_index.OffsetIndex | None = None
    leaves: dict[tuple[str, tuple[bytes, ...]], list[Leaf]] = field(default_factory=dict)
    """The leaves found in a group of the files, by the group's path and names (a read of
    one episode then opens no dataset to find them)."""


class ReadScratch:
    """Memory a pass in chunks reads every chunk into, in place of new arrays per chunk.

    Each leaf keeps one block, grown when a chunk needs more: its pages are first touched by
    the first chunk, and later chunks cost only their bytes (new arrays of a few megabytes
    are mapped, faulted in page by page and unmapped again, chunk after chunk). A chunk's
    arrays are views of the blocks, so they are valid only until the next chunk is read.
    """

    def __init__(self) -> None:
        self._blocks: dict[str, np.ndarray] = {}

    def array(self, path: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous ``shape`` array of ``dtype`` for the leaf ``path``."""
        size = math.prod(shape) * dtype.itemsize
        block = self._blocks.get(path)
        if block is None or block.nbytes < size:
            # An eighth more than asked for: a later chunk of a few more steps still fits.
            block = self._blocks[path] = np.empty(size + size // 8, dtype=np.uint8)
        return block[:size].view(dtype).reshape(shape)


def cached_steps(data_path: Path, cache: IndexCache, indices: np.ndarray) -> np.ndarray | None:
    """Steps of the stored episodes ``indices`` from the index ``cache`` holds, if it was
    checked on the files ``data_path`` holds now (``None`` otherwise: read them)."""
    if cache.index is None or cache.key != files_key(data_path):
        return None
    return cache.index.steps[indices]


def files_key(data_path: Path) -> tuple[Any, ...]:
    """The identity (stat keys) of a dataset's data file and offset index, ``None`` for one
    that is not there: a checked index is kept only while this stays the same."""
    key: list[Any] = []
    for name in (layout.MAIN_FILE_NAME, layout.INDEX_FILE_NAME):
        try:
            key.append(stat_key((data_path / name).stat()))
        except FileNotFoundError:
            key.append(None)
    return tuple(key)
