"""Vaults written exactly as Mava's systems write them convert with no options; other namings
with a key map; empty and inconsistent vaults get typed errors naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import minari
import numpy as np
import pytest
from adapter_helpers import rename_leaves
from marl_minari.adapters import from_vault, make_buffer, to_vault
from mava_style import Rollouts, expected_episodes, write_mava_vault

from marl_minari.errors import EmptyVaultError, InvalidOptionError, LayoutError, MarlMinariError
from marl_minari.sources import open_source
from marl_minari.storage.dataset import MultiAgentDataset


def _check_episodes(dataset: MultiAgentDataset, rollouts: Rollouts,
                    state: bool = False) -> None:
    data = rollouts.streams()
    expected = expected_episodes(data["done"])
    assert dataset.total_episodes == len(expected)
    assert dataset.total_steps == data["done"].shape[0] * data["done"].shape[1]
    agents = [f"agent_{i}" for i in range(rollouts.agents)]
    for index, want in enumerate(expected):
        episode = dataset[index]
        rows = slice(want.start, want.start + want.length)
        assert len(episode.team_rewards) == want.length
        for i, agent in enumerate(agents):
            np.testing.assert_array_equal(episode.observations[agent][:-1],
                                          data["observation"][want.stream, rows, i])
            np.testing.assert_array_equal(episode.actions[agent],
                                          data["action"][want.stream, rows, i])
            np.testing.assert_array_equal(
                episode.agent_infos[agent]["action_mask"][:-1],
                data["legal_action_mask"][want.stream, rows, i].astype(np.int8))
        np.testing.assert_allclose(episode.rewards, data["reward"][want.stream, rows])
        # done has no terminated/truncated split: an end on done is a termination, the
        # unfinished tail of a stream a truncation.
        assert bool(episode.episode_terminations[-1]) == want.finished
        assert bool(episode.episode_truncations[-1]) == (not want.finished)
        assert not episode.episode_terminations[:-1].any()
        assert not episode.episode_truncations[:-1].any()
        if state:
            np.testing.assert_array_equal(episode.state[:-1], data["state"][want.stream, rows])


def test_a_mava_vault_converts_with_no_options(vaults: Path, datasets_root: Path) -> None:
    rollouts = Rollouts(envs=4, agents=3, updates=6, rollout=8, seed=1)
    assert write_mava_vault(vaults, "ff_ippo", "run", rollouts) == 48
    dataset = from_vault(rel_dir=vaults, vault_name="ff_ippo", vault_uid="run",
                         dataset_id="mava/ippo-v0")
    _check_episodes(dataset, rollouts)
    plain = minari.load_dataset("mava/ippo-v0")
    assert plain.total_episodes == dataset.total_episodes
    ends = {e.start + e.length for e in expected_episodes(rollouts.streams()["done"])}
    assert len(ends) > 3  # episodes end at different steps in different streams


def test_a_mava_vault_with_a_global_state(vaults: Path, datasets_root: Path) -> None:
    rollouts = Rollouts(envs=2, agents=2, updates=4, rollout=6, seed=2, state_dim=7)
    write_mava_vault(vaults, "mat", "run", rollouts)
    dataset = from_vault(rel_dir=vaults, vault_name="mat", vault_uid="run",
                         dataset_id="mava/state-v0")
    _check_episodes(dataset, rollouts, state=True)


def test_a_mava_vault_is_read_in_place_through_the_door(vaults: Path) -> None:
    rollouts = Rollouts(envs=3, agents=2, updates=3, rollout=7, seed=3)
    write_mava_vault(vaults, "ff_ippo", "run", rollouts)
    source = open_source(vaults / "ff_ippo" / "run")
    expected = expected_episodes(rollouts.streams()["done"])
    assert source.total_episodes == len(expected)
    np.testing.assert_array_equal(source.episode_lengths(), [e.length for e in expected])
    # Any episodes, in any order, read the same as in order.
    picked = [5, 0, 3]
    arrays = source.read(picked)
    data = rollouts.streams()
    offset = 0
    for position, index in enumerate(picked):
        want = expected[index]
        got = arrays.actions["agent_1"][offset:offset + want.length]
        np.testing.assert_array_equal(got, data["action"][want.stream, want.start:
                                                          want.start + want.length, 1])
        assert arrays.episode_ids[position] == index
        offset += want.length
    assert not list(vaults.parent.glob("**/*.hdf5"))  # no temporary copy was written


def test_a_vault_converted_from_mava_goes_back_to_a_vault(vaults: Path,
                                                          datasets_root: Path) -> None:
    rollouts = Rollouts(envs=2, agents=2, updates=3, rollout=8, seed=4)
    write_mava_vault(vaults, "ff_ippo", "run", rollouts)
    dataset = from_vault(rel_dir=vaults, vault_name="ff_ippo", vault_uid="run",
                         dataset_id="mava/back-v0")
    path = to_vault(dataset, rel_dir=vaults, vault_name="again", vault_uid="u")
    source = open_source(path, vault_options={"restore": False})
    assert source.total_episodes == dataset.total_episodes
    np.testing.assert_array_equal(source.episode_lengths(),
                                  [dataset[i].total_steps for i in range(len(dataset))])


def test_another_naming_errors_with_the_keys_found_then_converts_with_a_map(
        vaults: Path, datasets_root: Path) -> None:
    rollouts = Rollouts(envs=2, agents=2, updates=2, rollout=8, seed=5)
    write_mava_vault(vaults, "own", "run", rollouts)
    rename_leaves(vaults / "own" / "run", {"observation": "obs", "action": "act", "reward": "rew",
                                     "done": "finished"})
    with pytest.raises(LayoutError) as error:
        from_vault(rel_dir=vaults, vault_name="own", vault_uid="run", dataset_id="own/x-v0")
    message = str(error.value)
    assert "'act', 'finished', 'legal_action_mask', 'obs', 'rew'" in message
    assert "keys={'observations': 'obs', 'actions': 'act', 'rewards': 'rew', " in message
    dataset = from_vault(rel_dir=vaults, vault_name="own", vault_uid="run", dataset_id="own/x-v0",
                         keys={
        "observations": "obs", "actions": "act", "rewards": "rew", "dones": "finished",
        "legals": "legal_action_mask"})
    _check_episodes(dataset, rollouts)
    with pytest.raises(InvalidOptionError, match="unknown roles"):
        from_vault(rel_dir=vaults, vault_name="own", vault_uid="run", dataset_id="own/y-v0",
                   keys={"obs": "obs"})
    with pytest.raises(LayoutError, match="maps 'rewards' to 'reward', which is not"):
        from_vault(rel_dir=vaults, vault_name="own", vault_uid="run", dataset_id="own/y-v0", keys={
            "observations": "obs", "actions": "act", "rewards": "reward", "dones": "finished"})


def test_an_empty_vault_says_so(vaults: Path, datasets_root: Path) -> None:
    import jax
    from flashbax.vault import Vault
    from mava_style import flat_buffer

    _, state = flat_buffer(Rollouts(), 20)
    Vault(vault_name="empty", experience_structure=state.experience, rel_dir=str(vaults),
          vault_uid="u")
    del jax
    with pytest.raises(EmptyVaultError) as error:
        from_vault(rel_dir=vaults, vault_name="empty", vault_uid="u", dataset_id="mava/empty-v0")
    assert "holds no time steps" in str(error.value)
    assert "10000000000000" not in str(error.value)
    assert "corrupt" not in str(error.value).lower()
    with pytest.raises(EmptyVaultError):
        make_buffer([vaults / "empty" / "u"], sample_batch_size=2, sample_sequence_length=2)


def test_make_buffer_takes_a_mava_vault(vaults: Path) -> None:
    rollouts = Rollouts(envs=2, agents=2, updates=3, rollout=8, seed=6)
    write_mava_vault(vaults, "ff_ippo", "run", rollouts)
    buffer, state = make_buffer([vaults / "ff_ippo" / "run"], sample_batch_size=2,
                                sample_sequence_length=2)
    assert state is not None and buffer is not None


def test_every_error_here_is_typed() -> None:
    assert issubclass(EmptyVaultError, MarlMinariError)
