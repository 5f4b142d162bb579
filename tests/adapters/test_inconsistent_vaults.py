"""A vault whose record disagrees with its arrays (hand-edited, or from another tool) is a typed
error naming the file and the key, in every reader: from_vault, the door and make_buffer."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from marl_minari.adapters import from_vault, make_buffer, to_vault

from marl_minari.errors import CorruptedDataError
from marl_minari.sources import open_source


def _drop_agent(ours: dict[str, Any]) -> None:
    ours["view"]["agents"] = ours["view"]["agents"][:-1]


def _add_agent(ours: dict[str, Any]) -> None:
    ours["view"]["agents"] = [*ours["view"]["agents"], "intruder"]


def _rename_agent(ours: dict[str, Any]) -> None:
    ours["view"]["agents"] = ["intruder", *ours["view"]["agents"][1:]]


def _widen_observations(ours: dict[str, Any]) -> None:
    ours["view"]["obs_shape"] = [ours["view"]["obs_shape"][0], ours["view"]["obs_shape"][1] + 4]


def _drop_restoration_array(ours: dict[str, Any]) -> None:
    ours["exact"] = ours["exact"][1:]


CASES: dict[str, Callable[[dict[str, Any]], None]] = {
    "fewer agents": _drop_agent, "more agents": _add_agent, "renamed agent": _rename_agent,
    "wider observations": _widen_observations, "missing array": _drop_restoration_array,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_vault_whose_record_disagrees_with_its_arrays_is_refused(
        case: str, vaults: Path, record_parallel: Any) -> None:
    dataset, _ = record_parallel("mpe2/simple_spread_v3", 2, dataset_id="og/src-v0",
                                 max_cycles=5)
    path = to_vault(dataset, rel_dir=vaults, vault_name="mine", vault_uid="u")
    meta_path = path / "metadata.json"
    meta = json.loads(meta_path.read_text())
    CASES[case](meta["marl_minari"])
    meta_path.write_text(json.dumps(meta))
    attempts = [lambda: from_vault(rel_dir=vaults, vault_name="mine", vault_uid="u",
                                   dataset_id="og/back-v0"),
                lambda: open_source(path).read([0, 1])]
    if case != "missing array":  # a buffer holds the view only: it needs no restoration array
        attempts.append(
            lambda: make_buffer([path], sample_batch_size=2, sample_sequence_length=2))
    for attempt in attempts:
        with pytest.raises(CorruptedDataError) as error:
            attempt()
        assert str(meta_path) in str(error.value) or str(path) in str(error.value)
