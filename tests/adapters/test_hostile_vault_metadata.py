"""A real vault (Mava's keys) whose ``metadata.json`` was tampered with: every reader (from_vault,
the source door, describe, make_buffer) raises one ``CorruptedDataError`` naming the file and
the key, before allocating anything the claimed shapes size."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from adapter_helpers import write_vault
from marl_minari.adapters import from_vault, make_buffer

import marl_minari as mm
from marl_minari.errors import CorruptedDataError
from marl_minari.sources import open_source


def _shape(key: str, value: Any) -> Callable[[dict[str, Any]], str]:
    def tamper(meta: dict[str, Any]) -> str:
        meta["structure_shape"][key] = value
        return key
    return tamper


def _dtype(key: str, value: Any) -> Callable[[dict[str, Any]], str]:
    def tamper(meta: dict[str, Any]) -> str:
        meta["structure_dtype"][key] = value
        return key
    return tamper


def _no_dtype(meta: dict[str, Any]) -> str:
    del meta["structure_dtype"]["rewards"]
    return "rewards"


CASES: dict[str, Callable[[dict[str, Any]], str]] = {
    "shape not a tuple": _shape("observations", "observations"),
    "shape a JSON list": _shape("observations", [2, 12, 3, 18]),
    "shape a number": _shape("rewards", 7),
    "shape a dict": _shape("rewards", {}),
    "negative dimension": _shape("observations", "(2, 12, 3, -18)"),
    "batch of zero": _shape("actions", "(0, 12, 3)"),
    "huge feature dimension": _shape("observations", "(2, 12, 3, 99999999999)"),
    "one dimension": _shape("rewards", "(2,)"),
    "leaves disagree on the batch": _shape("rewards", "(5, 12, 3)"),
    "claimed agents unlike the store": _shape("terminals", "(2, 12, 4)"),
    "dtype a dict": _dtype("observations", {}),
    "dtype object": _dtype("observations", "object"),
    "dtype unknown": _dtype("observations", "not-a-dtype"),
    "dtype complex": _dtype("rewards", "complex64"),
    "dtype unlike the store": _dtype("rewards", "float64"),
    "dtype missing": _no_dtype,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_tampered_vault_metadata_is_a_corrupted_data_error_naming_the_key(
        case: str, vaults: Path) -> None:
    write_vault(vaults, "mava", "u", streams=2)
    path = vaults / "mava" / "u"
    meta_path = path / "metadata.json"
    meta = json.loads(meta_path.read_text())
    key = CASES[case](meta)
    meta_path.write_text(json.dumps(meta))
    attempts = {
        "from_vault": lambda: from_vault("mava", rel_dir=vaults, vault_uid="u",
                                                dataset_id="og/back-v0"),
        "open_source": lambda: open_source(path).read([0]),
        "describe": lambda: mm.describe(path),
        "make_buffer": lambda: make_buffer([path], sample_batch_size=2,
                                           sample_sequence_length=2),
    }
    for reader, attempt in attempts.items():
        tracemalloc.start()
        try:
            with pytest.raises(CorruptedDataError) as error:
                attempt()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        message = str(error.value)
        assert str(meta_path) in message and repr(key) in message, (reader, message)
        assert peak < 64 << 20, (reader, peak)
