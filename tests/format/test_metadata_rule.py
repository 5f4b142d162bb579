"""One metadata rule for every door that writes a new dataset: unknown keys and values of
the wrong kind are refused with the same typed error, before any work."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from marl_minari.adapters import from_vault
from marl_minari.collectors.collect import collect
from synthetic import AGENTS, episode_with, spec_of, write_episodes, write_known_vault

import marl_minari as mm
from marl_minari.errors import InvalidOptionError
from marl_minari.format.ids import dataset_dir
from marl_minari.format.metadata import check_minari_metadata
from marl_minari.storage.recording import list_recordings

BAD: dict[str, tuple[dict[str, Any], str]] = {
    "unknown key": ({"autor": "me"}, "unknown metadata 'autor'"),
    "author not text": ({"author": 5}, "author=5 is not a string or a list of strings"),
    "score not a number": ({"ref_min_score": "low"}, "ref_min_score='low' is not a finite"),
    "requirements not a list": ({"requirements": "numpy"}, "requirements='numpy' is not a list"),
}


def test_the_rule_accepts_what_minari_takes() -> None:
    check_minari_metadata({"algorithm_name": "ppo", "author": ["a", "b"], "author_email": "a@b",
                           "code_permalink": "https://x", "description": "d",
                           "requirements": ["numpy>=1"], "ref_min_score": 0,
                           "ref_max_score": 1.5, "extra": {"license": "MIT"}})
    with pytest.raises(InvalidOptionError, match="unknown metadata 'extra'"):
        check_minari_metadata({"extra": {}}, extra=False)


def _doors(tmp_path: Path) -> dict[str, Callable[[dict[str, Any]], Any]]:
    vaults = tmp_path / "vaults"
    write_known_vault(vaults, "known", "Good")
    write_episodes("tests/source-v0", [3, 4], [1.0, 2.0])

    def recorder(metadata: dict[str, Any]) -> Any:
        collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=2),
                                             recording_path=tmp_path / "recording")
        try:
            return collector.create_dataset("tests/new-v0", **{
                "extra_metadata" if k == "extra" else k: v for k, v in metadata.items()})
        finally:
            collector.close()

    return {
        "write_dataset": lambda md: mm.write_dataset(
            "tests/new-v0", [episode_with(3, 1.0, 0)], spec_of(AGENTS), **md),
        "from_vault": lambda md: from_vault("known", rel_dir=vaults, vault_uid="Good",
                                              dataset_id="tests/new-v0", **md),
        "subsample": lambda md: mm.subsample("tests/source-v0", "tests/new-v0", max_steps=5,
                                             **md),
        "collect": lambda md: collect("mpe2/simple_spread_v3", 1, dataset_id="tests/new-v0",
                                      env_kwargs={"max_cycles": 2}, **md),
        "recorder": recorder,
    }


@pytest.mark.parametrize("door", ["write_dataset", "from_vault", "subsample", "collect",
                                  "recorder"])
def test_every_door_refuses_bad_metadata_before_writing(door: str, tmp_path: Path) -> None:
    write = _doors(tmp_path)[door]
    for case, (metadata, message) in BAD.items():
        if door == "recorder" and case == "unknown key":
            continue  # Minari's signature: Python itself refuses an unknown keyword
        with pytest.raises(InvalidOptionError, match=message):
            write(metadata)
        assert not dataset_dir("tests/new-v0").exists()
    assert list_recordings() == []


def test_from_vault_checks_the_new_id_before_reading_the_vault(tmp_path: Path) -> None:
    """The same id rule as every writer (malformed, then taken), before the vault is opened:
    a missing vault is not what the user hears about first."""
    with pytest.raises(mm.InvalidDatasetIdError):
        from_vault("missing", rel_dir=tmp_path, vault_uid="Good", dataset_id="no-version")
    write_episodes("tests/taken-v0", [3], [1.0])
    with pytest.raises(mm.DatasetExistsError, match="already exists"):
        from_vault("missing", rel_dir=tmp_path, vault_uid="Good", dataset_id="tests/taken-v0")
