"""The OG-MARL view of a multi-agent dataset: which vault arrays it has and where each comes from.

A :class:`ViewPlan` says which experience leaves a vault gets (``observations``, ``actions``,
``rewards``, ``terminals``, ``truncations``, ``infos.legals``, ``infos.state`` and, for data
that came from a vault, any other leaf it had) with their per-step shapes and dtypes, made
from a dataset's spec (:func:`plan_from_spec`) or a vault's record
(:func:`plan_from_vault_record`). :mod:`marl_minari.vaults.view` builds the rows it describes.

Row ``t`` of every view array belongs to step ``t``: the observation the action was taken
from, the action, the reward and done flags that came back; no final observation (OG-MARL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
from gymnasium import spaces

from marl_minari.errors import LayoutError
from marl_minari.format import layout
from marl_minari.format.legal_actions import mask_source
from marl_minari.format.spaces import leaf_dtype, leaf_shape, leaf_spaces
from marl_minari.format.spec import MultiAgentSpec

from .structure import parse_shape

PAD_VALUE: Final = 0.0
"""Value of the padding columns when agents' flattened widths differ."""

OBSERVATIONS: Final[tuple[str, ...]] = ("observations",)
ACTIONS: Final[tuple[str, ...]] = ("actions",)
REWARDS: Final[tuple[str, ...]] = ("rewards",)
TERMINALS: Final[tuple[str, ...]] = ("terminals",)
TRUNCATIONS: Final[tuple[str, ...]] = ("truncations",)
LEGALS: Final[tuple[str, ...]] = ("infos", "legals")
STATE: Final[tuple[str, ...]] = ("infos", "state")
OGMARL_KEYS: Final = (OBSERVATIONS, ACTIONS, REWARDS, TERMINALS, TRUNCATIONS, LEGALS, STATE)
"""The experience leaves OG-MARL's vaults have, in this order."""

VAULT_SOURCE_KEY: Final = "vault"
"""``MultiAgentSpec.extra`` key that :func:`from_vault` fills with the source vault's record."""

Dones = Literal["team", "agent"]
Terminals = Literal["end", "strict"]
"""``"end"``: ``terminals`` is 1 at every episode end (OG-MARL's convention), ``truncations``
says which ended by time; ``"strict"``: ``terminals`` is 1 only where an episode terminated."""
StateMode = Literal["auto", "env", "observations", "none"]


@dataclass(frozen=True)
class FlatLeaf:
    """A leaf of an agent's tree placed in its flattened row.

    Attributes:
        path: path inside the agent's tree (``""`` for a plain space; HDF5 style otherwise).
        dtype: the leaf's stored dtype.
        shape: the leaf's per-row shape.
        offset: first column in the flattened row.
        exact: the view dtype holds every value of ``dtype`` exactly.
    """

    path: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    exact: bool

    @property
    def size(self) -> int:
        """Number of columns."""
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class AgentFlat:
    """How one agent's tree is flattened into a row of the view."""

    leaves: tuple[FlatLeaf, ...]

    @property
    def size(self) -> int:
        """The true width (before padding)."""
        return sum(leaf.size for leaf in self.leaves)


@dataclass(frozen=True)
class LegalsPlan:
    """Where every agent's legal-action mask comes from.

    Attributes:
        width: ``A``, the widest agent's number of actions.
        counts: each agent's number of actions (columns past it are illegal, 0).
        sources: per agent ``("agent_infos", path)``, ``("observations", path)`` or ``None``
            (no mask recorded: every action of an active agent is legal).
    """

    width: int
    counts: tuple[int, ...]
    sources: tuple[tuple[str, str] | None, ...]


@dataclass(frozen=True)
class ViewPlan:
    """Everything needed to turn dataset chunks into vault rows.

    Attributes:
        agents: agent order of the ``N`` axis.
        observations: per-agent flattening of the observation trees (``action_mask`` leaves of
            Dict observations and text leaves are left out).
        obs_shape, obs_dtype: per-step shape ``(N, O)`` (or the source vault's) and dtype.
        actions: per-agent flattening of actions, ``None`` for discrete actions.
        action_shape, action_dtype: per-step shape ``(N,)`` int32 or ``(N, A)`` float32.
        legals: legal-action plan, ``None`` without discrete actions (or without legals in
            the source vault).
        state: ``"env"`` (the recorded global state), ``"observations"`` (all agents'
            observation rows concatenated) or ``None`` (no ``infos.state``).
        state_shape, state_dtype: per-step shape and dtype of ``infos.state``.
        dones: ``"team"`` copies the episode's done to every agent, ``"agent"`` uses the
            per-agent columns.
        terminals: ``"end"`` sets ``terminals`` at every end (terminated or truncated), as
            OG-MARL's learners expect; ``"strict"`` only where the episode (or agent)
            terminated.
        zero_idle_observations: the observation of an agent that does not act at a step (it
            died at the step before, or it is not its turn) is zeros in the view, as OG-MARL
            has it; the recorded values are kept in restoration arrays.
        truncations: write a ``truncations`` leaf.
        extras: vault leaves kept as dataset extras: ``(vault path, extras name, row shape,
            dtype)``.
        pad_value: value of padding columns.
    """

    agents: tuple[str, ...]
    observations: tuple[AgentFlat, ...]
    obs_shape: tuple[int, ...]
    obs_dtype: str
    actions: tuple[AgentFlat, ...] | None
    action_shape: tuple[int, ...]
    action_dtype: str
    legals: LegalsPlan | None
    state: Literal["env", "observations"] | None
    state_shape: tuple[int, ...]
    state_dtype: str
    dones: Dones
    terminals: Terminals = "strict"
    zero_idle_observations: bool = False
    truncations: bool = True
    extras: tuple[tuple[tuple[str, ...], str, tuple[int, ...], str], ...] = ()
    pad_value: float = PAD_VALUE

    @property
    def num_agents(self) -> int:
        """``N``."""
        return len(self.agents)

    def keys(self) -> dict[tuple[str, ...], tuple[tuple[int, ...], str]]:
        """``{leaf path: (per-step shape, dtype)}`` of the vault leaves, OG-MARL's first."""
        n = self.num_agents
        out: dict[tuple[str, ...], tuple[tuple[int, ...], str]] = {
            OBSERVATIONS: (self.obs_shape, self.obs_dtype),
            ACTIONS: (self.action_shape, self.action_dtype),
            REWARDS: ((n,), "float32"),
            TERMINALS: ((n,), "float32"),
        }
        if self.truncations:
            out[TRUNCATIONS] = ((n,), "float32")
        if self.legals is not None:
            out[LEGALS] = ((n, self.legals.width), "float32")
        if self.state is not None:
            out[STATE] = (self.state_shape, self.state_dtype)
        for path, _, shape, dtype in self.extras:
            out[path] = (shape, dtype)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form, stored in the vault's metadata (see :meth:`from_dict`)."""
        def flat(agents: tuple[AgentFlat, ...] | None) -> Any:
            if agents is None:
                return None
            return [[{"path": leaf.path, "dtype": leaf.dtype, "shape": list(leaf.shape),
                      "offset": leaf.offset, "exact": leaf.exact} for leaf in agent.leaves]
                    for agent in agents]

        return {
            "agents": list(self.agents),
            "observations": flat(self.observations),
            "observation_sizes": [a.size for a in self.observations],
            "obs_shape": list(self.obs_shape), "obs_dtype": self.obs_dtype,
            "actions": flat(self.actions),
            "action_sizes": None if self.actions is None else [a.size for a in self.actions],
            "action_shape": list(self.action_shape), "action_dtype": self.action_dtype,
            "legals": None if self.legals is None else {
                "width": self.legals.width, "counts": list(self.legals.counts),
                "sources": [None if s is None else list(s) for s in self.legals.sources]},
            "state": self.state, "state_shape": list(self.state_shape),
            "state_dtype": self.state_dtype,
            "dones": self.dones, "terminals": self.terminals,
            "zero_idle_observations": self.zero_idle_observations,
            "truncations": self.truncations,
            "extras": [{"path": list(p), "name": name, "shape": list(shape), "dtype": dtype}
                       for p, name, shape, dtype in self.extras],
            "pad_value": self.pad_value,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ViewPlan:
        """Inverse of :meth:`to_dict`."""
        def flat(value: Any) -> tuple[AgentFlat, ...] | None:
            if value is None:
                return None
            return tuple(AgentFlat(tuple(FlatLeaf(d["path"], d["dtype"], tuple(d["shape"]),
                                                  int(d["offset"]), bool(d["exact"]))
                                         for d in agent)) for agent in value)

        legals = data["legals"]
        observations = flat(data["observations"])
        assert observations is not None
        return cls(
            agents=tuple(data["agents"]),
            observations=observations,
            obs_shape=tuple(data["obs_shape"]), obs_dtype=data["obs_dtype"],
            actions=flat(data["actions"]),
            action_shape=tuple(data["action_shape"]), action_dtype=data["action_dtype"],
            legals=None if legals is None else LegalsPlan(
                int(legals["width"]), tuple(legals["counts"]),
                tuple(None if s is None else (s[0], s[1]) for s in legals["sources"])),
            state=data["state"], state_shape=tuple(data["state_shape"]),
            state_dtype=data["state_dtype"], dones=data["dones"],
            # Vaults written before these options had strict terminals and kept idle rows.
            terminals=data.get("terminals", "strict"),
            zero_idle_observations=bool(data.get("zero_idle_observations", False)),
            truncations=bool(data["truncations"]),
            extras=tuple((tuple(e["path"]), e["name"], tuple(e["shape"]), e["dtype"])
                         for e in data["extras"]),
            pad_value=float(data["pad_value"]),
        )


def flatten_plan(space: spaces.Space, view_dtype: str, *, skip_mask: bool) -> AgentFlat:
    """Lay the leaves of ``space`` out in one row (text leaves and, with ``skip_mask``, a
    top-level ``action_mask`` Dict entry are left out)."""
    placed = []
    offset = 0
    for path, leaf in leaf_spaces(space):
        if isinstance(leaf, spaces.Text):
            continue
        if skip_mask and path == layout.ACTION_MASK_KEY:
            continue
        dtype = leaf_dtype(leaf)
        item = FlatLeaf(path, dtype.name, leaf_shape(leaf), offset,
                        exact=bool(np.can_cast(dtype, np.dtype(view_dtype), "safe")))
        placed.append(item)
        offset += item.size
    return AgentFlat(tuple(placed))


def _mask_source(spec: MultiAgentSpec, agent: str, info_paths: set[str]
                 ) -> tuple[str, str] | None:
    space = spec.observation_spaces[agent]
    observation_keys = [key for key, sub in space.spaces.items()
                        if not isinstance(sub, (spaces.Dict, spaces.Tuple))] \
        if isinstance(space, spaces.Dict) else []
    return mask_source(observation_keys, info_paths)


def plan_from_spec(spec: MultiAgentSpec, info_paths: dict[str, set[str]], *,
                   dones: Dones = "team", state: StateMode = "auto",
                   terminals: Terminals = "end") -> ViewPlan:
    """The OG-MARL view of a dataset recorded from an environment.

    Args:
        spec: the dataset's spec.
        info_paths: ``{agent: leaf paths of its agent_infos tree}`` (from the data).
        dones, terminals: see :class:`ViewPlan`.
        state: ``"auto"`` uses the env's state if recorded, else concatenated observations;
            ``"env"`` requires the env's state; ``"observations"``; ``"none"``.

    Raises:
        LayoutError: ``state="env"`` on a dataset without a recorded state.
    """
    agents = spec.possible_agents
    observations = tuple(flatten_plan(spec.observation_spaces[a], "float32", skip_mask=True)
                         for a in agents)
    width = max((a.size for a in observations), default=0)
    discretes = [space for a in agents
                 if isinstance(space := spec.action_spaces[a], spaces.Discrete)]
    discrete = len(discretes) == len(agents)
    legals = None
    if discrete:
        counts = tuple(int(space.n) for space in discretes)
        legals = LegalsPlan(max(counts), counts, tuple(
            _mask_source(spec, a, info_paths.get(a, set())) for a in agents))
        actions = None
        action_shape: tuple[int, ...] = (len(agents),)
        action_dtype = "int32"
    else:
        actions = tuple(flatten_plan(spec.action_spaces[a], "float32", skip_mask=False)
                        for a in agents)
        action_shape = (len(agents), max(a.size for a in actions))
        action_dtype = "float32"
    state_source: Literal["env", "observations"] | None
    if state == "env" and spec.state_space is None:
        raise LayoutError("state='env' but the dataset records no global state (infos/marl/"
                          "state); use state='auto', 'observations' or 'none'")
    if state in ("auto", "env") and spec.state_space is not None:
        state_source = "env"
        state_shape: tuple[int, ...] = (flatten_plan(spec.state_space, "float32",
                                                     skip_mask=False).size,)
    elif state in ("auto", "observations"):
        state_source, state_shape = "observations", (len(agents) * width,)
    else:
        state_source, state_shape = None, (0,)
    return ViewPlan(agents=agents, observations=observations, obs_shape=(len(agents), width),
                    obs_dtype="float32", actions=actions, action_shape=action_shape,
                    action_dtype=action_dtype, legals=legals, state=state_source,
                    state_shape=state_shape, state_dtype="float32", dones=dones,
                    terminals=terminals, zero_idle_observations=True)


def plan_from_vault_record(spec: MultiAgentSpec, record: dict[str, Any]) -> ViewPlan:
    """The view that reproduces the vault a dataset was converted from (:func:`from_vault`).

    Raises:
        LayoutError: the dataset's spaces no longer fit the source vault's shapes.
    """
    agents = spec.possible_agents
    try:
        shapes = {tuple(k.split(".")): parse_shape(v) for k, v in record["shapes"].items()}
    except (ValueError, AttributeError) as exc:
        raise LayoutError(f"the dataset's record of its source vault has a malformed shape: "
                          f"{exc}") from exc
    dtypes = {tuple(k.split(".")): v for k, v in record["dtypes"].items()}
    obs_shape = shapes[OBSERVATIONS][2:]
    observations = tuple(flatten_plan(spec.observation_spaces[a], dtypes[OBSERVATIONS],
                                      skip_mask=False) for a in agents)
    per_agent = int(np.prod(obs_shape[1:], dtype=np.int64))
    for agent, flat in zip(agents, observations, strict=True):
        if flat.size > per_agent:
            raise LayoutError(
                f"observation space of {agent!r} flattens to {flat.size} values, more than the "
                f"source vault's observations row {obs_shape}")
    action_shape = shapes[ACTIONS][2:]
    discrete = all(isinstance(spec.action_spaces[a], spaces.Discrete) for a in agents)
    actions = None if discrete and len(action_shape) == 1 else tuple(
        flatten_plan(spec.action_spaces[a], dtypes[ACTIONS], skip_mask=False) for a in agents)
    legals = None
    if LEGALS in shapes:
        width = shapes[LEGALS][-1]
        legals = LegalsPlan(width, tuple(width for _ in agents),
                            tuple(("agent_infos", layout.ACTION_MASK_KEY) for _ in agents))
    extras = tuple((tuple(e["path"]), e["name"], shapes[tuple(e["path"])][2:],
                    dtypes[tuple(e["path"])]) for e in record["extras"])
    return ViewPlan(
        agents=agents, observations=observations, obs_shape=obs_shape,
        obs_dtype=dtypes[OBSERVATIONS], actions=actions, action_shape=action_shape,
        action_dtype=dtypes[ACTIONS], legals=legals,
        state="env" if STATE in shapes else None,
        state_shape=shapes[STATE][2:] if STATE in shapes else (0,),
        state_dtype=dtypes.get(STATE, "float32"), dones="agent",
        truncations=TRUNCATIONS in shapes, extras=extras,
    )
