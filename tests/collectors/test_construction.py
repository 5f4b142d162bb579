"""What the collectors check when they are built, and what recording without provenance says."""

from __future__ import annotations

import warnings

import pytest
from mpe2 import simple_spread_v3
from pettingzoo.classic import tictactoe_v3

import marl_minari as mm
from marl_minari.errors import EnvApiError


def test_parallel_collector_refuses_an_aec_env_naming_the_right_collector() -> None:
    env = tictactoe_v3.env()
    with pytest.raises(EnvApiError, match="AECDataCollector"):
        mm.ParallelDataCollector(env)
    env.close()


def test_aec_collector_refuses_a_parallel_env_naming_the_right_collector() -> None:
    env = simple_spread_v3.parallel_env()
    with pytest.raises(EnvApiError, match="ParallelDataCollector"):
        mm.AECDataCollector(env)
    env.close()


def test_each_collector_accepts_its_own_api() -> None:
    mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3")).close()
    mm.AECDataCollector(mm.make_env("classic/tictactoe-v3", api="aec")).close()


def test_missing_provenance_is_one_warning() -> None:
    env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=2))
    env.reset(seed=0)
    while env.agents:
        env.step({a: 0 for a in env.agents})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env.create_dataset("tests/no-author-v0", algorithm_name="zeros")
    env.close()
    provenance = [w for w in caught if "not set" in str(w.message)]
    assert len(provenance) == 1, [str(w.message) for w in caught]
    assert str(provenance[0].message).startswith("author, author_email, code_permalink, "
                                                 "description not set")
    assert provenance[0].filename == __file__  # points at the caller's line
