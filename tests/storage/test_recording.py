"""Recordings in progress: the episode journal, torn tails, and recovery after a SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import minari
import numpy as np
import pytest
from gymnasium import spaces
from marl_strategies import assert_episode_equal, random_episode

import marl_minari as mm
from marl_minari.errors import CorruptedDataError, DatasetNotFoundError, InvalidDatasetIdError
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.journal import encode_record, read_journal
from marl_minari.storage.recording import (
    JOURNAL_NAME,
    Recording,
    list_recordings,
    recover_recording,
)

AGENTS = ["x", "y"]
OBS = {"x": spaces.Dict({"t": spaces.Text(5, min_length=0), "b": spaces.Box(-1, 1, (2,))}),
       "y": spaces.Tuple((spaces.Discrete(3), spaces.MultiBinary(2)))}
ACT = {"x": spaces.Discrete(2), "y": spaces.Box(-1, 1, (1,), dtype=np.float64)}
SPEC = MultiAgentSpec(api="parallel", possible_agents=tuple(AGENTS), observation_spaces=OBS,
                      action_spaces=ACT)


def _episodes(count: int) -> list:
    return [random_episode(AGENTS, OBS, ACT, 2 + i % 3, seed=i, with_infos=True)
            for i in range(count)]


def _record(path: Path | None, episodes: list) -> Recording:
    recording = Recording(SPEC, path=path)
    for episode in episodes:
        recording.append(episode)
    return recording


def test_journal_round_trips_every_leaf(tmp_path: Path) -> None:
    episodes = _episodes(3)
    recording = _record(tmp_path / "rec", episodes)
    recording.close(keep=True)
    assert Recording.open(tmp_path / "rec").episodes == 3
    recover_recording(tmp_path / "rec", "rec/roundtrip-v0")
    dataset = mm.load_dataset("rec/roundtrip-v0")
    for i, episode in enumerate(episodes):
        assert_episode_equal(dataset.episode(i), episode)
        assert dataset.episode(i).seed == episode.seed
        assert dataset.episode(i).options == episode.options
    assert not (tmp_path / "rec").exists()  # the recording is gone once it is a dataset


@pytest.mark.parametrize("cut", [1, 10, 40, -1])
def test_torn_tail_loses_only_the_last_record(tmp_path: Path, cut: int) -> None:
    episodes = _episodes(3)
    _record(tmp_path / "rec", episodes).close(keep=True)
    journal = tmp_path / "rec" / JOURNAL_NAME
    last = len(encode_record(episodes[-1]))
    size = journal.stat().st_size
    with open(journal, "r+b") as handle:  # cut inside the frame, the header or the payload
        handle.truncate(size - last + cut if cut > 0 else size - 1)
    assert len(list(read_journal(journal))) == 2
    recover_recording(tmp_path / "rec", "rec/torn-v0")
    dataset = minari.load_dataset("rec/torn-v0")
    assert dataset.total_episodes == 2
    for i in range(2):
        assert_episode_equal(mm.load_dataset("rec/torn-v0").episode(i), episodes[i])


def test_damaged_last_record_fails_its_checksum(tmp_path: Path) -> None:
    episodes = _episodes(3)
    _record(tmp_path / "rec", episodes).close(keep=True)
    journal = tmp_path / "rec" / JOURNAL_NAME
    content = bytearray(journal.read_bytes())
    content[-3] ^= 0xFF  # a flipped byte in the last record's payload
    journal.write_bytes(bytes(content))
    assert [e.total_steps for e in read_journal(journal)] == [2, 3]


def test_appending_after_a_torn_tail_keeps_the_new_records(tmp_path: Path) -> None:
    episodes = _episodes(4)
    recording = _record(tmp_path / "rec", episodes[:1])
    journal = tmp_path / "rec" / JOURNAL_NAME
    first = journal.stat().st_size
    recording.append(episodes[1])
    recording.close(keep=True)
    size = journal.stat().st_size
    with open(journal, "r+b") as handle:
        handle.truncate(size - 7)  # killed while writing the second record
    torn = journal.read_bytes()[first:]
    resumed = _record(tmp_path / "rec", episodes[2:])
    assert resumed.episodes == 3
    resumed.close(keep=True)
    assert [e.total_steps for e in read_journal(journal)] == [2, 4, 2]
    assert (tmp_path / "rec" / (JOURNAL_NAME + ".damaged")).read_bytes() == torn
    recover_recording(tmp_path / "rec", "rec/resumed-v0")
    dataset = mm.load_dataset("rec/resumed-v0")
    for i, episode in enumerate([episodes[0], *episodes[2:]]):
        assert_episode_equal(dataset.episode(i), episode)


def test_reopening_a_recording_counts_and_keeps_its_episodes(tmp_path: Path) -> None:
    _record(tmp_path / "rec", _episodes(2)).close(keep=True)
    reopened = Recording(SPEC, path=tmp_path / "rec")
    assert reopened.episodes == 2
    reopened.close(keep=False)  # holds episodes: not removed
    assert len(list(read_journal(tmp_path / "rec" / JOURNAL_NAME))) == 2
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=2),
                                         recording_path=tmp_path / "spread")
    collector.reset(seed=0)
    while collector.agents:
        collector.step({a: 0 for a in collector.agents})
    collector.close()
    again = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=2),
                                     recording_path=tmp_path / "spread")
    assert again.recording_path == tmp_path / "spread"
    again.close()  # nothing new recorded: the earlier episode stays
    assert len(list(read_journal(tmp_path / "spread" / JOURNAL_NAME))) == 1


def test_recovery_errors_keep_the_recording(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="not a recording folder"):
        recover_recording(tmp_path / "nothing", "rec/none-v0")
    empty = Recording(SPEC, path=tmp_path / "empty")
    empty.close(keep=True)
    with pytest.raises(CorruptedDataError, match="no complete episode"):
        recover_recording(tmp_path / "empty", "rec/empty-v0")
    assert (tmp_path / "empty").exists()
    _record(tmp_path / "rec", _episodes(2)).close(keep=True)
    with pytest.raises(InvalidDatasetIdError):
        recover_recording(tmp_path / "rec", "t/bad-v0")
    assert recover_recording(tmp_path / "rec", "rec/good-v0").exists()
    assert mm.load_dataset("rec/good-v0").total_episodes == 2


def test_list_recordings_shows_unsaved_episodes(datasets_root: Path) -> None:
    recording = _record(None, _episodes(2))
    recording.close(keep=True)
    Recording(SPEC).close(keep=False)  # an empty one is removed and not listed
    found = list_recordings()
    assert [(r.path, r.episodes, r.steps) for r in found] == [(recording.path, 2, 5)]
    assert str(recording.path).startswith(str(datasets_root / ".marl_minari"))
    assert found[0].env == "unknown"


# --- a real recording killed with SIGKILL -------------------------------------------------------

CHILD = textwrap.dedent("""
    import sys, time, warnings
    warnings.simplefilter("ignore")
    import numpy as np
    import marl_minari as mm

    mode, path, hold_after = sys.argv[1], sys.argv[2], int(sys.argv[3])
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=5),
                                         recording_path=path,
                                         background_writing=sys.argv[4] == "True")
    rng = np.random.default_rng(0)
    print("started", flush=True)
    episode = 0
    while True:
        collector.reset(seed=episode)
        steps = 0
        while collector.agents:
            if mode == "hold" and episode == hold_after and steps == 3:
                collector.flush()  # every finished episode is durable from here on
                print("holding", flush=True)
                time.sleep(120)
            collector.step({a: int(rng.integers(5)) for a in collector.agents})
            steps += 1
        episode += 1
        print(f"done {episode} {collector.durable_episodes}", flush=True)
""")


def _spawn(tmp_path: Path, datasets_root: Path, mode: str, name: str,
           hold_after: int = 0, background: bool = False
           ) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    path = tmp_path / name
    process = subprocess.Popen(
        [sys.executable, str(script), mode, str(path), str(hold_after), str(background)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "MINARI_DATASETS_PATH": str(datasets_root)},
    )
    return process, path


def _wait_for(process: subprocess.Popen[str], prefix: str) -> list[str]:
    assert process.stdout is not None
    lines = []
    while True:
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"child ended early: {process.stderr.read()}")  # type: ignore
        lines.append(line.strip())
        if line.startswith(prefix):
            return lines


def _check_recovered(path: Path, dataset_id: str, count: int) -> None:
    recover_recording(path, dataset_id)
    plain = minari.load_dataset(dataset_id)
    assert plain.total_episodes == count
    assert all(len(e) == 5 for e in plain.iterate_episodes())
    dataset = mm.load_dataset(dataset_id)
    assert dataset.episode_seeds() == list(range(count))
    assert dataset.to_arrays().episode_lengths.tolist() == [5] * count


def test_sigkill_mid_episode_keeps_every_finished_episode(tmp_path: Path,
                                                          datasets_root: Path) -> None:
    # One child holds in the middle of its 4th episode; three are killed at random moments.
    holding, hold_path = _spawn(tmp_path, datasets_root, "hold", "held", hold_after=3)
    children = [holding]
    try:
        _wait_for(holding, "holding")
        holding.send_signal(signal.SIGKILL)
        holding.wait(timeout=30)
        _check_recovered(hold_path, "killed/held-v0", 3)

        rng = np.random.default_rng(1234)
        for i in range(3):
            # The second child writes in the background: kills strike at its hand-over too.
            process, path = _spawn(tmp_path, datasets_root, "run", f"random{i}",
                                   background=i == 1)
            children.append(process)
            seen = _wait_for(process, "done 2")
            time.sleep(float(rng.uniform(0.0, 0.05)))
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=30)
            assert process.stdout is not None
            reported = [line for line in process.stdout.read().splitlines()
                        if line.startswith("done")]
            finished = 2 + len(reported)
            claimed = int((seen + reported)[-1].split()[2])
            recovered = len(list(read_journal(path / JOURNAL_NAME)))
            # Every episode claimed durable is kept; one finished after the last print (or
            # written by the background writer since) may be kept too, never more.
            assert claimed <= recovered <= finished + 1
            _check_recovered(path, f"killed/random{i}-v0", recovered)
    finally:
        for process in children:
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


def test_killed_default_recording_is_listed(tmp_path: Path, datasets_root: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD.replace("recording_path=path", "recording_path=None"))
    process = subprocess.Popen([sys.executable, str(script), "hold", "unused", "2", "True"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "MINARI_DATASETS_PATH": str(datasets_root)})
    try:
        _wait_for(process, "holding")
    finally:
        process.kill()
        process.wait(timeout=30)
    found = list_recordings()
    assert len(found) == 1 and found[0].episodes == 2 and found[0].steps == 10
    assert found[0].env == "mpe2/simple_spread_v3"
    _check_recovered(found[0].path, "killed/listed-v0", 2)
    assert list_recordings() == []


@pytest.mark.filterwarnings("ignore:algorithm_name, author")
def test_a_failed_create_dataset_says_where_the_episodes_are_and_how_to_recover(
        tmp_path: Path) -> None:
    """The episodes of a refused ``create_dataset`` stay in the recording, and the error
    names its folder and the exact command that makes a dataset of them."""
    def played(folder: Path) -> mm.ParallelDataCollector:
        collector = mm.ParallelDataCollector(
            mm.make_env("mpe2/simple_spread_v3", max_cycles=2), recording_path=folder)
        collector.reset(seed=3)
        while collector.agents:
            collector.step({a: 0 for a in collector.agents})
        return collector

    first = played(tmp_path / "first")
    first.create_dataset("rec/taken-v0")
    first.close()
    late = played(tmp_path / "late")
    kept = late.recording_path
    with pytest.raises(mm.DatasetExistsError) as taken:
        late.create_dataset("rec/taken-v0")
    assert (f"The episodes stay in the recording {kept} (1 not stored): call create_dataset "
            f"with a new id, or run: marl-minari recover {kept} NEW_DATASET_ID") in str(
                taken.value)
    with pytest.raises(InvalidDatasetIdError, match=f"marl-minari recover {kept} NEW_DATASET"):
        late.create_dataset("no-version")
    with pytest.warns(UserWarning, match="1 recorded episode"):
        late.close()
    recover_recording(kept, "rec/rescued-v0")
    assert mm.load_dataset("rec/rescued-v0").episode_seeds() == [3]
