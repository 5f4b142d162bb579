"""Counting the offset-index entries a process compares with HDF5 one by one."""

from __future__ import annotations

from typing import Any

import pytest

from marl_minari.format import offset_index


def count_entry_checks(monkeypatch: pytest.MonkeyPatch, *, forget: bool = False) -> list[Any]:
    """The index entries compared with HDF5 from now on (their HDF5 paths, in order); with
    ``forget``, as in a fresh process: what this process bound and hashed is forgotten first."""
    if forget:
        monkeypatch.setattr(offset_index, "_FINGERPRINTS", {})
        monkeypatch.setattr(offset_index, "_BINDINGS", {})
    compared: list[Any] = []
    real = offset_index._agrees

    def counting(*args: Any) -> bool:
        compared.append(args[1])
        return real(*args)

    monkeypatch.setattr(offset_index, "_agrees", counting)
    return compared
