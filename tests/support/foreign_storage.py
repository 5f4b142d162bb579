"""HDF5 datasets rewritten to take their bytes from outside their file (external storage,
an external link, a virtual dataset): what a hostile publisher can ship, for the tests that
such data is refused and never read."""

from __future__ import annotations

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
