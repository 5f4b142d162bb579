"""README's Python examples run as written, in order, against a fresh datasets root."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples_for_every_feature() -> None:
    text = "\n".join(python_blocks())
    for feature in ("ParallelDataCollector", "AECDataCollector", "to_vault", "from_vault",
                    "make_buffer", "describe", "registry.publish", "minari.load_dataset",
                    "read_dataset", "export_rllib", "make_torchrl_buffer"):
        assert feature in text, feature


def run_blocks(blocks: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MARL_MINARI_REGISTRY", str(tmp_path / "registry"))
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for number, block in enumerate(blocks):
        exec(compile(block, f"README.md block {number}", "exec"), namespace)  # noqa: S102


def test_readme_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block but the Ray one, in order, with the core install."""
    run_blocks([b for b in python_blocks() if "import ray" not in b], tmp_path, monkeypatch)
    assert (tmp_path / "compare.png").stat().st_size > 0
    assert (tmp_path / "registry").exists()


def test_readme_ray_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every block including Ray's; needs the ``ray`` extra, which CI installs."""
    ray = pytest.importorskip("ray", reason="README's Ray example needs: pip install -e '.[ray]'")
    if ray.is_initialized():  # the example starts its own Ray, as a user's script would
        ray.shutdown()
    run_blocks(python_blocks(), tmp_path, monkeypatch)
    assert any((tmp_path / "rllib-data").rglob("*.parquet"))
