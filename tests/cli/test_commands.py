"""The marl-minari command line, run as a user runs it."""

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
from typer.testing import CliRunner

import marl_minari as mm
from marl_minari.cli import app


def test_collect_with_defaults_records_a_loadable_dataset(datasets_root: Path) -> None:
    result = CliRunner().invoke(app, ["collect", "--episodes", "3"])
    assert result.exit_code == 0, result.output
    dataset = minari.load_dataset("mpe2/simple_spread_v3/random-v0")
    assert dataset.total_episodes == 3
    assert dataset.total_steps == 3 * 25
    # A second run with defaults picks the next free version instead of failing.
    again = CliRunner().invoke(app, ["collect", "--episodes", "1"])
    assert again.exit_code == 0, again.output
    assert "random-v1" in again.output


def test_collect_state_encoding_option(datasets_root: Path) -> None:
    result = CliRunner().invoke(app, ["collect", "--episodes", "1", "--dataset-id", "cli/lzf-v0",
                                      "--state-encoding", "lzf", "--env-kwargs",
                                      '{"max_cycles": 3}'])
    assert result.exit_code == 0, result.output
    dataset = mm.load_dataset("cli/lzf-v0")
    assert dataset.spec.state_encoding == "lzf"
    np.testing.assert_array_equal(
        next(minari.load_dataset("cli/lzf-v0").iterate_episodes()).infos["marl"]["state"],
        dataset.episode(0).state)
    refused = CliRunner().invoke(app, ["collect", "--state-encoding", "jpeg"])
    assert refused.exit_code != 0
    assert "image-like" in refused.output


def test_collect_aec_only_env_falls_back_to_aec(datasets_root: Path) -> None:
    result = CliRunner().invoke(app, ["collect", "classic/tictactoe_v3", "--episodes", "2",
                                      "--dataset-id", "classic/ttt/random-v0"])
    assert result.exit_code == 0, result.output
    dataset = mm.load_dataset("classic/ttt/random-v0")
    assert dataset.spec.api == "aec"
    assert dataset.total_episodes == 2


def test_info_prints_per_agent_return_statistics(datasets_root: Path) -> None:
    CliRunner().invoke(app, ["collect", "--episodes", "2", "--dataset-id", "cli/info-v0"])
    arrays = mm.load_dataset("cli/info-v0").to_arrays()
    result = CliRunner().invoke(app, ["info", "cli/info-v0"])
    assert result.exit_code == 0, result.output
    mean = arrays.returns()[:, 0].mean()
    assert f"{mean:.3f}" in result.output
    for agent in ("agent_0", "agent_1", "agent_2"):
        assert agent in result.output


def test_info_on_an_empty_dataset_says_so(datasets_root: Path) -> None:
    env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=3))
    mm.write_dataset("cli/empty-v0", [], env.spec)
    env.close()
    result = CliRunner().invoke(app, ["info", "cli/empty-v0"])
    assert result.exit_code == 0, result.output
    assert "episodes       0" in result.output and "no episodes" in result.output
    assert "agent_0" in result.output


def test_info_on_missing_dataset_fails_with_clear_message(datasets_root: Path) -> None:
    result = CliRunner().invoke(app, ["info", "nope/missing-v0"])
    assert result.exit_code == 1
    assert "error: dataset 'nope/missing-v0' not found locally" in result.output


def test_recover_lists_and_rescues_a_killed_recording(datasets_root: Path,
                                                      tmp_path: Path) -> None:
    script = tmp_path / "record.py"
    script.write_text(textwrap.dedent("""
        import sys
        import marl_minari as mm
        env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=10))
        for episode in range(3):
            env.reset(seed=episode)
            while env.agents:
                env.step({a: 0 for a in env.agents})
        env.reset(seed=99)
        env.step({a: 0 for a in env.agents})
        print("ready", flush=True)
        sys.stdin.read()
    """))
    process = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                               stdin=subprocess.PIPE, env=os.environ.copy(), text=True)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    deadline = time.time() + 5
    listed = CliRunner().invoke(app, ["recover"])
    while "3 episodes" not in listed.output and time.time() < deadline:
        listed = CliRunner().invoke(app, ["recover"])
    assert "3 episodes, 30 steps" in listed.output, listed.output
    folder = listed.output.split()[0]
    result = CliRunner().invoke(app, ["recover", folder, "cli/rescued-v0"])
    assert result.exit_code == 0, result.output
    dataset = minari.load_dataset("cli/rescued-v0")
    assert dataset.total_episodes == 3
    assert [int(m["seed"]) for m in dataset.storage.get_episode_metadata(range(3))] == [0, 1, 2]
    assert not Path(folder).exists()
    assert np.all(mm.load_dataset("cli/rescued-v0").to_arrays().episode_lengths == 10)


def test_recover_append_finishes_an_interrupted_add_to_dataset(tmp_path: Path) -> None:
    """A recording whose add_to_dataset never finished: ``recover --append`` adds its episodes
    to the existing dataset, as ``Recording.open(path).add_to_dataset(id)`` does."""
    import warnings

    from gymnasium import spaces
    from marl_strategies import random_episode

    from marl_minari.format.spec import MultiAgentSpec
    from marl_minari.storage.recording import Recording
    from marl_minari.storage.writer import write_dataset

    agents = ["p", "q"]
    obs = {a: spaces.Box(-1, 1, (3,), dtype=np.float32) for a in agents}
    act = {a: spaces.Discrete(3) for a in agents}
    spec = MultiAgentSpec(api="parallel", possible_agents=tuple(agents),
                          observation_spaces=obs, action_spaces=act)
    write_dataset("cli/grown-v0", [random_episode(agents, obs, act, 4, s) for s in range(3)],
                  spec)
    recording = Recording(spec, path=tmp_path / "rec")
    for seed in (10, 11):
        recording.append(random_episode(agents, obs, act, 5, seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        recording.close(keep=True)
    created = CliRunner().invoke(app, ["recover", str(tmp_path / "rec"), "cli/grown-v0"])
    assert created.exit_code == 1 and "already exists" in created.output, created.output
    result = CliRunner().invoke(app, ["recover", str(tmp_path / "rec"), "cli/grown-v0",
                                      "--append"])
    assert result.exit_code == 0, result.output
    grown = mm.load_dataset("cli/grown-v0")
    assert grown.total_episodes == 5 and grown.total_steps == 3 * 4 + 2 * 5
    assert not (tmp_path / "rec").exists()
