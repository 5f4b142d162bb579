"""RangesFile: the file object HDF5 reads a byte supplier through, and opening one."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import h5py
import numpy as np
import pytest

from marl_minari.errors import CorruptedDataError
from marl_minari.storage.byte_ranges import LocalFileRanges, RangesFile, open_hdf5


class CountingSource(LocalFileRanges):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: list[list[tuple[int, int]]] = []

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        self.calls.append(list(ranges))
        return super().read_ranges(ranges)


def test_reads_anywhere_return_the_file_bytes(tmp_path: Path) -> None:
    path = tmp_path / "bytes.bin"
    data = np.random.default_rng(0).integers(0, 256, 300_000, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    rng = np.random.default_rng(1)
    with CountingSource(path) as source:
        file = RangesFile(source, page_size=4096, pages_kept=4)
        for _ in range(500):
            offset = int(rng.integers(0, len(data) + 10))
            size = int(rng.choice([1, 100, 4095, 4096, 4097, 20_000]))
            file.seek(offset)
            assert file.read(size) == data[offset:offset + size]
            assert file.tell() == min(offset + size, max(offset, len(data)))


def test_hdf5_metadata_reads_are_served_from_kept_pages(tmp_path: Path) -> None:
    """HDF5 opens objects with many small reads close together: the source is asked for a
    page once, not once per read."""
    path = tmp_path / "file.h5"
    with h5py.File(path, "w") as file:
        for episode in range(200):
            file[f"episode_{episode}/a"] = np.arange(10)
            file[f"episode_{episode}/b"] = np.ones((10, 3))
    reads = 0
    with CountingSource(path) as source:
        ranges_file = RangesFile(source)
        real = ranges_file.readinto

        def counted(buffer: memoryview) -> int:
            nonlocal reads
            reads += 1
            return real(buffer)

        ranges_file.readinto = counted  # type: ignore[method-assign]
        with h5py.File(ranges_file, "r") as file:
            total = sum(int(file[f"episode_{e}/a"][()].sum()) for e in range(200))
    assert total == 200 * 45
    assert reads > 400 and len(source.calls) * 10 < reads


def test_bytes_hdf5_cannot_open_are_a_damaged_file_named(tmp_path: Path) -> None:
    path = tmp_path / "main_data.hdf5"
    path.write_bytes(b"not an HDF5 file " * 100)
    with LocalFileRanges(path) as source, pytest.raises(CorruptedDataError) as raised:
        open_hdf5(source)
    assert str(path) in str(raised.value) and "download it again" in str(raised.value)
