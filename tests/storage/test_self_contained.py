"""Datasets whose HDF5 file points outside itself are refused, never read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pytest
from foreign_storage import SECRET, external_link, external_storage, virtual
from marl_minari.adapters import to_vault

import marl_minari as mm
from marl_minari.errors import ForeignStorageError


def _main(dataset: Any) -> Path:
    return Path(dataset.data_path) / "main_data.hdf5"


TAMPERINGS = [external_storage, external_link, virtual]


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
