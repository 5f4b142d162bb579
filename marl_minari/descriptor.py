"""Env descriptors: JSON that re-creates a PettingZoo environment.

A descriptor names an environment by a PettingZoo registry id (``classic/chess-v6``), by an
id of an env family outside the registry (``mpe2/simple_spread_v3``), or by an importable
``module:attr`` entry point, plus JSON keyword arguments and the versions of the packages it
came from.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import re
import sys
import warnings
import weakref
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from marl_minari.errors import EnvDescriptorError

Api = Literal["parallel", "aec"]
_ID_RE = re.compile(r"^(?P<family>[\w.]+)/(?P<name>\w+?)(?:[-_]v(?P<version>\d+))$")
_ATTACHED: weakref.WeakKeyDictionary[Any, EnvDescriptor] = weakref.WeakKeyDictionary()


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
            warnings.warn(
                f"env descriptor keys {unknown} are unknown to this marl-minari and ignored "
                "(written by a newer version?); upgrade marl-minari to use them.",
                stacklevel=2,
            )
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

    def make(self, api: Api | None = None, **overrides: Any) -> Any:
        """Create the environment (``api`` defaults to the recorded one).

        Raises:
            EnvDescriptorError: the entry point cannot be imported or called.
        """
        api = api or self.api
        kwargs = {**self.kwargs, **overrides}
        if self.env_id is not None:
            return make_env(self.env_id, api=api, **kwargs)
        if self.entry_point is None:
            raise EnvDescriptorError(
                "this dataset does not say how to re-create its environment (no entry point); "
                "record with an env made by marl_minari.make_env or pass env_descriptor=."
            )
        env = _load(self.entry_point)(**kwargs)
        return _convert(env, api)


def make_env(env_id: str, api: Api = "parallel", **kwargs: Any) -> Any:
    """Make a PettingZoo environment by id and remember how, for recording.

    ``env_id`` is a PettingZoo registry id (``classic/chess-v6``, ``butterfly/pistonball_v6``),
    an env family module id (``mpe2/simple_spread_v3``: module ``mpe2.simple_spread_v3``), or a
    ``module:attr`` entry point. AEC-only environments asked for as ``"parallel"`` are converted
    with ``aec_to_parallel``, and parallel ones asked for as ``"aec"`` with ``parallel_to_aec``.

    Raises:
        EnvDescriptorError: the id cannot be resolved; the message says what was tried.
    """
    if api not in ("parallel", "aec"):
        raise EnvDescriptorError(f"api must be 'parallel' or 'aec', got {api!r}")
    entry_point, registry_id = _resolve(env_id, api)
    try:
        if registry_id is not None:
            import pettingzoo

            native = "parallel" if registry_id in pettingzoo.parallel_registry else "aec"
            env = pettingzoo.make(native, registry_id, **kwargs)
        else:
            env = _load(entry_point)(**kwargs)
    except EnvDescriptorError:
        raise
    except Exception as exc:
        raise EnvDescriptorError(f"could not create {env_id!r} with {kwargs!r}: {exc}") from exc
    env = _convert(env, api)
    stored_id = None if ":" in env_id else env_id
    descriptor = EnvDescriptor(
        api=api, entry_point=entry_point, env_id=stored_id, kwargs=dict(kwargs),
        versions=package_versions(entry_point),
    )
    _check_json(descriptor)
    attach_descriptor(env, descriptor)
    return env


def attach_descriptor(env: Any, descriptor: EnvDescriptor) -> None:
    """Remember ``descriptor`` for ``env``; recorders pick it up from there."""
    _ATTACHED[env] = descriptor


def describe_env(env: Any, api: Api) -> EnvDescriptor:
    """The descriptor of ``env``: the one it was made with, else a best-effort inference.

    Inference finds the ``name_vN`` module that exposes the env's class (as PettingZoo and mpe2
    envs do) and assumes default constructor arguments; the result is marked
    ``kwargs_known=False`` and a warning says how to record exact arguments.
    """
    if env in _ATTACHED:
        return _ATTACHED[env]
    cls = type(env.unwrapped)
    module = _versioned_module_exposing(cls)
    if module is None:
        entry_point = f"{cls.__module__}:{cls.__qualname__}"
    else:
        entry_point = f"{module}:{'parallel_env' if api == 'parallel' else 'env'}"
    warnings.warn(
        f"recording an env not made by marl_minari.make_env: assuming {entry_point} with default "
        "arguments. Make it with marl_minari.make_env(id, **kwargs), or pass env_descriptor=, to "
        "record its exact constructor arguments.",
        stacklevel=3,
    )
    return EnvDescriptor(api=api, entry_point=entry_point, kwargs={},
                         versions=package_versions(entry_point), kwargs_known=False)


def package_versions(entry_point: str | None) -> dict[str, str]:
    """Installed versions of pettingzoo and of the top-level package of ``entry_point``."""
    names = ["pettingzoo"]
    if entry_point:
        top = entry_point.split(":")[0].split(".")[0]
        if top not in names:
            names.append(top)
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _resolve(env_id: str, api: Api) -> tuple[str, str | None]:
    """``(entry_point, registry_id or None)`` for an id or entry point."""
    if ":" in env_id:
        return env_id, None
    import pettingzoo

    normalised = re.sub(r"_v(?=\d+$)", "-v", env_id.strip())
    for registry in (pettingzoo.parallel_registry, pettingzoo.aec_registry):
        if normalised in registry:
            entry = registry[normalised].entry_point
            return (entry if isinstance(entry, str) else f"{normalised}"), normalised
    match = _ID_RE.match(env_id)
    if match is None:
        raise EnvDescriptorError(
            f"{env_id!r} is not an env id: use 'family/name_vN' (e.g. 'mpe2/simple_spread_v3', "
            "'classic/chess_v6') or a 'module:attr' entry point."
        )
    module_name = f"{match['name']}_v{match['version']}"
    tried = []
    for package in (match["family"], f"pettingzoo.{match['family']}"):
        candidate = f"{package}.{module_name}"
        tried.append(candidate)
        try:
            importlib.import_module(candidate)
        except ImportError:
            continue
        return f"{candidate}:{'parallel_env' if api == 'parallel' else 'env'}", None
    close = close_env_ids(env_id)
    if close:
        raise EnvDescriptorError(f"unknown env {env_id!r}: did you mean {', '.join(close)}?")
    raise EnvDescriptorError(
        f"cannot find env {env_id!r}: not in PettingZoo's registry, and none of {tried} imports. "
        "Check the id, install the package that provides it (e.g. pip install "
        "'marl-minari[envs]' for PettingZoo's and mpe2's envs) or pass 'module:attr'."
    )


def close_env_ids(env_id: str, limit: int = 3) -> list[str]:
    """Known env ids close to ``env_id``: PettingZoo's registry and mpe2's modules, written
    with ``_vN`` or ``-vN`` as ``env_id`` is."""
    import difflib
    import pkgutil

    import pettingzoo

    known = {re.sub(r"-v(?=\d+$)", "_v", key)
             for registry in (pettingzoo.parallel_registry, pettingzoo.aec_registry)
             for key in registry}
    try:
        import mpe2
    except ImportError:
        pass
    else:
        known |= {f"mpe2/{m.name}" for m in pkgutil.iter_modules(mpe2.__path__)
                  if re.search(r"_v\d+$", m.name)}
    typed = re.sub(r"-v(?=\d+$)", "_v", env_id.strip())
    close = difflib.get_close_matches(typed, sorted(known), n=limit, cutoff=0.8)
    if re.search(r"-v\d+$", env_id):
        close = [re.sub(r"_v(?=\d+$)", "-v", c) for c in close]
    return close


def _load(entry_point: str) -> Any:
    module_name, _, attr = entry_point.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise EnvDescriptorError(f"cannot import entry point {entry_point!r}: {exc}") from exc
    if not callable(target):
        raise EnvDescriptorError(f"entry point {entry_point!r} is not callable")
    return target


def _convert(env: Any, api: Api) -> Any:
    from pettingzoo.utils.conversions import aec_to_parallel, parallel_to_aec
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    if api == "parallel" and isinstance(env, AECEnv):
        if not env.metadata.get("is_parallelizable", False):
            raise EnvDescriptorError(
                f"{type(env.unwrapped).__name__} is turn-based and not parallelizable: record it "
                "with api='aec' (AECDataCollector, or marl-minari collect --api aec)."
            )
        return aec_to_parallel(env)
    if api == "aec" and isinstance(env, ParallelEnv):
        return parallel_to_aec(env)
    return env


def _versioned_module_exposing(cls: type) -> str | None:
    for name, module in list(sys.modules.items()):
        if module is None or not re.search(r"_v\d+$", name):
            continue
        if getattr(module, "raw_env", None) is cls or getattr(module, "parallel_env", None) is cls:
            return name
    return None


def _check_json(descriptor: EnvDescriptor) -> None:
    try:
        json.dumps(descriptor.to_dict())
    except TypeError as exc:
        raise EnvDescriptorError(
            f"env kwargs must be JSON values to be recorded: {descriptor.kwargs!r} ({exc})"
        ) from exc
