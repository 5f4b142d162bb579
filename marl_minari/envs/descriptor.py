"""Making PettingZoo environments: by id (:func:`make_env`), and again from a dataset's env
descriptor (:func:`recreate_env`), importing only the code the user trusts.

A descriptor read from a dataset is someone else's words: re-creating its environment imports
and calls what it names. :func:`recreate_env` therefore only imports modules of trusted
environment packages (:func:`trusted_env_packages`: pettingzoo, mpe2, those named in
``$MARL_MINARI_TRUSTED_ENV_PACKAGES`` and those passed to :func:`trust_env_package`) unless the
caller says ``trust_remote_code=True``, as Hugging Face's loaders do. Environments the user makes
with :func:`make_env` are the user's own choice and are not restricted.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import json
import os
import re
import sys
import warnings
import weakref
from typing import Any

from marl_minari.errors import EnvDescriptorError
from marl_minari.format.env_descriptor import Api, EnvDescriptor

TRUSTED_ENV_PACKAGES_VAR = "MARL_MINARI_TRUSTED_ENV_PACKAGES"
"""Environment variable: comma-separated top-level packages whose envs datasets may re-create."""
DEFAULT_TRUSTED_ENV_PACKAGES = ("pettingzoo", "mpe2")
_TRUSTED_BY_CALL: set[str] = set()
_ID_RE = re.compile(r"^(?P<family>[\w.]+)/(?P<name>\w+?)(?:[-_]v(?P<version>\d+))$")
_ATTACHED: weakref.WeakKeyDictionary[Any, EnvDescriptor] = weakref.WeakKeyDictionary()


def recreate_env(descriptor: EnvDescriptor, api: Api | None = None, *,
                 trust_remote_code: bool = False, **overrides: Any) -> Any:
    """Create the environment ``descriptor`` names (``api`` defaults to the recorded one).

    Args:
        descriptor: the env descriptor (``dataset.spec.env``).
        api: ``"parallel"`` or ``"aec"``; default: the recorded one.
        trust_remote_code: import and call the entry point even when its package is not
            trusted (:func:`trusted_env_packages`). Only for datasets whose author you
            trust: the descriptor can name any importable callable.
        overrides: keyword arguments replacing the recorded ones.

    Raises:
        EnvDescriptorError: the entry point is untrusted, cannot be imported or called, or
            does not return a PettingZoo env.
    """
    api = api or descriptor.api
    kwargs = {**descriptor.kwargs, **overrides}
    if descriptor.env_id is not None:
        if not trust_remote_code:
            _check_trusted(descriptor.env_id)
        return make_env(descriptor.env_id, api=api, **kwargs)
    if descriptor.entry_point is None:
        raise EnvDescriptorError(
            "this dataset does not say how to re-create its environment (no entry point); "
            "record with an env made by marl_minari.make_env or pass env_descriptor=."
        )
    if not trust_remote_code:
        _check_trusted(descriptor.entry_point)
    try:
        env = _load(descriptor.entry_point)(**kwargs)
    except EnvDescriptorError:
        raise
    except Exception as exc:
        raise EnvDescriptorError(
            f"could not create {descriptor.entry_point!r} with {kwargs!r}: {exc}") from exc
    return _convert(env, api, descriptor.entry_point)


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


def untrusted_package(env_id_or_entry_point: str) -> str | None:
    """The top-level package that ``env_id_or_entry_point`` (as a descriptor or env_spec names
    it) would import, if it is not trusted; ``None`` when it is trusted.

    A PettingZoo registry id (``classic/chess-v6``) and a family id (``mpe2/x_v3``) import
    ``pettingzoo.<family>`` or ``<family>``; an entry point ``module:attr`` imports ``module``.
    """
    name = env_id_or_entry_point.strip()
    if ":" in name:
        top = name.partition(":")[0].split(".")[0]
    else:
        family = name.split("/")[0]
        top = family.split(".")[0]
        if _in_pettingzoo(family):
            return None
    return None if top in trusted_env_packages() else top


JOINT_ENV_ENTRY_POINT = "marl_minari.joint:JointEnv"
"""The only ``env_spec`` entry point a multi-agent dataset's metadata may name."""


def untrusted_env_references(metadata: dict[str, Any]) -> list[str]:
    """What re-creating the environment of a dataset with this ``metadata.json`` would import
    from outside the trusted packages, as ``"<where>: <entry point or id>"`` lines.

    Looked at: the ``marl_minari`` env descriptor, the descriptor inside ``env_spec``'s kwargs
    and, for a multi-agent dataset, ``env_spec``'s own entry point (which must be
    :data:`JOINT_ENV_ENTRY_POINT`). A plain Minari dataset's ``env_spec`` entry point is left
    to Minari, which imports it on ``recover_environment`` as it always has.
    """
    found: list[str] = []
    marl = metadata.get("marl_minari")
    descriptors: list[tuple[str, Any]] = []
    if isinstance(marl, dict):
        descriptors.append(("marl_minari.env", marl.get("env")))
    env_spec: Any = metadata.get("env_spec")
    if isinstance(env_spec, str):
        try:
            env_spec = json.loads(env_spec)
        except ValueError:
            env_spec = None
    if isinstance(env_spec, dict):
        entry = env_spec.get("entry_point")
        if isinstance(marl, dict) and entry not in (None, JOINT_ENV_ENTRY_POINT):
            found.append(f"env_spec.entry_point: {entry}")
        kwargs = env_spec.get("kwargs")
        if isinstance(kwargs, dict):
            descriptors.append(("env_spec.kwargs.descriptor", kwargs.get("descriptor")))
    for where, described in descriptors:
        if not isinstance(described, dict):
            continue
        for key in ("env_id", "entry_point"):
            value = described.get(key)
            if isinstance(value, str) and untrusted_package(value) is not None:
                found.append(f"{where}.{key}: {value}")
            elif value is not None and not isinstance(value, str):
                found.append(f"{where}.{key}: {value!r} (not a string)")
            if isinstance(value, str) and key == "env_id":
                break  # an id wins over the entry point when both are given
    return found


def _in_pettingzoo(family: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(f"pettingzoo.{family}") is not None
    except (ImportError, ValueError):
        return False


def _check_trusted(env_id_or_entry_point: str) -> None:
    package = untrusted_package(env_id_or_entry_point)
    if package is not None:
        raise EnvDescriptorError(
            f"refusing to re-create the environment {env_id_or_entry_point!r}: it imports "
            f"package {package!r}, which is not a trusted environment package "
            f"({sorted(trusted_env_packages())}). A dataset can name any importable callable, "
            "so only trust it if you trust the dataset's author: pass trust_remote_code=True, "
            f"call marl_minari.trust_env_package({package!r}), or add it to "
            f"${TRUSTED_ENV_PACKAGES_VAR}."
        )


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
    env = _convert(env, api, env_id)
    stored_id = None if ":" in env_id else env_id
    descriptor = EnvDescriptor(
        api=api, entry_point=entry_point, env_id=stored_id,
        kwargs=effective_kwargs(entry_point, kwargs, imported=True),
        versions=package_versions(entry_point),
    )
    _check_json(descriptor)
    attach_descriptor(env, descriptor)
    return env


def effective_kwargs(entry_point: str | None, kwargs: dict[str, Any], *,
                     imported: bool = False) -> dict[str, Any]:
    """``kwargs`` completed with the defaults of the constructor arguments they leave out.

    Two datasets of ``simple_spread_v3`` made with ``{}`` and with ``{"max_cycles": 25}`` (its
    default) then record, and compare, the same arguments. The defaults are read from the
    signature of the entry point, or of its module's ``raw_env`` when the entry point only
    forwards ``**kwargs`` (PettingZoo's ``env``/``parallel_env`` wrappers); only JSON values
    (numbers, strings, booleans, ``None``) are added.

    Args:
        entry_point: ``module:attr``; anything else leaves ``kwargs`` as they are.
        kwargs: the arguments given.
        imported: the caller has made the env already (its module is imported and trusted by
            the user); otherwise only trusted packages' modules are imported to read defaults,
            so a dataset from others never makes this import its code.
    """
    given = dict(kwargs)
    if not entry_point or ":" not in entry_point or (
            not imported and untrusted_package(entry_point) is not None):
        return given
    try:
        factory = _load(entry_point)
    except EnvDescriptorError:
        return given
    parameters = _parameters(factory)
    if parameters is None:
        raw_env = getattr(sys.modules.get(entry_point.partition(":")[0]), "raw_env", None)
        parameters = _parameters(raw_env) if callable(raw_env) else None
    defaults = {name: p.default for name, p in (parameters or {}).items()
                if p.default is not inspect.Parameter.empty
                and (p.default is None or type(p.default) in (bool, int, float, str))}
    return {**defaults, **given}


def _parameters(factory: Any) -> dict[str, inspect.Parameter] | None:
    """Named parameters of ``factory``; ``None`` if it takes only ``*args, **kwargs``."""
    try:
        parameters = dict(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        return None
    named = {k: p for k, p in parameters.items()
             if p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)}
    return named or None


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
    # PettingZoo's own family first: a top-level package that happens to share the family's
    # name (``classic``) must not shadow it.
    for package in (f"pettingzoo.{match['family']}", match["family"]):
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


def _convert(env: Any, api: Api, source: str) -> Any:
    from pettingzoo.utils.conversions import aec_to_parallel, parallel_to_aec
    from pettingzoo.utils.env import AECEnv, ParallelEnv

    if not isinstance(env, (AECEnv, ParallelEnv)):
        raise EnvDescriptorError(
            f"{source!r} returned a {type(env).__name__}, not a PettingZoo AECEnv or "
            "ParallelEnv; name a callable that makes a PettingZoo environment."
        )

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
