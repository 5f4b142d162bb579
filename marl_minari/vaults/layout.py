"""What a foreign (non marl-minari) Flashbax vault holds, and the dataset it imports as.

:func:`import_layout` checks a vault's arrays, found through its key layout
(:mod:`marl_minari.vaults.keys`: ``(B, T, N, ...)`` observations, actions, rewards and done
flags; optional truncations, legals and state), and infers the agents' spaces from shapes and
dtypes, unless they are given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
from gymnasium import spaces

from marl_minari.errors import IncompatibleSourcesError, InvalidOptionError, LayoutError
from marl_minari.format.returns import REWARD_AGGREGATIONS
from marl_minari.format.spec import MultiAgentSpec

from .episodes import CutOn
from .keys import KeyLayout, leaf_text
from .structure import LeafInfo
from .view_plan import AgentFlat, flatten_plan

Trailing = Literal["drop", "truncate", "error"]
FinalObservation = Literal["zeros", "repeat"]
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


def import_options(trailing: Trailing = "truncate", final_observation: FinalObservation = "zeros",
                   cut_on: CutOn = "any", infer_dead: bool = True,
                   reward_aggregation: str = "mean") -> ImportOptions:
    """Checked :class:`ImportOptions` (see :func:`marl_minari.adapters.from_vault`).

    Raises:
        InvalidOptionError: naming the option and its allowed values.
    """
    if trailing not in ("drop", "truncate", "error"):
        raise InvalidOptionError(
            f"trailing must be 'drop', 'truncate' or 'error', got {trailing!r}")
    if final_observation not in ("zeros", "repeat"):
        raise InvalidOptionError(f"final_observation must be 'zeros' or 'repeat', got "
                                 f"{final_observation!r}")
    if cut_on not in ("any", "all"):
        raise InvalidOptionError(f"cut_on must be 'any' or 'all', got {cut_on!r}")
    if reward_aggregation not in REWARD_AGGREGATIONS:
        raise InvalidOptionError(f"reward_aggregation must be one of "
                                 f"{list(REWARD_AGGREGATIONS)}, got {reward_aggregation!r}")
    return ImportOptions(trailing, final_observation, cut_on, bool(infer_dead),
                         reward_aggregation)


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
        keys: which leaf plays which role.
    """

    agents: tuple[str, ...]
    spec: MultiAgentSpec
    obs_flat: tuple[AgentFlat, ...]
    act_flat: tuple[AgentFlat, ...] | None
    extras: tuple[tuple[tuple[str, ...], str], ...]
    streams: int
    length: int
    keys: KeyLayout

    def has(self, role: str) -> bool:
        """Whether a leaf plays ``role`` (see :mod:`marl_minari.vaults.keys`)."""
        return self.keys.has(role)


def import_layout(leaves: Sequence[LeafInfo], keys: KeyLayout, length: int, where: str, *,
                  agents: Sequence[str] | None,
                  observation_spaces: Mapping[str, spaces.Space] | None,
                  action_spaces: Mapping[str, spaces.Space] | None,
                  max_action: Callable[[], int]) -> ImportLayout:
    """Check a foreign vault's (or buffer's) leaves against the key layout and infer spaces.

    Args:
        leaves: the experience leaves, shaped ``(B, T, ...)``.
        keys: which leaf plays which role.
        length: steps per stream.
        where: what holds the leaves, for messages.
        agents, observation_spaces, action_spaces: given names and spaces (see
            :func:`marl_minari.adapters.from_vault`).
        max_action: the largest stored action (called only for integer actions with neither
            legal masks nor given action spaces).

    Raises:
        LayoutError: an array has a shape that does not fit (named).
        IncompatibleSourcesError: given agents or spaces do not fit the shapes.
    """
    by_path = {leaf.path: leaf for leaf in leaves}
    shapes = {role: by_path[path].shape for role, path in keys.paths.items()}
    dtypes = {role: np.dtype(by_path[path].dtype) for role, path in keys.paths.items()}

    def name(role: str) -> str:
        return leaf_text(keys.paths[role])

    obs_shape = shapes["observations"]
    if len(obs_shape) < 3:
        raise LayoutError(f"{where}: {name('observations')!r} has shape {obs_shape}, expected "
                          "(B, T, N, ...)")
    streams, n = obs_shape[0], obs_shape[2]
    for leaf in leaves:
        if leaf.shape[0] != streams:
            raise LayoutError(f"{where}: {leaf_text(leaf.path)!r} has {leaf.shape[0]} streams "
                              f"(shape {leaf.shape}), {name('observations')!r} has {streams}")
    for role in ("actions", "rewards", "terminals", "truncations", "dones", "legals"):
        if role not in shapes:
            continue
        shape = shapes[role]
        exact_rank = role in ("rewards", "terminals", "truncations", "dones")
        if len(shape) < 3 or shape[2] != n or (exact_rank and len(shape) != 3) or (
                role == "legals" and len(shape) != 4):
            expected = "(B, T, N)" if exact_rank else "(B, T, N, A)" if role == "legals" \
                else "(B, T, N, ...)"
            raise LayoutError(f"{where}: {name(role)!r} has shape {shape}; expected {expected} "
                              f"with N = {n} as in {name('observations')!r} {obs_shape}")
    names = tuple(agents) if agents is not None else tuple(f"agent_{i}" for i in range(n))
    if len(names) != n:
        raise IncompatibleSourcesError(
            f"{len(names)} agent names given ({list(names)}), {where} has "
            f"N = {n} agents ({name('observations')!r} shape {obs_shape})")
    obs_row = obs_shape[3:]
    obs_spaces = {a: _given(observation_spaces, a) or _box(obs_row, dtypes["observations"])
                  for a in names}
    obs_flat = tuple(flatten_plan(obs_spaces[a], dtypes["observations"].name, skip_mask=False)
                     for a in names)
    _check_widths("observation", names, obs_flat, obs_row)
    act_shape = shapes["actions"][3:]
    act_dtype = dtypes["actions"]
    act_spaces = {}
    for agent in names:
        given = _given(action_spaces, agent)
        if given is not None:
            act_spaces[agent] = given
        elif act_dtype.kind in "iu" and act_shape in ((), (1,)):
            # Integer actions, one per agent (``(B, T, N)`` or ``(B, T, N, 1)``) are indices.
            width = shapes["legals"][-1] if "legals" in shapes else None
            act_spaces[agent] = spaces.Discrete(width or max_action() + 1)
        else:
            act_spaces[agent] = _box(act_shape, act_dtype)
    discrete = act_shape == () and all(isinstance(s, spaces.Discrete) for s in
                                       act_spaces.values())
    act_flat = None if discrete else tuple(
        flatten_plan(act_spaces[a], act_dtype.name, skip_mask=False) for a in names)
    if act_flat is not None:
        _check_widths("action", names, act_flat, act_shape)
    state_space = _box(shapes["state"][2:], dtypes["state"]) if "state" in shapes else None
    extras = tuple((path, EXTRA_PREFIX + leaf_text(path))
                   for path in keys.others(leaf.path for leaf in leaves))
    spec = MultiAgentSpec(api="parallel", possible_agents=names, observation_spaces=obs_spaces,
                          action_spaces=act_spaces, state_space=state_space)
    return ImportLayout(agents=names, spec=spec, obs_flat=obs_flat, act_flat=act_flat,
                        extras=extras, streams=streams, length=length, keys=keys)


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
