"""Appending to a dataset that cannot be written (an immutable folder or file, another user's
files): one typed error saying the data stayed whole and where the episodes are, raised before
the data file is copied; replaced files keep their permission bits."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces
from immutable import chattr
from marl_strategies import random_episode

import marl_minari as mm
from marl_minari.errors import NotWritableError
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage import writer
from marl_minari.storage.recording import Recording
from marl_minari.storage.writer import append_to_dataset, write_dataset

AGENTS = ["p", "q"]
OBS = {a: spaces.Box(-1, 1, (3,), dtype=np.float32) for a in AGENTS}
ACT = {a: spaces.Discrete(3) for a in AGENTS}
SPEC = MultiAgentSpec(api="parallel", possible_agents=tuple(AGENTS),
                      observation_spaces=OBS, action_spaces=ACT)


def _episodes(count: int, first_seed: int = 0) -> list:
    return [random_episode(AGENTS, OBS, ACT, 4, seed)
            for seed in range(first_seed, first_seed + count)]


def _snapshot(dataset_id: str) -> dict[str, bytes]:
    data = dataset_dir(dataset_id) / "data"
    return {p.name: p.read_bytes() for p in sorted(data.iterdir()) if p.is_file()}


@pytest.mark.parametrize("locked", ["data folder", "data file"])
def test_append_to_an_immutable_dataset_is_a_typed_error_and_keeps_the_episodes(
        immutable: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        locked: str) -> None:
    write_dataset("lock/target-v0", _episodes(3), SPEC)
    before = _snapshot("lock/target-v0")
    data = dataset_dir("lock/target-v0") / "data"
    copies: list[Path] = []
    real_copy = writer.clone_or_copy
    monkeypatch.setattr(writer, "clone_or_copy",
                        lambda source, target: copies.append(source) or real_copy(source, target))
    recording = Recording(SPEC, path=tmp_path / "rec")
    for episode in _episodes(2, first_seed=10):
        recording.append(episode)
    target = data if locked == "data folder" else data / layout.MAIN_FILE_NAME
    chattr("+i", target)
    immutable.append(target)
    with pytest.raises(NotWritableError) as error:
        recording.add_to_dataset("lock/target-v0")
    message = str(error.value)
    assert str(target) in message and "unchanged" in message
    assert str(tmp_path / "rec") in message  # where the episodes stayed
    assert f"marl-minari recover {tmp_path / 'rec'} lock/target-v0 --append" in message
    assert copies == []  # refused before the data file was copied
    assert _snapshot("lock/target-v0") == before
    assert recording.episodes == 2
    chattr("-i", target)
    immutable.remove(target)
    recording.add_to_dataset("lock/target-v0")
    assert mm.load_dataset("lock/target-v0").total_episodes == 5
    recording.close(keep=False)


def test_an_append_keeps_the_permission_bits_of_the_files_it_replaces() -> None:
    write_dataset("lock/modes-v0", _episodes(2), SPEC)
    data = dataset_dir("lock/modes-v0") / "data"
    names = (layout.MAIN_FILE_NAME, layout.METADATA_FILE_NAME, layout.INDEX_FILE_NAME)
    for number, name in enumerate(names):
        os.chmod(data / name, (0o640, 0o600, 0o604)[number])
    append_to_dataset("lock/modes-v0", _episodes(1, first_seed=5), SPEC)
    assert [stat.S_IMODE((data / name).stat().st_mode) for name in names] == [
        0o640, 0o600, 0o604]


def test_append_by_a_user_who_cannot_write_the_datasets_root_is_a_typed_error() -> None:
    """Root owns the datasets (and their lock folder); another user appends."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run the append as another user (nobody)")
    import pwd

    nobody = pwd.getpwnam("nobody")
    # Outside pytest's root-only temporary folders, so that nobody can read the datasets.
    shared = Path(tempfile.mkdtemp(prefix="marl-minari-shared-"))
    os.chmod(shared, 0o755)
    script = textwrap.dedent(f"""
        import os, sys
        os.environ["MINARI_DATASETS_PATH"] = {str(shared)!r}
        sys.path.insert(0, {str(Path(__file__).parent.parent / 'support')!r})
        import numpy as np
        from gymnasium import spaces
        from marl_strategies import random_episode
        from marl_minari.format.spec import MultiAgentSpec
        from marl_minari.storage.writer import write_dataset, append_to_dataset
        agents = ["p", "q"]
        obs = {{a: spaces.Box(-1, 1, (3,), dtype=np.float32) for a in agents}}
        act = {{a: spaces.Discrete(3) for a in agents}}
        spec = MultiAgentSpec(api="parallel", possible_agents=tuple(agents),
                              observation_spaces=obs, action_spaces=act)
        episodes = [random_episode(agents, obs, act, 4, s) for s in range(2)]
        if sys.argv[1] == "write":
            write_dataset("shared/data-v0", episodes, spec)
        else:
            os.setgid({nobody.pw_gid})
            os.setuid({nobody.pw_uid})
            from marl_minari.errors import NotWritableError
            try:
                append_to_dataset("shared/data-v0", episodes, spec)
            except NotWritableError as exc:
                print("typed:", exc)
    """)
    run = [sys.executable, "-c", script]
    subprocess.run([*run, "write"], check=True, capture_output=True, text=True, timeout=120)
    before = (shared / "shared" / "data-v0" / "data" / layout.MAIN_FILE_NAME).read_bytes()
    done = subprocess.run([*run, "append"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("typed:") and "unchanged" in done.stdout, done.stdout
    after = (shared / "shared" / "data-v0" / "data" / layout.MAIN_FILE_NAME).read_bytes()
    shutil.rmtree(shared)
    assert after == before


def test_a_folder_made_immutable_after_the_check_is_still_a_typed_error(
        immutable: list[Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The commit's renames are refused too (the folder changed after it was checked): the
    same typed error, the dataset unchanged."""
    write_dataset("lock/late-v0", _episodes(2), SPEC)
    before = _snapshot("lock/late-v0")
    data = dataset_dir("lock/late-v0") / "data"
    monkeypatch.setattr(writer, "_check_writable", lambda data, dataset_id: None)
    chattr("+i", data)
    immutable.append(data)
    with pytest.raises(NotWritableError, match="unchanged"):
        append_to_dataset("lock/late-v0", _episodes(1, first_seed=7), SPEC)
    assert _snapshot("lock/late-v0") == before
