"""Which experience leaf of a vault (or of a Flashbax buffer) plays which role.

A role is what the dataset makes of a leaf: ``observations``, ``actions``, ``rewards``, the
done flags (``terminals`` and ``truncations``, or one ``dones`` flag with no split), the legal
action masks (``legals``) and the global ``state``. Two namings are known and recognised with
no options:

* OG-MARL's: ``observations``, ``actions``, ``rewards``, ``terminals``, optional
  ``truncations``, ``infos.legals``, ``infos.state``;
* Mava's (its systems record ``fbx.make_flat_buffer`` experience and write it with
  ``Vault.write``): ``observation``, ``action``, ``reward``, ``done``, optional
  ``legal_action_mask`` and a global ``state`` (or ``global_state``).

Any other naming is given as a map ``{role: leaf name}`` (``keys={"observations": "obs",
"actions": "act", "rewards": "rew", "dones": "done"}``; nested leaves as ``"infos.legals"``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from marl_minari.errors import InvalidOptionError, LayoutError

Path = tuple[str, ...]

ROLES: Final = ("observations", "actions", "rewards", "terminals", "truncations", "dones",
                "legals", "state")
"""Every role a leaf can play."""
REQUIRED: Final = ("observations", "actions", "rewards")
"""Roles every layout has, besides one done flag (``terminals`` or ``dones``)."""

OGMARL_NAMES: Final[dict[str, tuple[Path, ...]]] = {
    "observations": (("observations",),), "actions": (("actions",),),
    "rewards": (("rewards",),), "terminals": (("terminals",),),
    "truncations": (("truncations",),), "legals": (("infos", "legals"),),
    "state": (("infos", "state"),),
}
MAVA_NAMES: Final[dict[str, tuple[Path, ...]]] = {
    "observations": (("observation",),), "actions": (("action",),),
    "rewards": (("reward",),), "dones": (("done",),),
    "legals": (("legal_action_mask",),), "state": (("state",), ("global_state",)),
}
KNOWN_NAMINGS: Final = {"og-marl": OGMARL_NAMES, "mava": MAVA_NAMES}


def leaf_text(path: Path) -> str:
    """A leaf path as users write it (``("infos", "legals")`` -> ``"infos.legals"``)."""
    return ".".join(path)


@dataclass(frozen=True)
class KeyLayout:
    """The leaf of each role.

    Attributes:
        naming: ``"og-marl"``, ``"mava"`` or ``"given"`` (a map passed by the user).
        paths: ``{role: leaf path}`` of the roles present.
    """

    naming: str
    paths: dict[str, Path]

    def path(self, role: str) -> Path | None:
        """The leaf of ``role``, or ``None`` when the layout has none."""
        return self.paths.get(role)

    def has(self, role: str) -> bool:
        """Whether some leaf plays ``role``."""
        return role in self.paths

    @property
    def done_role(self) -> str:
        """``"terminals"`` (with an optional ``truncations`` beside it) or ``"dones"`` (one
        flag that does not say whether the episode terminated or was truncated)."""
        return "terminals" if "terminals" in self.paths else "dones"

    @property
    def flag_roles(self) -> tuple[str, ...]:
        """The done flags episodes are cut on."""
        return tuple(r for r in ("terminals", "truncations", "dones") if r in self.paths)

    def others(self, found: Iterable[Path]) -> list[Path]:
        """Leaves of ``found`` that play no role (kept as dataset extras)."""
        used = set(self.paths.values())
        return [path for path in found if path not in used]

    def to_dict(self) -> dict[str, object]:
        """JSON form (``{"naming": ..., "keys": {role: "a.b"}}``)."""
        return {"naming": self.naming,
                "keys": {role: leaf_text(path) for role, path in self.paths.items()}}


def resolve_keys(found: Iterable[Path], keys: Mapping[str, str] | None,
                 where: str) -> KeyLayout:
    """The key layout of leaves ``found``: ``keys`` when given, else OG-MARL's or Mava's
    naming, whichever the leaves follow.

    Raises:
        InvalidOptionError: ``keys`` names an unknown role or lacks a required one.
        LayoutError: a leaf named in ``keys`` is not there, or no naming fits (the message
            lists the leaves found and the ``keys=`` map to pass).
    """
    present = list(found)
    if keys is not None:
        return _given(present, keys, where)
    for naming, names in KNOWN_NAMINGS.items():
        paths = {role: next(p for p in candidates if p in present)
                 for role, candidates in names.items()
                 if any(p in present for p in candidates)}
        if all(role in paths for role in REQUIRED) and (
                "terminals" in paths or "dones" in paths):
            return KeyLayout(naming, paths)
    found_text = sorted(leaf_text(p) for p in present)
    suggested = _suggestion(found_text)
    raise LayoutError(
        f"{where}: its keys {found_text} follow neither OG-MARL's names (observations, "
        "actions, rewards, terminals) nor Mava's (observation, action, reward, done); say which "
        f"key is which: keys={suggested!r} (at the command line: --keys "
        f"{keys_option_text(suggested)}; roles: {', '.join(ROLES)})")


def _given(present: list[Path], keys: Mapping[str, str], where: str) -> KeyLayout:
    if not isinstance(keys, Mapping):
        raise InvalidOptionError(f"keys must map roles to leaf names, got {keys!r}")
    unknown = sorted(set(keys) - set(ROLES))
    if unknown:
        raise InvalidOptionError(f"keys names unknown roles {unknown}; the roles are "
                                 f"{list(ROLES)}")
    missing = [role for role in REQUIRED if role not in keys]
    if missing or ("terminals" not in keys and "dones" not in keys):
        raise InvalidOptionError(
            f"keys must give {', '.join(REQUIRED)} and 'terminals' or 'dones'; missing "
            f"{missing + ([] if 'terminals' in keys or 'dones' in keys else ['dones'])}")
    if "terminals" in keys and "dones" in keys:
        raise InvalidOptionError("keys gives both 'terminals' and 'dones': 'dones' is one "
                                 "flag with no terminated/truncated split, give one of them")
    paths = {}
    for role, name in keys.items():
        path = tuple(str(name).replace("/", ".").split("."))
        if path not in present:
            raise LayoutError(
                f"{where}: keys maps {role!r} to {name!r}, which is not one of its keys "
                f"{sorted(leaf_text(p) for p in present)}")
        paths[role] = path
    return KeyLayout("given", paths)


_HINTS: Final = (("observations", ("obs",)), ("actions", ("act",)), ("rewards", ("rew",)),
                 ("terminals", ("term",)), ("truncations", ("trunc",)), ("dones", ("done",)),
                 ("legals", ("legal", "avail", "mask")), ("state", ("state",)))
"""Stems that suggest a leaf's role, in the order roles take their pick (each leaf once)."""


def _suggestion(found: list[str]) -> dict[str, str]:
    """A ``keys=`` map guessed from the leaf names: every role a leaf seems to play, the
    truncations and legal action masks included (a map without them would lose both), and a
    placeholder for each required role nothing fits."""
    out: dict[str, str] = {}
    for role, stems in _HINTS:
        if role == "dones" and "terminals" in out:
            continue  # one done flag: terminals (with truncations) or dones
        candidates = [name for name in found if name not in out.values()
                      and any(stem in name.lower() for stem in stems)]
        # "act" is in "legal_action_mask" too: a name that starts with the stem goes first
        match = min(candidates, default=None, key=lambda name: (
            not any(name.lower().rsplit(".", 1)[-1].startswith(stem) for stem in stems),
            len(name)))
        if match is not None:
            out[role] = match
        elif role in REQUIRED:
            out[role] = f"<{role} key>"
    if "terminals" not in out and "dones" not in out:
        out["dones"] = "<dones key>"
    return out


def keys_option_text(keys: Mapping[str, str]) -> str:
    """A key map as the command line's ``--keys`` takes it (``role=leaf,...``)."""
    return ",".join(f"{role}={name}" for role, name in keys.items())
