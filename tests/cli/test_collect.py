"""``collect`` from Python: checks before the env is made, appending, progress and env ids."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from marl_minari.collectors.collect import collect

import marl_minari as mm
from marl_minari.errors import (
    DatasetExistsError,
    DatasetNotFoundError,
    EnvDescriptorError,
    InvalidDatasetIdError,
    InvalidOptionError,
)

TINY = {"max_cycles": 3}


@pytest.fixture
def made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tracer_env:make`` builds mpe2 spread and touches the returned file."""
    marker = tmp_path / "env-was-made"
    (tmp_path / "tracer_env.py").write_text(
        "from pathlib import Path\nfrom mpe2 import simple_spread_v3\n"
        f"def make(**kwargs):\n    Path({str(marker)!r}).touch()\n"
        "    return simple_spread_v3.parallel_env(max_cycles=3)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "tracer_env", raising=False)
    return marker


def test_bad_targets_fail_before_the_env_is_made(made: Path, datasets_root: Path) -> None:
    collect("mpe2/simple_spread_v3", 1, dataset_id="cli/taken-v0", env_kwargs=TINY)
    before = sorted(datasets_root.rglob("*"))
    with pytest.raises(InvalidDatasetIdError):
        collect("tracer_env:make", 1, dataset_id="foo")
    with pytest.raises(DatasetExistsError, match="append"):
        collect("tracer_env:make", 1, dataset_id="cli/taken-v0")
    with pytest.raises(DatasetNotFoundError, match="nothing to append to"):
        collect("tracer_env:make", 1, dataset_id="cli/free-v0", append=True)
    with pytest.raises(InvalidOptionError, match="needs the id"):
        collect("tracer_env:make", 1, append=True)
    with pytest.raises(InvalidOptionError, match="'parallel' or 'aec'"):
        collect("tracer_env:make", 1, api="turns")
    with pytest.raises(InvalidOptionError, match="state_encoding='zstd'"):
        collect("tracer_env:make", 1, state_encoding="zstd")
    assert not made.exists()
    assert sorted(datasets_root.rglob("*")) == before


def test_append_adds_episodes_to_the_dataset(datasets_root: Path) -> None:
    collect("mpe2/simple_spread_v3", 2, dataset_id="cli/grow-v0", env_kwargs=TINY)
    grown = collect("mpe2/simple_spread_v3", 3, seed=10, dataset_id="cli/grow-v0",
                    env_kwargs=TINY, append=True)
    assert grown.total_episodes == 5
    seeds = [int(m["seed"]) for m in grown.minari.storage.get_episode_metadata(range(5))]
    assert seeds == [0, 1, 10, 11, 12]


def test_record_state_off_records_no_state(datasets_root: Path) -> None:
    without = collect("mpe2/simple_spread_v3", 1, dataset_id="cli/nostate-v0",
                      env_kwargs=TINY, record_state=False)
    assert without.spec.state_space is None
    assert mm.load_dataset("cli/nostate-v0")[0].state is None


def test_progress_counts_steps_and_shows_the_writing_phase(
        datasets_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    collect("mpe2/simple_spread_v3", 2, dataset_id="cli/progress-v0", env_kwargs=TINY,
            progress=True)
    captured = capsys.readouterr()
    output = captured.err + captured.out
    assert "episode 2/2" in output
    assert "6step" in output  # 2 episodes of 3 steps, counted step by step
    assert "writing 2 episodes into cli/progress-v0" in output


@pytest.mark.parametrize(("typo", "meant"), [
    ("butterfly/pistonbal_v6", "butterfly/pistonball_v6"),
    ("classic/ches-v6", "classic/chess-v6"),
    ("mpe2/simple_sprad_v3", "mpe2/simple_spread_v3"),
])
def test_unknown_env_ids_get_close_matches(typo: str, meant: str) -> None:
    with pytest.raises(EnvDescriptorError, match=f"did you mean {meant}"):
        mm.make_env(typo)


def test_unknown_env_without_close_match_says_how_to_fix() -> None:
    with pytest.raises(EnvDescriptorError, match="Check the id") as caught:
        mm.make_env("nowhere/nothing_v1")
    assert "did you mean" not in str(caught.value)


def test_append_of_turn_based_episodes_to_a_parallel_dataset_is_refused(
        cli: Any, datasets_root: Path) -> None:
    """The mix the command line let through: AEC episodes into a parallel dataset. Refused
    before recording, with one error line, and the dataset byte-identical."""
    collect("mpe2/simple_spread_v3", 2, dataset_id="cli/parallel-v0", env_kwargs=TINY)
    folder = datasets_root / "cli" / "parallel-v0"
    before = {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    result = cli("collect", "mpe2/simple_spread_v3", "--episodes", "1", "--api", "aec",
                 "--env-kwargs", json.dumps(TINY), "--dataset-id", "cli/parallel-v0",
                 "--append")
    result.assert_one_error(1, "differ in api: 'aec' vs 'parallel'")
    assert {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} == before
