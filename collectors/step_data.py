"""``step_data_callback`` in either of two contracts: Minari's ``StepDataCallback`` class, or
this library's function over a step's dict of per-agent dicts.

Minari's ``DataCollector`` takes a ``StepDataCallback`` subclass, makes one instance, and calls
it at every reset and step as ``callback(env=, obs=, info=, action=, rew=, terminated=,
truncated=)`` (only ``env``, ``obs`` and ``info`` at a reset); it returns a dict with the
keys ``observation``, ``action``, ``reward``, ``terminated``, ``truncated`` and ``info``
(``minari.dataset.step_data.StepData``). The collectors here hand it the same arguments,
each value a dict by agent, and record what it returns. A plain function (not a class)
keeps this library's own contract: called with ``{"observations", "actions", "rewards",
"terminations", "truncations", "infos"}`` (at a reset only ``observations`` and
``infos``), it returns a dict of the same keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minari import EpisodeMetadataCallback as MinariEpisodeMetadataCallback
from minari import StepDataCallback

from marl_minari.errors import InvalidOptionError, StepDataError

StepCallback = Callable[[dict[str, Any]], dict[str, Any]]
"""This library's contract: a step's dict of per-agent dicts in, the dict to record out."""

MINARI_KEYS = {"observation": "observations", "action": "actions", "reward": "rewards",
               "terminated": "terminations", "truncated": "truncations", "info": "infos"}
"""Minari's step-data keys and the per-agent dict each one is here."""


def step_callback(callback: Any, env: Any) -> StepCallback | None:
    """The collectors' step callback for a user's ``step_data_callback``.

    Args:
        callback: ``None``, a ``minari.StepDataCallback`` subclass (or instance; Minari's
            contract) or a function (this library's).
        env: the recorded env, handed to a Minari callback as ``env``.

    Raises:
        InvalidOptionError: ``callback`` is not callable, or a class that is not a
            ``StepDataCallback``.
    """
    if callback is None:
        return None
    if isinstance(callback, type):
        if not issubclass(callback, StepDataCallback):
            raise InvalidOptionError(
                f"step_data_callback class {callback.__name__} is not a minari "
                "StepDataCallback subclass: subclass it (Minari's contract), or pass a function "
                "of the step's dict")
        return _minari_adapter(callback(), env)
    if isinstance(callback, StepDataCallback):
        return _minari_adapter(callback, env)
    if not callable(callback):
        raise InvalidOptionError(
            f"step_data_callback must be a minari StepDataCallback subclass or a function, got "
            f"{type(callback).__name__}")
    return callback  # type: ignore[no-any-return]


def episode_callback(callback: Any) -> Callable[[Any], dict[str, Any]] | None:
    """A user's ``episode_metadata_callback``, checked when the collector is made.

    Raises:
        InvalidOptionError: ``callback`` is not a function of the finished
            :class:`~marl_minari.MultiAgentEpisode`: a class (Minari's
            ``EpisodeMetadataCallback`` among them, which Minari instantiates and calls with
            its single-agent episode dict when the dataset is created) or not callable.
    """
    if callback is None:
        return None
    minari_class = isinstance(callback, type) and issubclass(
        callback, MinariEpisodeMetadataCallback)
    if minari_class or isinstance(callback, MinariEpisodeMetadataCallback):
        raise InvalidOptionError(
            "episode_metadata_callback is called with each finished MultiAgentEpisode, not "
            "Minari's episode dict, so a minari.EpisodeMetadataCallback is not accepted: "
            "pass a function, e.g. lambda episode: {'rewards_sum': "
            "float(episode.team_rewards.sum())} (the team reward is what Minari's default "
            "sums)")
    if isinstance(callback, type) or not callable(callback):
        raise InvalidOptionError(
            "episode_metadata_callback must be a function of the finished MultiAgentEpisode "
            f"returning a dict, got {callback!r}")
    return callback  # type: ignore[no-any-return]


def _minari_adapter(callback: Any, env: Any) -> StepCallback:
    def adapted(data: dict[str, Any]) -> dict[str, Any]:
        at_step = "actions" in data
        arguments: dict[str, Any] = {"env": env, "obs": data["observations"],
                                     "info": data["infos"]}
        if at_step:
            arguments.update(action=data["actions"], rew=data["rewards"],
                             terminated=data["terminations"], truncated=data["truncations"])
        returned = callback(**arguments)
        if not isinstance(returned, dict):
            raise StepDataError(
                f"{type(callback).__name__} returned {type(returned).__name__}, not the step "
                "data dict of minari's StepDataCallback")
        unknown = sorted(set(returned) - MINARI_KEYS.keys())
        if unknown:
            raise StepDataError(
                f"{type(callback).__name__} returned step data keys {unknown}: a multi-agent "
                "dataset stores only observation, action, reward, terminated, truncated and "
                "info by agent; put extra per-agent values in each agent's info dict "
                "(recorded with record_infos=True)")
        wanted = MINARI_KEYS if at_step else {"observation": "observations", "info": "infos"}
        missing = sorted(key for key in wanted if key not in returned)
        if missing:
            raise StepDataError(
                f"{type(callback).__name__} returned no {missing}: return every key of "
                "minari's StepDataCallback (call super().__call__ and edit its dict)")
        return {ours: returned[theirs] for theirs, ours in wanted.items()}

    return adapted
