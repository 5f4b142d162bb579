"""HDF5 datasets rewritten to take their bytes from outside their file (external storage,
an external link, a virtual dataset): what a hostile publisher can ship, for the tests that
such data is refused and never read."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import h5py
import numpy as np

SECRET = b"secret bytes of a local file the user never offered. " * 40


def external_storage(file: h5py.File, name: str, secret: Path) -> None:
    old = file[name]
    shape, dtype = old.shape, old.dtype
    del file[name]
    nbytes = int(np.prod(shape)) * dtype.itemsize
    file.create_dataset(name, shape=shape, dtype=dtype, external=[(str(secret), 0, nbytes)])


def external_link(file: h5py.File, name: str, secret: Path) -> None:
    other = secret.with_suffix(".h5")
    old = file[name]
    with h5py.File(other, "w") as handle:
        handle["x"] = np.frombuffer(SECRET[:old.nbytes], dtype=old.dtype).reshape(old.shape)
    del file[name]
    file[name] = h5py.ExternalLink(str(other), "/x")


def virtual(file: h5py.File, name: str, secret: Path) -> None:
    other = secret.with_suffix(".vds.h5")
    old = file[name]
    with h5py.File(other, "w") as handle:
        handle["x"] = np.frombuffer(SECRET[:old.nbytes], dtype=old.dtype).reshape(old.shape)
    shape, dtype = old.shape, old.dtype
    del file[name]
    layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
    layout[...] = h5py.VirtualSource(str(other), "x", shape=shape)
    file.create_virtual_dataset(name, layout)


def external_link_at(file: h5py.File, name: str, secret: Path, offset: int) -> None:
    """:func:`external_link`, its target placed at ``offset`` of the other file (padding
    before it): the indexed offset of ``name``, so that only the file tells them apart."""
    other = secret.with_suffix(".at.h5")
    old = file[name]
    data = np.frombuffer(SECRET[:old.nbytes], dtype=old.dtype).reshape(old.shape)
    for padding in range(max(0, offset - 4096), offset):
        with h5py.File(other, "w") as handle:
            handle["pad"] = np.zeros(padding, dtype=np.uint8)
            handle["x"] = data
            placed = handle["x"].id.get_offset()
        if placed == offset:
            break
    else:
        raise AssertionError(f"cannot place a dataset at offset {offset} of {other}")
    del file[name]
    file[name] = h5py.ExternalLink(str(other), "/x")


class OpenedFifo:
    """A FIFO an external link names, and how often something opened it for reading: a
    writer thread waits in ``open`` until a reader opens it (which then reads an empty file),
    and again, so that no reader is left waiting."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.openings = 0
        self._ending = False
        self._writer = threading.Thread(target=self._serve_readers, daemon=True)
        self._writer.start()

    def _serve_readers(self) -> None:
        while True:
            with open(self.path, "wb"):  # blocks until the FIFO is opened for reading
                if self._ending:
                    return
                self.openings += 1

    def end(self) -> int:
        """Release the writer; how many times a reader other than this one opened the FIFO."""
        self._ending = True
        released = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._writer.join()
        os.close(released)
        return self.openings
