"""The copy an append rewrites: cloned where the filesystem has reflinks, copied elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from marl_minari.storage.writer import clone_or_copy

REFLINK_DIR = os.environ.get("MARL_MINARI_REFLINK_DIR")
"""A folder on a filesystem with reflinks (btrfs, XFS): runs the clone test there."""


def _source(folder: Path) -> Path:
    path = folder / "source.bin"
    path.write_bytes(os.urandom(3 * 65536 + 17))
    return path


def test_copy_has_the_same_bytes_and_leaves_the_source_alone(tmp_path: Path) -> None:
    source = _source(tmp_path)
    before = source.read_bytes()
    clone_or_copy(source, tmp_path / "copy.bin")
    assert (tmp_path / "copy.bin").read_bytes() == before
    # Writing the copy (as an append does) never reaches the original, cloned or not.
    with open(tmp_path / "copy.bin", "r+b") as handle:
        handle.seek(100)
        handle.write(b"\xff" * 1000)
    assert source.read_bytes() == before


def test_existing_target_is_replaced(tmp_path: Path) -> None:
    source = _source(tmp_path)
    (tmp_path / "copy.bin").write_bytes(b"x" * 10_000_000)
    clone_or_copy(source, tmp_path / "copy.bin")
    assert (tmp_path / "copy.bin").read_bytes() == source.read_bytes()


def test_missing_source_raises_before_creating_the_target(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        clone_or_copy(tmp_path / "absent.bin", tmp_path / "copy.bin")
    assert not (tmp_path / "copy.bin").exists()


@pytest.mark.skipif(REFLINK_DIR is None, reason="set MARL_MINARI_REFLINK_DIR to a btrfs/XFS folder")
def test_reflink_filesystem_clones(tmp_path: Path) -> None:
    folder = Path(str(REFLINK_DIR)) / tmp_path.name
    folder.mkdir(parents=True)
    source = _source(folder)
    assert clone_or_copy(source, folder / "copy.bin") is True
    assert (folder / "copy.bin").read_bytes() == source.read_bytes()
