"""Vault -> Minari -> Vault on vaults written by Flashbax as Mava and OG-MARL write them."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import minari
import numpy as np
import pytest
from adapter_helpers import assert_same_episodes, assert_same_metadata, write_vault
from flashbax.vault import Vault
from gymnasium import spaces
from marl_minari.adapters import from_vault, to_vault

import marl_minari as mm
from marl_minari.errors import DatasetExistsError, LayoutError, VaultVersionError


def _read(vaults: Path, name: str, uid: str) -> dict:
    experience = Vault(name, rel_dir=str(vaults), vault_uid=uid).read().experience
    return jax.tree.map(np.asarray, experience)


def _assert_same_arrays(a: dict, b: dict) -> None:
    flat_a, tree_a = jax.tree_util.tree_flatten_with_path(a)
    flat_b, tree_b = jax.tree_util.tree_flatten_with_path(b)
    assert str(tree_a) == str(tree_b)
    for (path, x), (_, y) in zip(flat_a, flat_b, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape, (path, x.shape, y.shape)
        assert np.array_equal(x, y), path


def _meta(vaults: Path, name: str, uid: str) -> dict:
    return json.loads((vaults / name / uid / "metadata.json").read_text())


@pytest.mark.parametrize("streams", [1, 3])
def test_flashbax_vault_round_trip_is_exact(vaults: Path, streams: int) -> None:
    original = write_vault(vaults, "spread", "Good", streams=streams, steps=34, write_every=9,
                           metadata={"environment": "simple_spread", "seeds": [0, 1]})
    dataset = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="Good",
                         dataset_id="og/spread-v0")
    assert dataset.possible_agents == ("agent_0", "agent_1", "agent_2")
    assert dataset.spec.action_spaces["agent_0"] == spaces.Discrete(5)
    assert dataset.spec.observation_spaces["agent_0"].shape == (18,)
    assert dataset.spec.state_space.shape == (54,)
    assert dataset.total_steps == streams * 34  # trailing steps kept as truncated episodes
    dones = np.asarray(original.experience["terminals"]) + np.asarray(
        original.experience["truncations"])
    finished = int((dones.max(axis=-1) > 0).sum())
    trailing = int(sum(dones[b, -1].max() == 0 for b in range(streams)))
    assert dataset.total_episodes == finished + trailing

    plain = minari.load_dataset("og/spread-v0")  # Minari alone opens it
    for episode in plain.iterate_episodes():
        assert set(episode.observations) == set(dataset.possible_agents)
        assert len(episode.rewards) + 1 == len(episode.observations["agent_0"])
        assert episode.terminations[-1] or episode.truncations[-1]

    to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="again")
    _assert_same_arrays(jax.tree.map(np.asarray, original.experience),
                        _read(vaults, "spread", "again"))
    before, after = _meta(vaults, "spread", "Good"), _meta(vaults, "spread", "again")
    assert after.pop("marl_minari")["streams"] == streams
    assert before == after

    # ... and the vault we wrote restores the same dataset.
    restored = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="again",
                          dataset_id="og/spread-v1")
    assert_same_episodes(dataset, restored)
    assert_same_metadata(dataset.metadata, restored.metadata)


def test_dead_agents_extra_keys_and_final_rows(vaults: Path) -> None:
    original = write_vault(vaults, "smac", "Medium", kind="smac", streams=2, steps=60,
                           write_every=11)
    dataset = from_vault(rel_dir=vaults, vault_name="smac", vault_uid="Medium",
                         dataset_id="og/smac-v0", agents=["a", "b", "c"],
                         trailing="drop", final_observation="repeat")
    assert dataset.possible_agents == ("a", "b", "c")
    legals = np.asarray(original.experience["infos"]["legals"])
    dead = (legals[..., 0] == 1) & (legals[..., 1:].sum(axis=-1) == 0)
    assert dead.any()
    arrays = dataset.to_arrays()
    assert (~arrays.active[arrays.obs_rows]).sum() <= dead.sum()  # dropped tail excluded
    assert (~arrays.active[arrays.obs_rows]).any()
    for index in range(dataset.total_episodes):
        episode = dataset[index]
        inactive = ~episode.active[:-1]
        for i, agent in enumerate(dataset.possible_agents):
            assert np.all(episode.observations[agent][:-1][inactive[:, i]] == 0)
            assert np.all(episode.agent_infos[agent]["action_mask"][:-1][inactive[:, i]] == 0)
            np.testing.assert_array_equal(episode.observations[agent][-1],
                                          episode.observations[agent][-2])  # "repeat"
        np.testing.assert_allclose(episode.team_rewards, episode.rewards.mean(axis=1))
    assert "vault.episode_return" in arrays.extras

    to_vault(dataset, rel_dir=vaults, vault_name="smac", vault_uid="again")
    back = _read(vaults, "smac", "again")
    trailing = dataset.metadata["marl_minari"]["vault"]["trailing_steps"]
    length = 60 - min(trailing)  # shorter streams are padded to the longest
    assert back["rewards"].shape[1] == length
    for stream, rest in enumerate(trailing):
        kept = 60 - rest
        _assert_same_arrays(jax.tree.map(lambda x, b=stream, k=kept: np.asarray(x)[b, :k],
                                         original.experience),
                            jax.tree.map(lambda x, b=stream, k=kept: x[b, :k], back))
        assert all(np.all(x[stream, kept:] == 0) for x in jax.tree.leaves(back))


def test_trailing_steps_options(vaults: Path) -> None:
    write_vault(vaults, "spread", "u", steps=17, max_cycles=7)  # 2 episodes + 3 steps
    with pytest.raises(LayoutError, match="unfinished episode of 3 steps"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u", dataset_id="og/error-v0",
                   trailing="error")
    assert not minari.list_local_datasets()
    dropped = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u",
                         dataset_id="og/drop-v0", trailing="drop")
    assert (dropped.total_episodes, dropped.total_steps) == (2, 14)
    kept = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u", dataset_id="og/keep-v0",
                      trailing="truncate")
    assert (kept.total_episodes, kept.total_steps) == (3, 17)
    last = kept[2]
    assert last.episode_truncations[-1] and not last.truncations[-1].any()
    assert kept.metadata["marl_minari"]["vault"]["trailing_steps"] == [3]
    first = kept[0]
    assert first.episode_truncations[-1] and first.truncations[-1].all()
    assert not first.active[-1].any()  # final_observation="zeros": no final observation
    assert np.all(first.observations["agent_0"][-1] == 0)


def test_given_spaces_and_agents_are_checked(vaults: Path) -> None:
    write_vault(vaults, "spread", "u", steps=14, max_cycles=7)
    box = spaces.Dict({"position": spaces.Box(-np.inf, np.inf, (2,), np.float32),
                       "rest": spaces.Box(-np.inf, np.inf, (16,), np.float32)})
    dataset = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u",
                         dataset_id="og/spaces-v0",
                         observation_spaces={a: box for a in ("x", "y", "z")},
                         agents=("x", "y", "z"))
    episode = dataset[0]
    assert set(episode.observations["x"]) == {"position", "rest"}
    assert episode.observations["x"]["position"].shape == (8, 2)
    to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="again")
    _assert_same_arrays(_read(vaults, "spread", "u"), _read(vaults, "spread", "again"))
    with pytest.raises(DatasetExistsError, match="already exists"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u", dataset_id="og/spaces-v0")
    with pytest.raises(ValueError, match="2 agent names given"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u", dataset_id="og/bad-v0",
                   agents=["a", "b"])
    with pytest.raises(ValueError, match="flattens to 4 values"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u", dataset_id="og/bad-v0",
                   observation_spaces={
            a: spaces.Box(0, 1, (4,)) for a in ("agent_0", "agent_1", "agent_2")})
    with pytest.raises(ValueError, match="trailing must be"):
        from_vault(rel_dir=vaults, vault_name="spread", vault_uid="u", dataset_id="og/bad-v0",
                   trailing="keep")  # type: ignore[arg-type]


def test_vault_that_breaks_conventions_is_rejected(vaults: Path) -> None:
    import flashbax as fbx
    import jax.numpy as jnp

    buffer = fbx.make_trajectory_buffer(add_batch_size=1, sample_batch_size=1,
                                        sample_sequence_length=1, period=1,
                                        min_length_time_axis=1, max_length_time_axis=8)
    example = {"observations": jnp.zeros((2, 3)), "actions": jnp.zeros((2,), jnp.int32),
               "rewards": jnp.zeros(()), "terminals": jnp.zeros((2,))}
    state = buffer.add(buffer.init(example),
                       jax.tree.map(lambda x: jnp.zeros((1, 4, *x.shape), x.dtype), example))
    Vault("bad", state.experience, rel_dir=str(vaults), vault_uid="u").write(state)
    with pytest.raises(LayoutError, match=r"'rewards' has shape \(1, 8\)"):
        from_vault(rel_dir=vaults, vault_name="bad", vault_uid="u", dataset_id="og/bad-v0")
    with pytest.raises(FileNotFoundError, match="no vault"):
        from_vault(rel_dir=vaults, vault_name="missing", vault_uid="u", dataset_id="og/bad-v0")


@pytest.mark.parametrize("version", [2.0, 0.9, "1.2", None])
def test_vault_of_another_format_version_is_refused(vaults: Path, version: object) -> None:
    from marl_minari.adapters import make_buffer

    import marl_minari as mm

    write_vault(vaults, "spread", "v", steps=20)
    meta_path = vaults / "spread" / "v" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    assert meta["version"] == 1.2  # what the pinned flashbax writes
    if version is None:
        del meta["version"]
    else:
        meta["version"] = version
    meta_path.write_text(json.dumps(meta))
    for read in (lambda: from_vault(rel_dir=vaults, vault_name="spread", vault_uid="v",
                                    dataset_id="og/spread-v0"),
                 lambda: mm.describe(vaults / "spread" / "v"),
                 lambda: make_buffer([vaults / "spread" / "v"], sample_batch_size=1,
                                     sample_sequence_length=2)):
        with pytest.raises(VaultVersionError, match=r"metadata.json: vault format version"):
            read()


def test_vault_of_a_newer_minor_version_is_read(vaults: Path) -> None:
    write_vault(vaults, "spread", "v", steps=20)
    meta_path = vaults / "spread" / "v" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["version"] = 1.7  # Flashbax's own rule: only the major version must match
    meta_path.write_text(json.dumps(meta))
    assert from_vault(rel_dir=vaults, vault_name="spread", vault_uid="v",
                      dataset_id="og/spread-v0").total_episodes > 0


def test_a_selection_of_a_several_stream_vaults_episodes_keeps_each_in_its_stream(
        vaults: Path) -> None:
    """The record of every stored episode's stream was applied by position: once a filter
    dropped episodes, the rest went into other streams, and OG-MARL's view ran one stream's
    tail into another's episodes."""
    write_vault(vaults, "spread", "Good", streams=3, steps=34, write_every=9)
    dataset = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="Good",
                         dataset_id="og/spread-v0")
    record = dataset.spec.extra["vault"]
    stored_streams = [s for s, count in record["episode_streams"] for _ in range(count)]
    kept = dataset.filter_episodes(lambda e: e.id % 3 != 1)  # drops from every stream
    to_vault(kept, rel_dir=vaults, vault_name="kept", vault_uid="Good")
    view = _read(vaults, "kept", "Good")
    for stream in range(3):
        mine = [e for e in kept.episode_indices.tolist() if stored_streams[e] == stream]
        expected = np.concatenate([dataset.episode(e).observations["agent_0"][:-1]
                                   for e in mine])
        got = view["observations"][stream, :len(expected), 0]
        np.testing.assert_array_equal(got, expected)
    shuffled = dataset.subset(dataset.episode_indices[::-1])
    with pytest.raises(LayoutError, match="in another order than they were stored"):
        to_vault(shuffled, rel_dir=vaults, vault_name="shuffled", vault_uid="Good")
    metadata_path = Path(dataset.data_path) / "metadata.json"
    metadata = json.loads(metadata_path.read_text())
    metadata["marl_minari"]["vault"]["episode_streams"].pop()  # damaged: one run short
    metadata_path.write_text(json.dumps(metadata))
    with pytest.raises(LayoutError, match="whose record names the streams of"):
        to_vault(mm.load_dataset("og/spread-v0"), rel_dir=vaults, vault_name="short",
                 vault_uid="Good")
