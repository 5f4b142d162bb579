"""Which blocks of ``main_data.hdf5`` HDF5 reads to open a dataset, check it on load and
check its offset index before the first read.

A reader of a remote file by ranges pays one round trip per dependent read: HDF5 reads the
superblock, then the root group, then the B-tree nodes on the way to ``episode_<N-1>`` and
``episode_<N>`` (the load check of :func:`~marl_minari.storage.datafile.cross_check`), each
address found in the bytes before it; then, before any episode is read through the offset
index, the object headers of the sampled episodes' datasets
(:func:`~marl_minari.format.offset_index.sampled_episodes`). A publish records those blocks
(``open_blocks`` in the manifest, ``docs/registry.md``) so that a streaming reader fetches
them all at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import h5py

from marl_minari.format import offset_index
from marl_minari.storage.byte_ranges import LocalFileRanges, RangesFile
from marl_minari.storage.datafile import cross_check, first_agent_rewards

MAX_OPEN_BLOCKS: Final = 64
"""The most blocks recorded (a reader refuses a longer list)."""


class _Recording:
    """A :class:`LocalFileRanges` that notes the blocks every read touches."""

    def __init__(self, inner: LocalFileRanges, block_size: int) -> None:
        self.name, self.size = inner.name, inner.size
        self._inner, self._block_size = inner, block_size
        self.blocks: list[int] = []

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        for offset, length in ranges:
            if length:
                for number in range(offset // self._block_size,
                                    (offset + length - 1) // self._block_size + 1):
                    if number not in self.blocks:
                        self.blocks.append(number)
        return self._inner.read_ranges(ranges)


def opening_blocks(h5_path: Path, metadata: dict[str, Any], block_size: int) -> list[int]:
    """The blocks of ``block_size`` bytes that opening ``h5_path``, the load check and the
    offset index's sample (where the dataset has an index) read, in the order first read (at
    most :data:`MAX_OPEN_BLOCKS`); ``[]`` if HDF5 cannot open it (the conformance check
    reports that)."""
    index = offset_index.read(h5_path.parent)
    with LocalFileRanges(h5_path) as local:
        recording = _Recording(local, block_size)
        try:
            with h5py.File(RangesFile(recording), "r") as file:
                cross_check(file, metadata, None, h5_path)
                first_agent_rewards(file)  # the column check cross_check makes with a spec
                if index is not None:  # what a reader compares before it uses the index
                    offset_index.mismatches(index, file,
                                            offset_index.sampled_episodes(len(index.steps)))
        except Exception:  # noqa: BLE001 - a hint only; publish has validated the file
            return []
    return recording.blocks[:MAX_OPEN_BLOCKS]
