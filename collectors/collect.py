"""``collect``: record a PettingZoo env with a behaviour policy, the job behind the CLI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from marl_minari.collectors.aec import AECDataCollector
from marl_minari.collectors.parallel import ParallelDataCollector
from tqdm.auto import tqdm

from marl_minari.envs.make import make_env
from marl_minari.envs.policies import RandomPolicy
from marl_minari.errors import (
    DatasetNotFoundError,
    EnvDescriptorError,
    InvalidOptionError,
)
from marl_minari.format.env_descriptor import Api
from marl_minari.format.ids import dataset_dir
from marl_minari.format.metadata import check_minari_metadata
from marl_minari.format.spec import check_state_encoding
from marl_minari.storage.dataset import MultiAgentDataset
from marl_minari.storage.writer import check_appendable, check_new_dataset

Policy = Callable[..., Any]


def default_dataset_id(env_id: str, policy_name: str = "random") -> str:
    """``<env namespace>/<policy>-vN`` with the first N not taken locally."""
    base = env_id.replace(":", "/").replace(".", "_").strip("/")
    parts = [p if len(p) >= 2 else f"{p}_" for p in base.split("/")]
    version = 0
    while dataset_dir(f"{'/'.join(parts)}/{policy_name}-v{version}").exists():
        version += 1
    return f"{'/'.join(parts)}/{policy_name}-v{version}"


def collect(
    env_id: str,
    episodes: int = 10,
    *,
    seed: int = 0,
    dataset_id: str | None = None,
    api: Api | str | None = None,
    policy: Policy | None = None,
    env_kwargs: dict[str, Any] | None = None,
    jpeg_encoding: bool = True,
    record_infos: bool = False,
    record_state: bool = True,
    state_encoding: str | None = None,
    append: bool = False,
    progress: bool = False,
    background_writing: bool = False,
    **metadata: Any,
) -> MultiAgentDataset:
    """Record ``episodes`` episodes of ``env_id`` into a new dataset (or an existing one).

    The dataset id is checked before the env is made: a malformed id, an id already taken
    (without ``append``) or a missing one (with ``append``) fails at once, with nothing
    recorded.

    Args:
        env_id: anything :func:`marl_minari.make_env` accepts.
        episodes: number of episodes; episode ``i`` is reset with ``seed + i``.
        seed: seed of the first episode, and of the policy's random generator.
        dataset_id: id of the new dataset (default: :func:`default_dataset_id`).
        api: ``"parallel"`` or ``"aec"``; default parallel, falling back to aec for
            turn-based environments.
        policy: ``policy(action_space, observation, info) -> action``; default
            :class:`~marl_minari.envs.policies.RandomPolicy` (legal actions only).
        env_kwargs: keyword arguments for the env.
        jpeg_encoding: JPEG-encode image observations (as Minari does).
        record_infos: record per-agent info dicts.
        record_state: record the env's global ``state()`` when it has one.
        state_encoding: how the state is stored (``"jpeg"``, ``"gzip"``, ``"lzf"``,
            ``"raw"``; default ``"jpeg"`` for image-like states with ``jpeg_encoding``,
            else ``"raw"``).
        append: add the episodes to the existing dataset ``dataset_id`` (whose env and
            spaces must match) instead of creating it; ``metadata`` is then ignored.
        progress: show a progress bar of steps and episodes, and the writing phase: how
            many finished episodes are durable (written by the background writer) so far.
        background_writing: write finished episodes on a background thread while the env
            steps (off by default; see the collectors' ``background_writing``).
        **metadata: Minari metadata for ``create_dataset`` (author, description, ...,
            ``extra_metadata``), checked before the env is made.

    Raises:
        InvalidDatasetIdError: ``dataset_id`` is malformed.
        DatasetExistsError: ``dataset_id`` exists and ``append`` is off.
        DatasetNotFoundError: ``append`` is on and ``dataset_id`` does not exist.
        IncompatibleSourcesError: ``append`` is on and the env, API, agents, spaces or
            state differ from the dataset's (before anything is recorded).
        EnvDescriptorError: the env cannot be made.
    """
    if episodes < 1:
        raise InvalidOptionError(f"episodes must be at least 1, got {episodes}")
    if state_encoding is not None:
        check_state_encoding(state_encoding, None)  # needs no env: its name is checked here
    check_minari_metadata({"extra" if key == "extra_metadata" else key: value
                           for key, value in metadata.items()})
    dataset_id = check_target(dataset_id, append=append) or default_dataset_id(env_id)
    env_kwargs = dict(env_kwargs or {})
    env, api = _make(env_id, api, env_kwargs)
    policy = policy or RandomPolicy(seed)
    metadata.setdefault("algorithm_name", "random" if isinstance(policy, RandomPolicy) else None)
    metadata.setdefault("description", f"{episodes} episodes of {env_id} ({api} api)")
    collector = _collector(env, api, jpeg_encoding=jpeg_encoding, record_infos=record_infos,
                           record_state=record_state, state_encoding=state_encoding,
                           background_writing=background_writing)
    play = _play_parallel if api == "parallel" else _play_aec
    try:
        if append:  # refused before any episode is played, by the rule the append applies
            check_appendable(dataset_dir(dataset_id) / "data", collector.spec, dataset_id)
        with tqdm(unit="step", disable=not progress) as bar:
            for episode in range(episodes):
                bar.set_description(f"recording {env_id}, episode {episode + 1}/{episodes}")
                play(collector, policy, seed + episode, bar.update)
                bar.set_postfix_str(_written(collector, episode + 1))
            if progress:
                bar.set_description(f"writing the last episodes of {env_id}")
            collector.flush()
            bar.set_postfix_str(_written(collector, episodes))
        if progress:
            tqdm.write(f"writing {episodes} episodes into {dataset_id}")
        if append:
            return collector.add_to_dataset(dataset_id)
        return collector.create_dataset(dataset_id, **metadata)
    finally:
        collector.close()


def _written(collector: Any, finished: int) -> str:
    """The writing phase, for the progress bar: finished episodes already durable."""
    return f"durable {collector.durable_episodes}/{finished} episodes"


def check_target(dataset_id: str | None, *, append: bool) -> str | None:
    """``dataset_id`` if it can be recorded into: well formed, and free (or, with
    ``append``, existing). ``None`` passes unless appending."""
    if dataset_id is None:
        if append:
            raise InvalidOptionError("appending needs the id of the dataset to append to")
        return None
    if not append:
        check_new_dataset(dataset_id, or_else="add the episodes to it with append=True "
                                              "(--append)")
        return dataset_id
    if not dataset_dir(dataset_id).exists():
        raise DatasetNotFoundError(
            f"dataset {dataset_id!r} does not exist, so there is nothing to append to: drop "
            "append (--append) to create it")
    return dataset_id


def _make(env_id: str, api: str | None, env_kwargs: dict[str, Any]) -> tuple[Any, Api]:
    apis: dict[str | None, Api] = {"parallel": "parallel", "aec": "aec"}
    if api in apis:
        return make_env(env_id, api=apis[api], **env_kwargs), apis[api]
    if api is not None:
        raise InvalidOptionError(f"api must be 'parallel' or 'aec', got {api!r}")
    try:
        return make_env(env_id, api="parallel", **env_kwargs), "parallel"
    except EnvDescriptorError as exc:
        if "turn-based" not in str(exc):
            raise
        return make_env(env_id, api="aec", **env_kwargs), "aec"


def _collector(env: Any, api: str, **kwargs: Any) -> Any:
    if api == "parallel":
        return ParallelDataCollector(env, **kwargs)
    return AECDataCollector(env, **kwargs)


def _play_parallel(env: Any, policy: Policy, seed: int, on_step: Callable[[], Any]) -> None:
    observations, infos = env.reset(seed=seed)
    while env.agents:
        actions = {a: policy(env.action_space(a), observations.get(a), infos.get(a))
                   for a in env.agents}
        observations, _, _, _, infos = env.step(actions)
        on_step()


def _play_aec(env: Any, policy: Policy, seed: int, on_step: Callable[[], Any]) -> None:
    env.reset(seed=seed)
    for agent in env.agent_iter():
        observation, _, terminated, truncated, info = env.last()
        action = None if terminated or truncated else policy(env.action_space(agent),
                                                             observation, info)
        env.step(action)
        on_step()
