"""Datasets whose HDF5 file points outside itself are refused, never read."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import pytest
from foreign_storage import (
    SECRET,
    OpenedFifo,
    external_link,
    external_link_at,
    external_storage,
    virtual,
)
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


@pytest.mark.parametrize("linked", ["dataset", "episode group"])
def test_an_external_link_to_the_indexed_offset_of_another_file_is_refused(
        spread: Any, tmp_path: Path, linked: str) -> None:
    """The linked dataset (or the whole episode group, linked into a copy of the file) has
    the type, the shape and the offset the index names, in the other file: the entry's
    comparison tells the files apart, so it is never read as this file's bytes there
    (neither the link's target, which h5py would read, nor this file's)."""
    import shutil

    from marl_minari.format import offset_index
    from marl_minari.format.ids import dataset_dir

    shutil.copytree(dataset_dir("trust/spread-v0"), dataset_dir("trust/linked-v0"))
    data = dataset_dir("trust/linked-v0") / "data"  # a copy: its entries are compared
    index = offset_index.read(data)
    assert index is not None
    main = data / "main_data.hdf5"
    with h5py.File(main, "r+") as file:
        if linked == "dataset":
            external_link_at(file, "episode_1/rewards", tmp_path / "secret.bin",
                             int(index.offsets["rewards"][1]))
        else:
            other = tmp_path / "other.h5"
            shutil.copyfile(main, other)
            with h5py.File(other, "r+") as copy:
                copy["episode_1/rewards"][...] = 99.0  # in place: the same offsets
            del file["episode_1"]
            file["episode_1"] = h5py.ExternalLink(str(other), "/episode_1")
        offset_index.seal(file, index.offsets, index.steps)  # the index kept, as an author can
    offset_index.write(main, index.offsets, index.steps)
    dataset = mm.load_dataset("trust/linked-v0")
    with pytest.raises(ForeignStorageError, match="episode_1"):
        dataset.to_arrays([1])
    dataset.to_arrays([0])


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


@pytest.mark.parametrize("target", ["episode_1/rewards", "episode_1", "episode_1/infos/marl"])
def test_an_external_link_is_refused_without_opening_the_file_it_names(
        spread: Any, tmp_path: Path, target: str) -> None:
    """Opening a file named by a hostile dataset is already reading it (a FIFO blocks the
    reader forever, a device file can do worse): the file an external link names is never
    opened, also where an offset-index entry is compared before reading."""
    from marl_minari.format import offset_index

    fifo = OpenedFifo(tmp_path / "fifo")
    main = _main(spread)
    index = offset_index.read(main.parent)
    assert index is not None
    with h5py.File(main, "r+") as file:
        del file[target]
        file[target] = h5py.ExternalLink(str(fifo.path), "/" + target)
        offset_index.seal(file, index.offsets, index.steps)
    offset_index.write(main, index.offsets, index.steps)
    dataset = mm.load_dataset("trust/spread-v0")
    try:
        with pytest.raises(ForeignStorageError, match="episode_1"):
            dataset.to_arrays([1])
        with pytest.raises(ForeignStorageError, match="episode_1"):
            dataset.episode(1)
        with pytest.raises(ForeignStorageError, match="episode_1"):
            mm.check_dataset("trust/spread-v0")
        dataset.to_arrays([0])
    finally:
        assert fifo.end() == 0, "the FIFO an external link names was opened"


def test_a_soft_link_through_an_external_link_is_refused_as_foreign(spread: Any,
                                                                   tmp_path: Path) -> None:
    """``rewards`` a soft link whose target lies behind an external link: refused as a link
    out of the file (not reported as a missing dataset), and the FIFO never opened."""
    from marl_minari.format import offset_index

    fifo = OpenedFifo(tmp_path / "fifo")
    main = _main(spread)
    index = offset_index.read(main.parent)
    assert index is not None
    with h5py.File(main, "r+") as file:
        del file["episode_1/rewards"]
        file["episode_1/elsewhere"] = h5py.ExternalLink(str(fifo.path), "/")
        file["episode_1/rewards"] = h5py.SoftLink("/episode_1/elsewhere/rewards")
        offset_index.seal(file, index.offsets, index.steps)
    offset_index.write(main, index.offsets, index.steps)
    dataset = mm.load_dataset("trust/spread-v0")
    refused = r"'episode_1/rewards -> episode_1/elsewhere' is an external"
    try:
        with pytest.raises(ForeignStorageError, match=refused):
            dataset.to_arrays([1])
        with pytest.raises(ForeignStorageError, match=refused):
            dataset.episode(1)
        with pytest.raises(ForeignStorageError, match="'/episode_1/elsewhere' is an external"):
            mm.check_dataset("trust/spread-v0")  # every link of the file, by its own name
        dataset.to_arrays([0])
    finally:
        assert fifo.end() == 0, "the FIFO an external link names was opened"


def test_the_multi_agent_probe_of_plain_metadata_never_opens_a_linked_file(
        spread: Any, tmp_path: Path) -> None:
    """A dataset whose metadata lacks our key (as Minari's combine writes it) is probed for
    the multi-agent layout in its first episode; there ``infos/marl`` is an external link.
    The probe finds no layout without opening the file the link names, and the read that
    follows refuses the link."""
    import json
    import warnings

    from marl_minari.format import layout
    from marl_minari.format.recovered_layout import SingleAgentReadingWarning

    fifo = OpenedFifo(tmp_path / "fifo")
    main = _main(spread)
    metadata_path = main.parent / layout.METADATA_FILE_NAME
    metadata = json.loads(metadata_path.read_text())
    del metadata[layout.METADATA_KEY]
    metadata_path.write_text(json.dumps(metadata))
    with h5py.File(main, "r+") as file:
        del file["episode_0/infos/marl"]
        file["episode_0/infos/marl"] = h5py.ExternalLink(str(fifo.path), "/")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", SingleAgentReadingWarning)
            source = mm.open_source("trust/spread-v0")
        assert not source.multi_agent
        with pytest.raises(ForeignStorageError, match="episode_0/infos/marl"):
            mm.check_dataset("trust/spread-v0")
    finally:
        assert fifo.end() == 0, "the FIFO an external link names was opened"


def test_a_process_that_read_a_dataset_exits_cleanly_beside_torch(spread: Any) -> None:
    """The link access list that keeps lookups inside the file holds a Python object; HDF5
    freeing it while the interpreter is torn down crashed the process at exit (with torch
    imported), after every read had succeeded."""
    import subprocess
    import sys

    pytest.importorskip("torch")
    script = ("import torch, marl_minari as mm\n"
              "mm.load_dataset('trust/spread-v0').to_arrays([1])\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ}, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
