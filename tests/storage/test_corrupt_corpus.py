"""A corpus of damaged datasets: every entry point raises a MarlMinariError or reads correctly.

Each case damages a freshly recorded real dataset one way (truncation, flipped bytes, missing
groups, wrong dtypes or row counts, metadata of wrong types, missing keys, bad JSON, a damaged
index) and every public call that reads a dataset is run on it. A built-in exception escaping
(``KeyError`` with HDF5 internals, ``TypeError`` from numpy, ``JSONDecodeError``) fails the test.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

import marl_minari as mm
from marl_minari.errors import MarlMinariError

DATASET = "corpus/spread-v0"


def _main(data: Path) -> Path:
    return data / "main_data.hdf5"


def _truncate(keep: float) -> Callable[[Path], None]:
    def damage(data: Path) -> None:
        path = _main(data)
        with open(path, "r+b") as handle:
            handle.truncate(int(path.stat().st_size * keep))
    return damage


def _flip(seed: int) -> Callable[[Path], None]:
    def damage(data: Path) -> None:
        path = _main(data)
        raw = bytearray(path.read_bytes())
        rng = np.random.default_rng(seed)
        for position in rng.integers(0, len(raw), 64):
            raw[int(position)] ^= 0xFF
        path.write_bytes(bytes(raw))
    return damage


def _h5(edit: Callable[[h5py.File], None]) -> Callable[[Path], None]:
    def damage(data: Path) -> None:
        with h5py.File(_main(data), "r+") as file:
            edit(file)
    return damage


def _replace(name: str, make: Callable[[np.ndarray], np.ndarray]) -> Callable[[h5py.File], None]:
    def edit(file: h5py.File) -> None:
        data = file[name][()]
        del file[name]
        file[name] = make(data)
    return edit


def _metadata(edit: Callable[[dict], None]) -> Callable[[Path], None]:
    def damage(data: Path) -> None:
        path = data / "metadata.json"
        metadata = json.loads(path.read_text())
        edit(metadata)
        path.write_text(json.dumps(metadata))
    return damage


def _set(*keys: str, value: Any) -> Callable[[dict], None]:
    def edit(metadata: dict) -> None:
        node = metadata
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return edit


def _drop(*keys: str) -> Callable[[dict], None]:
    def edit(metadata: dict) -> None:
        node = metadata
        for key in keys[:-1]:
            node = node[key]
        del node[keys[-1]]
    return edit


def _text(name: str, text: str) -> Callable[[Path], None]:
    def damage(data: Path) -> None:
        (data / name).write_text(text)
    return damage


CASES: dict[str, Callable[[Path], None]] = {
    "truncated-1%": _truncate(0.01), "truncated-50%": _truncate(0.5),
    "truncated-99%": _truncate(0.99),
    **{f"flipped-{seed}": _flip(seed) for seed in range(4)},
    "missing-episode": _h5(lambda f: f.__delitem__("episode_1")),
    "missing-marl-group": _h5(lambda f: f.__delitem__("episode_0/infos/marl")),
    "missing-observations": _h5(lambda f: f.__delitem__("episode_2/observations/agent_1")),
    "rewards-as-text": _h5(_replace("episode_1/infos/marl/rewards",
                                    lambda a: np.full(a.shape, "x", dtype="S1"))),
    "actions-as-float": _h5(_replace("episode_0/actions/agent_0",
                                     lambda a: a.astype(np.float32))),
    "observations-T-rows": _h5(_replace("episode_1/observations/agent_2", lambda a: a[:-1])),
    "active-one-row": _h5(_replace("episode_2/infos/marl/active", lambda a: a[:1])),
    "total-steps-attr-text": _h5(lambda f: f["episode_1"].attrs.__setitem__("total_steps",
                                                                           "many")),
    "total-episodes-text": _metadata(_set("total_episodes", value="four")),
    "total-episodes-more": _metadata(_set("total_episodes", value=9)),
    "total-steps-null": _metadata(_set("total_steps", value=None)),
    "agents-not-a-list": _metadata(_set("marl_minari", "possible_agents", value=5)),
    "agents-unknown": _metadata(_set("marl_minari", "possible_agents", value=["a", "b", "c"])),
    "marl-is-a-list": _metadata(_set("marl_minari", value=[])),
    "env-is-text": _metadata(_set("marl_minari", "env", value="os:system")),
    "state-space-garbage": _metadata(_set("marl_minari", "state_space", value={"type": 3})),
    "observation-space-garbage": _metadata(_set("observation_space", value=[1, 2])),
    "api-missing": _metadata(_drop("marl_minari", "api")),
    "agents-missing": _metadata(_drop("marl_minari", "possible_agents")),
    "observation-space-missing": _metadata(_drop("observation_space")),
    "total-steps-missing": _metadata(_drop("total_steps")),
    "aggregation-bogus": _metadata(_set("marl_minari", "reward_aggregation", value="median")),
    "metadata-bad-json": _text("metadata.json", "{\"total_episodes\": 3,"),
    "metadata-a-list": _text("metadata.json", "[1, 2, 3]"),
    "index-garbage": _text("marl_minari_index.npz", "not a zip file"),
    "data-file-missing": lambda data: _main(data).unlink(),
    "minari-version-future": _metadata(_set("minari_version", value="9.9.9")),
    "author-a-number": _metadata(_set("author", value=123)),
    "author-email-a-number": _metadata(_set("author_email", value=123)),
    "ragged-agent-infos": _h5(_replace("episode_1/infos/marl/active", lambda a: a[:, :1])),
}


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """One recorded dataset (folder copy and its arrays), reused by every case."""
    import os

    import marl_minari as mm
    from marl_minari.format.ids import using_datasets_root

    root = tmp_path_factory.mktemp("pristine")
    os.environ.setdefault("MINARI_DATASETS_PATH", str(root))
    with using_datasets_root(root):
        env = mm.ParallelDataCollector(mm.make_env("mpe2/simple_spread_v3", max_cycles=4))
        for episode in range(3):
            env.reset(seed=episode)
            while env.agents:
                env.step({a: env.action_space(a).sample() for a in env.agents})
        dataset = env.create_dataset(DATASET, algorithm_name="random", author="tests",
                                     author_email="tests@example.com",
                                     code_permalink="https://example.com/tests")
        arrays = dataset.to_arrays()
    return root / DATASET, arrays


def _calls(tmp_path: Path) -> dict[str, Callable[[], Any]]:
    from marl_minari.adapters import to_vault

    from marl_minari import registry
    from marl_minari.cli import app

    def info() -> None:
        result = CliRunner().invoke(app, ["info", DATASET])
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception

    return {
        "load": lambda: mm.load_dataset(DATASET),
        "to_arrays": lambda: mm.load_dataset(DATASET).to_arrays(),
        "episode": lambda: mm.load_dataset(DATASET).episode(1),
        "describe": lambda: mm.describe(DATASET),
        "info": info,
        "to_vault": lambda: to_vault(DATASET, rel_dir=tmp_path / "vaults", vault_name="v"),
        "publish": lambda: registry.publish(DATASET, str(tmp_path / "registry")),
        "check": lambda: mm.check_dataset(DATASET),
    }


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_call_raises_a_typed_error_or_reads_correctly(
        case: str, pristine: tuple[Path, Any], datasets_root: Path, tmp_path: Path) -> None:
    source, expected = pristine
    target = datasets_root / DATASET
    shutil.copytree(source, target)
    CASES[case](target / "data")
    untyped = {}
    for name, call in _calls(tmp_path).items():
        try:
            result = call()
        except MarlMinariError:
            continue
        except Exception as exc:  # noqa: BLE001 - the point of the corpus
            untyped[name] = f"{type(exc).__name__}: {exc}"[:300]
            continue
        if name == "to_arrays":
            assert np.array_equal(result.episode_lengths, expected.episode_lengths), case
    assert not untyped, f"{case}: untyped errors {untyped}"
