"""One legal-action lookup: pattern rows, turn transitions and vault legals agree on every step,
taking the observation's action_mask before info['action_mask']."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.format.legal_actions import mask_source
from marl_minari.rows import patterns as P
from marl_minari.rows.turns import agent_transitions
from marl_minari.storage.arrays import recorded_mask
from marl_minari.vaults.view import view_rows
from marl_minari.vaults.view_plan import LEGALS, plan_from_spec


def _three_views(arrays: Any, spec: Any, agent: str) -> dict[str, np.ndarray]:
    """The mask of ``agent`` at every step it acted, as each consumer sees it."""
    column = spec.possible_agents.index(agent)
    acted = arrays.acted[:, column]
    info_paths = {a: set(t) for a, t in (arrays.agent_infos or {}).items()}
    legals = view_rows(plan_from_spec(spec, info_paths), arrays)[LEGALS][:, column]
    rows = P.agent_step_rows(arrays, spec, agents=[agent])
    turns = agent_transitions(arrays, agent)
    assert turns.action_masks is not None
    return {"vault": legals[acted].astype(bool),
            "pattern": rows[P.LEGAL_MASK].astype(bool),
            "turns": turns.action_masks.astype(bool)}


def test_observation_mask_wins_over_info_mask_everywhere(
        record_tictactoe: Callable[..., Any]) -> None:
    dataset = record_tictactoe("tests/tictactoe-v0", 3)
    arrays = dataset.to_arrays()
    spec = dataset.spec
    observed = {a: np.asarray(arrays.observations[a]["action_mask"]) for a in spec.possible_agents}
    # An info mask that disagrees with the observation's on every action.
    both = dataclasses.replace(arrays, agent_infos={
        a: {"action_mask": (1 - observed[a]).astype(np.int8)} for a in spec.possible_agents})
    for agent in spec.possible_agents:
        want = observed[agent][arrays.obs_rows[arrays.acted[:, spec.possible_agents.index(agent)]]]
        assert want.any(axis=1).all()  # a legal move at every turn: the check can fail
        for name, got in _three_views(both, spec, agent).items():
            assert np.array_equal(got, want.astype(bool)), (agent, name)


def test_info_mask_is_used_when_the_observation_has_none(
        record_tictactoe: Callable[..., Any]) -> None:
    dataset = record_tictactoe("tests/tictactoe-v0", 2)
    arrays = dataset.to_arrays()
    spec = dataset.spec
    agents = spec.possible_agents
    masks = {a: np.asarray(arrays.observations[a]["action_mask"]) for a in agents}
    board_only = dataclasses.replace(
        arrays, observations={a: {"observation": arrays.observations[a]["observation"]}
                              for a in agents},
        agent_infos={a: {"action_mask": masks[a]} for a in agents})
    board_spec = dataclasses.replace(spec, observation_spaces={
        a: spaces.Dict({"observation": spec.observation_spaces[a]["observation"]})
        for a in agents})
    for agent in agents:
        want = masks[agent][arrays.obs_rows[arrays.acted[:, agents.index(agent)]]].astype(bool)
        for name, got in _three_views(board_only, board_spec, agent).items():
            assert np.array_equal(got, want), (agent, name)


def test_mask_source_precedence_and_absence() -> None:
    assert mask_source({"action_mask", "observation"}, {"action_mask"}) == (
        "observations", "action_mask")
    assert mask_source({"observation"}, {"action_mask"}) == ("agent_infos", "action_mask")
    assert mask_source(set(), set()) is None


def test_a_nested_dict_named_action_mask_is_no_mask(
        record_tictactoe: Callable[..., Any]) -> None:
    dataset = record_tictactoe("tests/tictactoe-v0", 1)
    arrays = dataset.to_arrays()
    agent = dataset.spec.possible_agents[0]
    nested = dataclasses.replace(arrays, observations={
        **arrays.observations, agent: {"action_mask": {"inner": np.zeros(3)}}})
    assert recorded_mask(nested, agent) is None
