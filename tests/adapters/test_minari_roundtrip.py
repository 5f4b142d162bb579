"""Minari -> Vault -> Minari on datasets recorded from real environments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import minari
import numpy as np
import pytest
from adapter_helpers import assert_same_episodes, assert_same_metadata, assert_trees_equal
from flashbax.vault import Vault
from marl_minari.adapters import PAD_VALUE, from_vault, to_vault

import marl_minari as mm
from marl_minari.errors import DatasetExistsError

OGMARL_KEYS = {"observations", "actions", "rewards", "terminals", "truncations", "infos"}


def _read(vaults: Path, name: str, uid: str) -> dict:
    experience = Vault(name, rel_dir=str(vaults), vault_uid=uid).read().experience
    return jax.tree.map(np.asarray, experience)


def test_simple_spread_round_trip_is_exact(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=3, max_cycles=9)
    path = to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="Good", chunk_steps=7)
    assert path == vaults / "spread" / "Good"

    experience = _read(vaults, "spread", "Good")
    assert set(experience) == OGMARL_KEYS and set(experience["infos"]) == {"legals", "state"}
    steps = dataset.total_steps
    assert experience["observations"].shape == (1, steps, 3, 18)
    assert experience["observations"].dtype == np.float32
    assert experience["actions"].shape == (1, steps, 3)
    assert experience["actions"].dtype == np.int32
    for key in ("rewards", "terminals", "truncations"):
        assert experience[key].shape == (1, steps, 3) and experience[key].dtype == np.float32
    assert experience["infos"]["legals"].shape == (1, steps, 3, 5)
    assert np.all(experience["infos"]["legals"] == 1.0)  # no mask: every action legal
    assert experience["infos"]["state"].shape == (1, steps, 54)

    arrays = dataset.to_arrays()
    np.testing.assert_array_equal(experience["observations"][0, :, 1],
                                  arrays.observations["agent_1"][arrays.obs_rows])
    np.testing.assert_array_equal(experience["actions"][0, :, 2], arrays.actions["agent_2"])
    np.testing.assert_array_equal(experience["rewards"][0],
                                  arrays.rewards.astype(np.float32))
    team_done = arrays.episode_truncations.astype(np.float32)
    for agent in range(3):  # the team's done copied to every agent
        np.testing.assert_array_equal(experience["truncations"][0, :, agent], team_done)
    np.testing.assert_array_equal(experience["infos"]["state"][0],
                                  arrays.state[arrays.obs_rows])

    back = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="Good",
                      dataset_id="tests/back-v0", chunk_steps=5)
    assert_same_episodes(dataset, back)
    assert_same_metadata(dataset.metadata, back.metadata)
    plain = minari.load_dataset("tests/back-v0")
    assert plain.total_steps == steps
    assert sum(1 for _ in plain.iterate_episodes()) == 3


def test_heterogeneous_agents_are_padded_and_restored(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_speaker_listener_v4", episodes=2, max_cycles=6)
    to_vault(dataset, rel_dir=vaults, vault_name="speaker", vault_uid="u")
    experience = _read(vaults, "speaker", "u")
    assert experience["observations"].shape[2:] == (2, 11)
    speaker = dataset.possible_agents.index("speaker_0")
    assert np.all(experience["observations"][0, :, speaker, 3:] == PAD_VALUE)
    legals = experience["infos"]["legals"][0, :, speaker]
    assert legals.shape[-1] == 5 and np.all(legals[:, :3] == 1) and np.all(legals[:, 3:] == 0)

    meta = json.loads((vaults / "speaker" / "u" / "metadata.json").read_text())
    view = meta["marl_minari"]["view"]
    assert view["agents"] == list(dataset.possible_agents)
    assert view["observation_sizes"][speaker] == 3
    assert view["legals"]["counts"][speaker] == 3

    back = from_vault(rel_dir=vaults, vault_name="speaker", vault_uid="u",
                      dataset_id="tests/back-v0")
    assert_same_episodes(dataset, back)
    assert_same_metadata(dataset.metadata, back.metadata)


def test_image_observations_and_continuous_actions(recorded, vaults: Path) -> None:
    dataset = recorded("butterfly/pistonball_v6", episodes=2, jpeg=False, n_pistons=2,
                       max_cycles=4)
    to_vault(dataset, rel_dir=vaults, vault_name="pistons", vault_uid="u")
    experience = _read(vaults, "pistons", "u")
    assert experience["observations"].shape == (1, dataset.total_steps, 2, 457 * 120 * 3)
    assert experience["actions"].shape == (1, dataset.total_steps, 2, 1)
    assert experience["actions"].dtype == np.float32
    assert "legals" not in experience["infos"]  # continuous actions: no legal mask
    back = from_vault(rel_dir=vaults, vault_name="pistons", vault_uid="u",
                      dataset_id="tests/back-v0")
    assert_same_episodes(dataset, back)
    assert_same_metadata(dataset.metadata, back.metadata)


def test_jpeg_encoded_images_come_back_as_decoded_pixels(recorded, vaults: Path) -> None:
    dataset = recorded("butterfly/pistonball_v6", episodes=1, n_pistons=2, max_cycles=3)
    assert dataset.metadata["jpeg_encoding"] is True
    to_vault(dataset, rel_dir=vaults, vault_name="pistons", vault_uid="jpeg")
    back = from_vault(rel_dir=vaults, vault_name="pistons", vault_uid="jpeg",
                      dataset_id="tests/back-v0")
    assert_same_episodes(dataset, back)  # the pixels the dataset hands out, exactly
    assert back.metadata["jpeg_encoding"] is False  # re-encoding would lose them
    assert (dataset.spec.state_encoding, back.spec.state_encoding) == ("jpeg", "lzf")
    assert_same_metadata(dataset.metadata, back.metadata,
                         ignore=("dataset_id", "jpeg_encoding", "dataset_size", "marl_minari"))
    assert_same_metadata(dataset.metadata["marl_minari"], back.metadata["marl_minari"],
                         ignore=("state_encoding",))


def test_single_agent_minari_dataset_becomes_agent_0(cartpole_dataset, vaults: Path) -> None:
    to_vault("tests/cartpole-v0", rel_dir=vaults, vault_name="cartpole", vault_uid="u")
    experience = _read(vaults, "cartpole", "u")
    steps = cartpole_dataset.total_steps
    assert experience["observations"].shape == (1, steps, 1, 4)
    assert experience["actions"].shape == (1, steps, 1)
    assert experience["infos"]["legals"].shape == (1, steps, 1, 2)

    back = from_vault(rel_dir=vaults, vault_name="cartpole", vault_uid="u",
                      dataset_id="tests/cartpole-back-v0")
    assert back.possible_agents == ("agent_0",)
    seeds = [ep.seed for ep in back.iterate_episodes()]
    for original, restored, seed in zip(cartpole_dataset.iterate_episodes(),
                                        back.minari.iterate_episodes(), seeds, strict=True):
        assert_trees_equal(original.observations, restored.observations["agent_0"])
        assert_trees_equal(original.actions, restored.actions["agent_0"])
        assert_trees_equal(original.rewards, restored.rewards)
        assert_trees_equal(original.terminations, restored.terminations)
        assert_trees_equal(original.truncations, restored.truncations)
        assert seed == original.id
    original_meta = json.loads((Path(cartpole_dataset.storage.data_path)
                                / "metadata.json").read_text())
    source = back.metadata["marl_minari"]["single_agent_source"]
    assert source["env_spec"] == original_meta["env_spec"]
    assert source["action_space"] == original_meta["action_space"]
    for key in ("algorithm_name", "author", "author_email", "code_permalink", "description"):
        assert back.metadata[key] == original_meta[key]
    # A second trip gives the multi-agent dataset back exactly.
    to_vault(back, rel_dir=vaults, vault_name="cartpole", vault_uid="again")
    again = from_vault(rel_dir=vaults, vault_name="cartpole", vault_uid="again",
                       dataset_id="tests/cartpole-again-v0")
    assert_same_episodes(back, again)
    assert_same_metadata(back.metadata, again.metadata)


def test_vault_layout_is_what_flashbax_reads(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=5)
    to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="u",
             compression={"id": "zstd", "level": 3})
    folder = vaults / "spread" / "u"
    assert {p.name for p in folder.iterdir()} == {"metadata.json", "manifest.ocdbt", "d"}
    meta = json.loads((folder / "metadata.json").read_text())
    assert meta["version"] == 1.2
    assert meta["structure_dtype"]["infos"]["legals"] == "float32"
    assert meta["marl_minari"]["dataset_id"] == "tests/recorded-v0"
    vault = Vault("spread", rel_dir=str(vaults), vault_uid="u")
    assert vault.vault_index == dataset.total_steps
    half = vault.read(percentiles=(0, 50)).experience
    assert half["observations"].shape[1] == dataset.total_steps // 2
    with pytest.raises(DatasetExistsError, match="already exists"):
        to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="u")
    assert not [p for p in (vaults / "spread").iterdir() if p.name.startswith(".")]


def test_team_or_agent_dones_and_state_choices(recorded, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=5)
    to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="agent", dones="agent",
             state="none")
    experience = _read(vaults, "spread", "agent")
    assert "state" not in experience["infos"]
    arrays = dataset.to_arrays()
    np.testing.assert_array_equal(experience["truncations"][0],
                                  arrays.truncations.astype(np.float32))
    back = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="agent",
                      dataset_id="tests/back-v0")
    assert_same_episodes(dataset, back)
    to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="seedless", seeds=False)
    seedless = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="seedless",
                          dataset_id="tests/seedless-v0")
    assert [e.seed for e in dataset.iterate_episodes()] == [0, 1]
    assert [e.seed for e in seedless.iterate_episodes()] == [None, None]
    assert_trees_equal(dataset.to_arrays().observations, seedless.to_arrays().observations)


def test_state_env_needs_a_recorded_state(cartpole_dataset, vaults: Path) -> None:
    with pytest.raises(mm.LayoutError, match="state='env'"):
        to_vault(cartpole_dataset, rel_dir=vaults, vault_name="x", vault_uid="y", state="env")
    assert not (vaults / "x").exists() or not any((vaults / "x").iterdir())


def test_turn_based_dict_observations_with_masks(vaults: Path, record_tictactoe: Any) -> None:
    dataset = record_tictactoe("tests/tictactoe-v0", 2)
    to_vault(dataset, rel_dir=vaults, vault_name="ttt", vault_uid="u")
    experience = _read(vaults, "ttt", "u")
    assert experience["observations"].shape[2:] == (2, 18)  # the board, without the mask
    arrays = dataset.to_arrays()
    mask = arrays.observations["player_1"]["action_mask"][arrays.obs_rows]
    acted = arrays.acted[:, 0]
    np.testing.assert_array_equal(experience["infos"]["legals"][0, acted, 0], mask[acted])
    # Not its turn: OG-MARL's idle agent (only action 0 legal, zero observation).
    np.testing.assert_array_equal(experience["infos"]["legals"][0, ~acted, 0, 0], 1.0)
    assert not experience["infos"]["legals"][0, ~acted, 0, 1:].any()
    assert not experience["observations"][0, ~acted, 0].any()
    back = from_vault(rel_dir=vaults, vault_name="ttt", vault_uid="u",
                      dataset_id="tests/tictactoe-back-v0")
    assert_same_episodes(dataset, back)
    assert_same_metadata(dataset.metadata, back.metadata)


def test_chunk_leaves_match_the_writer(recorded) -> None:
    from marl_minari.adapters._leaves import leaf_episodes

    from marl_minari.storage.episode_writer import episode_leaves

    dataset = recorded("mpe2/simple_speaker_listener_v4", episodes=3, max_cycles=4)
    arrays = dataset.to_arrays()
    count = len(arrays.episode_lengths)
    for position, leaf_episode in enumerate(leaf_episodes(arrays, [7] * count,
                                                          [None] * count)):
        expected = list(episode_leaves(arrays.episode(position)))
        assert [p for p, _ in leaf_episode.leaves] == [p for p, _ in expected]
        for (path, got), (_, want) in zip(leaf_episode.leaves, expected, strict=True):
            assert_trees_equal(got, want, path)
        assert leaf_episode.total_steps == arrays.episode_lengths[position]
        assert leaf_episode.seed == 7


def test_values_the_float32_view_cannot_hold(vaults: Path) -> None:
    """float64/int64/Discrete leaves, MultiDiscrete actions, text infos, nested reset options
    and 64-bit seeds all come back exactly (from the restoration arrays)."""
    from gymnasium import spaces

    agents = ("left", "right")
    obs_space = spaces.Dict({"pos": spaces.Box(-1e9, 1e9, (2,), np.float64),
                             "id": spaces.Discrete(4)})
    spec = mm.MultiAgentSpec(api="parallel", possible_agents=agents,
                             observation_spaces={a: obs_space for a in agents},
                             action_spaces={a: spaces.MultiDiscrete([3, 2]) for a in agents})
    rng = np.random.default_rng(3)

    def episode(index: int, steps: int) -> mm.MultiAgentEpisode:
        rows = steps + 1
        ends = np.zeros(steps, dtype=bool)
        ends[-1] = True
        rewards = rng.standard_normal((steps, 2))
        return mm.MultiAgentEpisode(
            possible_agents=agents,
            observations={a: {"pos": rng.standard_normal((rows, 2)) * 1e6 + 1 / 3,
                              "id": rng.integers(0, 4, rows)} for a in agents},
            actions={a: rng.integers(0, 2, (steps, 2)) for a in agents},
            rewards=rewards, terminations=np.zeros((steps, 2), bool),
            truncations=np.repeat(ends[:, None], 2, axis=1), active=np.ones((rows, 2), bool),
            acted=np.ones((steps, 2), bool), team_rewards=rewards.sum(axis=1),
            episode_terminations=np.zeros(steps, bool), episode_truncations=ends,
            agent_infos={a: {"msg": np.asarray([f"{a} says é{i}" * (i % 3) for i in
                                                range(rows)], dtype=object),
                             "n": np.arange(rows, dtype=np.int64)} for a in agents},
            seed=2**63 + index if index else None,
            options={"level": index, "cfg": {"w": np.arange(3, dtype=np.int16)}} if index
            else None)

    mm.write_dataset("tests/odd-v0", (episode(i, 3 + i) for i in range(4)), spec,
                     description="odd values")
    dataset = mm.load_dataset("tests/odd-v0")
    to_vault(dataset, rel_dir=vaults, vault_name="odd", vault_uid="u", chunk_steps=5)
    experience = _read(vaults, "odd", "u")
    assert experience["actions"].shape == (1, dataset.total_steps, 2, 2)
    assert experience["actions"].dtype == np.float32
    assert experience["observations"].shape[2:] == (2, 3)
    back = from_vault(rel_dir=vaults, vault_name="odd", vault_uid="u",
                      dataset_id="tests/odd-back-v0", chunk_steps=4)
    assert_same_episodes(dataset, back)
    assert_same_metadata(dataset.metadata, back.metadata)
    assert back[1].seed == 2**63 + 1


def test_info_columns_that_appear_in_later_chunks(vaults: Path) -> None:
    from gymnasium import spaces

    agents = ("a", "b")
    box = spaces.Box(-1, 1, (2,), np.float32)
    spec = mm.MultiAgentSpec(api="parallel", possible_agents=agents,
                             observation_spaces={x: box for x in agents},
                             action_spaces={x: spaces.Discrete(3) for x in agents},
                             record_infos=True)

    def episode(index: int) -> mm.MultiAgentEpisode:
        steps, rows = 4, 5
        ends = np.eye(1, steps, steps - 1, dtype=bool)[0]
        infos = {"a": {"score": np.arange(rows, dtype=np.float32)}}
        if index >= 2:  # agent b hands out infos (a mask and a note) from episode 2 on
            infos["b"] = {"action_mask": np.ones((rows, 3), dtype=np.int8),
                          "note": np.asarray(["x"] * rows, dtype=object)}
        return mm.MultiAgentEpisode(
            possible_agents=agents,
            observations={x: np.full((rows, 2), index / 10, np.float32) for x in agents},
            actions={x: np.ones(steps, np.int64) for x in agents},
            rewards=np.ones((steps, 2)), terminations=np.repeat(ends[:, None], 2, axis=1),
            truncations=np.zeros((steps, 2), bool), active=np.ones((rows, 2), bool),
            acted=np.ones((steps, 2), bool), team_rewards=np.full(steps, 2.0),
            episode_terminations=ends, episode_truncations=np.zeros(steps, bool),
            agent_infos=infos, seed=index)

    mm.write_dataset("tests/late-v0", (episode(i) for i in range(4)), spec)
    dataset = mm.load_dataset("tests/late-v0")
    to_vault(dataset, rel_dir=vaults, vault_name="late", vault_uid="u",
             chunk_steps=4)  # one episode per chunk
    back = from_vault(rel_dir=vaults, vault_name="late", vault_uid="u",
                      dataset_id="tests/late-back-v0")
    assert_trees_equal(dataset.to_arrays().agent_infos, back.to_arrays().agent_infos)
    for index in range(4):
        assert_trees_equal(dataset.episode(index).observations, back[index].observations)


def test_a_killed_conversions_staging_is_removed_by_the_next(recorded, vaults: Path) -> None:
    from marl_minari.vaults.store import VAULT_STAGING_FOLDER

    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=5)
    staging = vaults / VAULT_STAGING_FOLDER  # beside the vault-name folder, not in it
    stale = staging / f"vault-{'0' * 32}"  # a killed conversion's folder: nobody holds its lock
    (stale / "d").mkdir(parents=True)
    (stale / "d" / "chunk").write_bytes(b"x" * 1024)
    path = to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="Good")
    assert not stale.exists()
    assert sorted(p.name for p in (vaults / "spread").iterdir()) == ["Good"]  # staging gone too
    assert (path / "metadata.json").is_file()


def test_a_conversion_whose_source_fails_leaves_no_vault_and_no_staging(recorded,
                                                                         vaults: Path) -> None:
    """Writes still in flight when a read failed made their files again after the staging
    folder was removed: a half-written vault stayed in ``.marl_minari_staging``."""
    import h5py

    from marl_minari.errors import CorruptedDataError
    from marl_minari.vaults.store import VAULT_STAGING_FOLDER

    dataset = recorded("mpe2/simple_spread_v3", episodes=6, max_cycles=25)
    with h5py.File(Path(dataset.data_path) / "main_data.hdf5", "r+") as file:
        name = "episode_5/observations/agent_0"
        rows = file[name][()]
        del file[name]
        file[name] = rows[:, :3]  # the last episode no longer reads
    with pytest.raises(CorruptedDataError, match="episode_5/observations/agent_0"):
        to_vault(dataset, rel_dir=vaults, vault_name="spread.vlt", vault_uid="Good",
                 chunk_steps=26)  # one episode per chunk: five are written first
    assert not (vaults / VAULT_STAGING_FOLDER).exists()
    assert list((vaults / "spread.vlt").iterdir()) == []  # no uid for OG-MARL to list


@pytest.mark.parametrize(("name", "uid", "message"), [
    ("spread.vlt", "../../sibling", "vault_uid='../../sibling'"),
    ("spread.vlt", "a/b", "vault_uid='a/b'"),
    ("../../escaped.vlt", "Good", "vault_name='../../escaped.vlt'"),
    ("/abs/spread.vlt", "Good", "vault_name='/abs/spread.vlt'"),
])
def test_vault_names_stay_under_rel_dir(recorded, vaults: Path, name: str, uid: str,
                                        message: str) -> None:
    """``vault_uid="../../sibling"`` wrote the vault beside ``rel_dir``."""
    from marl_minari.errors import InvalidOptionError

    dataset = recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=3)
    with pytest.raises(InvalidOptionError, match=message.replace(".", r"\.")):
        to_vault(dataset, rel_dir=vaults, vault_name=name, vault_uid=uid)
    assert not (vaults.parent / "sibling").exists() and list(vaults.iterdir()) == []


@pytest.mark.parametrize("compression", [{"id": "lz77"}, ["gzip"], {"level": 5}])
def test_an_unknown_compressor_is_named_before_anything_is_read(recorded, vaults: Path,
                                                                compression: object) -> None:
    """tensorstore's own ValueError came out of the first array's creation."""
    from marl_minari.errors import InvalidOptionError

    dataset = recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=3)
    with pytest.raises(InvalidOptionError, match=r"compression=.*'id' is one of 'blosc'"):
        to_vault(dataset, rel_dir=vaults, vault_name="spread.vlt", vault_uid="Good",
                 compression=compression)
    assert list(vaults.iterdir()) == []
