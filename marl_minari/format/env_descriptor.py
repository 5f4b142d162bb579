"""Env descriptors as a dataset stores them: JSON that names a PettingZoo environment.

A descriptor names an environment by a PettingZoo registry id (``classic/chess-v6``), by an
id of an env family outside the registry (``mpe2/simple_spread_v3``), or by an importable
``module:attr`` entry point, plus JSON keyword arguments and the versions of the packages it
came from (``docs/format.md``, *Env descriptor*). This module only holds and checks the data;
re-creating the environment, and deciding whether its code may be imported, is
:mod:`marl_minari.envs`'s.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from marl_minari.errors import EnvDescriptorError
from marl_minari.user_warnings import warn

Api = Literal["parallel", "aec"]
"""The PettingZoo API an environment is recorded through."""


@dataclass(frozen=True)
class EnvDescriptor:
    """How to re-create a PettingZoo environment.

    Attributes:
        api: ``"parallel"`` or ``"aec"``, the API the environment was recorded through.
        entry_point: ``module:attr`` of a callable returning the env (``None`` if unknown).
        env_id: the id it was made from (registry id or ``family/name_vN``), if any.
        kwargs: JSON keyword arguments for the entry point.
        versions: installed versions of pettingzoo and the env's package when recorded.
        kwargs_known: ``False`` when the env was not made through :func:`make_env` and its
            constructor arguments could not be recovered (defaults are then assumed).
    """

    api: Api
    entry_point: str | None
    env_id: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    kwargs_known: bool = True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (see :meth:`from_dict`)."""
        return asdict(self)

    def to_json(self) -> str:
        """The descriptor as a JSON string."""
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EnvDescriptor:
        """Rebuild a descriptor from :meth:`to_dict` output.

        Keys this version does not know (a newer writer's) are ignored with a warning, so that
        newer datasets stay readable; missing required keys (``api``, ``entry_point``) raise.
        """
        if not isinstance(data, dict):
            raise EnvDescriptorError(f"not an env descriptor: {data!r} (expected a JSON object)")
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(key) for key in data if key not in known)
        if unknown:
            warn(f"env descriptor keys {unknown} are unknown to this marl-minari and ignored "
                 "(written by a newer version?); upgrade marl-minari to use them.")
        try:
            return cls(**{key: value for key, value in data.items() if key in known})
        except TypeError as exc:
            raise EnvDescriptorError(f"not an env descriptor: {data!r} ({exc})") from exc

    @classmethod
    def from_json(cls, text: str) -> EnvDescriptor:
        """Rebuild a descriptor from :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))

    @property
    def name(self) -> str:
        """A short human name: the id, else the entry point's attribute path."""
        if self.env_id:
            return self.env_id
        return self.entry_point or "unknown"
