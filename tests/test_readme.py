"""README's examples run as written: each Python block alone, in a fresh process, in order,
against a fresh datasets root; the command-line examples use their own vault paths."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
OG_MARL_VAULT = re.compile(r"vaults/[\w.-]+/[\w.-]+/[\w.-]+\.vlt/[\w.-]+")
"""OG-MARL's vault paths: ``vaults/<source>/<env>/<scenario>.vlt/<uid>``."""


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_examples_for_every_feature() -> None:
    text = "\n".join(blocks("python"))
    for feature in ("ParallelDataCollector", "AECDataCollector", "to_vault", "from_vault",
                    "make_buffer", "describe", "registry.publish", "minari.load_dataset",
                    "read_dataset", "export_rllib", "make_torchrl_buffer", "check_dataset",
                    "combine_datasets", "split_dataset", "trust_env_package",
                    "multi_agent_offline", "default_registry()}/"):
        assert feature in text, feature


def run_alone(number: int, block: str, folder: Path) -> None:
    """Run one block as a script of its own, the way a user pastes it into a fresh Python."""
    script = folder / f"readme_block_{number}.py"
    script.write_text(block)
    env = {**os.environ, "MARL_MINARI_REGISTRY": str(folder / "registry")}
    done = subprocess.run([sys.executable, str(script)], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"README block {number}:\n{block}\n{done.stderr[-3000:]}"


def test_readme_python_examples_run(tmp_path: Path) -> None:
    """Every block but the Ray one, each in its own process, with the core install."""
    for number, block in enumerate(blocks("python")):
        if "import ray" not in block:
            run_alone(number, block, tmp_path)
    assert (tmp_path / "compare.png").stat().st_size > 0
    assert (tmp_path / "registry").exists()
    assert (tmp_path / "vaults" / "mpe2" / "spread" / "readme-v0.vlt" / "Random").is_dir()


def test_readme_ray_example_runs(tmp_path: Path) -> None:
    """The Ray block, in its own process after the recording block it reads; needs the
    ``ray`` extra, which CI installs."""
    pytest.importorskip("ray", reason="README's Ray example needs: pip install -e '.[ray]'")
    python = blocks("python")
    run_alone(0, python[0], tmp_path)
    ray_block = next(i for i, block in enumerate(python) if "import ray" in block)
    run_alone(ray_block, python[ray_block], tmp_path)
    assert any((tmp_path / "rllib-data").rglob("*.parquet"))


def test_readme_vault_paths_are_distinct_and_og_marl_style() -> None:
    """Running the Python examples and then the command-line ones never writes one vault
    twice, and every vault path follows OG-MARL's convention."""
    python = "\n".join(blocks("python"))
    python_vaults = {f"vaults/{name}/{uid}" for name, uid in  # the vaults the examples read
                     re.findall(r'Vault\("([^"]+)", rel_dir="vaults",\s*vault_uid="([^"]+)"\)',
                                python)}
    cli_vaults = {m for line in "\n".join(blocks("bash")).splitlines()
                  if "convert" in line for m in OG_MARL_VAULT.findall(line)}
    assert python_vaults and cli_vaults
    for path in python_vaults | cli_vaults:
        assert OG_MARL_VAULT.fullmatch(path), path
    assert not python_vaults & cli_vaults
