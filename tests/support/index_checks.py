"""Counting the offset-index entries a process compares with HDF5 one by one."""

from __future__ import annotations

from typing import Any

import pytest

from marl_minari.format import entry_checks, index_trust, offset_index


def count_entry_checks(monkeypatch: pytest.MonkeyPatch, *, forget: bool = False) -> list[Any]:
    """The index entries compared with HDF5 from now on (their HDF5 paths, in order); with
    ``forget``, as in a fresh process: what this process bound and hashed is forgotten first
    (the records of published files' comparisons on disk stay, as they do for a new process)."""
    if forget:
        monkeypatch.setattr(offset_index, "_FINGERPRINTS", {})
        monkeypatch.setattr(index_trust, "_BINDINGS", {})
        monkeypatch.setattr(index_trust, "_UNSAVED", {})
    compared: list[Any] = []
    real = entry_checks.agrees

    def counting(group: Any, check: entry_checks.EntryCheck) -> bool:
        compared.append(b"episode_%d/%s" % (check.episode_id, check.path))
        return real(group, check)

    monkeypatch.setattr(entry_checks, "agrees", counting)
    return compared
