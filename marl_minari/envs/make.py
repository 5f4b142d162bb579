"""Making PettingZoo environments: by id (:func:`make_env`), and again from a dataset's env
descriptor (:func:`recreate_env`), which imports only code the user trusts
(:mod:`marl_minari.envs.resolve` decides, on exactly the entry point it imports).

Environments the user makes with :func:`make_env` are the user's own choice and are not
restricted; a descriptor read from a dataset is someone else's words, so :func:`recreate_env`
makes its environment only from trusted packages (pettingzoo, mpe2, those named in
``$MARL_MINARI_TRUSTED_ENV_PACKAGES`` and those passed to ``trust_env_package``) unless the
caller says ``trust_remote_code=True``, as Hugging Face's loaders do.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import re
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from marl_minari.envs.resolve import ResolvedEnv, load_factory, missing_extra_or
from marl_minari.errors import EnvDescriptorError, MarlMinariError
from marl_minari.format.env_descriptor import Api, EnvDescriptor
from marl_minari.format.space_json import space_to_json
from marl_minari.user_warnings import warn

_ATTACHED: weakref.WeakKeyDictionary[Any, EnvDescriptor] = weakref.WeakKeyDictionary()


def make_env(env_id: str, api: Api = "parallel", **kwargs: Any) -> Any:
    """Make a PettingZoo environment by id and remember how, for recording.

    ``env_id`` is a PettingZoo registry id (``classic/chess-v6``, ``butterfly/pistonball_v6``),
    an env family module id (``mpe2/simple_spread_v3``: module ``mpe2.simple_spread_v3``), or a
    ``module:attr`` entry point. AEC-only environments asked for as ``"parallel"`` are converted
    with ``aec_to_parallel``, and parallel ones asked for as ``"aec"`` with ``parallel_to_aec``.

    Raises:
        EnvDescriptorError: the id cannot be resolved; the message says what was tried.
        MissingExtraError: the env needs a package of the ``envs`` extra.
    """
    if api not in ("parallel", "aec"):
        raise EnvDescriptorError(f"api must be 'parallel' or 'aec', got {api!r}")
    factory, resolved = load_factory(env_id, api, trusted_only=False)
    env = _create(env_id, factory, resolved, kwargs)
    env = _convert(env, api, env_id)
    descriptor = EnvDescriptor(
        api=api, entry_point=resolved.entry_point, env_id=None if ":" in env_id else env_id,
        kwargs=effective_kwargs(resolved.entry_point, kwargs, imported=True),
        versions=package_versions(resolved.entry_point),
    )
    _check_json(descriptor)
    attach_descriptor(env, descriptor)
    return env


def recreate_env(descriptor: EnvDescriptor, api: Api | None = None, *,
                 trust_remote_code: bool = False, **overrides: Any) -> Any:
    """Create the environment ``descriptor`` names (``api`` defaults to the recorded one).

    Args:
        descriptor: the env descriptor (``dataset.spec.env``).
        api: ``"parallel"`` or ``"aec"``; default: the recorded one.
        trust_remote_code: import and call the entry point even when its package is not
            trusted (``marl_minari.trusted_env_packages()``). Only for datasets whose author
            you trust: the descriptor can name any importable callable.
        overrides: keyword arguments replacing the recorded ones.

    Raises:
        EnvDescriptorError: the entry point is untrusted, cannot be imported or called, or
            does not return a PettingZoo env.
        MissingExtraError: the env needs a package of the ``envs`` extra.
    """
    api = api or descriptor.api
    kwargs = {**descriptor.kwargs, **overrides}
    reference = descriptor.env_id or descriptor.entry_point
    if reference is None:
        raise EnvDescriptorError(
            "this dataset does not say how to re-create its environment (no entry point); "
            "record with an env made by marl_minari.make_env or pass env_descriptor=.")
    factory, resolved = load_factory(reference, api, trusted_only=not trust_remote_code)
    return _convert(_create(reference, factory, resolved, kwargs), api, reference)


def check_recreated(env: Any, descriptor: EnvDescriptor | None, possible_agents: Sequence[str],
                    spaces_of: Callable[[str], tuple[Any, Any]] | None = None) -> None:
    """Refuse an env re-created for a dataset that is not the env the data describes.

    Args:
        env: the re-created PettingZoo env.
        descriptor: the descriptor it was made from (its ``kwargs_known`` says whether the
            arguments were recorded or the env was made with defaults).
        possible_agents: the dataset's agents.
        spaces_of: an agent's ``(observation_space, action_space)`` in the dataset, to compare
            too; ``None`` compares the agents alone.

    Raises:
        EnvDescriptorError: the env's agents, or an agent's spaces, differ from the dataset's;
            the message names the first difference and how to make the right env.
    """
    made = list(env.possible_agents)
    difference = None
    if sorted(made) != sorted(possible_agents):
        difference = f"has agents {made}, the dataset {list(possible_agents)}"
    elif spaces_of is not None:
        for agent in possible_agents:
            for kind, given, recorded in zip(
                    ("observation", "action"),
                    (env.observation_space(agent), env.action_space(agent)),
                    spaces_of(agent), strict=True):
                if space_to_json(given) != space_to_json(recorded):
                    difference = (f"gives agent {agent!r} the {kind} space {given}, the "
                                  f"dataset {recorded}")
                    break
            if difference:
                break
    if difference is None:
        return
    name = "the environment" if descriptor is None else repr(descriptor.name)
    why = ("the dataset's descriptor was inferred from an env not made by "
           "marl_minari.make_env, so it was re-created with default arguments; "
           if descriptor is not None and not descriptor.kwargs_known else "")
    raise EnvDescriptorError(
        f"{name} re-created for this dataset {difference}: {why}make it with the arguments the "
        "data was recorded with: marl_minari.load_dataset(id).recover_environment(**arguments)"
        ", or your own env in marl_minari.JointEnv(env, possible_agents=...)")


def _create(reference: str, factory: Any, resolved: ResolvedEnv,
            kwargs: dict[str, Any]) -> Any:
    try:
        if resolved.registry_id is not None:
            import pettingzoo

            native = ("parallel" if resolved.registry_id in pettingzoo.parallel_registry
                      else "aec")
            return pettingzoo.make(native, resolved.registry_id, **kwargs)
        return factory(**kwargs)
    except MarlMinariError:
        raise
    except Exception as exc:
        failure = EnvDescriptorError(f"could not create {reference!r} with {kwargs!r}: {exc}")
        raise missing_extra_or(exc, failure) from exc


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
    if not entry_point or ":" not in entry_point:
        return given
    try:
        factory, _ = load_factory(entry_point, "parallel", trusted_only=not imported)
    except (EnvDescriptorError, ImportError):
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
    warn(f"recording an env not made by marl_minari.make_env: assuming {entry_point} with default "
         "arguments. Make it with marl_minari.make_env(id, **kwargs), or pass env_descriptor=, to "
         "record its exact constructor arguments.")
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
