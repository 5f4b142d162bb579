"""Publishing reuses the digests a dataset remembers, and never ones that no longer hold."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import blake3
import pytest
from clock import after_last_change
from marl_minari.registry.transfer import copy_file_and_hash

from marl_minari import registry
from marl_minari.errors import CorruptedDataError
from marl_minari.format import layout
from marl_minari.format.digests import remember_digests, stat_key
from marl_minari.format.ids import dataset_dir

MAIN = f"data/{layout.MAIN_FILE_NAME}"
FORGED = "0" * 64


@pytest.fixture
def remembered(small_dataset: Callable[..., str]) -> str:
    """A small real dataset whose digests are remembered a clock tick after its last write."""
    dataset_id = small_dataset()
    folder = dataset_dir(dataset_id)
    after_last_change(*(folder / "data").iterdir())
    remember_digests(folder, [p.relative_to(folder).as_posix()
                              for p in (folder / "data").iterdir()])
    return dataset_id


def _manifest_digests(registry_dir: Path, dataset_id: str) -> dict[str, tuple[str, str]]:
    manifest = json.loads((registry_dir / dataset_id / "manifest.json").read_text())
    return {e["path"]: (e["sha256"], e["blake3"]) for e in manifest["files"]}


def _true_digests(folder: Path) -> dict[str, tuple[str, str]]:
    return {p.relative_to(folder).as_posix(): (hashlib.sha256(p.read_bytes()).hexdigest(),
                                                blake3.blake3(p.read_bytes()).hexdigest())
            for p in (folder / "data").iterdir()}


def _forge_sidecar(folder: Path) -> None:
    """Replace the remembered digests of the data file, keeping its identity and the tick."""
    sidecar = folder / layout.DIGESTS_FILE_NAME
    written = sidecar.stat().st_mtime_ns
    document = json.loads(sidecar.read_text())
    document["files"][MAIN].update(sha256=FORGED, blake3=FORGED)
    sidecar.write_text(json.dumps(document))
    os.utime(sidecar, ns=(written, written))


def test_publish_reuses_remembered_digests(remembered: str, registry_dir: Path,
                                          hashed_bytes: list[int]) -> None:
    folder = dataset_dir(remembered)
    registry.publish(remembered)
    main_size = (folder / MAIN).stat().st_size
    assert sum(hashed_bytes) < main_size  # the data file was copied, not read again
    assert _manifest_digests(registry_dir, remembered) == _true_digests(folder)


def test_forged_remembered_digests_are_what_publish_trusts(remembered: str,
                                                          registry_dir: Path) -> None:
    # The counterpart of the test above: it shows the sidecar is what publish used, so the
    # two tests below would fail if publish trusted a sidecar that no longer holds.
    _forge_sidecar(dataset_dir(remembered))
    registry.publish(remembered)
    assert _manifest_digests(registry_dir, remembered)[MAIN] == (FORGED, FORGED)


def test_publish_rehashes_a_file_written_after_its_digests(remembered: str,
                                                          registry_dir: Path) -> None:
    folder = dataset_dir(remembered)
    _forge_sidecar(folder)
    main = folder / MAIN
    main.write_bytes(main.read_bytes())
    registry.publish(remembered)
    assert _manifest_digests(registry_dir, remembered) == _true_digests(folder)


def test_publish_rehashes_a_file_hashed_in_the_tick_of_its_last_write(
        remembered: str, registry_dir: Path) -> None:
    folder = dataset_dir(remembered)
    _forge_sidecar(folder)
    ctime = (folder / MAIN).stat().st_ctime_ns
    os.utime(folder / layout.DIGESTS_FILE_NAME, ns=(ctime, ctime))
    registry.publish(remembered)
    assert _manifest_digests(registry_dir, remembered) == _true_digests(folder)


def test_copy_refuses_a_source_changed_since_it_was_hashed(tmp_path: Path) -> None:
    source = tmp_path / "source.bin"
    source.write_bytes(b"remembered bytes")
    identity = stat_key(source.stat())
    copied, digests = copy_file_and_hash(source, tmp_path / "copy.bin", (), expect=identity)
    assert (copied, digests) == (16, {})
    assert (tmp_path / "copy.bin").read_bytes() == b"remembered bytes"
    after_last_change(source)
    source.write_bytes(b"changed  bytes!!")
    with pytest.raises(CorruptedDataError, match="changed after its digests"):
        copy_file_and_hash(source, tmp_path / "again.bin", (), expect=identity)
