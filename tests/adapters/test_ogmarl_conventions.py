"""The vault view follows OG-MARL's conventions, checked the way OG-MARL's learners use it.

Recordings cover a parallel env whose agents die (KAZ), heterogeneous agents
(simple_speaker_listener) and a turn-based game (tic-tac-toe).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import flashbax as fbx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from adapter_helpers import assert_same_episodes
from flashbax.vault import Vault
from marl_minari.adapters import from_vault, to_vault

KAZ = ("butterfly/knights_archers_zombies_v11",
       {"max_cycles": 150, "spawn_delay": 1, "line_death": True})
SPEAKER = ("mpe2/simple_speaker_listener_v4", {"max_cycles": 6})


def _read(vaults: Path, name: str, uid: str) -> dict[str, Any]:
    experience = Vault(name, rel_dir=str(vaults), vault_uid=uid).read().experience
    return jax.tree.map(np.asarray, experience)


def _dataset(kind: str, recorded: Any, record_tictactoe: Any) -> Any:
    if kind == "tictactoe":
        return record_tictactoe("tests/tictactoe-v0", 4)
    env_id, kwargs = {"kaz": KAZ, "speaker": SPEAKER}[kind]
    return recorded(env_id, episodes=2, **kwargs)


def _logged_action_legality(experience: dict[str, Any]) -> np.ndarray:
    """Per row and agent, the legal-mask entry of the logged action."""
    actions = experience["actions"][..., None].astype(np.int64)
    return np.take_along_axis(experience["infos"]["legals"], actions, axis=-1)[..., 0]


@pytest.mark.parametrize("kind", ["kaz", "speaker", "tictactoe"])
def test_every_logged_action_is_legal_and_the_round_trip_stays_exact(
        kind: str, recorded: Any, record_tictactoe: Any, vaults: Path) -> None:
    dataset = _dataset(kind, recorded, record_tictactoe)
    arrays = dataset.to_arrays()
    idle = ~arrays.acted
    if kind != "speaker":
        assert idle.any(), "some agent must not act at some step for this test to bite"
    to_vault(dataset, rel_dir=vaults, vault_name=kind, vault_uid="Random", chunk_steps=40)
    experience = _read(vaults, kind, "Random")

    assert (_logged_action_legality(experience) == 1.0).all()
    legals, observations = experience["infos"]["legals"][0], experience["observations"][0]
    # OG-MARL's idle agent (gone, or not its turn): action 0, only action 0 legal, zeros.
    assert not experience["actions"][0][idle].any()
    assert (legals[idle][:, 0] == 1.0).all() and not legals[idle][:, 1:].any()
    assert not observations[idle].any()

    back = from_vault(rel_dir=vaults, vault_name=kind, vault_uid="Random",
                      dataset_id="tests/back-v0", chunk_steps=30)
    assert_same_episodes(dataset, back)


def test_terminals_mark_every_episode_end_and_strict_keeps_terminations(
        recorded: Any, vaults: Path) -> None:
    dataset = recorded("mpe2/simple_spread_v3", episodes=3, max_cycles=6)
    arrays = dataset.to_arrays()
    ends = np.cumsum(arrays.episode_lengths) - 1
    assert arrays.episode_truncations[ends].all()  # mpe2 episodes end by their time limit

    to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="Random")
    default = _read(vaults, "spread", "Random")
    expected = np.zeros((dataset.total_steps, 3), dtype=np.float32)
    expected[ends] = 1.0
    np.testing.assert_array_equal(default["terminals"][0], expected)
    np.testing.assert_array_equal(default["truncations"][0], expected)

    to_vault(dataset, rel_dir=vaults, vault_name="spread", vault_uid="strict", terminals="strict")
    strict = _read(vaults, "spread", "strict")
    assert not strict["terminals"].any()
    np.testing.assert_array_equal(strict["truncations"][0], expected)

    for uid in ("Random", "strict"):
        assert_same_episodes(dataset, from_vault(rel_dir=vaults, vault_name="spread", vault_uid=uid,
                                                 dataset_id=f"tests/{uid}-v0"))
    # Imported like any OG-MARL vault: an end with a truncation flag is a truncation.
    imported = from_vault(rel_dir=vaults, vault_name="spread", vault_uid="Random",
                          dataset_id="tests/imported-v0", restore=False)
    for episode in imported.iterate_episodes():
        assert episode.episode_truncations[-1] and not episode.episode_terminations[-1]


def test_integer_actions_with_a_trailing_axis_are_discrete(vaults: Path) -> None:
    experience = write_single_action_axis_vault(vaults)
    imported = from_vault(rel_dir=vaults, vault_name="axis", vault_uid="Random",
                          dataset_id="tests/axis-v0")
    space = imported.spec.action_spaces["agent_0"]
    assert (type(space).__name__, int(space.n)) == ("Discrete", 5)
    np.testing.assert_array_equal(imported.to_arrays().actions["agent_1"],
                                  experience["actions"][0, :, 1, 0])


def write_single_action_axis_vault(vaults: Path) -> dict[str, Any]:
    """An OG-MARL-style vault whose integer actions are shaped ``(B, T, N, 1)``."""
    rng = np.random.default_rng(0)
    steps, n = 12, 2
    experience = {
        "observations": rng.standard_normal((1, steps, n, 4)).astype(np.float32),
        "actions": rng.integers(0, 5, (1, steps, n, 1)).astype(np.int32),
        "rewards": np.zeros((1, steps, n), np.float32),
        "terminals": np.zeros((1, steps, n), np.float32),
        "truncations": np.zeros((1, steps, n), np.float32),
        "infos": {"legals": np.ones((1, steps, n, 5), np.float32)},
    }
    experience["terminals"][0, [5, 11]] = 1.0
    state = fbx.trajectory_buffer.TrajectoryBufferState(
        experience=jax.tree.map(jnp.asarray, experience),
        current_index=jnp.asarray(steps, jnp.int32), is_full=jnp.asarray(False))
    Vault("axis", experience_structure=state.experience, rel_dir=str(vaults),
          vault_uid="Random").write(state)
    return experience


# --------------------------------------------------------------------------- a learner


def _q_learning_loss(params: dict[str, jax.Array], batch: dict[str, Any]) -> jax.Array:
    """One-step Q-learning with a behaviour-cloning term, OG-MARL style.

    Illegal actions get ``-inf`` (as OG-MARL's learners mask them), so a logged action that its
    own ``legals`` row calls illegal makes the loss infinite; ``terminals`` cut episodes (no
    bootstrapping across an end).
    """
    obs, legals = batch["observations"], batch["infos"]["legals"]
    q = jnp.einsum("btno,oa->btna", obs, params["w"]) + params["b"]
    q = jnp.where(legals > 0, q, -jnp.inf)
    actions = batch["actions"].astype(jnp.int32)
    taken = jnp.take_along_axis(q, actions[..., None], axis=-1)[..., 0]
    next_best = jnp.max(q[:, 1:], axis=-1)
    cut = 1.0 - batch["terminals"][:, :-1]
    target = batch["rewards"][:, :-1] + 0.99 * cut * jnp.where(cut > 0, next_best, 0.0)
    td = taken[:, :-1] - jax.lax.stop_gradient(target)
    log_policy = jax.nn.log_softmax(q, axis=-1)
    bc = -jnp.take_along_axis(log_policy, actions[..., None], axis=-1)[..., 0]
    return jnp.mean(td**2) + jnp.mean(bc)


@pytest.mark.parametrize("kind", ["kaz", "tictactoe"])
def test_an_ogmarl_style_learner_gets_finite_losses(
        kind: str, recorded: Any, record_tictactoe: Any, vaults: Path) -> None:
    dataset = _dataset(kind, recorded, record_tictactoe)
    to_vault(dataset, rel_dir=vaults, vault_name=kind, vault_uid="Random")
    vault_state = Vault(kind, rel_dir=str(vaults), vault_uid="Random").read()
    length = vault_state.experience["terminals"].shape[1]
    # Every episode end is visible to the learner (OG-MARL counts episodes by terminals).
    ends = np.asarray(vault_state.experience["terminals"][0]).any(axis=-1)
    assert int(ends.sum()) == dataset.total_episodes
    assert ends[length - 1]

    buffer = fbx.make_trajectory_buffer(
        add_batch_size=1, sample_batch_size=32, sample_sequence_length=5, period=1,
        min_length_time_axis=5, max_length_time_axis=length)
    obs_width = vault_state.experience["observations"].shape[-1]
    actions = vault_state.experience["infos"]["legals"].shape[-1]
    params = {"w": jnp.zeros((obs_width, actions)), "b": jnp.zeros((actions,))}
    grad = jax.jit(jax.value_and_grad(_q_learning_loss))
    sample = jax.jit(buffer.sample)
    losses = []
    for step in range(20):
        batch = sample(vault_state, jax.random.PRNGKey(step)).experience
        loss, grads = grad(params, batch)
        params = jax.tree.map(lambda p, g: p - 0.01 * g, params, grads)
        losses.append(float(loss))
    assert np.isfinite(losses).all(), losses


# --------------------------------------------------------------------------- names and paths


def test_default_vault_path_is_ogmarl_style(recorded: Any, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from marl_minari.adapters import make_buffer
    from typer.testing import CliRunner

    from marl_minari.cli import app

    dataset = recorded("mpe2/simple_spread_v3", episodes=2, max_cycles=4,
                       dataset_id="mpe2/simple_spread/random-v0")
    monkeypatch.chdir(tmp_path)
    path = to_vault(dataset)  # algorithm_name "random" -> uid "Random"
    assert path == tmp_path / "vaults" / "mpe2" / "simple_spread" / "random-v0.vlt" / "Random"
    # OG-MARL's loaders name it this way.
    read = Vault("mpe2/simple_spread/random-v0.vlt", rel_dir="vaults", vault_uid="Random").read()
    assert read.experience["observations"].shape[1] == dataset.total_steps
    back = from_vault(rel_dir="vaults", vault_name="mpe2/simple_spread/random-v0.vlt",
                      vault_uid="Random", dataset_id="tests/back-v0")
    assert_same_episodes(dataset, back)
    from_path = from_vault(rel_dir="vaults/mpe2/simple_spread", vault_name="random-v0.vlt",
                           vault_uid="Random",
                           dataset_id="tests/back-v1")
    assert from_path.total_steps == dataset.total_steps
    _, state = make_buffer([str(path)], sample_batch_size=2, sample_sequence_length=2)
    assert state.experience["observations"].shape[1] == dataset.total_steps

    done = CliRunner().invoke(app, ["convert", "mpe2/simple_spread/random-v0",
                                    "--terminals", "strict"])
    assert done.exit_code == 1 and "exists" in done.output  # the default path, already there
    shutil.rmtree(path)
    done = CliRunner().invoke(app, ["convert", "mpe2/simple_spread/random-v0",
                                    "--terminals", "strict"])
    assert done.exit_code == 0, done.output
    assert "Vault('mpe2/simple_spread/random-v0.vlt', rel_dir='vaults', vault_uid='Random')" \
        in done.output
    assert not _read(tmp_path / "vaults", "mpe2/simple_spread/random-v0.vlt",
                     "Random")["terminals"].any()


def test_an_untrusted_dataset_id_cannot_name_the_vault_folder(
        recorded: Any, datasets_root: Path, tmp_path: Path) -> None:
    import marl_minari as mm

    recorded("mpe2/simple_spread_v3", episodes=1, max_cycles=3)
    folder = datasets_root / "tests" / "recorded-v0"
    meta_path = folder / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["dataset_id"] = "../../escaped-v0"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(mm.InvalidDatasetIdError, match="pass vault_name"):
        to_vault(folder, rel_dir=tmp_path / "vaults")
    assert not (tmp_path / "escaped-v0.vlt").exists()
    assert to_vault(folder, rel_dir=tmp_path / "vaults", vault_name="spread.vlt",
                    vault_uid="Random").is_dir()
