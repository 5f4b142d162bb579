"""``MultiAgentSpec``: what a multi-agent dataset holds, serialisable to its metadata."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gymnasium import spaces

from marl_minari.errors import (
    EnvDescriptorError,
    InvalidOptionError,
    LayoutError,
    UnsupportedSpaceError,
)
from marl_minari.format import layout
from marl_minari.format.env_descriptor import Api, EnvDescriptor
from marl_minari.format.space_json import space_from_json, space_to_json
from marl_minari.format.spaces import check_storable, is_image_space
from marl_minari.version import __version__


@dataclass(frozen=True)
class MultiAgentSpec:
    """Agents, spaces and provenance of a multi-agent dataset.

    Attributes:
        api: ``"parallel"`` or ``"aec"``.
        possible_agents: agent names in the environment's order (Gymnasium's ``Dict`` sorts its
            keys, so this order is stored separately).
        observation_spaces: ``{agent: space}``.
        action_spaces: ``{agent: space}``.
        state_space: the global state's space, or ``None`` when the env has no ``state()``.
        env: how to re-create the environment, or ``None``.
        reward_aggregation: how per-agent rewards became Minari's ``rewards`` column.
        record_infos: whether the env's per-agent info dicts were recorded.
        state_encoding: how the global state is stored, one of ``layout.STATE_ENCODINGS``
            (see :func:`resolve_state_encoding`).
    """

    api: Api
    possible_agents: tuple[str, ...]
    observation_spaces: dict[str, spaces.Space]
    action_spaces: dict[str, spaces.Space]
    state_space: spaces.Space | None = None
    env: EnvDescriptor | None = None
    reward_aggregation: str = "sum"
    record_infos: bool = False
    state_encoding: str = "raw"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.reward_aggregation not in layout.REWARD_AGGREGATIONS:
            raise LayoutError(
                f"reward_aggregation must be one of {layout.REWARD_AGGREGATIONS}, "
                f"got {self.reward_aggregation!r}"
            )
        if len(set(self.possible_agents)) != len(self.possible_agents):
            raise LayoutError(f"possible_agents has duplicates: {self.possible_agents}")
        for agent in self.possible_agents:
            if not isinstance(agent, str) or agent in ("", ".", "..") or "/" in agent:
                raise UnsupportedSpaceError(
                    f"agent name {agent!r} cannot name an HDF5 group: use non-empty strings "
                    "without '/' (and not '.' or '..')"
                )
            check_storable(self.observation_spaces[agent], f"observation_space({agent!r})")
            check_storable(self.action_spaces[agent], f"action_space({agent!r})")
        if self.state_space is not None:
            check_storable(self.state_space, "state_space")
        check_state_encoding(self.state_encoding, self.state_space)

    @property
    def num_agents(self) -> int:
        """Number of possible agents ``N``."""
        return len(self.possible_agents)

    @property
    def observation_space(self) -> spaces.Dict:
        """The dataset's joint observation space, ``Dict({agent: space})``."""
        return spaces.Dict({a: self.observation_spaces[a] for a in self.possible_agents})

    @property
    def action_space(self) -> spaces.Dict:
        """The dataset's joint action space, ``Dict({agent: space})``."""
        return spaces.Dict({a: self.action_spaces[a] for a in self.possible_agents})

    def to_metadata(self) -> dict[str, Any]:
        """The ``metadata.json["marl_minari"]`` dict (spaces live in Minari's own keys)."""
        return {
            layout.META_LAYOUT_VERSION: layout.LAYOUT_VERSION,
            layout.META_LIBRARY_VERSION: __version__,
            layout.META_API: self.api,
            layout.META_POSSIBLE_AGENTS: list(self.possible_agents),
            layout.META_ENV: None if self.env is None else self.env.to_dict(),
            layout.META_REWARD_AGGREGATION: self.reward_aggregation,
            layout.META_STATE_SPACE: (
                None if self.state_space is None
                else space_to_json(self.state_space, compact_bounds=True)
            ),
            layout.META_RECORD_INFOS: self.record_infos,
            layout.META_STATE_ENCODING: self.state_encoding,
            **self.extra,
        }

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any], observation_space: spaces.Space,
                      action_space: spaces.Space) -> MultiAgentSpec:
        """Rebuild the spec of a stored dataset from its ``metadata.json`` and Dict spaces.

        Raises:
            LayoutError: the metadata lacks the multi-agent keys or is of a newer layout.
        """
        marl = metadata.get(layout.METADATA_KEY)
        if not isinstance(marl, dict):
            raise LayoutError(
                f"dataset {metadata.get('dataset_id')!r} has no '{layout.METADATA_KEY}' metadata: "
                "it is not a multi-agent dataset written by marl-minari."
            )
        name = f"dataset {metadata.get('dataset_id')!r}"
        version = marl.get(layout.META_LAYOUT_VERSION)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise LayoutError(
                f"{name}: metadata.json's {layout.METADATA_KEY}.{layout.META_LAYOUT_VERSION} "
                f"is {version!r}, not a layout version (a whole number from 1); the metadata is "
                "damaged: restore it from a copy")
        if version > layout.LAYOUT_VERSION:
            raise LayoutError(
                f"{name} uses layout version {version!r}; this marl-minari reads up to "
                f"{layout.LAYOUT_VERSION}. Upgrade marl-minari."
            )
        data_format = metadata.get("data_format", "hdf5")
        if data_format != "hdf5":
            raise LayoutError(
                f"{name}: metadata.json's data_format is {data_format!r}, but multi-agent "
                "datasets are stored in HDF5 (main_data.hdf5); the metadata is damaged: restore "
                "it from a copy, or set data_format to 'hdf5'")
        agents = _agents(marl.get(layout.META_POSSIBLE_AGENTS), metadata)
        api = marl.get(layout.META_API)
        if api not in ("parallel", "aec"):
            raise LayoutError(f"dataset {metadata.get('dataset_id')!r}: marl_minari.api must be "
                              f"'parallel' or 'aec', got {api!r}")
        if not isinstance(observation_space, spaces.Dict) or not isinstance(
            action_space, spaces.Dict
        ) or set(observation_space.spaces) != set(agents) or set(action_space.spaces) != set(
            agents
        ):
            def keys(space: spaces.Space) -> str:
                return (f"keys {sorted(space.spaces)}" if isinstance(space, spaces.Dict)
                        else f"a {type(space).__name__}")

            raise LayoutError(
                f"{name}: metadata.json's observation_space and action_space must be Dicts "
                f"keyed by possible_agents {list(agents)}, not {keys(observation_space)} and "
                f"{keys(action_space)}; the metadata is damaged: restore it from a copy"
            )
        env = marl.get(layout.META_ENV)
        state_space = marl.get(layout.META_STATE_SPACE)
        aggregation = marl.get(layout.META_REWARD_AGGREGATION, "sum")
        if aggregation not in layout.REWARD_AGGREGATIONS:
            raise LayoutError(
                f"dataset {metadata.get('dataset_id')!r}: '{layout.META_REWARD_AGGREGATION}' is "
                f"{aggregation!r}, not one of {list(layout.REWARD_AGGREGATIONS)}"
            )
        encoding = marl.get(layout.META_STATE_ENCODING, "raw")
        if encoding not in layout.STATE_ENCODINGS:
            raise LayoutError(
                f"dataset {metadata.get('dataset_id')!r}: '{layout.META_STATE_ENCODING}' is "
                f"{encoding!r}, not one of {list(layout.STATE_ENCODINGS)}; see docs/format.md."
            )
        known = {getattr(layout, k) for k in dir(layout) if k.startswith("META_")}
        if env is not None and not isinstance(env, dict):
            raise EnvDescriptorError(f"dataset {metadata.get('dataset_id')!r}: marl_minari.env "
                                     f"must be an env descriptor object, got {env!r}")
        return cls(
            api=api,
            possible_agents=agents,
            observation_spaces={a: observation_space[a] for a in agents},
            action_spaces={a: action_space[a] for a in agents},
            state_space=None if state_space is None else _state_space(state_space, metadata),
            env=None if env is None else EnvDescriptor.from_dict(env),
            reward_aggregation=aggregation,
            record_infos=bool(marl.get(layout.META_RECORD_INFOS, False)),
            state_encoding=encoding,
            extra={k: v for k, v in marl.items() if k not in known},
        )

    def joint_env_spec(self) -> Any:
        """A Gymnasium ``EnvSpec`` of the joint view, or ``None`` without an env descriptor.

        ``gymnasium.make`` of it (which Minari's ``recover_environment`` calls) returns a
        :class:`marl_minari.envs.joint.JointEnv` whose spaces equal the dataset's Dict spaces.
        """
        if self.env is None or (self.env.entry_point is None and self.env.env_id is None):
            return None
        from gymnasium.envs.registration import EnvSpec

        name = "".join(c if c.isalnum() or c == "_" else "_" for c in self.env.name)
        return EnvSpec(
            id=f"marl_minari/{name}-v0",
            entry_point="marl_minari.joint:JointEnv",
            kwargs={"descriptor": self.env.to_dict(), "possible_agents": list(self.possible_agents),
                    "reward_aggregation": self.reward_aggregation},
            disable_env_checker=True,
            order_enforce=False,
        )

    def to_json(self) -> str:
        """The spec with its spaces, as JSON (used for recordings in progress)."""
        return json.dumps({
            "marl": self.to_metadata(),
            "observation_space": space_to_json(self.observation_space, compact_bounds=True),
            "action_space": space_to_json(self.action_space, compact_bounds=True),
        })

    @classmethod
    def from_json(cls, text: str) -> MultiAgentSpec:
        """Inverse of :meth:`to_json`."""
        data = json.loads(text)
        return cls.from_metadata(
            {layout.METADATA_KEY: data["marl"]},
            space_from_json(data["observation_space"]),
            space_from_json(data["action_space"]),
        )


def _agents(value: Any, metadata: dict[str, Any]) -> tuple[str, ...]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(agent, str) for agent in value)):
        raise LayoutError(f"dataset {metadata.get('dataset_id')!r}: marl_minari.possible_agents "
                          f"must be a non-empty list of agent names, got {value!r}")
    return tuple(value)


def resolve_state_encoding(requested: str | None, state_space: spaces.Space | None,
                           jpeg_encoding: bool) -> str:
    """The state encoding a recorder uses: ``requested``, or by default ``"jpeg"`` for an
    image-like state space when ``jpeg_encoding`` is on (as Minari treats image
    observations) and ``"raw"`` otherwise. Without a state it is ``"raw"``.

    Raises:
        InvalidOptionError: an unknown encoding, or ``"jpeg"`` for a state that is no image.
    """
    if state_space is None:
        return "raw"
    if requested is None:
        return "jpeg" if jpeg_encoding and is_image_space(state_space) else "raw"
    check_state_encoding(requested, state_space)
    return requested


def check_state_encoding(encoding: str, state_space: spaces.Space | None) -> None:
    """Raise :class:`InvalidOptionError` unless ``encoding`` can store ``state_space``."""
    if encoding not in layout.STATE_ENCODINGS:
        raise InvalidOptionError(
            f"state_encoding={encoding!r} is not one of {', '.join(layout.STATE_ENCODINGS)}")
    if encoding == "jpeg" and state_space is not None and not is_image_space(state_space):
        raise InvalidOptionError(
            f"state_encoding='jpeg' needs an image-like state space (uint8 Box of rank 2-3, "
            f"at least 32x32, bounds 0..255), not {state_space}; use 'gzip', 'lzf' or 'raw'")


def _state_space(text: Any, metadata: dict[str, Any]) -> spaces.Space:
    try:
        return space_from_json(text)
    except Exception as exc:  # a malformed space can make the parser raise anything
        raise LayoutError(
            f"dataset {metadata.get('dataset_id')!r}: '{layout.METADATA_KEY}' metadata key "
            f"'{layout.META_STATE_SPACE}' is not a serialised space ({exc}); see docs/format.md."
        ) from exc
