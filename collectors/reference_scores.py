"""Minari's reference scores for multi-agent data: ``eval_env``, ``expert_policy`` and
``num_episodes_average_score`` of ``create_dataset``, as Minari's ``DataCollector`` uses them.

Minari (``minari.utils._generate_dataset_metadata`` and ``get_average_reference_score``)
plays ``num_episodes_average_score`` episodes of the evaluation environment, the first reset
with ``seed=123`` and the others unseeded, and stores the mean episode return (as float32)
as ``ref_max_score`` (with ``expert_policy``) and, when a maximum is known and no
``ref_min_score`` is given, that of a random policy as ``ref_min_score``. Here the episodes
are played through a recorder of the dataset's own kind, so an episode's return is the sum
of exactly the team rewards the dataset stores (its ``reward_aggregation``); nothing of them
is written anywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from marl_minari.envs.make import describe_env, make_env, recreate_env
from marl_minari.envs.policies import RandomPolicy
from marl_minari.errors import DatasetExistsError, EnvDescriptorError, InvalidOptionError
from marl_minari.format.env_descriptor import Api, EnvDescriptor
from marl_minari.format.ids import dataset_dir
from marl_minari.format.returns import sequential_sums
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.journal_writer import JournalWriter

MINARI_SCORE_SEED = 123
"""The seed of the first reset of a reference run (Minari's ``get_average_reference_score``)."""

JointPolicy = Callable[[dict[str, Any]], Mapping[str, Any]]
"""An expert policy: observations by agent to actions by agent."""

RecorderFactory = Callable[..., Any]
"""A collector class (``ParallelDataCollector`` or ``AECDataCollector``)."""


@dataclass(frozen=True)
class ReferenceScores:
    """What ``create_dataset`` writes for the reference scores and the evaluation env.

    Attributes:
        metadata: top-level ``metadata.json`` keys: ``ref_min_score``, ``ref_max_score``,
            ``num_episodes_average_score`` (when scores are known) and ``eval_env_spec``
            (when an evaluation env is given).
    """

    metadata: dict[str, Any]


def eval_env_descriptor(eval_env: Any, api: Api) -> EnvDescriptor | None:
    """The descriptor of an ``eval_env`` given to ``create_dataset``.

    Args:
        eval_env: ``None``, a PettingZoo env (ideally made by :func:`marl_minari.make_env`),
            an env id :func:`marl_minari.make_env` accepts, or an :class:`EnvDescriptor`.
        api: the dataset's API.

    Raises:
        EnvDescriptorError: ``eval_env`` is none of these, or its id cannot be made.
    """
    if eval_env is None:
        return None
    if isinstance(eval_env, EnvDescriptor):
        return eval_env
    if isinstance(eval_env, str):
        env = make_env(eval_env, api)
        try:
            return describe_env(env, api)
        finally:
            env.close()
    if callable(getattr(eval_env, "reset", None)) and hasattr(eval_env, "possible_agents"):
        return describe_env(eval_env, api)
    raise EnvDescriptorError(
        f"eval_env must be a PettingZoo env, an env id or an EnvDescriptor, got "
        f"{type(eval_env).__name__}; pass e.g. marl_minari.make_env('mpe2/simple_spread_v3')")


def reference_scores(
    spec: MultiAgentSpec,
    recorder: RecorderFactory,
    *,
    dataset_id: str,
    eval_env: Any,
    ref_min_score: float | None,
    ref_max_score: float | None,
    expert_policy: JointPolicy | None,
    num_episodes_average_score: int,
) -> ReferenceScores:
    """Minari's reference-score rules for a multi-agent dataset recorded as ``spec``.

    Args:
        spec: the recording's spec (its env descriptor and ``reward_aggregation``).
        recorder: the collector class that plays the reference episodes.
        dataset_id: the dataset to be created: checked before any episode is played, so a
            taken or malformed id fails at once.
        eval_env: as for :func:`eval_env_descriptor`; the scoring env (the recorded env
            re-created by default). An env object is played as it is.
        ref_min_score, ref_max_score: given scores (Minari's).
        expert_policy: plays the episodes that give ``ref_max_score``.
        num_episodes_average_score: episodes averaged per score (Minari's default: 100).

    Raises:
        InvalidOptionError: both ``expert_policy`` and ``ref_max_score``, or fewer than one
            episode to average.
        EnvDescriptorError: the scoring env cannot be made.
        InvalidDatasetIdError, DatasetExistsError: scores are to be played for an id that
            is malformed or taken.
    """
    if expert_policy is not None and ref_max_score is not None:
        raise InvalidOptionError(
            "create_dataset: pass expert_policy or ref_max_score, not both (as Minari): the "
            "expert policy's average return becomes ref_max_score")
    if expert_policy is not None and not callable(expert_policy):
        raise InvalidOptionError(
            f"create_dataset: expert_policy must be callable (observations by agent -> actions "
            f"by agent), got {type(expert_policy).__name__}")
    descriptor = eval_env_descriptor(eval_env, spec.api)
    metadata: dict[str, Any] = {}
    if descriptor is not None:
        joint = replace(spec, env=descriptor).joint_env_spec()
        if joint is not None:
            metadata["eval_env_spec"] = joint.to_json()
    if expert_policy is None and ref_max_score is None:
        if ref_min_score is not None:
            metadata["ref_min_score"] = ref_min_score
        return ReferenceScores(metadata)
    if isinstance(num_episodes_average_score, bool) or not isinstance(
            num_episodes_average_score, int) or num_episodes_average_score < 1:
        raise InvalidOptionError(
            "create_dataset: num_episodes_average_score must be a positive int, got "
            f"{num_episodes_average_score!r}")
    if dataset_dir(dataset_id).exists():
        raise DatasetExistsError(
            f"dataset {dataset_id!r} already exists: choose another id (bump -vN); no "
            "reference episodes were played")
    env = eval_env if _is_env(eval_env) else _scoring_env(descriptor or spec.env, spec.api)
    owned = env is not eval_env
    try:
        if ref_min_score is None:
            ref_min_score = average_team_return(
                env, spec, recorder, _random_joint_policy(env), num_episodes_average_score)
        if expert_policy is not None:
            ref_max_score = average_team_return(env, spec, recorder, expert_policy,
                                                num_episodes_average_score)
    finally:
        if owned:
            env.close()
    metadata.update(ref_min_score=ref_min_score, ref_max_score=ref_max_score,
                    num_episodes_average_score=num_episodes_average_score)
    return ReferenceScores(metadata)


def average_team_return(env: Any, spec: MultiAgentSpec, recorder: RecorderFactory,
                        policy: JointPolicy, episodes: int) -> float:
    """Mean return over ``episodes`` episodes of ``policy`` in ``env``, as Minari computes it.

    The env is wrapped in ``recorder`` with the dataset's ``reward_aggregation``, so each
    episode's return is the sum of the team rewards a dataset would store; the recorder's
    journal is replaced by a sink, so nothing is written.
    """
    returns: list[float] = []

    def keep_return(episode: Any) -> None:
        rewards = episode.team_rewards
        returns.append(float(sequential_sums(rewards, [0], [len(rewards)])[0]))

    wrapped = recorder(env, episode_metadata_callback=keep_return, record_state=False,
                       jpeg_encoding=False, reward_aggregation=spec.reward_aggregation,
                       env_descriptor=spec.env or EnvDescriptor(api=spec.api, entry_point=None))
    wrapped._core.writer = JournalWriter(lambda episode, note: None)
    wrapped._core.autoseed = False  # unseeded resets go on from the env's state, as Minari's
    play = _play_parallel if spec.api == "parallel" else _play_aec
    for index in range(episodes):
        play(wrapped, policy, MINARI_SCORE_SEED if index == 0 else None)
    return float(np.mean(returns, dtype=np.float32))


def _play_parallel(env: Any, policy: JointPolicy, seed: int | None) -> None:
    observations, _ = env.reset(seed=seed)
    while env.agents:
        actions = policy(dict(observations))
        env.step({agent: actions[agent] for agent in env.agents})


def _play_aec(env: Any, policy: JointPolicy, seed: int | None) -> None:
    env.reset(seed=seed)
    for agent in env.agent_iter():
        observation, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else policy({agent: observation})[agent])


def _random_joint_policy(env: Any) -> JointPolicy:
    """Minari's ``RandomPolicy`` for every agent: a legal action drawn uniformly (the
    action mask, where the env gives one, decides what is legal)."""
    draw = RandomPolicy(MINARI_SCORE_SEED)
    return lambda observations: {agent: draw(env.action_space(agent), observation)
                                 for agent, observation in observations.items()}


def _is_env(value: Any) -> bool:
    return callable(getattr(value, "reset", None)) and hasattr(value, "possible_agents")


def _scoring_env(descriptor: EnvDescriptor | None, api: Api) -> Any:
    if descriptor is None or (descriptor.env_id is None and descriptor.entry_point is None):
        raise EnvDescriptorError(
            "create_dataset: the reference scores need an env to play, and this recording "
            "does not say how to make its env; pass eval_env= (a PettingZoo env or an id)")
    # The recording's (or the caller's) own env: the caller already runs its code.
    return recreate_env(descriptor, api, trust_remote_code=True)
