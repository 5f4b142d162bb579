"""Comparing offset-index entries with HDF5 on files whose headers say odd things."""

from __future__ import annotations

import struct
from pathlib import Path

import h5py
import numpy as np

from marl_minari.format import entry_checks
from marl_minari.format.entry_checks import EntryCheck


def test_a_layout_at_address_zero_is_no_offset(tmp_path: Path) -> None:
    path = tmp_path / "zero.hdf5"
    with h5py.File(path, "w") as file:
        file["episode_0/rewards"] = np.ones(4)
        offset = file["episode_0/rewards"].id.get_offset()
    data = bytearray(path.read_bytes())
    (at,) = [n for n in range(2, len(data) - 8) if struct.unpack_from("<Q", data, n)[0]
             == offset and data[n - 2:n] == b"\x03\x01"]  # the layout message's address
    struct.pack_into("<Q", data, at, 0)
    path.write_bytes(bytes(data))
    with h5py.File(path, "r") as file:
        group = entry_checks.episode_group(file, 0)
        assert group is not None
        check = EntryCheck(0, b"rewards", 0, h5py.h5t.py_create(np.dtype(np.float64)), (4,))
        assert not entry_checks.agrees(group, check)
        assert entry_checks.agrees(group, check._replace(offset=offset)) is False
