"""The background journal writer keeps every promise the journal made.

Finished episodes are handed to a writer thread; one is durable only once its journal record
is written and flushed; the hand-over is bounded; a failure in the thread is raised in the
recorder as the original error; a kill at the hand-over loses only episodes never claimed
durable, and recovery stores complete episodes once each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import minari
import numpy as np
import pytest

import marl_minari as mm
from marl_minari.errors import ConfigurationError, CorruptedDataError
from marl_minari.format import jpeg
from marl_minari.storage import recording
from marl_minari.storage.journal import read_journal
from marl_minari.storage.journal_writer import JournalWriter
from marl_minari.storage.recording import JOURNAL_NAME

# Recordings these tests leave unsaved on purpose are kept with a warning.
pytestmark = pytest.mark.filterwarnings("ignore:.*recorded episode.*in no dataset yet")

META = {"algorithm_name": "random", "author": "tests", "author_email": "t@example.com",
        "code_permalink": "https://example.com", "description": "background writer"}


def _play(collector: Any, episodes: int, first_seed: int = 0) -> None:
    for seed in range(first_seed, first_seed + episodes):
        collector.reset(seed=seed)
        while collector.agents:
            collector.step({a: collector.action_space(a).sample() for a in collector.agents})


def _spread(**kwargs: Any) -> mm.ParallelDataCollector:
    """A collector writing in the background (unless ``kwargs`` say otherwise)."""
    return mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3),
                                    **{"background_writing": True, **kwargs})


def _slow_appends(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    real = recording.Recording.append

    def append(self: Any, episode: Any, metadata: Any = None) -> None:
        time.sleep(seconds)
        real(self, episode, metadata)

    monkeypatch.setattr(recording.Recording, "append", append)


def _gated_appends(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """Journal appends wait until the returned event is set."""
    real = recording.Recording.append
    gate = threading.Event()

    def append(self: Any, episode: Any, metadata: Any = None) -> None:
        assert gate.wait(60), "the test never opened the gate"
        real(self, episode, metadata)

    monkeypatch.setattr(recording.Recording, "append", append)
    return gate


def test_flush_makes_every_finished_episode_durable(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = _gated_appends(monkeypatch)
    collector = _spread(writer_queue=4)
    _play(collector, 4)
    # step returned with every episode handed over and none written yet
    assert collector.pending_episodes == 4 and collector.durable_episodes == 0
    gate.set()
    collector.flush()
    assert collector.durable_episodes == 4 and collector.pending_episodes == 0
    assert len(list(read_journal(collector.recording_path / JOURNAL_NAME))) == 4
    collector.close()


def test_create_dataset_and_close_write_the_queued_episodes_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_appends(monkeypatch, 0.05)
    collector = _spread()
    _play(collector, 3)
    dataset = collector.create_dataset("bg/created-v0", **META)
    assert dataset.total_episodes == 3 and dataset.episode_seeds() == [0, 1, 2]
    _play(collector, 2, first_seed=3)
    path = collector.recording_path
    with pytest.warns(UserWarning, match="2 recorded episode"):
        collector.close()  # the queued episodes are written, then kept for recovery
    mm.recover_recording(path, "bg/closed-v0", **META)
    assert mm.load_dataset("bg/closed-v0").episode_seeds() == [3, 4]


def test_the_queue_bound_blocks_the_producer() -> None:
    release = threading.Event()
    written: list[int] = []

    def append(episode: Any, metadata: Any) -> None:
        release.wait(10)
        written.append(episode.seed)

    writer = JournalWriter(append, capacity=2)
    for seed in range(2):
        writer.submit(SimpleNamespace(seed=seed, total_steps=1), None)  # type: ignore[arg-type]
    third = threading.Thread(target=writer.submit,
                             args=(SimpleNamespace(seed=2, total_steps=1), None))
    third.start()
    third.join(0.3)
    assert third.is_alive() and writer.pending_episodes == 2  # the producer waits
    release.set()
    third.join(10)
    writer.flush()
    assert written == [0, 1, 2] and writer.durable_episodes == 3


def test_memory_stays_flat_with_a_slow_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    _slow_appends(monkeypatch, 0.02)
    collector = _spread(writer_queue=1)
    most = 0
    for seed in range(6):
        _play(collector, 1, first_seed=seed)
        most = max(most, collector.pending_episodes)
    assert most == 1
    collector.flush()
    assert collector.durable_episodes == 6
    collector.close()


class _Broken(CorruptedDataError):
    pass


def _fail_on(monkeypatch: pytest.MonkeyPatch, seeds: set[int]) -> None:
    real = recording.Recording.append

    def append(self: Any, episode: Any, metadata: Any = None) -> None:
        if episode.seed in seeds:
            raise _Broken(f"cannot store episode {episode.seed}")
        real(self, episode, metadata)

    monkeypatch.setattr(recording.Recording, "append", append)


def test_a_writer_failure_is_raised_in_the_recorder_as_the_original_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _fail_on(monkeypatch, {1})
    collector = _spread()
    _play(collector, 2)
    with pytest.raises(_Broken, match="cannot store episode 1") as caught:
        collector.flush()
    assert "not stored" in "".join(caught.value.__notes__)
    _play(collector, 2, first_seed=2)  # recording goes on; later episodes are written
    dataset = collector.create_dataset("bg/failed-v0", **META)
    assert dataset.episode_seeds() == [0, 2, 3]
    collector.close()


def test_a_failure_surfaces_at_the_next_step_and_at_close(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _fail_on(monkeypatch, {0})
    collector = _spread()
    _play(collector, 1)
    deadline = time.monotonic() + 10
    while collector._core.writer._error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(_Broken):  # handing over the next finished episode raises it
        _play(collector, 1, first_seed=1)
    _fail_on(monkeypatch, {2})
    _play(collector, 1, first_seed=2)
    path = collector.recording_path
    with pytest.raises(_Broken, match="episode 2"), pytest.warns(UserWarning, match="kept"):
        collector.close()
    mm.recover_recording(path, "bg/surfaced-v0", **META)
    # The episode whose hand-over raised the earlier failure is kept; the failed ones are not.
    assert mm.load_dataset("bg/surfaced-v0").episode_seeds() == [1]


def test_a_dead_writer_does_not_hang_the_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    _fail_on(monkeypatch, set(range(100)))
    collector = _spread(writer_queue=1)
    failures = 0
    done = threading.Event()

    def play() -> None:
        nonlocal failures
        for seed in range(5):
            try:
                _play(collector, 1, first_seed=seed)
            except _Broken:
                failures += 1
        done.set()

    thread = threading.Thread(target=play)
    thread.start()
    assert done.wait(20), "the producer hung on a dead writer"
    assert failures >= 3
    with pytest.raises(_Broken):
        collector.close()


def test_flush_raises_a_failure_with_episodes_queued_behind_it_then_writes_them() -> None:
    release = threading.Event()
    written: list[int] = []

    def append(episode: Any, metadata: Any) -> None:
        release.wait(10)
        if episode.seed == 0:
            raise _Broken("first fails")
        written.append(episode.seed)

    writer = JournalWriter(append, capacity=3)
    for seed in range(3):
        writer.submit(SimpleNamespace(seed=seed, total_steps=1), None)  # type: ignore[arg-type]
    outcome: list[BaseException | None] = []

    def flush() -> None:
        try:
            writer.flush()
            outcome.append(None)
        except _Broken as exc:
            outcome.append(exc)

    release.set()
    for _ in range(2):
        thread = threading.Thread(target=flush, daemon=True)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "flush hung on a stopped writer"
    assert isinstance(outcome[0], _Broken) and outcome[1] is None
    assert written == [1, 2] and writer.durable_episodes == 2


def test_writing_in_the_caller_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = _spread(background_writing=False)
    _play(collector, 2)
    assert collector.durable_episodes == 2 and collector.pending_episodes == 0
    assert len(list(read_journal(collector.recording_path / JOURNAL_NAME))) == 2
    assert collector.create_dataset("bg/sync-v0", **META).total_episodes == 2
    collector.close()


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_a_bad_queue_size_is_refused(size: Any) -> None:
    with pytest.raises(ConfigurationError, match="writer_queue"):
        _spread(writer_queue=size)


def test_a_failed_append_leaves_no_torn_record(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = _spread(background_writing=False)
    _play(collector, 1)
    calls = 0
    real = recording.write_all

    def half(handle: Any, parts: Any) -> None:
        nonlocal calls
        calls += 1
        real(handle, parts[:2])  # the frame and header reach the file, the payload does not
        raise OSError("disk full")

    monkeypatch.setattr(recording, "write_all", half)
    with pytest.raises(OSError, match="disk full"):
        _play(collector, 1, first_seed=1)
    monkeypatch.setattr(recording, "write_all", real)
    _play(collector, 1, first_seed=2)
    seeds = [e.seed for e in read_journal(collector.recording_path / JOURNAL_NAME)]
    assert calls == 1 and seeds == [0, 2]
    collector.close()


# --- images are JPEG-encoded once, by the writer ---------------------------------------------

def test_image_frames_are_encoded_once_into_the_journal(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0
    real = jpeg.encode_frame

    def counting(frame: np.ndarray) -> np.ndarray:
        nonlocal calls
        calls += 1
        return real(frame)

    monkeypatch.setattr(jpeg, "encode_frame", counting)
    collector = mm.ParallelDataCollector(
        mm.make_env("butterfly/pistonball_v6", n_pistons=3, max_cycles=3),
        background_writing=True)
    _play(collector, 2)
    collector.flush()
    encoded = calls
    episodes = list(read_journal(collector.recording_path / JOURNAL_NAME))
    rows = sum(e.total_steps + 1 for e in episodes)
    assert encoded == rows * (3 + 1)  # three agents' observations and the state
    frames = dict(episodes[0].leaves)["observations/piston_0"]
    shape = (episodes[0].total_steps + 1, 457, 120, 3)
    assert isinstance(frames, jpeg.JpegFrames) and frames.shape == shape
    dataset = collector.create_dataset("bg/pistons-v0", **META)
    assert calls == encoded  # the dataset got the journal's bytes, not a new encoding
    collector.close()
    plain = next(minari.load_dataset("bg/pistons-v0").iterate_episodes())
    assert plain.observations["piston_0"].shape == shape
    ours = dataset.episode(0).observations["piston_0"]
    np.testing.assert_array_equal(ours, frames.decode())


def test_image_rows_are_checked_when_the_episode_ends_and_callbacks_get_arrays() -> None:
    def shrink(step: dict[str, Any]) -> dict[str, Any]:
        if "actions" in step:  # every step's observation of piston_0 loses a row of pixels
            step["observations"]["piston_0"] = step["observations"]["piston_0"][1:]
        return step

    collector = mm.ParallelDataCollector(
        mm.make_env("butterfly/pistonball_v6", n_pistons=3, max_cycles=3),
        step_data_callback=shrink)
    collector.reset(seed=0)
    with pytest.raises(mm.errors.StepDataError, match=r"observation of 'piston_0', row 1"):
        while collector.agents:
            collector.step({a: collector.action_space(a).sample() for a in collector.agents})
    collector.close()

    seen: list[Any] = []
    collector = mm.ParallelDataCollector(
        mm.make_env("butterfly/pistonball_v6", n_pistons=3, max_cycles=3),
        episode_metadata_callback=lambda e: seen.append(e) or {})
    _play(collector, 1)
    collector.close()
    assert isinstance(seen[0].observations["piston_0"], np.ndarray)
    assert isinstance(seen[0].state, np.ndarray)


def test_a_transposed_frame_encodes_to_the_same_bytes() -> None:
    pixels = np.random.default_rng(0).integers(0, 256, (40, 60, 3), dtype=np.uint8)
    view = pixels.transpose(1, 0, 2)  # column-major, as pygame surfaces are
    assert not view.flags.c_contiguous
    assert jpeg.encode_frame(view).tobytes() == jpeg.encode_frame(
        np.ascontiguousarray(view)).tobytes()


def test_jpeg_frames_appended_to_an_exact_dataset_are_stored_decoded() -> None:
    env = mm.make_env("butterfly/pistonball_v6", n_pistons=3, max_cycles=3)
    exact = mm.ParallelDataCollector(env, jpeg_encoding=False, record_state=False)
    _play(exact, 1)
    exact.create_dataset("bg/exact-v0", **META)
    exact.close()
    lossy = mm.ParallelDataCollector(
        mm.make_env("butterfly/pistonball_v6", n_pistons=3, max_cycles=3), record_state=False)
    _play(lossy, 1, first_seed=1)
    dataset = lossy.add_to_dataset("bg/exact-v0")
    lossy.close()
    assert dataset.total_episodes == 2
    pixels = dataset.episode(1).observations["piston_0"]
    assert pixels.shape[1:] == (457, 120, 3) and pixels.dtype == np.uint8


# --- killed at the hand-over -----------------------------------------------------------------

CHILD = textwrap.dedent("""
    import os, signal, sys, threading, time, warnings
    warnings.simplefilter("ignore")
    import marl_minari as mm
    from marl_minari.storage import recording

    path, stall = sys.argv[1], sys.argv[2]
    real_append, real_write = recording.Recording.append, recording.write_all
    stalled = threading.Event()

    def append(self, episode, metadata=None):
        if episode.seed >= 2 and stall == "queued":
            stalled.set()
            time.sleep(600)  # written never: the episode stays queued
        real_append(self, episode, metadata)

    def write_all(handle, parts):
        if stall == "torn" and len(parts) > 2 and b'"seq": 2' in bytes(parts[1]):
            real_write(handle, parts[:2])  # a record cut short, as by a kill mid-write
            stalled.set()
            time.sleep(600)
        real_write(handle, parts)

    recording.Recording.append = append
    recording.write_all = write_all
    collector = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3),
                                         recording_path=path, background_writing=True)
    for seed in range(4):
        collector.reset(seed=seed)
        while collector.agents:
            collector.step({a: 0 for a in collector.agents})
        print("finished", seed + 1, "durable", collector.durable_episodes, flush=True)
    stalled.wait(60)
    print("claimed", collector.durable_episodes, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


@pytest.mark.parametrize("stall", ["queued", "torn"])
def test_a_kill_at_the_hand_over_loses_only_episodes_never_claimed_durable(
        stall: str, tmp_path: Path, datasets_root: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    path = tmp_path / "recording"
    result = subprocess.run([sys.executable, str(script), str(path), stall],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "MINARI_DATASETS_PATH": str(datasets_root)})
    assert result.returncode == -signal.SIGKILL, result.stderr
    lines = result.stdout.splitlines()
    claimed = int(lines[-1].split()[-1])
    assert lines[-2].startswith("finished 4")  # every episode ended and was handed over
    assert claimed == 2  # the third was queued (or half written) when the process died
    mm.recover_recording(path, "bg/killed-v0", **META)
    dataset = mm.load_dataset("bg/killed-v0")
    assert dataset.episode_seeds() == [0, 1]  # complete episodes, once each, in order
    assert all(len(e) == 3 for e in minari.load_dataset("bg/killed-v0").iterate_episodes())
