"""Which episodes may share a dataset: the one rule that appends, combines and every other
door that puts episodes of two origins into one dataset asks.

A dataset's metadata describes all its episodes at once (one API, one set of agents and
spaces, one state space, one reward aggregation, one env), so episodes that differ in any of
these cannot be stored together without the metadata lying about some of them: a turn-based
episode among simultaneous ones reads as a simultaneous episode with most actions missing.
"""

from __future__ import annotations

from typing import Any

from marl_minari.envs.make import effective_kwargs
from marl_minari.errors import IncompatibleSourcesError
from marl_minari.format import layout
from marl_minari.format.spec import MultiAgentSpec


def first_difference(first: MultiAgentSpec, other: MultiAgentSpec, *,
                     first_layout: Any = layout.LAYOUT_VERSION,
                     other_layout: Any = layout.LAYOUT_VERSION
                     ) -> tuple[str, Any, Any] | None:
    """``(what, first's, other's)`` for the first way ``other``'s episodes differ from
    ``first``'s, or ``None`` when they may share a dataset.

    Compared, in this order: agents (and their order), API, each agent's observation and
    action space, whether there is a global state, the state space, reward aggregation,
    layout version and environment (its constructor arguments completed with their
    defaults, from trusted packages only, so ``{}`` and ``{"max_cycles": 25}`` are one env).
    """
    checks: list[tuple[str, Any, Any]] = [
        ("agents", list(first.possible_agents), list(other.possible_agents)),
        ("api", first.api, other.api),
    ]
    checks += [(f"observation space of {agent!r}", first.observation_spaces[agent],
                other.observation_spaces.get(agent)) for agent in first.possible_agents]
    checks += [(f"action space of {agent!r}", first.action_spaces[agent],
                other.action_spaces.get(agent)) for agent in first.possible_agents]
    checks += [
        # Named apart from the space: "a state or none" is what a user fixes (record_state=).
        ("global state", _state_presence(first), _state_presence(other)),
        ("state space", first.state_space, other.state_space),
        ("reward aggregation", first.reward_aggregation, other.reward_aggregation),
        ("layout version", first_layout, other_layout),
        ("environment", comparable_env(first), comparable_env(other)),
    ]
    for what, mine, theirs in checks:
        if mine != theirs:
            if isinstance(mine, dict) and isinstance(theirs, dict):
                return what, *_differing(mine, theirs)
            return what, mine, theirs
    return None


def _differing(mine: dict[str, Any], theirs: dict[str, Any]
               ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The entries of two dicts that differ (nested dicts likewise), so that a message names
    ``max_cycles`` rather than two whole env descriptors."""
    a: dict[str, Any] = {}
    b: dict[str, Any] = {}
    for key in [*mine, *(k for k in theirs if k not in mine)]:
        x, y = mine.get(key), theirs.get(key)
        if x == y:
            continue
        if isinstance(x, dict) and isinstance(y, dict):
            a[key], b[key] = _differing(x, y)
        else:
            a[key], b[key] = x, y
    return a, b


def check_compatible(first: MultiAgentSpec, other: MultiAgentSpec, *, first_name: str,
                     other_name: str, fix: str, first_layout: Any = layout.LAYOUT_VERSION,
                     other_layout: Any = layout.LAYOUT_VERSION) -> None:
    """Raise :class:`IncompatibleSourcesError` naming the first way ``other`` differs from
    ``first`` (see :func:`first_difference`).

    Args:
        first, other: the specs of the two groups of episodes.
        first_name, other_name: how the message names them (``"dataset 'x/y-v0'"``...).
        fix: what the user can do instead, ending the message.
        first_layout, other_layout: their layout versions (the current one by default).
    """
    difference = first_difference(first, other, first_layout=first_layout,
                                  other_layout=other_layout)
    if difference is not None:
        what, mine, theirs = difference
        raise IncompatibleSourcesError(
            f"{other_name} and {first_name} differ in {what}: {theirs!r} vs {mine!r}; {fix}")


def _state_presence(spec: MultiAgentSpec) -> str:
    return "recorded" if spec.state_space is not None else "not recorded"


def comparable_env(spec: MultiAgentSpec) -> dict[str, Any] | None:
    """The env descriptor with default constructor arguments filled in (from trusted
    packages only), so ``{}`` and ``{"max_cycles": 25}`` name the same env."""
    if spec.env is None:
        return None
    described = spec.env.to_dict()
    described["kwargs"] = effective_kwargs(spec.env.entry_point, spec.env.kwargs)
    return described
