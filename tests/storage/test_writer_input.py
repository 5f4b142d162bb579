"""Episodes handed to the writer are checked against the dataset's spec before anything is
written: stored as the spaces say (what ``check`` and Minari's readers expect), or refused by
name, never written as a dataset that no reader reads back."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import h5py
import minari
import numpy as np
import pytest
from gymnasium import spaces
from marl_strategies import random_episode

import marl_minari as mm
from marl_minari.errors import StepDataError
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.writer import append_to_dataset, write_dataset

AGENTS = ["red", "blue"]
OBS = {"red": spaces.Box(-1, 1, (2,), dtype=np.float32),
       "blue": spaces.Dict({"pos": spaces.Box(-1, 1, (3,), dtype=np.float32),
                            "id": spaces.Discrete(4)})}
ACT = {"red": spaces.Discrete(3), "blue": spaces.MultiDiscrete([2, 5])}
SPEC = MultiAgentSpec(api="parallel", possible_agents=tuple(AGENTS), observation_spaces=OBS,
                      action_spaces=ACT)
Change = Callable[[MultiAgentEpisode], MultiAgentEpisode]


def _episodes(count: int = 2) -> list[MultiAgentEpisode]:
    return [random_episode(AGENTS, OBS, ACT, 3 + i, seed=i, with_infos=True)
            for i in range(count)]


def _observations(episode: MultiAgentEpisode, agent: str, value: Any) -> MultiAgentEpisode:
    return replace(episode, observations={**episode.observations, agent: value})


def _actions(episode: MultiAgentEpisode, agent: str, value: Any) -> MultiAgentEpisode:
    return replace(episode, actions={**episode.actions, agent: value})


def _retyped(episode: MultiAgentEpisode) -> MultiAgentEpisode:
    """Observations as float64 and int32, actions as int32 and float64 holding whole
    numbers: other dtypes than the spaces', values the spaces' dtypes hold."""
    blue = episode.observations["blue"]
    episode = _observations(episode, "red", episode.observations["red"].astype(np.float64))
    episode = _observations(episode, "blue", {"pos": blue["pos"].astype(np.float64),
                                              "id": blue["id"].astype(np.int32)})
    episode = _actions(episode, "red", episode.actions["red"].astype(np.int32))
    return _actions(episode, "blue", episode.actions["blue"].astype(np.float64))


def _assert_refused_and_not_written(dataset_id: str, change: Change, message: str) -> None:
    """Writing episode 0 and ``change(episode 1)`` raises ``message`` naming episode 1, and
    leaves no dataset folder."""
    episodes = _episodes()
    with pytest.raises(StepDataError, match=rf"new dataset '{dataset_id}': episode 1 "
                                            r"\(seed 1\): " + message):
        write_dataset(dataset_id, [episodes[0], change(episodes[1])], SPEC)
    assert not dataset_dir(dataset_id).exists()


def test_leaves_of_other_dtypes_are_stored_as_their_spaces_say() -> None:
    """What `check` and Minari read is the spaces' dtypes, whatever the episode held."""
    episodes = _episodes()
    write_dataset("input/retyped-v0", [_retyped(e) for e in episodes], SPEC)
    main = dataset_dir("input/retyped-v0") / "data" / layout.MAIN_FILE_NAME
    with h5py.File(main, "r") as file:
        group = file["episode_1"]
        assert group["observations/red"].dtype == np.float32
        assert group["observations/blue/pos"].dtype == np.float32
        assert group["observations/blue/id"].dtype == np.int64
        assert group["actions/red"].dtype == np.int64
        assert group["actions/blue"].dtype == np.int64
    mm.check_dataset("input/retyped-v0")
    read = mm.load_dataset("input/retyped-v0").episode(1)
    np.testing.assert_array_equal(read.observations["red"], episodes[1].observations["red"])
    np.testing.assert_array_equal(read.actions["blue"], episodes[1].actions["blue"])
    plain = minari.load_dataset("input/retyped-v0")[1]
    assert plain.observations["red"].dtype == np.float32
    assert plain.actions["red"].dtype == np.int64


def test_appended_episodes_are_stored_as_their_spaces_say() -> None:
    episodes = _episodes(3)
    write_dataset("input/appended-v0", episodes[:1], SPEC)
    append_to_dataset("input/appended-v0", [_retyped(e) for e in episodes[1:]], SPEC)
    mm.check_dataset("input/appended-v0")
    read = mm.load_dataset("input/appended-v0").episode(2)
    assert read.observations["blue"]["pos"].dtype == np.float32
    np.testing.assert_array_equal(read.observations["blue"]["pos"],
                                  episodes[2].observations["blue"]["pos"])


@pytest.mark.parametrize(("change", "message"), [
    (lambda e: _actions(e, "red", e.actions["red"] + 0.5),
     r"actions of 'red', row 0: float64 value \d\.5 does not fit the space's int64"),
    (lambda e: _actions(e, "blue", np.where(np.arange(e.total_steps)[:, None] == 1, np.nan,
                                            e.actions["blue"].astype(np.float64))),
     r"actions of 'blue', row 1: float64 value nan does not fit the space's int64"),
    (lambda e: _observations(e, "red", np.full((e.total_steps + 1, 2), 1e300)),
     r"observations of 'red', row 0: float64 value 1e\+300 does not fit the space's float32 "
     r"\(it would be stored as inf\)"),
    (lambda e: _observations(e, "red", np.full((e.total_steps + 1, 2), "x")),
     r"observations of 'red': <U1 values cannot be stored as the space's float32"),
], ids=["fraction-for-discrete", "nan-for-integer", "overflow", "text-for-box"])
def test_values_the_spaces_cannot_hold_are_refused_and_nothing_is_written(
        datasets_root: Path, change: Change, message: str) -> None:
    _assert_refused_and_not_written("input/lossy-v0", change, message)


def test_a_uint8_leaf_refuses_what_would_wrap() -> None:
    obs: dict[str, spaces.Space] = {agent: spaces.Box(0, 255, (2,), dtype=np.uint8)
                                    for agent in AGENTS}
    spec = replace(SPEC, observation_spaces=obs)
    episode = random_episode(AGENTS, obs, ACT, 3, seed=0)
    wide = episode.observations["red"].astype(np.int64)
    wide[2, 1] = 300
    with pytest.raises(StepDataError, match=r"observations of 'red', row 2: int64 value 300 "
                                            r"does not fit the space's uint8 \(it would be "
                                            r"stored as 44\)"):
        write_dataset("input/wrapped-v0", [_observations(episode, "red", wide)], spec)
    wide[2, 1] = 255
    write_dataset("input/wrapped-v0", [_observations(episode, "red", wide)], spec)
    assert mm.load_dataset("input/wrapped-v0").episode(0).observations["red"][2, 1] == 255


@pytest.mark.parametrize(("change", "message"), [
    (lambda e: replace(e, possible_agents=("blue", "red")),
     r"possible_agents \['blue', 'red'\] are not the dataset's \['red', 'blue'\]"),
    (lambda e: replace(e, actions={"red": e.actions["red"]}),
     r"actions has entries for \['red'\], not for the possible agents \['red', 'blue'\]"),
    (lambda e: replace(e, team_rewards=e.team_rewards[:-1]),
     r"field rewards has shape \(4, 2\), expected \(3, 2\) for 3 steps"),
    (lambda e: replace(e, active=e.active[:-1]), r"field active has shape \(4, 2\)"),
    (lambda e: _observations(e, "red", e.observations["red"][:, :1]),
     r"observations of 'red': shape \(5, 1\), expected \(5, 2\)"),
    (lambda e: _observations(e, "blue", {"pos": e.observations["blue"]["pos"]}),
     r"observations of 'blue': has \['pos'\] where its Dict space has keys \['id', 'pos'\]"),
    (lambda e: _actions(e, "blue", e.actions["blue"][:, :1]),
     r"actions of 'blue': shape \(4, 1\), expected \(4, 2\)"),
    (lambda e: replace(e, agent_infos={**(e.agent_infos or {}), "green": {"x": np.zeros(5)}}),
     r"agent_infos has an entry for 'green', which is not one of the possible agents"),
    (lambda e: replace(e, agent_infos={"red": {"x": np.zeros(e.total_steps)}}),
     r"agent_infos of 'red'/x has shape \(4,\), expected 5 rows"),
    (lambda e: replace(e, extras={"turn": np.zeros(e.total_steps)}),
     r"extras\['turn'\] has shape \(4,\), expected 5 rows"),
], ids=["agent-order", "missing-agent", "team-rewards", "active", "observation-shape",
        "dict-keys", "action-shape", "unknown-agent-info", "info-rows", "extra-rows"])
def test_an_episode_that_does_not_fit_the_spec_is_refused_by_name(
        datasets_root: Path, change: Change, message: str) -> None:
    """Each of these used to be written, and read back wrong or not at all."""
    _assert_refused_and_not_written("input/misfit-v0", change, message)


def test_an_append_that_does_not_fit_keeps_the_dataset_as_it_was() -> None:
    episodes = _episodes(3)
    folder = write_dataset("input/kept-v0", episodes[:2], SPEC)
    before = (folder / "data" / layout.MAIN_FILE_NAME).read_bytes()
    with pytest.raises(StepDataError, match=r"main_data.hdf5: episode 2 \(seed 2\): actions "
                                            r"of 'red', row 0: float64 value"):
        append_to_dataset("input/kept-v0",
                          [_actions(episodes[2], "red", episodes[2].actions["red"] + 0.25)],
                          SPEC)
    assert (folder / "data" / layout.MAIN_FILE_NAME).read_bytes() == before
    assert mm.load_dataset("input/kept-v0").total_episodes == 2


def test_values_outside_their_space_are_written_as_given_without_a_warning() -> None:
    """As Minari's ``create_dataset_from_buffers``: an action of the space's dtype but out of
    its range is written as given (the episodes were made elsewhere) and not warned of;
    ``describe`` counts it."""
    episodes = _episodes()
    actions = episodes[1].actions["red"].copy()
    actions[0] = 7  # Discrete(3)
    episodes[1] = _actions(episodes[1], "red", actions)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        write_dataset("input/outside-v0", episodes, SPEC)
    assert mm.load_dataset("input/outside-v0")[1].actions["red"][0] == 7
    red = mm.describe("input/outside-v0").agents[0]
    assert red.name == "red" and red.actions[0].out_of_space == 1
