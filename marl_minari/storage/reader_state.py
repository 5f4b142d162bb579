"""What an :class:`~marl_minari.storage.episode_reader.EpisodeReader` keeps between reads:
the leaves it found in a file, the offset index it checked (and the files' identity it was
checked on), and the memory a pass in chunks reads every chunk into."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np

from marl_minari.format import layout, offset_index
from marl_minari.format.digests import stat_key
from marl_minari.format.entry_checks import ReadAs
from marl_minari.format.jpeg import jpeg_paths
from marl_minari.format.metadata import metadata_space
from marl_minari.format.spaces import leaf_dtype, leaf_shape, leaf_spaces
from marl_minari.format.spec import MultiAgentSpec


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


def spec_leaves(spec: MultiAgentSpec, jpeg: frozenset[str]) -> list[Leaf]:
    """The leaves the spec names, as every read lays them out: each agent's observation and
    action leaves, and the team's rewards and end flags. ``jpeg``: the leaves stored as JPEG
    frames (:func:`~marl_minari.format.jpeg.jpeg_paths`)."""
    found: list[Leaf] = []
    for field_name, by_agent, per_obs in (("observations", spec.observation_spaces, True),
                                          ("actions", spec.action_spaces, False)):
        for agent in spec.possible_agents:
            for path, space in leaf_spaces(by_agent[agent], f"{field_name}/{agent}"):
                found.append(Leaf(path, leaf_dtype(space), leaf_shape(space), per_obs,
                                  jpeg=path in jpeg, text=leaf_dtype(space).kind == "O"))
    for name in ("rewards", "terminations", "truncations"):
        found.append(Leaf(name, np.dtype(np.float64 if name == "rewards" else bool), (), False))
    return found


def spec_read_as(spec: MultiAgentSpec, jpeg: frozenset[str]) -> dict[str, ReadAs | None]:
    """How readers read the spec's leaves as bytes, by path (``None``: never, a JPEG or text
    leaf): what a whole file must agree with before its index is trusted whole
    (:func:`~marl_minari.format.offset_index.verify_or_drop`)."""
    return {leaf.path: None if leaf.jpeg or leaf.text else ReadAs(
        h5py.h5t.py_create(leaf.dtype), leaf.row_shape, int(leaf.per_obs))
        for leaf in spec_leaves(spec, jpeg)}


def metadata_read_as(metadata: dict[str, Any], data_path: Path) -> dict[str, ReadAs | None]:
    """:func:`spec_read_as` of the dataset ``metadata`` describes (its ``data/`` folder is
    ``data_path``); empty for a plain Minari dataset, which readers never read through an
    index.

    Raises:
        CorruptedDataError, LayoutError: its spaces or agents cannot be read.
    """
    if layout.METADATA_KEY not in metadata:
        return {}
    spec = MultiAgentSpec.from_metadata(
        metadata, metadata_space(metadata, "observation_space", data_path),
        metadata_space(metadata, "action_space", data_path))
    return spec_read_as(spec, jpeg_paths(spec, bool(metadata.get("jpeg_encoding", True))))


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
    arrays are views of the blocks, so they are valid only until the next chunk is read
    (with ``slots=2``, until the read after it).

    Args:
        rows_into: ``{leaf path: (steps of the pass, ...) array}``, the caller's own
            destination of leaves it keeps as they are stored (a buffer's ``infos.state``):
            each read writes its episodes' step rows (a leaf stored with a row per
            observation loses each episode's final one) into the next rows of the array,
            straight from the file, where the leaf's stored dtype and values per row are the
            array's; :attr:`written` then names it, and the read's arrays hold those step
            rows for it (no observation rows).
        slots: sets of blocks the reads take in turn: with 2, a chunk's arrays stay valid
            while the next chunk is read (a pass that reads one chunk ahead of its caller,
            :func:`~marl_minari.storage.read_ahead.read_ahead`), at twice the memory.
    """

    def __init__(self, rows_into: dict[str, np.ndarray] | None = None, *,
                 slots: int = 1) -> None:
        if slots < 1:
            raise ValueError(f"a ReadScratch needs at least one slot (got {slots})")
        self._slots: list[dict[str, np.ndarray]] = [{} for _ in range(slots)]
        self._slot = 0
        self._rows_into = dict(rows_into or {})
        self._cursor = 0
        self.written: frozenset[str] = frozenset()
        """The leaves the last read wrote into their ``rows_into`` arrays."""

    def array(self, path: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An uninitialised C-contiguous ``shape`` array of ``dtype`` for the leaf ``path``."""
        size = math.prod(shape) * dtype.itemsize
        blocks = self._slots[self._slot]
        block = blocks.get(path)
        if block is None or block.nbytes < size:
            # An eighth more than asked for: a later chunk of a few more steps still fits.
            block = blocks[path] = np.empty(size + size // 8, dtype=np.uint8)
        return block[:size].view(dtype).reshape(shape)

    def rows_into(self, leaf: Leaf, steps: int) -> np.ndarray | None:
        """The next ``steps`` rows of the caller's array for ``leaf``, as ``(steps,
        *leaf.row_shape)``, when it has one that holds the leaf's stored values as they are
        (no JPEG or text, the same dtype and values per row); ``None`` otherwise.

        Raises:
            ValueError: the pass reads more steps than the array has rows (a caller's bug).
        """
        target = self._rows_into.get(leaf.path)
        if (target is None or leaf.jpeg or leaf.text or target.dtype != leaf.dtype
                or not target.flags.c_contiguous
                or math.prod(target.shape[1:]) != math.prod(leaf.row_shape)):
            return None
        if self._cursor + steps > len(target):
            raise ValueError(f"the pass reads more steps than the {len(target)} rows given "
                             f"for {leaf.path}")
        return target[self._cursor:self._cursor + steps].reshape(steps, *leaf.row_shape)

    def advance(self, steps: int, written: frozenset[str]) -> None:
        """A read of ``steps`` steps is done and wrote ``written`` into their arrays; the
        next read takes the next slot's blocks."""
        if self._rows_into:
            self._cursor += steps
        self.written = written
        self._slot = (self._slot + 1) % len(self._slots)


def rows_into(scratch: ReadScratch | None, leaves: list[Leaf], steps: int
              ) -> tuple[list[Leaf], dict[int, np.ndarray]]:
    """The leaves of a read of ``steps`` steps that go straight into the caller's arrays
    (:meth:`ReadScratch.rows_into`), their arrays by position in ``leaves``; and ``leaves``
    with each episode's final observation row of those left out of the read (the arrays hold
    step rows)."""
    if scratch is None:
        return leaves, {}
    direct: dict[int, np.ndarray] = {}
    placed = list(leaves)
    for n, leaf in enumerate(leaves):
        target = scratch.rows_into(leaf, steps)
        if target is None:
            continue
        direct[n] = target
        if leaf.per_obs and leaf.drop is None:
            placed[n] = replace(leaf, drop="last")
    return placed, direct


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
