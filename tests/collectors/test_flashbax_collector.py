"""FlashbaxDataCollector: Mava's training loop with the collector in place of ``Vault``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium import spaces
from marl_minari.adapters import from_vault
from marl_minari.collectors import FlashbaxDataCollector
from mava_style import Rollouts, buffer_states, expected_episodes, flat_buffer

import marl_minari as mm
from marl_minari.errors import BufferOverrunError, InvalidOptionError, LayoutError, StepDataError
from marl_minari.storage.dataset import MultiAgentDataset
from marl_minari.storage.recording import recover_recording

FIELDS = ("rewards", "terminations", "truncations", "active", "acted", "team_rewards",
          "episode_terminations", "episode_truncations")


def assert_same_episodes(a: MultiAgentDataset, b: MultiAgentDataset) -> None:
    assert a.total_episodes == b.total_episodes
    for index in range(a.total_episodes):
        x, y = a[index], b[index]
        for agent in x.possible_agents:
            np.testing.assert_array_equal(x.observations[agent], y.observations[agent])
            np.testing.assert_array_equal(x.actions[agent], y.actions[agent])
            np.testing.assert_array_equal(x.agent_infos[agent]["action_mask"],
                                          y.agent_infos[agent]["action_mask"])
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(x, name), getattr(y, name), err_msg=name)
        if x.state is not None or y.state is not None:
            np.testing.assert_array_equal(x.state, y.state)


def _collector(state: Any, tmp_path: Path, **kwargs: Any) -> FlashbaxDataCollector:
    return FlashbaxDataCollector(experience_structure=state.experience,
                                 recording_path=tmp_path / "recording", **kwargs)


def test_the_dataset_equals_vault_write_then_from_vault(tmp_path: Path) -> None:
    from flashbax.vault import Vault

    rollouts = Rollouts(envs=3, agents=2, updates=7, rollout=6, seed=11, state_dim=3)
    vault = collector = None
    consumed, written = [], []
    for state in buffer_states(rollouts, time_axis=16):
        if vault is None:
            vault = Vault(vault_name="run", experience_structure=state.experience,
                          rel_dir=str(tmp_path / "vaults"), vault_uid="u")
            collector = _collector(state, tmp_path)
        assert collector is not None
        written.append(int(vault.write(state)))
        consumed.append(collector.write(state))
    assert consumed == written == [6] * 7
    assert collector is not None
    ours = collector.create_dataset("jax/collected-v0", algorithm_name="ippo", author="t",
                                    author_email="t@example.com",
                                    code_permalink="https://example.com", description="t")
    theirs = from_vault(rel_dir=tmp_path / "vaults", vault_name="run", vault_uid="u",
                        dataset_id="jax/vaulted-v0")
    assert_same_episodes(ours, theirs)
    assert ours.total_episodes == len(expected_episodes(rollouts.streams()["done"]))
    collector.close()


def test_write_takes_each_timestep_once(tmp_path: Path) -> None:
    rollouts = Rollouts(envs=2, agents=2, updates=3, rollout=5, seed=12)
    collector = None
    for state in buffer_states(rollouts, time_axis=12):
        collector = collector or _collector(state, tmp_path)
        assert collector.write(state) == 5
        assert collector.write(state) == 0  # nothing new: nothing written twice
    assert collector is not None
    dataset = collector.create_dataset("jax/once-v0", description="t")
    assert dataset.total_steps == 2 * 15
    assert dataset.total_episodes == len(expected_episodes(rollouts.streams()["done"]))
    collector.close()


def test_a_write_of_something_else_than_a_live_collectors_buffer_state_is_named(
        tmp_path: Path) -> None:
    """The experience alone escaped as ``AttributeError``, a write after ``close`` as
    ``ValueError: I/O operation on closed file``."""
    rollouts = Rollouts(envs=2, agents=2, updates=1, rollout=5, seed=12)
    state = next(iter(buffer_states(rollouts, time_axis=12)))
    collector = _collector(state, tmp_path)
    with pytest.raises(InvalidOptionError, match="write takes the buffer state .* not a dict"):
        collector.write(state.experience)
    assert collector.write(state) == 5
    with pytest.warns(UserWarning) as said:
        collector.close()
        collector.close()  # closing twice is closing once: one warning of what was kept
    assert len([w for w in said if "in no dataset yet" in str(w.message)]) == 1
    with pytest.raises(InvalidOptionError, match=r"write after close\(\)"):
        collector.write(state)


def test_episodes_are_durable_as_soon_as_write_returns(tmp_path: Path) -> None:
    """A killed training loop keeps every finished episode; recover makes the dataset."""
    recording = tmp_path / "recording"
    script = textwrap.dedent(f"""
        import os, signal, sys, warnings
        warnings.simplefilter("ignore")
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1] / "support")!r})
        from mava_style import Rollouts, buffer_states
        from marl_minari.collectors import FlashbaxDataCollector
        collector = None
        for state in buffer_states(Rollouts(envs=3, agents=2, updates=4, rollout=6, seed=13),
                                   time_axis=16):
            collector = collector or FlashbaxDataCollector(
                experience_structure=state.experience, recording_path={str(recording)!r})
            collector.write(state)
        print(collector.durable_episodes, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ}, timeout=300)
    assert run.returncode == -9, run.stderr
    durable = int(run.stdout.strip().splitlines()[-1])
    assert durable > 0
    recover_recording(recording, "jax/recovered-v0")
    from marl_minari import load_dataset

    recovered = load_dataset("jax/recovered-v0")
    rollouts = Rollouts(envs=3, agents=2, updates=4, rollout=6, seed=13)
    list(rollouts)  # the same updates the killed process made
    finished = expected_episodes(rollouts.streams()["done"], trailing=False)
    assert recovered.total_episodes == durable == len(finished)  # only unfinished ones lost
    data = rollouts.streams()
    for index, want in enumerate(finished):
        np.testing.assert_array_equal(
            recovered[index].actions["agent_0"],
            data["action"][want.stream, want.start:want.start + want.length, 0])


def test_a_buffer_that_wrapped_past_unwritten_timesteps_is_an_error(tmp_path: Path) -> None:
    rollouts = Rollouts(envs=2, agents=2, updates=4, rollout=6, seed=14)
    buffer, state = flat_buffer(rollouts, 10)
    add = jax.jit(buffer.add)
    updates = iter(rollouts)
    collector = _collector(state, tmp_path)
    state = add(state, jax.tree.map(jnp.asarray, next(updates)))
    assert collector.write(state) == 6
    state = add(state, jax.tree.map(jnp.asarray, next(updates)))
    state = add(state, jax.tree.map(jnp.asarray, next(updates)))  # 12 > 9 steps unwritten
    with pytest.raises(BufferOverrunError, match="at least every 9 timesteps"):
        collector.write(state)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        collector.close()


def test_a_buffer_full_before_the_first_write_is_an_error(tmp_path: Path) -> None:
    rollouts = Rollouts(envs=2, agents=2, updates=2, rollout=6, seed=15)
    buffer, state = flat_buffer(rollouts, 10)
    collector = _collector(state, tmp_path)
    for update in rollouts:
        state = buffer.add(state, jax.tree.map(jnp.asarray, update))
    with pytest.raises(BufferOverrunError, match="already full"):
        collector.write(state)
    collector.close()


def test_integer_actions_without_masks_need_action_spaces(tmp_path: Path) -> None:
    structure = {"observation": np.zeros((2, 8, 3, 4), np.float32),
                 "action": np.zeros((2, 8, 3), np.int32),
                 "reward": np.zeros((2, 8, 3), np.float32), "done": np.zeros((2, 8, 3), bool)}
    with pytest.raises(InvalidOptionError, match="pass action_spaces="):
        FlashbaxDataCollector(experience_structure=structure,
                              recording_path=tmp_path / "r1").close()
    collector = FlashbaxDataCollector(
        experience_structure=structure, recording_path=tmp_path / "r2",
        action_spaces={f"agent_{i}": spaces.Discrete(6) for i in range(3)})
    assert collector.spec.action_spaces["agent_2"] == spaces.Discrete(6)
    collector.close()


def _mava_structure(**changed: Any) -> dict[str, Any]:
    structure: dict[str, Any] = {
        "observation": np.zeros((2, 8, 3, 4), np.float32),
        "action": np.zeros((2, 8, 3), np.int32), "reward": np.zeros((2, 8, 3), np.float32),
        "done": np.zeros((2, 8, 3), bool)}
    structure.update(changed)
    return structure


@pytest.mark.parametrize("current_index", [99, 16, -1, "3", 2.5, [1, 2]])
def test_a_buffer_index_outside_the_time_axis_is_refused_before_anything_is_written(
        tmp_path: Path, current_index: Any) -> None:
    """Flashbax never makes such a state; a corrupted or hand-made one must not become data
    (``current_index = 99`` on 16 timesteps once repeated the buffer's episodes six times)."""
    rollouts = Rollouts(envs=2, agents=2, updates=2, rollout=6, seed=16)
    states = list(buffer_states(rollouts, time_axis=16))
    collector = _collector(states[0], tmp_path)
    assert collector.write(states[0]) == 6
    before = collector.durable_episodes
    with pytest.raises(StepDataError, match="current_index"):
        collector.write(states[1].replace(current_index=current_index))
    assert collector.durable_episodes == before
    assert collector.write(states[1]) == 6  # the real state is still taken whole
    with pytest.warns(UserWarning, match="in no dataset yet") as said:
        collector.close()
    assert [w.filename for w in said] == [__file__]


@pytest.mark.parametrize(("structure", "named"), [
    (list(_mava_structure().values()), "dict"),
    (_mava_structure(observation=np.zeros((2, 8, 3, 4), np.complex64)), "'observation'"),
    (_mava_structure(observation=np.zeros((2, 8, 3, 4), object)), "'observation'"),
    (_mava_structure(observation=np.zeros((2, 8, 3, 4), "U3")), "'observation'"),
    (_mava_structure(reward=np.zeros((2, 9, 3), np.float32)), "'reward'"),
    (_mava_structure(done=np.zeros((3, 8, 3), bool)), "'done'"),
], ids=["list", "complex", "object", "string", "time-axis", "batch-axis"])
def test_an_experience_structure_that_is_not_a_flat_buffer_is_a_layout_error(
        tmp_path: Path, structure: Any, named: str) -> None:
    with pytest.raises(LayoutError, match=named):
        FlashbaxDataCollector(experience_structure=structure, recording_path=tmp_path / "r",
                              action_spaces={f"agent_{i}": spaces.Discrete(6)
                                             for i in range(3)}).close()


def test_a_buffer_state_shaped_unlike_the_structure_is_a_layout_error(tmp_path: Path) -> None:
    rollouts = Rollouts(envs=2, agents=2, updates=1, rollout=6, seed=17)
    state = next(iter(buffer_states(rollouts, time_axis=16)))
    collector = _collector(state, tmp_path)
    experience = dict(state.experience)
    experience["reward"] = np.asarray(experience["reward"])[:, :8]
    with pytest.raises(LayoutError, match="'reward'"):
        collector.write(state.replace(experience=experience))
    assert collector.durable_episodes == 0
    collector.close()


def test_a_write_refusing_an_action_takes_nothing_and_the_next_write_refuses_it_again(
        tmp_path: Path) -> None:
    """An action outside its space is refused by the write that would store its episode,
    and that write takes none of its timesteps: the next write meets the same episode and
    refuses it again, instead of going on without the episodes the refused write finished."""
    rollouts = Rollouts(envs=2, agents=2, actions=4, updates=4, rollout=8, seed=3)
    updates = list(rollouts)
    for update in updates:
        update["action"] = np.minimum(update["action"], 2)
    updates[1]["action"][0, 3, 1] = 3  # outside Discrete(3); its episode ends two writes on
    buffer, state = flat_buffer(rollouts, time_axis=40)
    collector = _collector(state, tmp_path, action_spaces={
        f"agent_{i}": spaces.Discrete(3) for i in range(2)})
    refused = []
    for update in updates:
        state = buffer.add(state, jax.tree.map(jnp.asarray, update))
        before = (collector.timesteps, collector.durable_episodes)
        try:
            collector.write(state)
        except StepDataError as exc:
            refused.append(str(exc))
            assert (collector.timesteps, collector.durable_episodes) == before
    assert len(refused) == 2 and refused[0] == refused[1]
    assert "the action of 'agent_1'" in refused[0]
    assert "outside its action space Discrete(3)" in refused[0]
    assert collector.timesteps == 2 * 8  # the writes before the refused one
    with pytest.warns(UserWarning, match="recorded episode"):
        collector.close()


def test_a_write_cut_short_by_storage_stores_every_episode_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A journal append that fails in the middle of a write: the episodes it stored stay
    taken, the ones after it are journalled first by the next write, and in the end every
    episode is stored exactly once, in order."""
    from marl_minari.storage.recording import Recording

    rollouts = Rollouts(envs=3, agents=2, updates=5, rollout=8, seed=4)
    states = list(buffer_states(rollouts, time_axis=40))
    collector = _collector(states[0], tmp_path)
    real_append = Recording.append
    calls = {"n": 0}

    def failing_second(self: Recording, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("the disk gave out")
        real_append(self, *args, **kwargs)

    collector.write(states[0])
    first_stored = collector.durable_episodes
    monkeypatch.setattr(Recording, "append", failing_second)
    with pytest.raises(OSError, match="gave out"):
        collector.write(states[1])
    assert collector.durable_episodes == first_stored + 1
    monkeypatch.setattr(Recording, "append", real_append)
    for state in states[2:]:
        collector.write(state)
    ours = collector.create_dataset("jax/cut-short-v0", description="t")
    collector.close()
    whole = _collector(states[0], tmp_path / "whole")
    for state in states:
        whole.write(state)
    expected = whole.create_dataset("jax/whole-v0", description="t")
    whole.close()
    assert_same_episodes(ours, expected)


def test_episodes_a_failed_append_left_out_are_journalled_by_the_next_write_or_close(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from marl_minari.storage.recording import Recording

    rollouts = Rollouts(envs=2, agents=2, updates=14, rollout=1, seed=6)
    states = list(buffer_states(rollouts, time_axis=40))
    whole = _collector(states[0], tmp_path / "whole")
    finished = []
    for state in states:
        whole.write(state)
        finished.append(whole.durable_episodes)
    with pytest.warns(UserWarning, match="recorded episode"):
        whole.close()
    # a write that finishes episodes, followed by one that finishes none
    k = next(i for i in range(1, len(states) - 1)
             if finished[i] > finished[i - 1] and finished[i + 1] == finished[i])
    real_append = Recording.append

    def refused(self: Recording, *args: Any, **kwargs: Any) -> None:
        raise OSError("the disk gave out")

    for ending in ("next write", "close"):
        collector = _collector(states[0], tmp_path / ending.replace(" ", "-"))
        for state in states[:k]:
            collector.write(state)
        monkeypatch.setattr(Recording, "append", refused)
        with pytest.raises(OSError, match="gave out"):
            collector.write(states[k])
        monkeypatch.setattr(Recording, "append", real_append)
        assert collector.durable_episodes == finished[k - 1]
        path = collector.recording_path
        if ending == "next write":
            collector.write(states[k + 1])
            assert collector.durable_episodes == finished[k + 1]
        with pytest.warns(UserWarning, match="recorded episode"):
            collector.close()
        dataset_id = f"jax/{ending.replace(' ', '-')}-v0"
        recover_recording(path, dataset_id)
        assert mm.load_dataset(dataset_id).total_episodes == finished[k]
