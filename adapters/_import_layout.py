"""What a foreign (non marl-minari) Flashbax vault holds, and the dataset it imports as.

:func:`import_layout` checks a vault's arrays against OG-MARL's conventions (``(B, T, N, ...)``
observations, actions, rewards and terminals; optional truncations, legals and state) and infers
the agents' spaces from shapes and dtypes, unless they are given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from gymnasium import spaces

from marl_minari.errors import IncompatibleSourcesError, LayoutError
from marl_minari.format.spec import MultiAgentSpec

from ._store import VaultReader, leaf_name, time_chunk
from ._view import (
    ACTIONS,
    LEGALS,
    OBSERVATIONS,
    OGMARL_KEYS,
    REWARDS,
    STATE,
    TERMINALS,
    TRUNCATIONS,
    AgentFlat,
    flatten_plan,
)

Trailing = Literal["drop", "truncate", "error"]
FinalObservation = Literal["zeros", "repeat"]
CutOn = Literal["any", "all"]
EXTRA_PREFIX: Final = "vault."
"""Dataset extras holding vault leaves outside OG-MARL's keys are named ``vault.<leaf>``."""


@dataclass(frozen=True)
class ImportOptions:
    """How :func:`from_vault` cuts and fills episodes of a foreign vault."""

    trailing: Trailing = "truncate"
    final_observation: FinalObservation = "zeros"
    cut_on: CutOn = "any"
    infer_dead: bool = True
    reward_aggregation: str = "mean"


@dataclass(frozen=True)
class ImportLayout:
    """What a foreign vault holds and how its rows become a dataset.

    Attributes:
        agents: names of the ``N`` agents.
        spec: the new dataset's spec (before the vault record is added).
        obs_flat: per-agent layout of the observation tree in the flattened observation row.
        act_flat: the same for actions, ``None`` when the actions are stored as they are.
        extras: vault leaves outside OG-MARL's keys, ``(path, extras name)``.
        streams: ``B``.
        length: steps per stream (``vault_index``).
        has_truncations, has_legals, has_state: which optional OG-MARL arrays it has.
    """

    agents: tuple[str, ...]
    spec: MultiAgentSpec
    obs_flat: tuple[AgentFlat, ...]
    act_flat: tuple[AgentFlat, ...] | None
    extras: tuple[tuple[tuple[str, ...], str], ...]
    streams: int
    length: int
    has_truncations: bool
    has_legals: bool
    has_state: bool


def import_layout(reader: VaultReader, agents: Sequence[str] | None,
                  observation_spaces: Mapping[str, spaces.Space] | None,
                  action_spaces: Mapping[str, spaces.Space] | None) -> ImportLayout:
    """Check a foreign vault's arrays against OG-MARL's conventions and infer its spaces.

    Raises:
        LayoutError: a required array is missing or has a shape that does not fit (named).
        ValueError: given agents or spaces do not fit the vault's shapes.
    """
    shapes = {leaf.path: leaf.shape for leaf in reader.leaves}
    dtypes = {leaf.path: np.dtype(leaf.dtype) for leaf in reader.leaves}
    where = f"vault {reader.path}"
    for required in (OBSERVATIONS, ACTIONS, REWARDS, TERMINALS):
        if required not in shapes:
            raise LayoutError(f"{where} has no '{leaf_name(required)[:-1]}' array (it has "
                              f"{sorted(leaf_name(p)[:-1] for p in shapes)}); OG-MARL vaults "
                              "have observations, actions, rewards and terminals")
    obs_shape = shapes[OBSERVATIONS]
    if len(obs_shape) < 3:
        raise LayoutError(f"{where}: 'observations' has shape {obs_shape}, expected (B, T, N, "
                          "...)")
    streams, n = obs_shape[0], obs_shape[2]
    for path, shape in shapes.items():
        if shape[0] != streams:
            raise LayoutError(f"{where}: '{leaf_name(path)[:-1]}' has {shape[0]} streams "
                              f"(shape {shape}), 'observations' has {streams}")
    for path in (ACTIONS, REWARDS, TERMINALS, TRUNCATIONS, LEGALS):
        if path not in shapes:
            continue
        shape = shapes[path]
        exact_rank = path in (REWARDS, TERMINALS, TRUNCATIONS)
        if len(shape) < 3 or shape[2] != n or (exact_rank and len(shape) != 3) or (
                path == LEGALS and len(shape) != 4):
            expected = "(B, T, N)" if exact_rank else "(B, T, N, A)" if path == LEGALS else \
                "(B, T, N, ...)"
            raise LayoutError(f"{where}: '{leaf_name(path)[:-1]}' has shape {shape}; expected "
                              f"{expected} with N = {n} as in 'observations' {obs_shape}")
    names = tuple(agents) if agents is not None else tuple(f"agent_{i}" for i in range(n))
    if len(names) != n:
        raise IncompatibleSourcesError(
            f"{len(names)} agent names given ({list(names)}), the vault has "
            f"N = {n} agents ('observations' shape {obs_shape})")
    obs_row = obs_shape[3:]
    obs_spaces = {a: _given(observation_spaces, a) or _box(obs_row, dtypes[OBSERVATIONS])
                  for a in names}
    obs_flat = tuple(flatten_plan(obs_spaces[a], dtypes[OBSERVATIONS].name, skip_mask=False)
                     for a in names)
    _check_widths("observation", names, obs_flat, obs_row)
    act_shape = shapes[ACTIONS][3:]
    act_dtype = dtypes[ACTIONS]
    act_spaces = {}
    for agent in names:
        given = _given(action_spaces, agent)
        if given is not None:
            act_spaces[agent] = given
        elif act_dtype.kind in "iu" and act_shape in ((), (1,)):
            # Integer actions, one per agent (``(B, T, N)`` or ``(B, T, N, 1)``) are indices.
            width = shapes[LEGALS][-1] if LEGALS in shapes else None
            act_spaces[agent] = spaces.Discrete(width or _max_action(reader, act_dtype) + 1)
        else:
            act_spaces[agent] = _box(act_shape, act_dtype)
    discrete = act_shape == () and all(isinstance(s, spaces.Discrete) for s in
                                       act_spaces.values())
    act_flat = None if discrete else tuple(
        flatten_plan(act_spaces[a], act_dtype.name, skip_mask=False) for a in names)
    if act_flat is not None:
        _check_widths("action", names, act_flat, act_shape)
    state_space = _box(shapes[STATE][2:], dtypes[STATE]) if STATE in shapes else None
    extras = tuple((path, EXTRA_PREFIX + ".".join(path)) for path in shapes
                   if path not in OGMARL_KEYS)
    spec = MultiAgentSpec(api="parallel", possible_agents=names, observation_spaces=obs_spaces,
                          action_spaces=act_spaces, state_space=state_space)
    return ImportLayout(agents=names, spec=spec, obs_flat=obs_flat, act_flat=act_flat,
                        extras=extras, streams=streams, length=reader.length,
                        has_truncations=TRUNCATIONS in shapes, has_legals=LEGALS in shapes,
                        has_state=STATE in shapes)


def _check_widths(kind: str, agents: Sequence[str], flats: Sequence[AgentFlat],
                  row: tuple[int, ...]) -> None:
    """Every agent's ``kind`` space flattens to exactly the vault's row of shape ``row``."""
    width = int(np.prod(row, dtype=np.int64))
    for agent, flat in zip(agents, flats, strict=True):
        if flat.size != width:
            raise IncompatibleSourcesError(
                f"{kind} space of {agent!r} flattens to {flat.size} values; "
                f"the vault's {kind} row {row} has {width}")


def _given(by_agent: Mapping[str, spaces.Space] | None, agent: str) -> spaces.Space | None:
    if by_agent is None:
        return None
    if agent not in by_agent:
        raise IncompatibleSourcesError(
            f"no space given for agent {agent!r} (given for {sorted(by_agent)})")
    return by_agent[agent]


def _box(shape: tuple[int, ...], dtype: np.dtype) -> spaces.Box:
    if dtype.kind == "f":
        return spaces.Box(-np.inf, np.inf, shape, dtype=dtype.type)
    if dtype.kind == "b":
        return spaces.Box(0, 1, shape, dtype=dtype.type)
    info = np.iinfo(dtype)
    return spaces.Box(info.min, info.max, shape, dtype=dtype.type)


def _max_action(reader: VaultReader, dtype: np.dtype) -> int:
    """The largest action in the vault (a pass over the actions only)."""
    best = 0
    window = max(1, time_chunk(int(np.prod(reader.leaf(ACTIONS).row_shape,  # type: ignore
                                               dtype=np.int64)) * dtype.itemsize
                               * reader.num_streams, 1 << 24))
    for t0 in range(0, reader.length, window):
        block = np.asarray(reader.read_async(leaf_name(ACTIONS),
                                             (slice(None), slice(t0, t0 + window))).result())
        if block.size:
            best = max(best, int(block.max()))
    return best
