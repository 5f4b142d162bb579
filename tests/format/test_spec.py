"""``MultiAgentSpec``: validation at construction and the metadata/JSON round trip."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from marl_strategies import agent_spaces

from marl_minari.errors import LayoutError, UnsupportedSpaceError
from marl_minari.format import layout
from marl_minari.format.env_descriptor import EnvDescriptor
from marl_minari.format.spec import MultiAgentSpec


def _spec(**changes: object) -> MultiAgentSpec:
    fields: dict = {
        "api": "parallel",
        "possible_agents": ("b", "a"),
        "observation_spaces": {"a": spaces.Discrete(2), "b": spaces.Box(0, 1, (3,))},
        "action_spaces": {"a": spaces.Discrete(3), "b": spaces.MultiBinary(2)},
    }
    fields.update(changes)
    return MultiAgentSpec(**fields)


def test_unstorable_observation_space_is_refused_naming_the_agent() -> None:
    with pytest.raises(UnsupportedSpaceError, match=r"observation_space\('a'\) is a Sequence"):
        _spec(observation_spaces={"a": spaces.Sequence(spaces.Discrete(2)),
                                  "b": spaces.Discrete(2)})


def test_unstorable_action_space_is_refused_naming_the_agent() -> None:
    graph = spaces.Graph(node_space=spaces.Discrete(3), edge_space=None)
    with pytest.raises(UnsupportedSpaceError, match=r"action_space\('b'\) is a Graph"):
        _spec(action_spaces={"a": spaces.Discrete(2), "b": graph})


def test_unstorable_state_space_is_refused() -> None:
    with pytest.raises(UnsupportedSpaceError, match="state_space is a Sequence"):
        _spec(state_space=spaces.Sequence(spaces.Discrete(2)))


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", 3])
def test_agent_names_that_cannot_name_an_hdf5_group_are_refused(name: object) -> None:
    with pytest.raises(UnsupportedSpaceError, match="cannot name an HDF5 group"):
        _spec(possible_agents=(name, "a"),
              observation_spaces={name: spaces.Discrete(2), "a": spaces.Discrete(2)},
              action_spaces={name: spaces.Discrete(2), "a": spaces.Discrete(2)})


def test_duplicate_agents_and_unknown_aggregation_are_refused() -> None:
    with pytest.raises(ValueError, match="duplicates"):
        _spec(possible_agents=("a", "a"))
    with pytest.raises(ValueError, match="reward_aggregation must be one of"):
        _spec(reward_aggregation="median")


def test_joint_spaces_are_dicts_over_the_agents_and_order_is_kept_separately() -> None:
    spec = _spec()
    assert spec.num_agents == 2
    assert list(spec.observation_space.spaces) == ["a", "b"]  # Gymnasium sorts keys
    assert spec.possible_agents == ("b", "a")
    assert spec.to_metadata()[layout.META_POSSIBLE_AGENTS] == ["b", "a"]


@settings(max_examples=25, deadline=None)
@given(agent_spaces(), st.sampled_from(layout.REWARD_AGGREGATIONS), st.booleans(),
       st.booleans())
def test_json_round_trip_keeps_agents_order_spaces_and_options(
        agent_sp: tuple, aggregation: str, record_infos: bool, with_state: bool) -> None:
    agents, obs, act = agent_sp
    descriptor = EnvDescriptor(api="parallel", entry_point="pkg.mod:env", env_id=None,
                               kwargs={"n": 3, "mode": "x"}, versions={"pettingzoo": "1.27"})
    spec = MultiAgentSpec(
        api="parallel", possible_agents=tuple(agents), observation_spaces=obs, action_spaces=act,
        state_space=spaces.Box(-np.inf, np.inf, (4,)) if with_state else None, env=descriptor,
        reward_aggregation=aggregation, record_infos=record_infos, extra={"note": "kept"},
    )
    back = MultiAgentSpec.from_json(spec.to_json())
    assert back == spec


def test_from_metadata_refuses_single_agent_and_newer_layouts() -> None:
    spec = _spec()
    with pytest.raises(LayoutError, match="not a multi-agent dataset"):
        MultiAgentSpec.from_metadata({"dataset_id": "x-v0"}, spec.observation_space,
                                     spec.action_space)
    newer = {layout.METADATA_KEY: {**spec.to_metadata(),
                                   layout.META_LAYOUT_VERSION: layout.LAYOUT_VERSION + 1}}
    with pytest.raises(LayoutError, match="Upgrade marl-minari"):
        MultiAgentSpec.from_metadata(newer, spec.observation_space, spec.action_space)
    good = {layout.METADATA_KEY: spec.to_metadata()}
    with pytest.raises(LayoutError, match="Dicts keyed by possible_agents"):
        MultiAgentSpec.from_metadata(good, spaces.Discrete(2), spec.action_space)
    with pytest.raises(LayoutError, match="Dicts keyed by possible_agents"):
        MultiAgentSpec.from_metadata(good, spaces.Dict({"a": spaces.Discrete(2)}),
                                     spec.action_space)
    assert MultiAgentSpec.from_metadata(good, spec.observation_space, spec.action_space) == spec


def test_joint_env_spec_needs_a_descriptor() -> None:
    assert _spec().joint_env_spec() is None
    spec = _spec(env=EnvDescriptor(api="parallel", entry_point="m:f", env_id="mpe2/x_v3"))
    env_spec = spec.joint_env_spec()
    assert env_spec.entry_point == "marl_minari.joint:JointEnv"
    assert env_spec.id == "marl_minari/mpe2_x_v3-v0"
    assert env_spec.kwargs["possible_agents"] == ["b", "a"]
