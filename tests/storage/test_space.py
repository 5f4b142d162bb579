"""A full disk (a per-file size limit stands in for one) ends in a typed error, never a crash,
and every recorded episode is still recoverable."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import marl_minari as mm

CHILD = textwrap.dedent("""
    import resource, sys
    import marl_minari as mm

    recording, limit, when = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=25),
                                   recording_path=recording)
    episodes = 200 if when == "create" else 10
    for seed in range(episodes):
        if when == "record" and seed == 5:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
        env.reset(seed=seed)
        while env.agents:
            try:
                env.step({a: env.action_space(a).sample() for a in env.agents})
            except mm.StorageFullError as exc:
                print("RECORD-ERROR", exc, flush=True)
                sys.exit(3)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    try:
        env.create_dataset("space/limited-v0", algorithm_name="random", author="t",
                           author_email="t@example.com", code_permalink="https://example.com",
                           description="limited")
    except mm.StorageFullError as exc:
        print("CREATE-ERROR", exc, flush=True)
        sys.exit(4)
    print("created")
""")


def _run(tmp_path: Path, limit: int, when: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "rec"), str(limit), when],
                          capture_output=True, text=True, timeout=600)


def test_a_dataset_that_does_not_fit_is_refused_before_hdf5_writes(
        tmp_path: Path, datasets_root: Path) -> None:
    done = _run(tmp_path, 2_000_000, "create")
    # Before the room was claimed, libhdf5 went on writing past the limit and crashed (SIGSEGV).
    assert done.returncode == 4, done.stderr[-2000:]
    assert "file-size limit" in done.stdout and "marl-minari recover" in done.stdout
    assert not (datasets_root / "space" / "limited-v0").exists()
    mm.recover_recording(tmp_path / "rec", "space/recovered-v0")
    dataset = mm.load_dataset("space/recovered-v0")
    assert dataset.total_episodes == 200 and dataset.episode_seeds() == list(range(200))


def test_a_journal_append_without_room_keeps_the_episodes_before_it(tmp_path: Path) -> None:
    journal = tmp_path / "rec" / "episodes.journal"
    done = _run(tmp_path, 0, "record")  # from episode 5 on, no byte may be added to a file
    assert done.returncode == 3, done.stderr[-2000:]
    assert "file-size limit" in done.stdout and "the 5 before it stay" in done.stdout
    assert journal.exists()
    mm.recover_recording(tmp_path / "rec", "space/five-v0")
    assert mm.load_dataset("space/five-v0").episode_seeds() == [0, 1, 2, 3, 4]
