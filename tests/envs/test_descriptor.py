"""Env descriptors: making PettingZoo envs by id and re-creating them from JSON."""

from __future__ import annotations

import warnings

import pytest
from pettingzoo.utils.conversions import aec_to_parallel_wrapper
from pettingzoo.utils.env import AECEnv, ParallelEnv

import marl_minari as mm
from marl_minari.envs.make import describe_env, recreate_env
from marl_minari.errors import EnvDescriptorError
from marl_minari.format.env_descriptor import EnvDescriptor


@pytest.mark.parametrize(
    ("env_id", "kwargs", "agents"),
    [
        ("mpe2/simple_spread_v3", {"N": 2}, ["agent_0", "agent_1"]),
        ("butterfly/pistonball_v6", {"n_pistons": 3}, ["piston_0", "piston_1", "piston_2"]),
        ("classic/rps_v2", {}, ["player_0", "player_1"]),
        ("classic/rps-v2", {}, ["player_0", "player_1"]),
        ("mpe2.simple_spread_v3:parallel_env", {"N": 1}, ["agent_0"]),
    ],
)
def test_make_env_and_json_round_trip(env_id: str, kwargs: dict, agents: list[str]) -> None:
    env = mm.make_env(env_id, **kwargs)
    assert isinstance(env, ParallelEnv)
    assert env.possible_agents == agents
    descriptor = describe_env(env, "parallel")
    assert descriptor.kwargs_known
    assert descriptor.kwargs == {**descriptor.kwargs, **kwargs}  # given ones kept, defaults added
    assert "pettingzoo" in descriptor.versions
    again = EnvDescriptor.from_json(descriptor.to_json())
    assert again == descriptor
    remade = recreate_env(again)
    assert remade.possible_agents == agents
    for agent in agents:
        assert remade.observation_space(agent) == env.observation_space(agent)
    remade.reset(seed=1)
    remade.step({a: remade.action_space(a).sample() for a in remade.agents})
    env.close()
    remade.close()


def test_recorded_kwargs_are_the_effective_ones() -> None:
    """``{}`` and ``{"max_cycles": 25}`` (the default) describe the same env, and say so."""
    from marl_minari.envs.make import effective_kwargs

    implicit = describe_env(mm.make_env("mpe2/simple_spread_v3"), "parallel")
    explicit = describe_env(mm.make_env("mpe2/simple_spread_v3", max_cycles=25), "parallel")
    assert implicit == explicit
    assert implicit.kwargs["max_cycles"] == 25 and implicit.kwargs["N"] == 3
    other = describe_env(mm.make_env("mpe2/simple_spread_v3", max_cycles=5), "parallel")
    assert other.kwargs["max_cycles"] == 5 and other != implicit
    # AEC registry entry points wrap raw_env(**kwargs): its defaults are read.
    tictactoe = describe_env(mm.make_env("classic/tictactoe_v3", api="aec"), "aec")
    assert tictactoe.kwargs["screen_height"] == 1000
    # A dataset's untrusted entry point is never imported to read its defaults.
    import sys

    assert effective_kwargs("evil_env_pkg.mod:env", {"a": 1}) == {"a": 1}
    assert "evil_env_pkg" not in sys.modules
    assert effective_kwargs("mpe2.simple_spread_v3:parallel_env", {})["max_cycles"] == 25


def test_turn_based_env_is_converted_or_refused() -> None:
    rps = mm.make_env("classic/rps_v2")
    assert isinstance(rps, aec_to_parallel_wrapper)
    with pytest.raises(EnvDescriptorError, match="not parallelizable: record it with api='aec'"):
        mm.make_env("classic/tictactoe_v3")
    assert isinstance(mm.make_env("classic/tictactoe_v3", api="aec"), AECEnv)
    spread = mm.make_env("mpe2/simple_spread_v3", api="aec")
    assert isinstance(spread, AECEnv)


@pytest.mark.parametrize(
    ("env_id", "message"),
    [("nope/foo_v1", "cannot import the env 'nope/foo_v1'"), ("bad id", "is not an env id"),
     ("no_such_module:f", "cannot import the env 'no_such_module:f'")],
)
def test_unknown_envs_say_what_was_tried(env_id: str, message: str) -> None:
    with pytest.raises(EnvDescriptorError, match=message):
        mm.make_env(env_id)


def test_bad_api_and_non_json_kwargs_are_refused() -> None:
    with pytest.raises(EnvDescriptorError, match="api must be"):
        mm.make_env("mpe2/simple_spread_v3", api="vector")  # type: ignore[arg-type]
    with pytest.raises(EnvDescriptorError, match="JSON values"):
        mm.make_env("mpe2/simple_spread_v3", dynamic_rescaling=object())
    with pytest.raises(EnvDescriptorError, match="could not create"):
        mm.make_env("mpe2/simple_spread_v3", no_such_argument=1)


def test_envs_not_made_by_make_env_are_inferred_with_a_warning() -> None:
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env(N=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        descriptor = describe_env(env, "parallel")
    assert [w.filename for w in caught if "not made by marl_minari.make_env" in str(w.message)
            ] == [__file__]  # the user's line
    assert descriptor.entry_point == "mpe2.simple_spread_v3:parallel_env"
    assert descriptor.kwargs_known is False and descriptor.kwargs == {}
    assert recreate_env(descriptor).possible_agents == ["agent_0", "agent_1", "agent_2"]


def test_descriptor_errors() -> None:
    with pytest.raises(EnvDescriptorError, match="not an env descriptor"):
        EnvDescriptor.from_dict({"api": "parallel", "unknown": 1})
    with pytest.raises(EnvDescriptorError, match="no entry point"):
        recreate_env(EnvDescriptor(api="parallel", entry_point=None))
    with pytest.raises(EnvDescriptorError, match="is not callable"):
        recreate_env(EnvDescriptor(api="parallel", entry_point="marl_minari:__version__"),
                     trust_remote_code=True)
