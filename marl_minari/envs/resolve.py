"""What an env id or entry point names, and whether a dataset may make this process import it.

:func:`resolve_env` turns what a user types or a dataset names (a PettingZoo registry id, a
family id ``family/name_vN``, a ``module:attr`` entry point) into the exact entry point that
would be imported, importing nothing but PettingZoo to find out. Trust is decided on that
resolved entry point, by the same code that then imports it (:func:`load_factory`), so what
is checked is what runs:

* a family id is PettingZoo's when PettingZoo has that family: then only the exact
  ``pettingzoo.<family>.<name>_vN`` module is used, and a top-level package of the same name
  (``classic`` in the working directory) is never picked instead;
* a dataset's reference runs only if its module's top-level package is trusted
  (:func:`trusted_env_packages`) and its attribute is a callable that package defines (not,
  say, ``os.system`` reached through a trusted module's imports).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Final

from marl_minari.errors import EnvDescriptorError
from marl_minari.extras import EXTRA_OF_PACKAGE, require
from marl_minari.format.env_descriptor import Api

TRUSTED_ENV_PACKAGES_VAR: Final = "MARL_MINARI_TRUSTED_ENV_PACKAGES"
"""Environment variable: comma-separated top-level packages whose envs datasets may re-create."""
DEFAULT_TRUSTED_ENV_PACKAGES: Final = ("pettingzoo", "mpe2")
JOINT_ENV_ENTRY_POINT: Final = "marl_minari.joint:JointEnv"
"""The only ``env_spec`` entry point a multi-agent dataset's metadata may name."""
ENVS_EXTRA_MODULES: Final = frozenset(
    name for name, extra in EXTRA_OF_PACKAGE.items() if extra == "envs")
"""Modules the ``envs`` extra installs: a missing one is a missing extra, not a bad id."""

_TRUSTED_BY_CALL: set[str] = set()
_ID_RE = re.compile(r"^(?P<family>\w+(?:\.\w+)*)/(?P<name>\w+?)(?:[-_]v(?P<version>\d+))$")


@dataclass(frozen=True)
class ResolvedEnv:
    """The entry point an env reference names.

    Attributes:
        entry_point: ``module:attr``.
        registry_id: the PettingZoo registry id it was found under, if any.
    """

    entry_point: str
    registry_id: str | None = None

    @property
    def module(self) -> str:
        """The module the entry point imports."""
        return self.entry_point.partition(":")[0]

    @property
    def package(self) -> str:
        """The top-level package the entry point imports."""
        return self.module.split(".")[0]


def trust_env_package(package: str) -> None:
    """Let datasets re-create environments from ``package`` (a top-level package name) in this
    process, as if it were listed in ``$MARL_MINARI_TRUSTED_ENV_PACKAGES``."""
    if not package.isidentifier():
        raise EnvDescriptorError(f"{package!r} is not a top-level package name")
    _TRUSTED_BY_CALL.add(package)


def trusted_env_packages() -> frozenset[str]:
    """Top-level packages whose environments a dataset's descriptor may name."""
    listed = os.environ.get(TRUSTED_ENV_PACKAGES_VAR, "")
    from_env = {name.strip() for name in listed.replace(":", ",").split(",") if name.strip()}
    return frozenset(DEFAULT_TRUSTED_ENV_PACKAGES) | from_env | _TRUSTED_BY_CALL


def resolve_env(reference: str, api: Api = "parallel") -> ResolvedEnv:
    """The entry point ``reference`` names, found without importing anything but PettingZoo.

    Args:
        reference: a PettingZoo registry id (``classic/chess-v6``), a family id
            (``mpe2/simple_spread_v3``: module ``mpe2.simple_spread_v3``), or ``module:attr``.
        api: which of a family module's factories to use (``parallel_env`` or ``env``).

    Raises:
        EnvDescriptorError: not an id, or a PettingZoo family without that env (the message
            names close ids).
    """
    reference = reference.strip()
    if ":" in reference:
        return ResolvedEnv(reference)
    import pettingzoo

    normalised = re.sub(r"_v(?=\d+$)", "-v", reference)
    for registry in (pettingzoo.parallel_registry, pettingzoo.aec_registry):
        if normalised in registry:
            entry = registry[normalised].entry_point
            return ResolvedEnv(entry if isinstance(entry, str) else normalised, normalised)
    match = _ID_RE.match(reference)
    if match is None:
        raise EnvDescriptorError(
            f"{reference!r} is not an env id: use 'family/name_vN' (e.g. "
            "'mpe2/simple_spread_v3', 'classic/chess_v6') or a 'module:attr' entry point.")
    family, module_name = match["family"], f"{match['name']}_v{match['version']}"
    factory = "parallel_env" if api == "parallel" else "env"
    if _has_module(f"pettingzoo.{family}"):
        candidate = f"pettingzoo.{family}.{module_name}"
        if _has_module(candidate):
            return ResolvedEnv(f"{candidate}:{factory}")
        raise EnvDescriptorError(
            f"unknown env {reference!r}: PettingZoo's {family!r} family has no {module_name}"
            f"{_did_you_mean(reference)}. A package named {family!r} outside PettingZoo is never "
            f"used for this id; name it as an entry point ('{family}.{module_name}:{factory}') "
            "if you mean it.")
    return ResolvedEnv(f"{family}.{module_name}:{factory}")


def untrusted_reason(reference: str) -> str | None:
    """Why a dataset naming ``reference`` may not make this process import it (an untrusted
    package, or a reference that does not resolve); ``None`` when it may."""
    try:
        resolved = resolve_env(reference)
    except EnvDescriptorError as exc:
        return f"it does not resolve ({exc})"
    if resolved.package not in trusted_env_packages():
        return (f"it imports package {resolved.package!r}, which is not a trusted environment "
                f"package ({sorted(trusted_env_packages())})")
    attribute = resolved.entry_point.partition(":")[2]
    if not attribute.isidentifier():
        return (f"its attribute {attribute!r} is not one name: a dataset may only name a "
                "callable its trusted package defines")
    return None


def load_factory(reference: str, api: Api, *, trusted_only: bool) -> tuple[Any, ResolvedEnv]:
    """Resolve ``reference``, decide whether it may run, and import its factory: one step, so
    the entry point checked is the one imported.

    Args:
        reference: as for :func:`resolve_env`.
        api: as for :func:`resolve_env`.
        trusted_only: refuse what :func:`untrusted_reason` refuses (a dataset's reference);
            ``False`` for what the user typed.

    Raises:
        EnvDescriptorError: unresolvable, untrusted, not importable or not callable.
        MissingExtraError: the env needs a package of the ``envs`` extra that is missing.
    """
    if trusted_only:
        reason = untrusted_reason(reference)
        if reason is not None:
            raise _refusal(reference, reason)
    resolved = resolve_env(reference, api)
    if resolved.registry_id is not None:
        return None, resolved  # PettingZoo's own registry makes it
    module_name, _, attribute = resolved.entry_point.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except ImportError as exc:
        raise missing_extra_or(exc, EnvDescriptorError(
            f"cannot import the env {reference!r} ({resolved.entry_point}): {exc}"
            f"{_did_you_mean(reference)}. Check the id, install the package that provides it "
            "(pip install \"marl-minari[envs]\" for PettingZoo's and mpe2's envs), or pass "
            "'module:attr'.")) from exc
    except AttributeError as exc:
        raise EnvDescriptorError(
            f"cannot import the env {reference!r} ({resolved.entry_point}): {exc}") from exc
    if not callable(target):
        raise EnvDescriptorError(f"entry point {resolved.entry_point!r} is not callable")
    if trusted_only and str(getattr(target, "__module__", "")).split(".")[0] not in (
            trusted_env_packages()):
        raise _refusal(reference, f"{resolved.entry_point} is defined in "
                                  f"{getattr(target, '__module__', 'an unknown module')!r}, "
                                  "outside the trusted packages")
    return target, resolved


def missing_extra_or(exc: BaseException, otherwise: Exception) -> Exception:
    """The ``envs`` extra's missing-package error when ``exc`` is a package that extra
    brings (mpe2, pygame, chess...), else ``otherwise``."""
    missing = getattr(exc, "name", None) or ""
    text = str(exc)
    names = {missing.split(".")[0]} | {name for name in ENVS_EXTRA_MODULES if name in text}
    if names & ENVS_EXTRA_MODULES:
        try:
            require(sorted(names & ENVS_EXTRA_MODULES)[0], "envs", "this environment")
        except ImportError as missing_extra:
            return missing_extra
    return otherwise


def untrusted_env_references(metadata: dict[str, Any]) -> list[str]:
    """What re-creating the environment of a dataset with this ``metadata.json`` would import
    from outside the trusted packages, as ``"<where>: <entry point or id> (<why>)"`` lines.

    Looked at: the ``marl_minari`` env descriptor, the descriptor inside ``env_spec``'s and
    ``eval_env_spec``'s kwargs and, for a multi-agent dataset, their own entry points (which must be
    :data:`JOINT_ENV_ENTRY_POINT`). A plain Minari dataset's ``env_spec`` entry point is left
    to Minari, which imports it on ``recover_environment`` as it always has.
    """
    found: list[str] = []
    marl = metadata.get("marl_minari")
    descriptors: list[tuple[str, Any]] = []
    if isinstance(marl, dict):
        descriptors.append(("marl_minari.env", marl.get("env")))
    for spec_key in ("env_spec", "eval_env_spec"):  # the recorded env, the evaluation env
        env_spec: Any = metadata.get(spec_key)
        if isinstance(env_spec, str):
            try:
                env_spec = json.loads(env_spec)
            except (ValueError, RecursionError):  # not JSON, or nested past the parser's limit
                env_spec = None
        if isinstance(env_spec, dict):
            entry = env_spec.get("entry_point")
            if isinstance(marl, dict) and entry not in (None, JOINT_ENV_ENTRY_POINT):
                found.append(f"{spec_key}.entry_point: {entry}")
            kwargs = env_spec.get("kwargs")
            if isinstance(kwargs, dict):
                descriptors.append((f"{spec_key}.kwargs.descriptor", kwargs.get("descriptor")))
    for where, described in descriptors:
        if not isinstance(described, dict):
            continue
        for key in ("env_id", "entry_point"):
            value = described.get(key)
            if isinstance(value, str):
                reason = untrusted_reason(value)
                if reason is not None:
                    found.append(f"{where}.{key}: {value} ({reason})")
                if key == "env_id":
                    break  # an id wins over the entry point when both are given
            elif value is not None:
                found.append(f"{where}.{key}: {value!r} (not a string)")
    return found


def close_env_ids(env_id: str, limit: int = 3) -> list[str]:
    """Known env ids close to ``env_id``: PettingZoo's registry and mpe2's modules, written
    with ``_vN`` or ``-vN`` as ``env_id`` is."""
    import difflib
    import pkgutil

    import pettingzoo

    known = {re.sub(r"-v(?=\d+$)", "_v", key)
             for registry in (pettingzoo.parallel_registry, pettingzoo.aec_registry)
             for key in registry}
    spec = _spec("mpe2")
    if spec is not None and spec.submodule_search_locations:
        known |= {f"mpe2/{m.name}" for m in pkgutil.iter_modules(spec.submodule_search_locations)
                  if re.search(r"_v\d+$", m.name)}
    typed = re.sub(r"-v(?=\d+$)", "_v", env_id.strip())
    close = difflib.get_close_matches(typed, sorted(known), n=limit, cutoff=0.8)
    if re.search(r"-v\d+$", env_id):
        close = [re.sub(r"_v(?=\d+$)", "-v", c) for c in close]
    return close


def _did_you_mean(reference: str) -> str:
    close = close_env_ids(reference)
    return f" (did you mean {', '.join(close)}?)" if close else ""


def _spec(module: str) -> Any:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def _has_module(module: str) -> bool:
    """Whether ``module`` exists; finding it imports its parent packages, so callers only ask
    about PettingZoo's (trusted) packages and a top-level name."""
    return _spec(module) is not None


def _refusal(reference: str, reason: str) -> EnvDescriptorError:
    package = reference.partition(":")[0].split("/")[0].split(".")[0]
    return EnvDescriptorError(
        f"refusing to re-create the environment {reference!r}: {reason}. A dataset can name "
        "any importable callable, so only trust it if you trust the dataset's author: pass "
        f"trust_remote_code=True, call marl_minari.trust_env_package({package!r}), or add it "
        f"to ${TRUSTED_ENV_PACKAGES_VAR}.")
