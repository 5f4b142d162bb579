"""README's examples cover every feature and the command-line examples use their own vault
paths (tests/test_docs.py runs them)."""

from __future__ import annotations

import re
from pathlib import Path

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
                    "combine_datasets", "split_dataset", "write_dataset", "trust_env_package",
                    "multi_agent_offline", "default_registry()}/"):
        assert feature in text, feature


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
