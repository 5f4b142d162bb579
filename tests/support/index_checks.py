"""Counting the offset-index entries a process compares with HDF5 (by HDF5 itself or against
a header template HDF5 compared), and the calls a comparison makes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from marl_minari.format import entry_checks, index_trust, offset_index
from marl_minari.format.entry_checks import ReadAs
from marl_minari.storage.reader_state import metadata_read_as


def count_entry_checks(monkeypatch: pytest.MonkeyPatch, *, forget: bool = False) -> list[Any]:
    """The index entries compared with HDF5 from now on (their HDF5 paths, in order); with
    ``forget``, as in a fresh process: what this process bound and hashed is forgotten first
    (the records of published files' comparisons on disk stay, as they do for a new process)."""
    if forget:
        monkeypatch.setattr(offset_index, "_FINGERPRINTS", {})
        monkeypatch.setattr(index_trust, "_BINDINGS", {})
        monkeypatch.setattr(index_trust, "_UNSAVED", {})
    compared: list[Any] = []
    real = entry_checks.compare_leaves

    def counting(file: Any, leaves: Sequence[entry_checks.LeafChecks], *args: Any) -> Any:
        compared.extend(b"episode_%d/%s" % (episode_id, leaf.path)
                        for leaf in leaves for episode_id in leaf.episode_ids.tolist())
        return real(file, leaves, *args)

    monkeypatch.setattr(entry_checks, "compare_leaves", counting)
    return compared


def recorded_calls(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str
                   ) -> list[tuple[Any, ...]]:
    """The arguments of every call of ``owner.name`` from now on."""
    calls: list[tuple[Any, ...]] = []
    real = getattr(owner, name)

    def recording(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(owner, name, recording)
    return calls


def copied_data(data_dir: Path, into: Path
                ) -> tuple[offset_index.OffsetIndex, Mapping[str, ReadAs | None]]:
    """A copy of the dataset's ``data`` folder ``data_dir`` at ``into``: its offset index and
    how readers read its leaves, for a whole-file check of the copy."""
    shutil.copytree(data_dir, into)
    index = offset_index.read(into)
    assert index is not None
    return index, metadata_read_as(json.loads((into / "metadata.json").read_text()), into)
