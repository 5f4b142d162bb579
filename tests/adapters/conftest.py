"""Fixtures of the adapter tests: recorded datasets (cached per session), vault folders.

Also makes ``adapter_helpers`` importable in any import mode.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


# --------------------------------------------------------------------------- recordings


@pytest.fixture(scope="session")
def _recording_cache(tmp_path_factory: pytest.TempPathFactory,
                     random_play: Callable[..., Any]) -> Callable[..., Path]:
    root = tmp_path_factory.mktemp("recordings")
    made: dict[str, Path] = {}

    def record(env_id: str, episodes: int, jpeg: bool, kwargs: dict[str, Any]) -> Path:
        import marl_minari as mm

        key = json.dumps([env_id, episodes, jpeg, kwargs], sort_keys=True)
        if key in made:
            return made[key]
        dataset_id = f"cache/d{len(made)}-v0"
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("MINARI_DATASETS_PATH", str(root))
            collector = mm.ParallelDataCollector(mm.make_env(env_id, **kwargs),
                                                 jpeg_encoding=jpeg)
            random_play(collector, episodes)
            collector.create_dataset(dataset_id, algorithm_name="random", author="tests",
                                     author_email="tests@example.com",
                                     code_permalink="https://example.com/tests",
                                     description="recorded by the adapter tests")
            collector.close()
        made[key] = root / dataset_id
        return made[key]

    return record


@pytest.fixture
def recorded(_recording_cache: Callable[..., Path], datasets_root: Path) -> Callable[..., Any]:
    """``recorded(env_id, episodes=3, dataset_id="tests/recorded-v0", jpeg=True, **env_kw)``:
    a dataset recorded from a real env (once per session) placed under this test's root."""
    import marl_minari as mm

    def get(env_id: str, episodes: int = 3, dataset_id: str = "tests/recorded-v0",
            jpeg: bool = True, **kwargs: Any) -> Any:
        source = _recording_cache(env_id, episodes, jpeg, kwargs)
        namespace, _, name = dataset_id.rpartition("/")
        target = datasets_root / namespace / name
        target.parent.mkdir(parents=True, exist_ok=True)
        (target.parent / "namespace_metadata.json").write_text("{}")
        shutil.copytree(source, target)
        meta_path = target / "data" / "metadata.json"
        meta = json.loads(meta_path.read_text())
        meta["dataset_id"] = dataset_id
        meta_path.write_text(json.dumps(meta))
        return mm.load_dataset(dataset_id)

    return get


@pytest.fixture
def cartpole_dataset(datasets_root: Path, record_cartpole: Callable[..., Any]) -> Any:
    """A plain single-agent Minari dataset recorded with Minari's own ``DataCollector``."""
    return record_cartpole("tests/cartpole-v0", record_infos=True)


@pytest.fixture
def vaults(tmp_path: Path) -> Path:
    """An empty folder for vaults."""
    path = tmp_path / "vaults"
    path.mkdir()
    return path
