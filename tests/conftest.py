"""Shared fixtures: an isolated Minari datasets root and recorded datasets from real envs."""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

# Shared test helpers (strategies, the spec writer, durability children) live in tests/support.
_SUPPORT = str(Path(__file__).resolve().parent / "support")
if _SUPPORT not in sys.path:
    sys.path.insert(0, _SUPPORT)

from random_play import play_random_episodes  # noqa: E402

os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

TEST_METADATA = {"algorithm_name": "random", "author": "tests",
                 "author_email": "tests@example.com", "code_permalink": "https://example.com/tests"}
"""Minari metadata of every dataset the fixtures below record."""


@pytest.fixture(autouse=True)
def datasets_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own empty ``MINARI_DATASETS_PATH``."""
    root = tmp_path / "minari-datasets"
    root.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    yield root


@pytest.fixture(scope="session")
def random_play() -> Callable[..., list[dict[str, Any]]]:
    """:func:`play_parallel`, for the fixtures of other conftest files (which cannot import
    this one under ``--import-mode=importlib``)."""
    return play_parallel


def play_parallel(env: Any, episodes: int, seed: int = 0) -> list[dict[str, Any]]:
    """Play ``episodes`` random episodes; return what the env handed out per episode.

    Each record has ``returns`` ({agent: sum of rewards}), ``steps`` (env steps),
    ``agent_steps`` ({agent: actions taken}) and ``seed``.
    """
    records = []
    for episode in range(episodes):
        episode_seed = seed + episode
        env.reset(seed=episode_seed)
        rng = np.random.default_rng(episode_seed)
        returns = {a: 0.0 for a in env.possible_agents}
        agent_steps = {a: 0 for a in env.possible_agents}
        steps = 0
        while env.agents:
            actions = {}
            for agent in env.agents:
                space = env.action_space(agent)
                space.seed(int(rng.integers(2**31)))
                actions[agent] = space.sample()
                agent_steps[agent] += 1
            _, rewards, _, _, _ = env.step(actions)
            for agent, reward in rewards.items():
                returns[agent] += float(reward)
            steps += 1
        records.append({"returns": returns, "steps": steps, "agent_steps": agent_steps,
                        "seed": episode_seed})
    return records


@pytest.fixture
def record_parallel() -> Callable[..., tuple[Any, list[dict[str, Any]]]]:
    """Record random episodes of a real env: ``record_parallel(env_id, episodes, **kw)``.

    Returns ``(MultiAgentDataset, records)`` where ``records`` come from :func:`play_parallel`.
    Keyword arguments starting with ``collector_`` go to the collector, the rest to
    ``make_env``; ``dataset_id`` picks the id.
    """
    import marl_minari as mm

    def record(env_id: str, episodes: int = 3, dataset_id: str = "tests/recorded-v0",
               **kwargs: Any) -> tuple[Any, list[dict[str, Any]]]:
        collector_kwargs = {k[len("collector_"):]: v for k, v in kwargs.items()
                            if k.startswith("collector_")}
        env_kwargs = {k: v for k, v in kwargs.items() if not k.startswith("collector_")}
        collector = mm.ParallelDataCollector(mm.make_env(env_id, **env_kwargs),
                                             **collector_kwargs)
        records = play_parallel(collector, episodes)
        dataset = collector.create_dataset(dataset_id, description="recorded by the test suite",
                                           **TEST_METADATA)
        collector.close()
        return dataset, records

    return record


@pytest.fixture(scope="session")
def _recording_cache(tmp_path_factory: pytest.TempPathFactory
                     ) -> Callable[..., tuple[Path, list[dict[str, Any]]]]:
    """``cache(env_id, episodes, collector_kwargs, env_kwargs)`` -> ``(dataset folder, play
    records)``: each distinct recording is made once per session, in a root of its own."""
    import marl_minari as mm

    root = tmp_path_factory.mktemp("recordings")
    made: dict[str, tuple[Path, list[dict[str, Any]]]] = {}

    def record(env_id: str, episodes: int, collector_kwargs: dict[str, Any],
               env_kwargs: dict[str, Any]) -> tuple[Path, list[dict[str, Any]]]:
        key = json.dumps([env_id, episodes, collector_kwargs, env_kwargs], sort_keys=True)
        if key not in made:
            dataset_id = f"cache/d{len(made)}-v0"
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv("MINARI_DATASETS_PATH", str(root))
                collector = mm.ParallelDataCollector(mm.make_env(env_id, **env_kwargs),
                                                     **collector_kwargs)
                records = play_parallel(collector, episodes)
                collector.create_dataset(dataset_id, description="recorded by the test suite",
                                         **TEST_METADATA)
                collector.close()
            made[key] = (root / dataset_id, records)
        return made[key]

    return record


def place_dataset(source: Path, dataset_id: str, root: Path) -> None:
    """Copy the dataset folder ``source`` under ``root`` as ``dataset_id``."""
    namespace, _, name = dataset_id.rpartition("/")
    target = root / namespace / name
    target.parent.mkdir(parents=True, exist_ok=True)
    (target.parent / "namespace_metadata.json").write_text("{}")
    shutil.copytree(source, target)
    meta_path = target / "data" / "metadata.json"
    meta = json.loads(meta_path.read_text())
    meta["dataset_id"] = dataset_id
    meta_path.write_text(json.dumps(meta))


@pytest.fixture
def recorded_parallel(_recording_cache: Callable[..., tuple[Path, list[dict[str, Any]]]],
                      datasets_root: Path) -> Callable[..., tuple[Any, list[dict[str, Any]]]]:
    """:func:`record_parallel` (same arguments, same result) for tests that only read the
    dataset: each distinct recording is made once per session and copied into this test's
    datasets root under the id asked for."""
    import marl_minari as mm

    def get(env_id: str, episodes: int = 3, dataset_id: str = "tests/recorded-v0",
            **kwargs: Any) -> tuple[Any, list[dict[str, Any]]]:
        collector_kwargs = {k[len("collector_"):]: v for k, v in kwargs.items()
                            if k.startswith("collector_")}
        env_kwargs = {k: v for k, v in kwargs.items() if not k.startswith("collector_")}
        source, records = _recording_cache(env_id, episodes, collector_kwargs, env_kwargs)
        place_dataset(source, dataset_id, datasets_root)
        return mm.load_dataset(dataset_id), records

    return get


@pytest.fixture
def recorded(recorded_parallel: Callable[..., tuple[Any, list[dict[str, Any]]]]
             ) -> Callable[..., Any]:
    """``recorded(env_id, episodes=3, dataset_id="tests/recorded-v0", jpeg=True, **env_kw)``:
    a dataset recorded from a real env (once per session) placed under this test's root."""

    def get(env_id: str, episodes: int = 3, dataset_id: str = "tests/recorded-v0",
            jpeg: bool = True, **kwargs: Any) -> Any:
        return recorded_parallel(env_id, episodes, dataset_id, collector_jpeg_encoding=jpeg,
                                 **kwargs)[0]

    return get


@pytest.fixture(scope="session")
def record_tictactoe() -> Callable[..., Any]:
    """Random legal tic-tac-toe games through ``AECDataCollector``:
    ``record_tictactoe(dataset_id, games)`` -> ``MultiAgentDataset`` (game ``g`` uses seed ``g``).
    """
    import marl_minari as mm

    def record(dataset_id: str, games: int) -> Any:
        env = mm.AECDataCollector(mm.make_env("classic/tictactoe-v3", api="aec"))
        for game in range(games):
            env.reset(seed=game)
            rng = np.random.default_rng(game)
            for _ in env.agent_iter():
                observation, _, terminated, truncated, _ = env.last()
                env.step(None if terminated or truncated else int(
                    rng.choice(np.flatnonzero(observation["action_mask"]))))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dataset = env.create_dataset(dataset_id, description="tic-tac-toe", **TEST_METADATA)
        env.close()
        return dataset

    return record


@pytest.fixture(scope="session")
def record_cartpole() -> Callable[..., Any]:
    """Whole random CartPole episodes recorded by Minari's own ``DataCollector``:
    ``record_cartpole(dataset_id, episodes=3, *, record_infos=False, max_episode_steps=None)``
    -> ``MinariDataset`` (a plain single-agent dataset; episode ``e`` uses seed ``e``).
    """

    def record(dataset_id: str, episodes: int = 3, *, record_infos: bool = False,
               max_episode_steps: int | None = None) -> Any:
        import gymnasium as gym
        import minari

        env = minari.DataCollector(gym.make("CartPole-v1", max_episode_steps=max_episode_steps),
                                   record_infos=record_infos)
        play_random_episodes(env, episodes)
        dataset = env.create_dataset(dataset_id, description="random CartPole", **TEST_METADATA)
        env.close()
        return dataset

    return record


@pytest.fixture
def hashed_bytes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts every byte fed to a digest from here on (the real hashing still runs)."""
    from marl_minari.format.digests import MultiHash

    counts: list[int] = []
    update = MultiHash.update

    def counting(self: MultiHash, data: Any) -> None:
        counts.append(len(memoryview(data)))
        update(self, data)

    monkeypatch.setattr(MultiHash, "update", counting)
    yield counts
