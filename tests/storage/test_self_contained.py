"""Datasets whose HDF5 file points outside itself are refused, never read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from marl_minari.adapters import to_vault

import marl_minari as mm
from marl_minari.errors import ForeignStorageError

SECRET = b"secret bytes of a local file the user never offered. " * 40


def _main(dataset: Any) -> Path:
    return Path(dataset.data_path) / "main_data.hdf5"


def _external_storage(file: h5py.File, name: str, secret: Path) -> None:
    old = file[name]
    shape, dtype = old.shape, old.dtype
    del file[name]
    nbytes = int(np.prod(shape)) * dtype.itemsize
    file.create_dataset(name, shape=shape, dtype=dtype, external=[(str(secret), 0, nbytes)])


def _external_link(file: h5py.File, name: str, secret: Path) -> None:
    other = secret.with_suffix(".h5")
    old = file[name]
    with h5py.File(other, "w") as handle:
        handle["x"] = np.frombuffer(SECRET[:old.nbytes], dtype=old.dtype).reshape(old.shape)
    del file[name]
    file[name] = h5py.ExternalLink(str(other), "/x")


def _virtual(file: h5py.File, name: str, secret: Path) -> None:
    other = secret.with_suffix(".vds.h5")
    old = file[name]
    with h5py.File(other, "w") as handle:
        handle["x"] = np.frombuffer(SECRET[:old.nbytes], dtype=old.dtype).reshape(old.shape)
    shape, dtype = old.shape, old.dtype
    del file[name]
    layout = h5py.VirtualLayout(shape=shape, dtype=dtype)
    layout[...] = h5py.VirtualSource(str(other), "x", shape=shape)
    file.create_virtual_dataset(name, layout)


TAMPERINGS = [_external_storage, _external_link, _virtual]


@pytest.fixture
def spread(record_parallel: Callable[..., Any]) -> Any:
    dataset, _ = record_parallel("mpe2/simple_spread_v3", 2, dataset_id="trust/spread-v0",
                                 max_cycles=5)
    return dataset


@pytest.mark.parametrize("tamper", TAMPERINGS)
def test_multi_agent_readers_refuse_data_outside_the_file(spread: Any, tmp_path: Path,
                                                          tamper: Any) -> None:
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET)
    with h5py.File(_main(spread), "r+") as file:
        tamper(file, "episode_1/infos/marl/state", secret)
    dataset = mm.load_dataset("trust/spread-v0")
    with pytest.raises(ForeignStorageError, match="episode_1/infos/marl/state"):
        dataset.to_arrays()
    with pytest.raises(ForeignStorageError):
        dataset.episode(1)
    with pytest.raises(ForeignStorageError):
        to_vault("trust/spread-v0", rel_dir=tmp_path / "vaults", vault_name="v")
    with pytest.raises(ForeignStorageError, match="episode_1/infos/marl/state"):
        mm.check_dataset("trust/spread-v0")
    dataset.episode(0)  # untouched episodes still read


@pytest.mark.parametrize("tamper", TAMPERINGS)
def test_plain_minari_readers_refuse_data_outside_the_file(
        record_cartpole: Callable[..., Any], tmp_path: Path, tamper: Any) -> None:
    dataset = record_cartpole("trust/cartpole-v0", 2)
    secret = tmp_path / "secret.bin"
    secret.write_bytes(SECRET)
    with h5py.File(Path(dataset.storage.data_path) / "main_data.hdf5", "r+") as file:
        tamper(file, "episode_0/rewards", secret)
    with pytest.raises(ForeignStorageError, match="episode_0/rewards"):
        mm.describe("trust/cartpole-v0")
    with pytest.raises(ForeignStorageError, match="episode_0/rewards"):
        to_vault("trust/cartpole-v0", rel_dir=tmp_path / "vaults", vault_name="v")
    with pytest.raises(ForeignStorageError, match="episode_0/rewards"):
        mm.check_dataset("trust/cartpole-v0")
