"""TorchRL export: keys equal to TorchRL's own PettingZooWrapper, values equal to Minari's,
slices inside episodes, weights, typed refusals, streaming memory and a loss that trains."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest

pytest.importorskip("torchrl", reason="the TorchRL tests need the torch extra: "
                    "pip install -e '.[test]'")

import torch  # noqa: E402
from marl_minari.adapters import make_torchrl_buffer, to_tensordict  # noqa: E402

import marl_minari as mm  # noqa: E402
from marl_minari.errors import IncompatibleSourcesError, InvalidOptionError  # noqa: E402

OURS_ONLY = {("collector", "traj_ids"), ("collector", "episode_id")}
"""Keys TorchRL's collectors add (or that we add) that a bare wrapper rollout lacks."""


def _wrapper_layout(env: Any) -> dict[tuple[str, ...], tuple[tuple[int, ...], torch.dtype]]:
    """Per-step shape and dtype of every key of a real ``PettingZooWrapper`` rollout."""
    from torchrl.envs.libs.pettingzoo import PettingZooWrapper

    try:
        wrapped = PettingZooWrapper(env, use_mask=True, return_state=True)
    except NotImplementedError:  # no env.state(): the dataset records none either
        wrapped = PettingZooWrapper(env, use_mask=True, return_state=False)
    rollout = wrapped.rollout(3)
    return _layout(rollout)


def _layout(td: Any) -> dict[tuple[str, ...], tuple[tuple[int, ...], torch.dtype]]:
    return {key if isinstance(key, tuple) else (key,): (tuple(value.shape[1:]), value.dtype)
            for key, value in td.items(include_nested=True, leaves_only=True)}


def _ours(td: Any) -> dict[tuple[str, ...], tuple[tuple[int, ...], torch.dtype]]:
    return {k: v for k, v in _layout(td).items() if k not in OURS_ONLY}


def _check_values(td: Any, dataset_id: str, turn_based: bool) -> None:
    """Every value of ``td`` equals what plain ``minari.load_dataset`` gives per agent."""
    plain = minari.load_dataset(dataset_id)
    agents = list(plain.observation_space.spaces)
    groups = mm.adapters.tensordicts.default_group_map(mm.load_dataset(dataset_id).spec)
    cursor = 0
    for episode in plain.iterate_episodes():
        steps = len(episode.rewards)
        rows = slice(cursor, cursor + steps)
        marl = episode.infos["marl"]
        assert torch.all(td["collector", "traj_ids"][rows] == episode.id)
        np.testing.assert_array_equal(td["next", "terminated"][rows, 0], episode.terminations)
        np.testing.assert_array_equal(td["next", "truncated"][rows, 0], episode.truncations)
        assert not td["done"][cursor] and torch.equal(td["done"][cursor + 1:cursor + steps],
                                                     td["next", "done"][rows][:-1])
        if "state" in marl:
            np.testing.assert_array_equal(td["state"][rows], marl["state"][:-1])
            np.testing.assert_array_equal(td["next", "state"][rows], marl["state"][1:])
        for group, members in groups.items():
            for j, agent in enumerate(members):
                i = agents.index(agent)
                observation = episode.observations[agent]
                if isinstance(observation, dict):
                    mask = observation["action_mask"]
                    np.testing.assert_array_equal(td[group, "action_mask"][rows, j], mask[:-1])
                    np.testing.assert_array_equal(td["next", group, "action_mask"][rows, j],
                                                  mask[1:])
                    observation = {k: v for k, v in observation.items() if k != "action_mask"}
                    for key, value in observation.items():
                        np.testing.assert_array_equal(
                            td[group, "observation", key][rows, j], value[:-1])
                        np.testing.assert_array_equal(
                            td["next", group, "observation", key][rows, j], value[1:])
                else:
                    np.testing.assert_array_equal(td[group, "observation"][rows, j],
                                                  observation[:-1])
                    np.testing.assert_array_equal(td["next", group, "observation"][rows, j],
                                                  observation[1:])
                np.testing.assert_array_equal(td[group, "action"][rows, j], episode.actions[agent])
                np.testing.assert_array_equal(td["next", group, "reward"][rows, j, 0],
                                              marl["rewards"][1:, i].astype(np.float32))
                for flag in ("terminations", "truncations"):
                    name = "terminated" if flag == "terminations" else "truncated"
                    np.testing.assert_array_equal(td["next", group, name][rows, j, 0],
                                                  marl[flag][1:, i])
                    np.testing.assert_array_equal(td[group, name][rows, j, 0][1:],
                                                  marl[flag][1:-1, i])
                present = (marl["extras"]["agent_selection"] == i) if turn_based else \
                    marl["active"][:, i]
                np.testing.assert_array_equal(td[group, "mask"][rows, j], present[:-1])
                np.testing.assert_array_equal(td["next", group, "mask"][rows, j], present[1:])
        cursor += steps
    assert cursor == td.shape[0]


@pytest.mark.parametrize(("env_id", "kwargs"), [
    ("mpe2/simple_spread_v3", {"max_cycles": 6}),
    ("mpe2/simple_speaker_listener_v4", {"max_cycles": 6}),
    ("butterfly/knights_archers_zombies_v11",
     {"max_cycles": 150, "spawn_delay": 1, "line_death": True}),
])
def test_parallel_keys_and_values_equal_the_wrapper_and_minari(recorded, env_id: str,
                                                                kwargs: dict[str, Any]) -> None:
    episodes = 1 if "knights" in env_id else 3
    dataset = recorded(env_id, episodes=episodes, jpeg=False, **kwargs)
    # spread streams one episode per chunk; the others hold several episodes in one chunk
    td = to_tensordict(dataset, chunk_steps=5 if "spread" in env_id else 1000)
    assert _ours(td) == _wrapper_layout(mm.make_env(env_id, **kwargs))
    _check_values(td, "tests/recorded-v0", turn_based=False)
    if "knights" in env_id:
        masks = torch.cat([td[g, "mask"] for g in ("archer", "knight")], dim=1)
        assert not masks.all(), "an agent must die for this case to bite"
    if "speaker" in env_id:
        assert set(td.keys()) >= {"speaker", "listener"}


def test_turn_based_game_keys_and_values(record_tictactoe) -> None:
    from pettingzoo.classic import tictactoe_v3

    record_tictactoe("tests/tictactoe-v0", 3)
    td = to_tensordict("tests/tictactoe-v0", chunk_steps=4)
    assert _ours(td) == _wrapper_layout(tictactoe_v3.env())
    _check_values(td, "tests/tictactoe-v0", turn_based=True)


def test_slices_stay_inside_episodes_and_weights_pick_sources(recorded) -> None:
    spread = recorded("mpe2/simple_spread_v3", episodes=3, max_cycles=6)
    other = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=9,
                     dataset_id="tests/longer-v0")
    buffer = make_torchrl_buffer([spread, "tests/longer-v0"], 4 * 5, slice_len=5,
                                 chunk_steps=7)
    assert len(buffer) == 3 * 6 + 2 * 9
    seen = set()
    for _ in range(30):
        sample = buffer.sample().reshape(4, 5)
        for key in (("collector", "traj_ids"), "source", ("collector", "episode_id")):
            column = sample[key]
            assert torch.all(column == column[:, :1]), f"{key} changes inside a slice"
        assert torch.all(sample["index"].diff(dim=1) == 1)
        # the next observation of each step is the observation of the step after it
        assert torch.equal(sample["next", "agent", "observation"][:, :-1],
                           sample["agent", "observation"][:, 1:])
        seen |= set(sample["source"][:, 0].tolist())
    assert seen == {0, 1}
    only_second = make_torchrl_buffer([spread, other], 8, slice_len=4, weights=[0.0, 1.0])
    assert torch.all(only_second.sample()["source"] == 1)
    single = make_torchrl_buffer([spread], 16)
    assert single.sample().shape == (16,)
    with pytest.raises(InvalidOptionError, match="no episode of 7 steps"):
        make_torchrl_buffer([spread, other], 14, slice_len=7, weights=[1.0, 1.0])
    with pytest.raises(InvalidOptionError, match="weights must be 2"):
        make_torchrl_buffer([spread, other], 8, weights=[1.0])
    with pytest.raises(InvalidOptionError, match="multiple of slice_len"):
        make_torchrl_buffer([spread], 10, slice_len=4)


def test_mismatched_sources_are_refused(recorded) -> None:
    spread = recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=4)
    recorded("mpe2/simple_speaker_listener_v4", episodes=1, max_cycles=4,
             dataset_id="tests/speaker-v0")
    with pytest.raises(IncompatibleSourcesError,
                       match=r"source 1 \('tests/speaker-v0'\).*different keys"):
        make_torchrl_buffer([spread, "tests/speaker-v0"], 4)
    recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=4, N=2,
             dataset_id="tests/two-v0")
    with pytest.raises(IncompatibleSourcesError, match=r"differ in \('agent', 'observation'\)"):
        make_torchrl_buffer([spread, "tests/two-v0"], 4)


def test_group_map_is_checked(recorded) -> None:
    dataset = recorded("mpe2/simple_speaker_listener_v4", episodes=1, max_cycles=4)
    with pytest.raises(InvalidOptionError, match="mixes observation spaces"):
        to_tensordict(dataset, group_map={"all": ["speaker_0", "listener_0"]})
    with pytest.raises(InvalidOptionError, match="name every agent once"):
        to_tensordict(dataset, group_map={"speaker": ["speaker_0"]})


def test_a_tensordict_is_never_written_over_another(recorded, tmp_path: Path) -> None:
    """A second ``to_tensordict`` into the first one's folder changed its values in place."""
    spread = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=4)
    first = to_tensordict(spread, path=tmp_path / "td")
    before = first["next", "agent", "reward"].clone()
    other = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=4, local_ratio=0.2,
                     dataset_id="tests/other-v0")
    with pytest.raises(mm.DatasetExistsError, match=r"td holds files .* never written over"):
        to_tensordict(other, path=tmp_path / "td")
    assert torch.equal(first["next", "agent", "reward"], before)
    (tmp_path / "file").write_text("x")
    with pytest.raises(mm.DatasetExistsError, match="file is a file"):
        to_tensordict(spread, path=tmp_path / "file")
    (tmp_path / "empty").mkdir()
    assert to_tensordict(spread, path=tmp_path / "empty").shape == before.shape[:1]


def test_independent_behaviour_cloning_trains(recorded) -> None:
    dataset = recorded("mpe2/simple_speaker_listener_v4", episodes=3, max_cycles=8)
    buffer = make_torchrl_buffer([dataset], 32)
    first = buffer.sample()
    policies = {group: torch.nn.Linear(first[group, "observation"].shape[-1], 5 if group ==
                                       "listener" else 3) for group in ("speaker", "listener")}
    optimiser = torch.optim.Adam([p for m in policies.values() for p in m.parameters()], lr=0.05)
    losses = []
    for _ in range(20):
        batch = buffer.sample()
        loss = sum(
            torch.nn.functional.cross_entropy(policy(batch[g, "observation"])[batch[g, "mask"]],
                                              batch[g, "action"][batch[g, "mask"]])
            for g, policy in policies.items())
        optimiser.zero_grad()
        loss.backward()  # type: ignore[union-attr]
        optimiser.step()
        losses.append(float(loss))
    assert np.all(np.isfinite(losses))


_STREAM_SCRIPT = textwrap.dedent("""
    import json, sys, threading, time
    from pathlib import Path

    def anon_kib():
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
        return 0

    import tensordict, torch, torchrl  # noqa: F401  (their import is not what is measured)
    from marl_minari.adapters import to_tensordict
    base = anon_kib()
    peak = [base]
    running = [True]
    def watch():
        while running[0]:
            peak[0] = max(peak[0], anon_kib())
            time.sleep(0.002)
    thread = threading.Thread(target=watch)
    thread.start()
    td = to_tensordict(sys.argv[1], path=sys.argv[2], chunk_steps=int(sys.argv[3]))
    running[0] = False
    thread.join()
    print(json.dumps({"growth_kib": peak[0] - base, "bytes": int(td.bytes()),
                      "steps": td.shape[0]}))
""")


def test_a_dataset_larger_than_a_chunk_streams_with_flat_memory(tmp_path: Path,
                                                                datasets_root: Path) -> None:
    from big_obs_env import record_big_observations

    record_big_observations("tests/big-v0", episodes=24, steps=50, width=8192)
    out = subprocess.run([sys.executable, "-c", _STREAM_SCRIPT, "tests/big-v0",
                          str(tmp_path / "td"), "50"], capture_output=True, text=True,
                         check=True, timeout=600)
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["steps"] == 24 * 50
    # observations and next observations of 2 agents: about 150 MB written, in 50-step chunks
    assert found["bytes"] > 120e6
    assert found["growth_kib"] * 1024 < found["bytes"] / 4, found


def test_every_kind_of_source(recorded, cartpole_dataset, vaults: Path) -> None:
    from marl_minari.adapters import to_vault

    dataset = recorded("mpe2/simple_spread_v3", episodes=3, max_cycles=5)
    whole = to_tensordict(dataset)
    filtered = minari.load_dataset("tests/recorded-v0").filter_episodes(
        lambda episode: episode.id != 1)
    some = to_tensordict(filtered)
    assert some["collector", "episode_id"].unique().tolist() == [0, 2]
    kept = whole["collector", "episode_id"] != 1
    assert torch.equal(some["agent", "observation"], whole["agent", "observation"][kept])
    path = to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="u")
    from_vault = to_tensordict(path)
    assert torch.equal(from_vault["agent", "observation"], whole["agent", "observation"])
    assert torch.equal(from_vault["next", "agent", "reward"], whole["next", "agent", "reward"])
    plain = to_tensordict(cartpole_dataset)
    episode = cartpole_dataset[0]
    steps = len(episode.rewards)
    np.testing.assert_array_equal(plain["agent", "observation"][:steps, 0],
                                  episode.observations[:-1])
    np.testing.assert_array_equal(plain["agent", "action"][:steps, 0], episode.actions)


def test_missing_torch_extra_is_named(monkeypatch: pytest.MonkeyPatch, recorded) -> None:
    from marl_minari.errors import MissingExtraError

    dataset = recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=3)
    monkeypatch.setitem(sys.modules, "torchrl", None)
    with pytest.raises(MissingExtraError, match=r"marl-minari\[torch\]"):
        to_tensordict(dataset)
