"""``collect``: record a PettingZoo env with a behaviour policy, the job behind the CLI."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tqdm.auto import tqdm

from marl_minari.descriptor import Api, make_env
from marl_minari.errors import EnvDescriptorError
from marl_minari.ids import dataset_dir
from marl_minari.policies import RandomPolicy
from marl_minari.reader import MultiAgentDataset

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
    progress: bool = False,
    **metadata: Any,
) -> MultiAgentDataset:
    """Record ``episodes`` episodes of ``env_id`` into a new dataset.

    Args:
        env_id: anything :func:`marl_minari.make_env` accepts.
        episodes: number of episodes; episode ``i`` is reset with ``seed + i``.
        seed: seed of the first episode, and of the policy's random generator.
        dataset_id: id of the new dataset (default: :func:`default_dataset_id`).
        api: ``"parallel"`` or ``"aec"``; default parallel, falling back to aec for
            turn-based environments.
        policy: ``policy(action_space, observation, info) -> action``; default
            :class:`~marl_minari.policies.RandomPolicy` (legal actions only).
        env_kwargs: keyword arguments for the env.
        jpeg_encoding: JPEG-encode image observations (as Minari does).
        record_infos: record per-agent info dicts.
        progress: show a progress bar.
        **metadata: Minari metadata for ``create_dataset`` (author, description, ...).
    """
    env_kwargs = dict(env_kwargs or {})
    env, api = _make(env_id, api, env_kwargs)
    policy = policy or RandomPolicy(seed)
    dataset_id = dataset_id or default_dataset_id(env_id)
    metadata.setdefault("algorithm_name", "random" if isinstance(policy, RandomPolicy) else None)
    metadata.setdefault("description", f"{episodes} episodes of {env_id} ({api} api)")
    collector = _collector(env, api, jpeg_encoding=jpeg_encoding, record_infos=record_infos)
    play = _play_parallel if api == "parallel" else _play_aec
    try:
        for episode in tqdm(range(episodes), desc=f"recording {env_id}", unit="ep",
                            disable=not progress):
            play(collector, policy, seed + episode)
        return collector.create_dataset(dataset_id, **metadata)
    finally:
        collector.close()


def _make(env_id: str, api: str | None, env_kwargs: dict[str, Any]) -> tuple[Any, Api]:
    if api is not None:
        if api not in ("parallel", "aec"):
            raise EnvDescriptorError(f"api must be 'parallel' or 'aec', got {api!r}")
        return make_env(env_id, api=api, **env_kwargs), api  # type: ignore[arg-type,return-value]
    try:
        return make_env(env_id, api="parallel", **env_kwargs), "parallel"
    except EnvDescriptorError as exc:
        if "turn-based" not in str(exc):
            raise
        return make_env(env_id, api="aec", **env_kwargs), "aec"


def _collector(env: Any, api: str, **kwargs: Any) -> Any:
    import marl_minari

    if api == "parallel":
        return marl_minari.ParallelDataCollector(env, **kwargs)
    return marl_minari.AECDataCollector(env, **kwargs)


def _play_parallel(env: Any, policy: Policy, seed: int) -> None:
    observations, infos = env.reset(seed=seed)
    while env.agents:
        actions = {a: policy(env.action_space(a), observations.get(a), infos.get(a))
                   for a in env.agents}
        observations, _, _, _, infos = env.step(actions)


def _play_aec(env: Any, policy: Policy, seed: int) -> None:
    env.reset(seed=seed)
    for agent in env.agent_iter():
        observation, _, terminated, truncated, info = env.last()
        action = None if terminated or truncated else policy(env.action_space(agent),
                                                             observation, info)
        env.step(action)
