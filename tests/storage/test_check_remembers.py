"""``check`` remembers a copy whose index it compared whole, so that reads trust it at once;
never a file it did not verify in the state remembered, never where it cannot write."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from clock import after_last_change
from forged_index import store_differently_and_reseal, swap_episodes_and_forge_index
from gymnasium import spaces
from immutable import chattr
from index_checks import count_entry_checks
from marl_strategies import assert_episode_equal, random_episode
from typer.testing import CliRunner

import marl_minari as mm
from marl_minari.cli import app
from marl_minari.errors import CorruptedDataError
from marl_minari.format import layout, offset_index
from marl_minari.format.digests import remembered_digests
from marl_minari.format.ids import dataset_dir
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.writer import write_dataset

AGENTS = ["p", "q"]
OBS = {a: spaces.Box(-3, 3, (3,), dtype=np.float32) for a in AGENTS}
ACT = {a: spaces.Discrete(4) for a in AGENTS}
SPEC = MultiAgentSpec(api="parallel", possible_agents=tuple(AGENTS), observation_spaces=OBS,
                      action_spaces=ACT)
MAIN = f"data/{layout.MAIN_FILE_NAME}"


def _copy(episodes: list[Any], source: str, copy: str) -> Path:
    """Write ``source``, copy it to ``copy`` (new inodes and times); the copy's folder."""
    write_dataset(source, episodes, SPEC)
    shutil.copytree(dataset_dir(source), dataset_dir(copy))
    # A digest taken in the clock tick of the copy's last write is never trusted.
    after_last_change(dataset_dir(copy) / MAIN)
    return dataset_dir(copy)


def test_check_of_a_copy_remembers_it_and_reads_compare_no_entry(
        monkeypatch: pytest.MonkeyPatch) -> None:
    episodes = [random_episode(AGENTS, OBS, ACT, 5, seed) for seed in range(6)]
    folder = _copy(episodes, "remember/source-v0", "remember/copy-v0")
    compared = count_entry_checks(monkeypatch, forget=True)
    mm.load_dataset("remember/copy-v0").to_arrays()
    assert compared  # an unchecked copy: entries compared one by one
    report = mm.check_dataset("remember/copy-v0")
    assert report.index_checked and report.index_remembered
    assert MAIN in remembered_digests(folder)
    compared = count_entry_checks(monkeypatch, forget=True)
    arrays = mm.load_dataset("remember/copy-v0").to_arrays()
    assert compared == []
    for episode_id, expected in enumerate(episodes):
        assert_episode_equal(arrays.episode(episode_id), expected)


def test_check_refuses_a_forged_copy_and_remembers_nothing() -> None:
    folder = _copy([random_episode(AGENTS, OBS, ACT, 4, seed) for seed in range(6)],
                   "remember/honest-v0", "remember/forged-v0")
    swap_episodes_and_forge_index(folder / "data")
    before = json.loads((folder / layout.DIGESTS_FILE_NAME).read_bytes())
    with pytest.raises(CorruptedDataError, match="disagrees with the HDF5 file"):
        mm.check_dataset("remember/forged-v0")
    after = json.loads((folder / layout.DIGESTS_FILE_NAME).read_bytes())
    del before["files"][MAIN]  # what the sidecar said of the data file is dropped, nothing added
    assert after == before
    assert MAIN not in remembered_digests(folder)


def test_a_file_changed_since_it_was_verified_is_not_remembered() -> None:
    """``vouch`` is told the state its caller verified; a file in another state when hashed
    (written in between) is left out of the sidecar."""
    folder = _copy([random_episode(AGENTS, OBS, ACT, 4, seed) for seed in range(3)],
                   "remember/changed-v0", "remember/changed-copy-v0")
    state = os.stat(folder / MAIN)
    verified = (state.st_dev, state.st_ino, state.st_size, state.st_mtime_ns,
                state.st_ctime_ns - 1)
    assert not offset_index.vouch(folder / "data", state=verified)
    assert MAIN not in remembered_digests(folder)
    assert f"data/{layout.METADATA_FILE_NAME}" in remembered_digests(folder)


def test_check_of_a_read_only_copy_passes_and_says_nothing_was_remembered(
        immutable: list[Path]) -> None:
    folder = _copy([random_episode(AGENTS, OBS, ACT, 4, seed) for seed in range(3)],
                   "remember/locked-v0", "remember/locked-copy-v0")
    (folder / layout.DIGESTS_FILE_NAME).unlink()
    chattr("+i", folder)
    immutable.append(folder)
    report = mm.check_dataset("remember/locked-copy-v0")
    assert report.index_checked and not report.index_remembered
    assert not (folder / layout.DIGESTS_FILE_NAME).exists()
    result = CliRunner().invoke(app, ["check", "remember/locked-copy-v0"])
    assert result.exit_code == 0, result.output
    assert "offset index verified, not remembered" in result.output


def test_cli_check_says_it_remembered_a_copy() -> None:
    _copy([random_episode(AGENTS, OBS, ACT, 4, seed) for seed in range(3)],
          "remember/cli-v0", "remember/cli-copy-v0")
    result = CliRunner().invoke(app, ["check", "remember/cli-copy-v0"])
    assert result.exit_code == 0, result.output
    assert "offset index verified and remembered" in result.output


@pytest.mark.parametrize(("path", "stored_as"), [
    ("rewards", lambda stored: stored.astype(np.float32)),  # the spec's leaf, another type
    ("infos/marl/agent_infos/p/score", lambda stored: stored.astype(np.float32)),
], ids=["spec-type", "unlike-the-first"])
def test_check_refuses_an_entry_stored_other_than_readers_read_it(path: str,
                                                                 stored_as: Any) -> None:
    """Every offset agrees with HDF5 and the seal with the index, but episode 1's dataset is
    not what a reader that trusts the whole index would read there (team rewards not
    float64; an agent's info not of the type episode 0 has, which a read starting at episode
    0 takes for all): not remembered. (The episode check itself refuses an observation or a
    layout column of another type or shape.)"""
    folder = _copy([random_episode(AGENTS, OBS, ACT, 4, seed, with_infos=True)
                    for seed in range(4)], "remember/typed-v0", "remember/retyped-v0")
    import h5py

    with h5py.File(folder / MAIN, "r") as file:
        stored = file[f"episode_1/{path}"][()]
    store_differently_and_reseal(folder / "data", 1, path, stored_as(stored))
    with pytest.raises(CorruptedDataError, match=f"episode_1/{path}: index says offset"):
        mm.check_dataset("remember/retyped-v0")
    assert MAIN not in remembered_digests(folder) or remembered_digests(folder)[MAIN].stat \
        != offset_index.stat_key(os.stat(folder / MAIN))


def test_a_file_remembered_before_is_no_longer_trusted_whole_once_check_refuses_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A file remembered whole by an older release, whose download or check compared offsets
    alone: episode 1's rewards are float32 where readers read float64, and a reader that
    trusts the whole index returns other values than h5py. Once `check` refuses the file,
    nothing vouches for it: reads compare each entry and go through HDF5 for that one."""
    import h5py

    from marl_minari.format import index_trust
    from marl_minari.format.digests import remember_digests

    folder = _copy([random_episode(AGENTS, OBS, ACT, 4, seed) for seed in range(3)],
                   "remember/older-v0", "remember/older-copy-v0")
    with h5py.File(folder / MAIN, "r") as file:
        stored = file["episode_1/rewards"][()].astype(np.float32)
    store_differently_and_reseal(folder / "data", 1, "rewards", stored)
    after_last_change(folder / MAIN)
    remember_digests(folder, [MAIN, f"data/{layout.METADATA_FILE_NAME}",
                              f"data/{layout.INDEX_FILE_NAME}"])

    def episode_1_rewards() -> np.ndarray:
        monkeypatch.setattr(offset_index, "_FINGERPRINTS", {})  # as in a fresh process
        monkeypatch.setattr(index_trust, "_BINDINGS", {})
        return mm.load_dataset("remember/older-copy-v0").to_arrays([1]).team_rewards

    assert not np.array_equal(episode_1_rewards(), stored)  # the older release's split view
    with pytest.raises(CorruptedDataError, match="episode_1/rewards: index says offset"):
        mm.check_dataset("remember/older-copy-v0")
    assert MAIN not in remembered_digests(folder)
    np.testing.assert_array_equal(episode_1_rewards(), stored)
