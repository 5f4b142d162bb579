"""Re-creating a dataset's environment never imports or runs what an untrusted author named."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import minari
import pytest

import marl_minari as mm
from marl_minari.envs import resolve as resolve_module
from marl_minari.envs.make import recreate_env
from marl_minari.errors import EnvDescriptorError

DATASET = "trust/hostile-v0"


@pytest.fixture(autouse=True)
def _no_trust_left_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resolve_module, "_TRUSTED_BY_CALL", set())
    monkeypatch.delenv(resolve_module.TRUSTED_ENV_PACKAGES_VAR, raising=False)


def _hostile(record_parallel: Callable[..., Any], entry: dict[str, Any]) -> Any:
    """A real recorded dataset whose both descriptor copies were rewritten by its author."""
    dataset, _ = record_parallel("mpe2/simple_spread_v3", 1, dataset_id=DATASET, max_cycles=3)
    _rewrite(dataset, entry)
    return dataset


def _rewrite(dataset: Any, entry: dict[str, Any]) -> None:
    """Rewrite both descriptor copies of ``dataset``'s metadata to name ``entry``."""
    path = Path(dataset.data_path) / "metadata.json"
    metadata = json.loads(path.read_text())
    hostile = {"api": "parallel", "entry_point": None, "env_id": None, "kwargs": {},
               "versions": {}, "kwargs_known": True, **entry}
    metadata["marl_minari"]["env"] = hostile
    env_spec = json.loads(metadata["env_spec"])
    env_spec["kwargs"]["descriptor"] = hostile
    metadata["env_spec"] = json.dumps(env_spec)
    path.write_text(json.dumps(metadata))


def test_a_dataset_naming_os_system_runs_nothing(record_parallel: Callable[..., Any],
                                                 tmp_path: Path) -> None:
    marker = tmp_path / "X"
    _hostile(record_parallel, {"entry_point": "os:system",
                               "kwargs": {"command": f"touch {marker}"}})
    with pytest.raises(EnvDescriptorError, match=r"'os:system'.*trust_remote_code=True"):
        mm.load_dataset(DATASET).recover_environment()
    with pytest.raises(EnvDescriptorError, match="trust_env_package\\('os'\\)"):
        minari.load_dataset(DATASET).recover_environment()
    from minari.cli import app
    from typer.testing import CliRunner

    CliRunner().invoke(app, ["show", DATASET])
    assert not marker.exists()


def test_trusting_explicitly_still_demands_a_pettingzoo_env(
        record_parallel: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _hostile(record_parallel, {"entry_point": "collections:OrderedDict"})
    dataset = mm.load_dataset(DATASET)
    with pytest.raises(EnvDescriptorError, match="not a trusted environment package"):
        dataset.recover_environment()
    with pytest.raises(EnvDescriptorError, match="returned a OrderedDict, not a PettingZoo"):
        dataset.recover_environment(trust_remote_code=True)
    monkeypatch.setenv("MARL_MINARI_TRUSTED_ENV_PACKAGES", "numpy, collections")
    with pytest.raises(EnvDescriptorError, match="not a PettingZoo"):
        dataset.recover_environment()
    monkeypatch.delenv("MARL_MINARI_TRUSTED_ENV_PACKAGES")
    mm.trust_env_package("collections")
    assert "collections" in mm.trusted_env_packages()
    with pytest.raises(EnvDescriptorError, match="not a PettingZoo"):
        minari.load_dataset(DATASET).recover_environment()


@pytest.mark.parametrize("env_id", ["antigravity/fly_v0", "this.that/x_v1"])
def test_family_ids_outside_the_trusted_packages_are_not_imported(
        record_parallel: Callable[..., Any], env_id: str) -> None:
    import sys

    _hostile(record_parallel, {"env_id": env_id})
    with pytest.raises(EnvDescriptorError, match="not a trusted environment package"):
        mm.load_dataset(DATASET).recover_environment()
    assert "antigravity" not in sys.modules  # importing it would open a web browser


def test_trusted_ids_and_entry_points_still_work(record_parallel: Callable[..., Any]) -> None:
    dataset, _ = record_parallel("mpe2/simple_spread_v3", 1, dataset_id="trust/ok-v0",
                                 max_cycles=3)
    env = dataset.recover_environment()
    assert env.possible_agents == list(dataset.possible_agents)
    joint = minari.load_dataset("trust/ok-v0").recover_environment()
    assert set(joint.observation_space.spaces) == set(dataset.possible_agents)
    entry = mm.EnvDescriptor(api="parallel", entry_point="mpe2.simple_spread_v3:parallel_env")
    assert recreate_env(entry).possible_agents == env.possible_agents
    chess = mm.EnvDescriptor(api="aec", entry_point=None, env_id="classic/tictactoe-v3")
    assert recreate_env(chess).possible_agents == ["player_1", "player_2"]


def test_download_warns_about_and_strict_refuses_untrusted_env_code(
        record_parallel: Callable[..., Any], tmp_path: Path) -> None:
    import shutil

    from typer.testing import CliRunner

    from marl_minari import registry
    from marl_minari.cli import app
    from marl_minari.format.ids import dataset_dir

    marker = tmp_path / "X"
    _hostile(record_parallel, {"entry_point": "os:system",
                               "kwargs": {"command": f"touch {marker}"}})
    remote = str(tmp_path / "registry")
    registry.publish(DATASET, remote)
    shutil.rmtree(dataset_dir(DATASET))
    with pytest.raises(EnvDescriptorError, match="os:system.*Not downloaded"):
        registry.download(DATASET, remote, strict=True)
    assert not dataset_dir(DATASET).exists()
    result = CliRunner().invoke(app, ["download", DATASET, "--remote", remote,
                                             "--strict"])
    assert result.exit_code != 0 and "os:system" in result.output
    assert not dataset_dir(DATASET).exists()
    with pytest.warns(UserWarning, match="marl_minari.env.entry_point: os:system"):
        registry.download(DATASET, remote)
    assert dataset_dir(DATASET).exists() and not marker.exists()


def test_untrusted_env_references_lists_every_copy() -> None:
    from marl_minari.envs.resolve import untrusted_env_references

    hostile = {"api": "parallel", "entry_point": "os:system", "env_id": None}
    metadata = {"marl_minari": {"env": hostile},
                "env_spec": json.dumps({"entry_point": "evil:Env",
                                        "kwargs": {"descriptor": hostile}})}
    listed = untrusted_env_references(metadata)
    assert [line.split(" (")[0] for line in listed] == [
        "env_spec.entry_point: evil:Env", "marl_minari.env.entry_point: os:system",
        "env_spec.kwargs.descriptor.entry_point: os:system"]
    assert all("not a trusted environment package" in line for line in listed[1:])
    plain = {"env_spec": json.dumps({"entry_point": "gymnasium.envs:CartPoleEnv"})}
    assert untrusted_env_references(plain) == []  # Minari's own behaviour, documented
    trusted = {"marl_minari": {"env": {"env_id": "classic/chess-v6", "entry_point": "x:y"}}}
    assert untrusted_env_references(trusted) == []


SHADOW = """
import pathlib
pathlib.Path({marker!r}).write_text("imported")

def parallel_env(**kwargs):
    raise SystemExit("the shadowing package ran")

env = parallel_env
"""


def _shadowing_package(folder: Path, family: str, marker: Path) -> None:
    """A top-level package ``family`` holding ``evil_v1``, as an attacker leaves in the working
    directory (which Python searches first) beside a dataset that names it."""
    package = folder / family
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "evil_v1.py").write_text(SHADOW.format(marker=str(marker)))


@pytest.mark.parametrize("family", ["classic", "utils"])
@pytest.mark.parametrize("named", ["env_id", "entry_point"])
def test_a_package_shadowing_a_pettingzoo_family_is_never_imported(
        record_parallel: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        family: str, named: str) -> None:
    marker = tmp_path / "imported"
    _shadowing_package(tmp_path, family, marker)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    reference = (f"{family}/evil_v1" if named == "env_id"
                 else f"{family}.evil_v1:parallel_env")
    _hostile(record_parallel, {named: reference})
    with pytest.raises(EnvDescriptorError, match="refusing to re-create"):
        mm.load_dataset(DATASET).recover_environment()
    with pytest.raises(EnvDescriptorError, match="refusing to re-create"):
        minari.load_dataset(DATASET).recover_environment()
    listed = resolve_module.untrusted_env_references(json.loads(
        (Path(mm.load_dataset(DATASET).data_path) / "metadata.json").read_text()))
    assert any(reference in line for line in listed), listed  # the download warning names it
    assert not marker.exists()


def test_a_user_typed_id_never_picks_a_package_shadowing_a_pettingzoo_family(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported"
    _shadowing_package(tmp_path, "classic", marker)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(EnvDescriptorError, match=r"'classic' family has no evil_v1.*"
                                                 r"classic\.evil_v1:parallel_env"):
        mm.make_env("classic/evil_v1")
    assert not marker.exists()
    with pytest.raises(SystemExit, match="the shadowing package ran"):
        mm.make_env("classic.evil_v1:parallel_env")  # named explicitly: the user's choice
    assert marker.exists()


def test_a_trusted_module_cannot_be_a_stepping_stone_to_other_code(
        record_parallel: Callable[..., Any], tmp_path: Path) -> None:
    import pettingzoo.classic.go.go as go

    assert go.os.system  # the module imports os: its attributes reach os.system
    marker = tmp_path / "X"
    dataset = _hostile(record_parallel, {"entry_point": "pettingzoo.classic.go.go:os.system",
                                         "kwargs": {"command": f"touch {marker}"}})
    with pytest.raises(EnvDescriptorError, match="not one name"):
        mm.load_dataset(DATASET).recover_environment()
    _rewrite(dataset, {"entry_point": "pettingzoo.classic.go.go:EzPickle", "kwargs": {}})
    with pytest.raises(EnvDescriptorError, match="outside the trusted packages|not callable"):
        mm.load_dataset(DATASET).recover_environment()
    assert not marker.exists()
