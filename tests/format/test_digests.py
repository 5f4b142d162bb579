"""Digests of dataset files: computed right, remembered by the writer, trusted only while valid."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import blake3
import pytest
from clock import after_last_change
from hypothesis import given, settings
from hypothesis import strategies as st

import marl_minari as mm
from marl_minari.format import layout
from marl_minari.format.digests import (
    ALGORITHMS,
    CHUNK_SIZE,
    MultiHash,
    hash_file,
    new_hash,
    remember_digests,
    remembered_digests,
    stat_key,
)
from marl_minari.storage.writer import append_to_dataset

MAIN = f"data/{layout.MAIN_FILE_NAME}"
DATA_FILES = [MAIN, f"data/{layout.METADATA_FILE_NAME}", f"data/{layout.INDEX_FILE_NAME}"]


def _reference(data: bytes) -> dict[str, str]:
    return {"sha256": hashlib.sha256(data).hexdigest(), "blake3": blake3.blake3(data).hexdigest()}


@settings(max_examples=25, deadline=None)
@given(st.binary(max_size=3 * 1024) | st.sampled_from([b"", b"x" * (CHUNK_SIZE + 7)]))
def test_hash_file_matches_hashlib_and_blake3(tmp_path_factory: pytest.TempPathFactory,
                                              data: bytes) -> None:
    path = tmp_path_factory.mktemp("hash") / "file.bin"
    path.write_bytes(data)
    assert hash_file(path) == (len(data), _reference(data))
    assert hash_file(path, ("blake3",)) == (len(data), {"blake3": _reference(data)["blake3"]})


def test_multi_hash_and_unknown_algorithms() -> None:
    digests = MultiHash(ALGORITHMS)
    digests.update(b"multi")
    digests.update(memoryview(b"-agent"))
    assert digests.hexdigests() == _reference(b"multi-agent")
    with pytest.raises(ValueError, match="md5"):
        new_hash("md5")


@pytest.fixture
def dataset(record_parallel: Callable[..., Any]) -> Path:
    """A real recorded mpe2 dataset, then remembered again after a clock tick has surely passed."""
    dataset, _ = record_parallel("mpe2/simple_spread_v3", 2, max_cycles=10,
                                 dataset_id="tests/digests-v0")
    folder = Path(dataset.data_path).parent
    after_last_change(*(folder / name for name in DATA_FILES))
    remember_digests(folder, DATA_FILES)
    return folder


def _sidecar(folder: Path) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((folder / layout.DIGESTS_FILE_NAME).read_text())
    return document


def test_writer_remembers_the_digests_of_every_data_file(
        record_parallel: Callable[..., Any]) -> None:
    dataset, _ = record_parallel("mpe2/simple_spread_v3", 2, max_cycles=10,
                                 dataset_id="tests/written-v0")
    folder = Path(dataset.data_path).parent
    files = _sidecar(folder)["files"]
    assert sorted(files) == sorted(DATA_FILES)
    for relative, entry in files.items():
        path = folder / relative
        assert {k: entry[k] for k in ALGORITHMS} == _reference(path.read_bytes())
        assert entry["size"] == path.stat().st_size
        assert tuple(entry["stat"]) == stat_key(path.stat())


def test_append_forgets_the_data_file_and_remembers_the_rest(dataset: Path) -> None:
    """An append does not hash the whole data file (its cost would grow with the dataset):
    the stale digests go, the small files' new ones are remembered, publishing hashes the
    data file when asked."""
    assert MAIN in _sidecar(dataset)["files"]
    more = list(mm.load_dataset("tests/digests-v0"))
    spec = mm.load_dataset("tests/digests-v0").spec
    append_to_dataset("tests/digests-v0", more, spec)
    files = _sidecar(dataset)["files"]
    assert MAIN not in files
    metadata = f"data/{layout.METADATA_FILE_NAME}"
    assert {k: files[metadata][k] for k in ALGORITHMS} == _reference(
        (dataset / metadata).read_bytes())


def test_remembered_digests_describe_unchanged_files(dataset: Path) -> None:
    known = remembered_digests(dataset)
    assert sorted(known) == sorted(DATA_FILES)
    for relative, remembered in known.items():
        data = (dataset / relative).read_bytes()
        assert remembered.digests.size == len(data)
        assert remembered.digests.sha256 == _reference(data)["sha256"]
        assert remembered.digests.blake3 == _reference(data)["blake3"]


def test_a_rewritten_file_is_not_trusted_even_with_the_same_bytes(dataset: Path) -> None:
    main = dataset / MAIN
    main.write_bytes(main.read_bytes())  # same size and content: only ctime/mtime move
    assert MAIN not in remembered_digests(dataset)
    assert f"data/{layout.METADATA_FILE_NAME}" in remembered_digests(dataset)


def test_a_replaced_file_is_not_trusted(dataset: Path) -> None:
    main = dataset / MAIN
    copy = main.with_name("copy.hdf5")
    copy.write_bytes(main.read_bytes())
    status = main.stat()
    os.utime(copy, ns=(status.st_atime_ns, status.st_mtime_ns))
    os.replace(copy, main)  # same size and mtime, another inode
    assert MAIN not in remembered_digests(dataset)


def test_a_file_hashed_in_the_tick_of_its_last_write_is_not_trusted(dataset: Path) -> None:
    sidecar = dataset / layout.DIGESTS_FILE_NAME
    ctime = (dataset / MAIN).stat().st_ctime_ns
    os.utime(sidecar, ns=(ctime, ctime))  # as if the sidecar was written in that same tick
    assert MAIN not in remembered_digests(dataset)
    os.utime(sidecar, ns=(ctime + 1, ctime + 1))
    assert MAIN in remembered_digests(dataset)


@pytest.mark.parametrize("damage", ["garbage", "other format", "bad digest", "bad stat",
                                    "missing"])
def test_a_damaged_sidecar_is_ignored(dataset: Path, damage: str) -> None:
    sidecar = dataset / layout.DIGESTS_FILE_NAME
    document = _sidecar(dataset)
    written = sidecar.stat().st_mtime_ns
    if damage == "garbage":
        sidecar.write_bytes(b"\x00{not json")
    elif damage == "other format":
        sidecar.write_text(json.dumps({**document, "format": "something-else"}))
    elif damage == "bad digest":
        document["files"][MAIN]["sha256"] = "Z" * 64
        sidecar.write_text(json.dumps(document))
    elif damage == "bad stat":
        document["files"][MAIN]["stat"] = ["x"]
        sidecar.write_text(json.dumps(document))
    else:
        sidecar.unlink()
    if sidecar.exists():
        os.utime(sidecar, ns=(written, written))
    known = remembered_digests(dataset)
    assert MAIN not in known
    if damage in ("bad digest", "bad stat"):
        assert f"data/{layout.METADATA_FILE_NAME}" in known


def test_remembering_is_best_effort(dataset: Path) -> None:
    remember_digests(dataset, [MAIN, "data/vanished.bin"])
    assert sorted(_sidecar(dataset)["files"]) == [MAIN]
    sidecar = dataset / layout.DIGESTS_FILE_NAME
    sidecar.unlink()
    (sidecar / "blocker").mkdir(parents=True)  # the sidecar cannot be replaced
    remember_digests(dataset, DATA_FILES)
    assert sorted(p.name for p in dataset.iterdir()) == sorted(
        ["data", layout.DIGESTS_FILE_NAME])  # no temporary file left behind
    assert remembered_digests(dataset) == {}
