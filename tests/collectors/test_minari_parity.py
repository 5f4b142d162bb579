"""The collectors' ``create_dataset``/``add_to_dataset`` with Minari's ``DataCollector``
contract: its arguments in its order, ``eval_env`` recorded, reference scores computed as
``minari.utils._generate_dataset_metadata`` computes them, and the dataset object updated in
place. Real mpe2 and PettingZoo classic envs, real Minari."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import minari
import numpy as np
import pytest

import marl_minari as mm
from marl_minari.envs.resolve import untrusted_env_references
from marl_minari.errors import (
    DatasetExistsError,
    EnvDescriptorError,
    InvalidDatasetIdError,
    InvalidOptionError,
    StepDataError,
)

SPREAD = "mpe2/simple_spread_v3"


def _record_spread(episodes: int = 2, **collector_kwargs: Any) -> Any:
    collector = mm.ParallelDataCollector(mm.make_env(SPREAD, max_cycles=6), **collector_kwargs)
    for seed in range(episodes):
        collector.reset(seed=seed)
        while collector.agents:
            collector.step({a: collector.action_space(a).sample() for a in collector.agents})
    return collector


def _still(observations: dict[str, Any]) -> dict[str, int]:
    """An 'expert' that never moves (action 0 for every agent)."""
    return {agent: 0 for agent in observations}


def _minari_average(env: Any, policy: Any, episodes: int) -> float:
    """Minari's ``get_average_reference_score`` played by hand on a parallel env: first reset
    seeded 123, the others unseeded, each episode's team reward (sum over agents) summed."""
    returns = []
    for index in range(episodes):
        observations, _ = env.reset(seed=123 if index == 0 else None)
        total = 0.0
        while env.agents:
            actions = policy(observations)
            observations, rewards, _, _, _ = env.step({a: actions[a] for a in env.agents})
            step = 0.0
            for agent in env.possible_agents:
                if agent in rewards:
                    step += float(rewards[agent])
            total += step
        returns.append(total)
    return float(np.mean(returns, dtype=np.float32))


def test_minari_positional_order_fills_ref_max_from_the_expert_policy() -> None:
    collector = _record_spread()
    # Minari's order: dataset_id, eval_env, algorithm_name, author, author_email,
    # code_permalink, ref_min_score, ref_max_score, expert_policy, num_episodes_average_score,
    # description, requirements.
    dataset = collector.create_dataset(
        "parity/spread-v0", None, "random", "me", "me@example.org", "https://example.org",
        -100.0, None, _still, 3, "two random episodes", ["mpe2"])
    collector.close()
    metadata = dataset.metadata
    assert metadata["description"] == "two random episodes"
    assert metadata["requirements"] == ["mpe2"]
    assert metadata["num_episodes_average_score"] == 3
    assert metadata["ref_min_score"] == -100.0  # given: not replaced by a random policy's
    expected = _minari_average(mm.make_env(SPREAD, max_cycles=6), _still, 3)
    assert metadata["ref_max_score"] == pytest.approx(expected, rel=0, abs=0)
    plain = minari.load_dataset("parity/spread-v0")
    normalised = minari.get_normalized_score(plain, np.asarray([expected, -100.0]))
    assert np.allclose(normalised, [1.0, 0.0])


def test_ref_min_score_comes_from_a_random_policy_when_a_maximum_is_known() -> None:
    collector = _record_spread()
    dataset = collector.create_dataset("parity/spread-v0", ref_max_score=0.0,
                                       num_episodes_average_score=2, algorithm_name="random")
    collector.close()
    score = dataset.metadata["ref_min_score"]
    assert isinstance(score, float) and score < 0.0  # spread's rewards are negative distances
    assert dataset.metadata["ref_max_score"] == 0.0


def test_no_scores_are_computed_without_a_maximum() -> None:
    collector = _record_spread()
    dataset = collector.create_dataset("parity/spread-v0", algorithm_name="random")
    collector.close()
    assert "ref_min_score" not in dataset.metadata
    assert "num_episodes_average_score" not in dataset.metadata


def test_expert_policy_and_ref_max_score_together_are_refused() -> None:
    collector = _record_spread()
    with pytest.raises(InvalidOptionError, match="expert_policy or ref_max_score"):
        collector.create_dataset("parity/spread-v0", ref_max_score=1.0, expert_policy=_still)
    with pytest.raises(InvalidOptionError, match="num_episodes_average_score"):
        collector.create_dataset("parity/spread-v0", expert_policy=_still,
                                 num_episodes_average_score=0)
    collector.close()
    assert "parity/spread-v0" not in minari.list_local_datasets()


def test_a_taken_id_fails_before_any_reference_episode_is_played() -> None:
    collector = _record_spread()
    collector.create_dataset("parity/spread-v0", algorithm_name="random")
    _record_more(collector)
    played: list[Any] = []

    def watched(observations: dict[str, Any]) -> dict[str, int]:
        played.append(observations)
        return _still(observations)

    with pytest.raises(DatasetExistsError, match="no reference episodes were played"):
        collector.create_dataset("parity/spread-v0", expert_policy=watched)
    with pytest.raises(InvalidDatasetIdError):
        collector.create_dataset("bad id", expert_policy=watched)
    collector.close()
    assert played == []


def test_our_options_are_keyword_only() -> None:
    collector = _record_spread()
    with pytest.raises(TypeError):
        collector.create_dataset("parity/spread-v0", None, None, None, None, None, None, None,
                                 None, 100, None, None, {"k": 1})  # type: ignore[misc]
    collector.close()


def test_eval_env_is_recorded_and_recovered_by_both_loaders() -> None:
    collector = _record_spread()
    evaluation = mm.make_env(SPREAD, max_cycles=4)
    dataset = collector.create_dataset("parity/spread-v0", evaluation, algorithm_name="random")
    collector.close()
    assert dataset.recover_environment().unwrapped.max_cycles == 6
    assert dataset.recover_environment(eval_env=True).unwrapped.max_cycles == 4
    assert dataset.recover_environment(True, api="aec").unwrapped.max_cycles == 4
    joint = minari.load_dataset("parity/spread-v0").recover_environment(eval_env=True)
    assert json.loads(minari.load_dataset("parity/spread-v0").storage.metadata[
        "eval_env_spec"])["kwargs"]["descriptor"]["kwargs"]["max_cycles"] == 4
    assert joint.observation_space == dataset.observation_space


def test_without_eval_env_the_recorded_env_is_the_evaluation_env() -> None:
    collector = _record_spread()
    dataset = collector.create_dataset("parity/spread-v0", algorithm_name="random")
    collector.close()
    assert "eval_env_spec" not in dataset.metadata
    assert dataset.recover_environment(eval_env=True).unwrapped.max_cycles == 6


def test_eval_env_by_id_and_bad_eval_env() -> None:
    collector = _record_spread()
    dataset = collector.create_dataset("parity/spread-v0", SPREAD, algorithm_name="random")
    assert dataset.recover_environment(eval_env=True).unwrapped.max_cycles == 25  # default
    _record_more(collector)
    with pytest.raises(EnvDescriptorError, match="eval_env must be"):
        collector.create_dataset("parity/spread-v1", 3.5)
    collector.close()


def test_recover_environment_refuses_an_api_as_its_first_argument() -> None:
    collector = _record_spread()
    dataset = collector.create_dataset("parity/spread-v0", algorithm_name="random")
    collector.close()
    with pytest.raises(InvalidOptionError, match="api='aec'"):
        dataset.recover_environment("aec")


def test_an_untrusted_eval_env_is_reported_and_not_made(monkeypatch: pytest.MonkeyPatch) -> None:
    collector = _record_spread()
    dataset = collector.create_dataset("parity/spread-v0", algorithm_name="random")
    collector.close()
    path = Path(dataset.data_path) / "metadata.json"
    metadata = json.loads(path.read_text())
    spec = json.loads(metadata["env_spec"])
    spec["kwargs"]["descriptor"]["entry_point"] = "os:system"
    spec["kwargs"]["descriptor"]["env_id"] = None
    metadata["eval_env_spec"] = json.dumps(spec)
    path.write_text(json.dumps(metadata))
    assert any(line.startswith("eval_env_spec.kwargs.descriptor.entry_point: os:system")
               for line in untrusted_env_references(metadata))
    reopened = mm.load_dataset("parity/spread-v0")
    with pytest.raises(EnvDescriptorError, match="os:system"):
        reopened.recover_environment(eval_env=True)


def _record_more(collector: Any, seed: int = 10) -> None:
    collector.reset(seed=seed)
    while collector.agents:
        collector.step({a: collector.action_space(a).sample() for a in collector.agents})


def test_add_to_dataset_updates_the_dataset_object_in_place() -> None:
    collector = _record_spread()
    dataset = collector.create_dataset("parity/spread-v0", algorithm_name="random")
    plain = minari.load_dataset("parity/spread-v0")
    _record_more(collector)
    assert collector.add_to_dataset(dataset) is dataset
    assert len(dataset) == 3 and list(dataset.episode_indices) == [0, 1, 2]
    assert dataset[2].total_steps == 6 and dataset.total_steps == 18
    _record_more(collector, seed=11)
    # Minari's own object, as Minari's add_to_dataset takes it: the new id is the storage's
    # episode count before the append (3), whatever this view held.
    assert collector.add_to_dataset(plain) is plain
    assert list(plain.episode_indices) == [0, 1, 3]
    assert plain.total_steps == 18 and plain.storage.total_episodes == 4
    _record_more(collector, seed=12)
    by_id = collector.add_to_dataset("parity/spread-v0")
    collector.close()
    assert len(by_id) == 5


def test_add_to_dataset_refuses_a_copy_stored_outside_the_root(tmp_path: Path) -> None:
    collector = _record_spread()
    dataset = collector.create_dataset("parity/spread-v0", algorithm_name="random")
    copy = tmp_path / "elsewhere" / "spread-v0"
    shutil.copytree(Path(dataset.data_path).parent, copy)
    elsewhere = mm.load_dataset(copy)
    _record_more(collector)
    # Appending by the copy's id would change the original in the root: refused.
    with pytest.raises(InvalidOptionError, match="not at"):
        collector.add_to_dataset(elsewhere)
    with pytest.raises(InvalidOptionError, match="got int"):
        collector.add_to_dataset(3)
    collector.add_to_dataset(dataset)
    collector.close()
    assert len(mm.load_dataset(copy)) == 2 and len(dataset) == 3


def _first_legal(observations: dict[str, Any]) -> dict[str, int]:
    return {agent: int(np.flatnonzero(observation["action_mask"])[0])
            for agent, observation in observations.items()}


def test_aec_expert_policy_scores_the_team_return_under_the_datasets_aggregation() -> None:
    game = mm.AECDataCollector(mm.make_env("classic/tictactoe-v3", api="aec"),
                               reward_aggregation="max")
    game.reset(seed=1)
    for agent in game.agent_iter():
        observation, _, terminated, truncated, _ = game.last()
        game.step(None if terminated or truncated else _first_legal({agent: observation})[agent])
    dataset = game.create_dataset("parity/ttt-v0", expert_policy=_first_legal,
                                  num_episodes_average_score=2, algorithm_name="first")
    game.close()
    # Both players take their first legal square: player 1 wins every game in 7 moves, and
    # the team reward of the winning row is max(+1, -1) = 1.
    assert dataset.metadata["ref_max_score"] == 1.0
    stored = [float(np.sum(episode.team_rewards)) for episode in dataset]
    assert stored == [1.0]


def _rows(tree: Any, count: int) -> list[Any]:
    """The ``count`` rows of a nested dict of arrays, each row a nested dict."""
    if isinstance(tree, dict):
        columns = {key: _rows(value, count) for key, value in tree.items()}
        return [{key: rows[i] for key, rows in columns.items()} for i in range(count)]
    assert len(tree) == count
    return list(tree)


def test_minari_dataset_api_checks_pass_on_a_multi_agent_dataset() -> None:
    """The checks Minari's test suite makes of every dataset (its ``tests/common.py``:
    ``check_data_integrity``, ``check_env_recovery``, ``check_load_and_delete_dataset``),
    written again here against the attributes a ``MinariDataset`` answers."""
    collector = _record_spread(episodes=3)
    env = mm.make_env(SPREAD, max_cycles=6)
    evaluation = mm.make_env(SPREAD, max_cycles=4)
    dataset = collector.create_dataset("parity/spread-v0", evaluation, algorithm_name="random")
    collector.close()
    plain = minari.load_dataset("parity/spread-v0")
    assert dataset.id == plain.id == plain.spec.dataset_id == "parity/spread-v0"
    assert dataset.minari_version == plain.minari_version
    assert dataset.combined_datasets == plain.combined_datasets == []
    assert dataset.observation_space == plain.observation_space
    assert dataset.action_space == plain.action_space
    assert dataset.env_spec == plain.env_spec
    # check_data_integrity: through the storage, every episode at its index, T + 1
    # observations and T of everything else, every row inside its space, steps adding up.
    storage = dataset.storage
    episodes = list(storage.get_episodes(dataset.episode_indices))
    assert storage.total_episodes == len(episodes) == dataset.total_episodes == 3
    assert [int(episode["id"]) for episode in episodes] == list(dataset.episode_indices)
    steps = 0
    for episode in episodes:
        length = len(episode["rewards"])
        steps += length
        for row in _rows(episode["observations"], length + 1):
            assert dataset.observation_space.contains(row)
        for row in _rows(episode["actions"], length):
            assert dataset.action_space.contains(row)
        for key in ("rewards", "terminations", "truncations"):
            assert len(episode[key]) == length
    assert steps == storage.total_steps == dataset.total_steps == 18
    # check_env_recovery: the recovered env's spec and spaces are the recording's, and the
    # evaluation env comes back as given.
    joint = plain.recover_environment()
    assert joint.spec == plain.env_spec
    assert joint.observation_space == dataset.observation_space
    assert joint.action_space == dataset.action_space
    recovered = dataset.recover_environment()
    for agent in env.possible_agents:
        assert recovered.observation_space(agent) == dataset.observation_space[agent]
        assert recovered.action_space(agent) == dataset.action_space[agent]
    assert plain.recover_environment(eval_env=True).spec.kwargs["descriptor"]["kwargs"][
        "max_cycles"] == 4
    assert dataset.recover_environment(eval_env=True).unwrapped.max_cycles == 4
    # check_load_and_delete_dataset.
    assert "parity/spread-v0" in minari.list_local_datasets()
    minari.delete_dataset("parity/spread-v0")
    assert "parity/spread-v0" not in minari.list_local_datasets()

class _DoubledRewards(minari.StepDataCallback):
    """A Minari StepDataCallback as Minari's docs write one: super() then edit its dict."""

    calls: list[tuple[str, ...]] = []

    def __call__(self, env: Any, **kwargs: Any) -> Any:
        step_data = super().__call__(env, **kwargs)
        _DoubledRewards.calls.append(tuple(sorted(step_data["observation"])))
        if step_data["reward"] is not None:
            step_data["reward"] = {agent: 2.0 * reward
                                   for agent, reward in step_data["reward"].items()}
        return step_data


def _record_still(**collector_kwargs: Any) -> Any:
    """One episode of spread where nobody moves: the same rewards every time."""
    collector = mm.ParallelDataCollector(mm.make_env(SPREAD, max_cycles=6), **collector_kwargs)
    collector.reset(seed=3)
    while collector.agents:
        collector.step({agent: 0 for agent in collector.agents})
    return collector


def test_minari_step_data_callback_class_gets_minaris_contract_by_agent() -> None:
    _DoubledRewards.calls.clear()
    plain = _record_still()
    mine = _record_still(step_data_callback=_DoubledRewards)
    ours = plain.create_dataset("parity/plain-v0", algorithm_name="still")[0]
    doubled = mine.create_dataset("parity/doubled-v0", algorithm_name="still")[0]
    plain.close()
    mine.close()
    assert len(_DoubledRewards.calls) == 7  # the reset and six steps
    assert _DoubledRewards.calls[0] == ("agent_0", "agent_1", "agent_2")
    assert np.any(ours.rewards != 0)
    np.testing.assert_array_equal(doubled.rewards, 2.0 * ours.rewards)
    np.testing.assert_array_equal(doubled.observations["agent_0"], ours.observations["agent_0"])


class _ExtraKey(minari.StepDataCallback):
    def __call__(self, env: Any, **kwargs: Any) -> Any:
        step_data = super().__call__(env, **kwargs)
        step_data["environment_states"] = {"x": 1}
        return step_data


def test_a_minari_callback_adding_keys_is_told_where_they_go() -> None:
    with pytest.raises(StepDataError, match="environment_states.*info"):
        _record_spread(episodes=1, step_data_callback=_ExtraKey)
    with pytest.raises(InvalidOptionError, match="StepDataCallback subclass"):
        mm.ParallelDataCollector(mm.make_env(SPREAD), step_data_callback=dict)


@pytest.mark.parametrize("collector", [mm.ParallelDataCollector, mm.AECDataCollector])
@pytest.mark.parametrize("callback", [minari.EpisodeMetadataCallback,
                                      minari.EpisodeMetadataCallback(), dict, 3])
def test_an_episode_metadata_callback_not_a_function_of_the_episode_is_refused_at_once(
        collector: Any, callback: Any) -> None:
    """Minari's callback class was accepted, then failed with a TypeError inside the step
    that ended the first episode."""
    with pytest.raises(InvalidOptionError, match="episode_metadata_callback"):
        collector(mm.make_env(SPREAD, api="parallel" if collector is mm.ParallelDataCollector
                              else "aec"), episode_metadata_callback=callback)


@pytest.mark.parametrize("collector", [mm.ParallelDataCollector, mm.AECDataCollector])
def test_minari_data_format_hdf5_is_accepted_and_arrow_refused(collector: Any) -> None:
    api = "parallel" if collector is mm.ParallelDataCollector else "aec"
    collector(mm.make_env(SPREAD, api=api), data_format="hdf5").close()
    with pytest.raises(InvalidOptionError, match="data_format='arrow'.*HDF5 datasets only"):
        collector(mm.make_env(SPREAD, api=api), data_format="arrow")


def test_describe_and_card_show_returns_normalised_as_minari_does(tmp_path: Path) -> None:
    collector = _record_spread(episodes=3)
    dataset = collector.create_dataset("parity/spread-v0", ref_min_score=-40.0,
                                       ref_max_score=-5.0, algorithm_name="random")
    collector.close()
    description = mm.describe(dataset)
    team = np.asarray([float(np.sum(episode.team_rewards)) for episode in dataset])
    expected = minari.get_normalized_score(dataset.minari, team)
    normalised = description.normalized_team_returns
    assert normalised is not None
    assert normalised.mean == pytest.approx(float(np.mean(expected)))
    assert normalised.max == pytest.approx(float(np.max(expected)))
    assert "normalised     mean" in description.to_text()
    assert description.to_dict()["normalized_team_returns"]["count"] == 3
    card = Path(mm.dataset_card(description, tmp_path / "README.md")).read_text()
    assert "| team, normalised | 3 |" in card
    unscored = _record_spread(episodes=1)
    plain = unscored.create_dataset("parity/unscored-v0", algorithm_name="random")
    unscored.close()
    assert mm.describe(plain).normalized_team_returns is None
    assert "normalised" not in mm.describe(plain).to_text()


def test_every_collector_takes_minaris_create_dataset_arguments_in_order() -> None:
    import inspect

    from marl_minari.collectors import FlashbaxDataCollector

    minaris = list(inspect.signature(minari.DataCollector.create_dataset).parameters)
    for collector in (mm.ParallelDataCollector, mm.AECDataCollector, FlashbaxDataCollector):
        ours = inspect.signature(collector.create_dataset).parameters
        positional = [name for name, p in ours.items()
                      if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert positional == minaris, collector.__name__
        assert ours["num_episodes_average_score"].default == 100
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY
                   for name, p in ours.items() if name not in minaris)
