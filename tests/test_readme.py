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
                    "make_buffer", "describe", "registry.publish", "minari.load_dataset"):
        assert feature in text, feature


def test_readme_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MARL_MINARI_REGISTRY", str(tmp_path / "registry"))
    namespace: dict[str, object] = {"__name__": "__readme__"}
    for number, block in enumerate(python_blocks()):
        exec(compile(block, f"README.md block {number}", "exec"), namespace)  # noqa: S102
    assert (tmp_path / "compare.png").stat().st_size > 0
    assert (tmp_path / "registry").exists()
