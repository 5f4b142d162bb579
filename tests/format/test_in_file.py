"""Looking up paths of a file someone else wrote without leaving it: which link leads out of
the file is told from link records alone, soft links followed by their targets' paths."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
from foreign_storage import OpenedFifo

from marl_minari.format.in_file import dataset_in_file, hard_link_address, link_out


def _file(tmp_path: Path) -> Path:
    path = tmp_path / "main.h5"
    with h5py.File(path, "w") as file:
        file["a/b/data"] = np.arange(3)
        file["a/out"] = h5py.ExternalLink(str(tmp_path / "never.h5"), "/")
        file["a/soft_in"] = h5py.SoftLink("/a/b")
        file["a/soft_out"] = h5py.SoftLink("out/data")  # relative, through the external link
        file["a/to_soft_out"] = h5py.SoftLink("/a/soft_out")
        file["a/loop_1"] = h5py.SoftLink("/a/loop_2")
        file["a/loop_2"] = h5py.SoftLink("/a/loop_1")
    return path


def test_links_out_of_the_file_are_named_and_links_inside_it_are_not(tmp_path: Path) -> None:
    with h5py.File(_file(tmp_path), "r") as file:
        root = file.id
        assert link_out(root, b"a/b/data") is None
        assert link_out(root, b"a/soft_in/data") is None
        assert link_out(root, b"a/missing/data") is None
        assert link_out(root, b"a/out/data") == "a/out"
        assert link_out(root, b"a/soft_out") == "a/soft_out -> out"
        assert link_out(root, b"a/to_soft_out") == "a/to_soft_out -> a/soft_out -> out"
        assert link_out(root, b"a/loop_1/data") is None  # a cycle ends, as in HDF5
        assert dataset_in_file(root, b"a/soft_in/data") is not None
        assert dataset_in_file(root, b"a/soft_out") is None
    assert not (tmp_path / "never.h5").exists()


def test_a_header_address_is_looked_up_without_following_a_link_out(tmp_path: Path) -> None:
    fifo = OpenedFifo(tmp_path / "fifo")
    path = tmp_path / "main.h5"
    with h5py.File(path, "w") as file:
        file["a/b/data"] = np.arange(3)
        file["a/fifo"] = h5py.ExternalLink(str(fifo.path), "/")
        file["a/soft_in"] = h5py.SoftLink("/a/b")
    try:
        with h5py.File(path, "r") as file:
            root = file.id
            found = hard_link_address(root, b"a/b/data")
            assert found == h5py.h5o.get_info(root, b"a/b/data").addr
            assert hard_link_address(root, b"a/soft_in/data") == found  # on the way: followed
            assert hard_link_address(root, b"a/soft_in") is None  # the last part: not
            assert hard_link_address(root, b"a/fifo/data") is None
            assert hard_link_address(root, b"a/fifo") is None
            assert hard_link_address(root, b"a/missing") is None
    finally:
        assert fifo.end() == 0
