"""``EpisodeBuilder``: per-step dicts of a PettingZoo env into one ``MultiAgentEpisode``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from marl_minari.collectors.builder import EpisodeBuilder

from marl_minari.errors import InfoStructureError, StepDataError
from marl_minari.format.spec import MultiAgentSpec

AGENTS = ("a", "b", "c")


def _builder(aggregation: str = "sum", record_infos: bool = False,
             with_state: bool = False) -> EpisodeBuilder:
    spec = MultiAgentSpec(
        api="parallel", possible_agents=AGENTS,
        observation_spaces={a: spaces.Box(-9, 9, (2,), dtype=np.float32) for a in AGENTS},
        action_spaces={a: spaces.Discrete(4) for a in AGENTS},
        state_space=spaces.Box(-9, 9, (3,)) if with_state else None,
        reward_aggregation=aggregation, record_infos=record_infos,
    )
    return EpisodeBuilder(spec, record_infos=record_infos, has_state=with_state)


def _obs(agents: str, value: float) -> dict[str, np.ndarray]:
    return {a: np.full(2, value, dtype=np.float32) for a in agents}


def _play(builder: EpisodeBuilder, rewards: list[dict[str, float]],
          infos: list[dict[str, Any]] | None = None, last_term: bool = True,
          seed: int | None = None) -> None:
    """Reset with all agents, then one step per ``rewards`` entry (its keys are present)."""
    infos = infos or [{} for _ in range(len(rewards) + 1)]
    builder.start(_obs("abc", 0), infos[0], seed=seed)
    for t, step_rewards in enumerate(rewards):
        present = "".join(step_rewards)
        last = t == len(rewards) - 1
        builder.add({a: t % 4 for a in present}, _obs(present, t + 1), step_rewards,
                    {a: last and last_term for a in present},
                    {a: last and not last_term for a in present}, infos[t + 1])


@pytest.mark.parametrize(
    ("aggregation", "expected"),
    [("sum", [6.0, 2.0, 0.0]), ("mean", [2.0, 1.0, 0.0]), ("max", [3.0, 3.0, 0.0]),
     ("min", [1.0, -1.0, 0.0])],
)
def test_team_reward_aggregates_only_agents_that_were_rewarded(aggregation: str,
                                                              expected: list[float]) -> None:
    builder = _builder(aggregation)
    _play(builder, [{"a": 1.0, "b": 2.0, "c": 3.0}, {"a": -1.0, "c": 3.0}, {}])
    episode = builder.finish(cut=False)
    np.testing.assert_array_equal(episode.team_rewards, expected)
    np.testing.assert_array_equal(episode.rewards,
                                  [[1, 2, 3], [-1, 0, 3], [0, 0, 0]])


def test_active_acted_and_fill_values_follow_the_dicts() -> None:
    builder = _builder()
    _play(builder, [{"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 1.0, "c": 1.0}])
    episode = builder.finish(cut=False)
    episode.check_shapes()
    np.testing.assert_array_equal(episode.active, [[1, 1, 1], [1, 1, 1], [1, 0, 1]])
    np.testing.assert_array_equal(episode.acted, [[1, 1, 1], [1, 0, 1]])
    np.testing.assert_array_equal(episode.observations["b"], [[0, 0], [1, 1], [0, 0]])
    np.testing.assert_array_equal(episode.actions["b"], [0, 0])
    np.testing.assert_array_equal(episode.actions["a"], [0, 1])
    assert episode.agent_steps == {"a": 2, "b": 1, "c": 2}
    assert episode.returns == {"a": 2.0, "b": 1.0, "c": 2.0}


def test_episode_end_flags() -> None:
    builder = _builder()
    _play(builder, [{"a": 0.0}, {"a": 0.0}], last_term=True)
    ended = builder.finish(cut=False)
    assert ended.episode_terminations.tolist() == [False, True]
    assert ended.episode_truncations.tolist() == [False, False]
    _play(builder, [{"a": 0.0}, {"a": 0.0}], last_term=False)
    truncated = builder.finish(cut=False)
    assert truncated.episode_terminations.tolist() == [False, False]
    assert truncated.episode_truncations.tolist() == [False, True]
    assert truncated.truncations[-1].tolist() == [True, False, False]
    _play(builder, [{"a": 0.0}, {"a": 0.0}, {"a": 0.0}, {"a": 0.0}], last_term=True)
    cut = builder.finish(cut=True)
    assert cut.episode_truncations.tolist() == [False, False, False, True]
    assert not cut.episode_terminations.any()


def test_seed_options_and_state_are_kept() -> None:
    builder = _builder(with_state=True)
    builder.start(_obs("abc", 0), {}, state=np.zeros(3), seed=7, options={"x": 1})
    builder.add({"a": 1}, _obs("a", 1), {"a": 1.0}, {"a": True}, {"a": False}, {},
                state=np.ones(3))
    episode = builder.finish(cut=False)
    assert (episode.seed, episode.options) == (7, {"x": 1})
    np.testing.assert_array_equal(episode.state, [[0, 0, 0], [1, 1, 1]])
    assert episode.state.dtype == np.float32


def test_an_episode_without_steps_is_refused() -> None:
    builder = _builder()
    builder.start(_obs("abc", 0), {})
    with pytest.raises(StepDataError, match="at least one step"):
        builder.finish(cut=True)


def test_changed_info_keys_are_refused_naming_agent_and_step() -> None:
    builder = _builder(record_infos=True)
    builder.start(_obs("abc", 0), {a: {"x": 0} for a in "abc"})
    builder.add({"a": 0}, _obs("abc", 1), {}, {}, {}, {a: {"x": 1} for a in "abc"})
    with pytest.raises(InfoStructureError, match=r"agent 'b' at step 2 has keys \['x', 'y'\]"):
        builder.add({"a": 0}, _obs("abc", 2), {}, {}, {}, {"a": {"x": 2}, "b": {"x": 2, "y": 0}})


def test_changed_info_keys_are_refused_in_a_later_episode_too() -> None:
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}], infos=[{"a": {"x": 0}}, {"a": {"x": 1}}])
    builder.finish(cut=False)
    with pytest.raises(InfoStructureError, match=r"agent 'a' at step 0 has keys \[\]"):
        builder.start(_obs("abc", 0), {"a": {}})


def test_changed_info_dtype_is_refused_naming_agent_and_row() -> None:
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}, {"a": 0.0}],
          infos=[{"a": {"x": 0}}, {"a": {"x": 1}}, {"a": {"x": 2.5}}])
    with pytest.raises(InfoStructureError, match=r"info of 'a'\['x'\], row 2: float64"):
        builder.finish(cut=False)


def test_changed_info_shape_is_refused() -> None:
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}], infos=[{"a": {"m": np.zeros(2)}}, {"a": {"m": np.zeros(3)}}])
    with pytest.raises(InfoStructureError, match=r"row 1: float64\[3\] value does not fit"):
        builder.finish(cut=False)


@pytest.mark.parametrize(
    ("values", "message"),
    [([None, 1.5], r"\['x'\], row 0: None cannot be stored"),
     ([1.5, None], r"\['x'\], row 1: None cannot be stored"),
     (["a", 3], r"\['x'\], row 1: int value 3 in a column of strings"),
     (["a", np.array(["b", "c"])], r"row 1: ndarray value .* column of strings"),
     ([2**70, 1], r"\['x'\], row 0: 1180591620717411303424 has no array form"),
     ([np.int8(1), np.int64(300)], r"row 1: int64 value 300 does not fit the int8 .* 44\)"),
     ([2**63, -1], r"row 1: int64\[\] value does not fit the uint64"),
     ([b"ab", b"abc"], r"row 1: \|S3 value b'abc' does not fit the \|S2"),
     ([{"p": 0}, None], r"\['x'\], row 1: None cannot be stored")],
    ids=["none-first", "none-later", "str-then-int", "str-then-array", "huge-int", "int8-wrap",
         "uint64-wrap", "bytes-cut", "nested-none"],
)
def test_info_values_that_would_change_when_stored_are_refused(values: list[Any],
                                                                message: str) -> None:
    """Each was stored as another value before: text for numbers, 0 for None, cut bytes."""
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}], infos=[{"a": {"x": value}} for value in values])
    with pytest.raises(InfoStructureError, match=message):
        builder.finish(cut=False)


def test_info_rows_of_an_absent_agent_are_filled_and_given_values_kept() -> None:
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}, {"a": 0.0}],
          infos=[{"a": {"n": np.int8(-3), "s": "x"}}, {}, {"a": {"n": 7, "s": "y"}}])
    infos = builder.finish(cut=False).agent_infos
    assert infos is not None
    assert infos["a"]["n"].dtype == np.int8 and infos["a"]["n"].tolist() == [-3, 0, 7]
    assert infos["a"]["s"].tolist() == ["x", "", "y"]


def test_info_dtype_change_between_episodes_is_refused() -> None:
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}], infos=[{"a": {"x": 0}}, {"a": {"x": 1}}])
    builder.finish(cut=False)
    _play(builder, [{"a": 0.0}], infos=[{"a": {"x": 0.5}}, {"a": {"x": 1.5}}])
    with pytest.raises(InfoStructureError, match=r"agent 'a' has leaves x: float64\[\]"):
        builder.finish(cut=False)


def test_compatible_info_values_are_cast_to_the_first_dtype() -> None:
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}], infos=[{"a": {"x": np.float32(0.5), "n": 1}},
                                        {"a": {"x": 1.5, "n": True}}])
    infos = builder.finish(cut=False).agent_infos
    assert infos is not None
    assert infos["a"]["x"].dtype == np.float32 and infos["a"]["x"].tolist() == [0.5, 1.5]
    assert infos["a"]["n"].tolist() == [1, 1]


def test_agent_without_infos_in_a_later_episode_gets_filled_columns() -> None:
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}], infos=[{"a": {"x": 0.5, "s": "hi"}, "b": {}},
                                        {"a": {"x": 1.5, "s": "yo"}, "b": {}}])
    first = builder.finish(cut=False)
    assert first.agent_infos is not None and set(first.agent_infos) == {"a"}
    _play(builder, [{"b": 0.0}], infos=[{"b": {}}, {"b": {}}])
    second = builder.finish(cut=False)
    assert second.agent_infos is not None
    np.testing.assert_array_equal(second.agent_infos["a"]["x"], [0.0, 0.0])
    assert second.agent_infos["a"]["s"].tolist() == ["", ""]


def test_without_record_infos_only_action_masks_are_kept_and_keys_may_change() -> None:
    builder = _builder(record_infos=False)
    mask = np.array([1, 0, 1, 1], dtype=np.int8)
    builder.start(_obs("abc", 0), {"a": {"action_mask": mask, "x": 1}, "b": {}})
    builder.add({"a": 0}, _obs("abc", 1), {}, {}, {},
                {"a": {"action_mask": mask[::-1].copy(), "episode": {"r": 3.0}}, "b": {"y": 2}})
    infos = builder.finish(cut=False).agent_infos
    assert infos is not None and set(infos) == {"a"}
    assert set(infos["a"]) == {"action_mask"}
    np.testing.assert_array_equal(infos["a"]["action_mask"], [mask, mask[::-1]])


def test_no_infos_at_all_gives_none() -> None:
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}])
    assert builder.finish(cut=False).agent_infos is None


@pytest.mark.parametrize(
    ("options", "message"),
    [({"x": None}, r"options\['x'\] = None cannot be stored"),
     ({"cfg": {"names": ["a", "b"]}}, r"options\['cfg'\]\['names'\]"),
     ({"x": object()}, "cannot be stored"),
     ({"a/b": 1}, "without '/'"),
     ([1, 2], "must be a dict")],
)
def test_options_minari_cannot_store_are_refused_at_reset(options: Any, message: str) -> None:
    builder = _builder()
    with pytest.raises(StepDataError, match=message):
        builder.start(_obs("abc", 0), {}, options=options)
    assert not builder.started  # nothing half-recorded
    builder.start(_obs("abc", 0), {}, options={"n": 1, "s": "x", "v": [1.5, 2], "d": {"b": True}})
    assert builder.started


def test_nested_info_keys_changing_are_refused_naming_the_row() -> None:
    builder = _builder(record_infos=True)
    _play(builder, [{"a": 0.0}, {"a": 0.0}],
          infos=[{"a": {"z": {"p": 0}}}, {"a": {"z": {"p": 1}}}, {"a": {"z": {"p": 2, "q": 3}}}])
    with pytest.raises(InfoStructureError, match=r"info of 'a'\['z'\], row 2: keys \['p', 'q'\]"):
        builder.finish(cut=False)
