"""Flashbax vaults as sources (OG-MARL's and this library's; ``docs/adapters.md``)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from marl_minari.format.ids import using_datasets_root
from marl_minari.sources.base import DatasetSource, EpisodeAttributes
from marl_minari.sources.folders import FolderSource
from marl_minari.storage.arrays import MultiAgentArrays

VAULT_METADATA_FILE: Final = "metadata.json"
_IMPORTED_ID: Final = "vault/imported-v0"


def is_vault(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a vault folder (``metadata.json`` with a ``structure_shape``)."""
    meta = Path(path) / VAULT_METADATA_FILE
    try:
        document = json.loads(meta.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):  # none, or not readable
        return False
    return isinstance(document, dict) and "structure_shape" in document


def vault_path_parts(path: str | os.PathLike[str]) -> tuple[Path, str, str]:
    """Split a vault folder ``rel_dir/vault_name/vault_uid`` into its three parts."""
    resolved = Path(path).resolve()
    return resolved.parent.parent, resolved.parent.name, resolved.name


class VaultSource(DatasetSource):
    """The episodes of a Flashbax vault folder (``rel_dir/vault_name/vault_uid``).

    Args:
        path: the vault folder.
        vault_options: how to read a vault not written by this library (see
            :func:`marl_minari.adapters.from_vault`).
    """

    def __init__(self, path: Path, vault_options: dict[str, Any] | None = None) -> None:
        from marl_minari.adapters import from_vault

        self.vault_path = Path(path).resolve()
        self._root = Path(tempfile.mkdtemp(prefix="marl-minari-vault-"))
        self._cleanup = weakref.finalize(self, shutil.rmtree, self._root, True)
        rel_dir, vault_name, vault_uid = vault_path_parts(self.vault_path)
        with using_datasets_root(self._root):
            imported = from_vault(rel_dir, vault_name, vault_uid, _IMPORTED_ID,
                                  **dict(vault_options or {}))
        self._imported = FolderSource(str(self.vault_path), imported.data_path)
        super().__init__(str(self.vault_path), "vault", self._imported.spec,
                         self._imported.metadata, self._imported.episode_indices)

    def _stored_lengths(self, ids: np.ndarray) -> np.ndarray:
        return self._imported._stored_lengths(ids)

    def episode_attributes(self, ids: Sequence[int] | np.ndarray) -> list[EpisodeAttributes]:
        return self._imported.episode_attributes(ids)

    def read(self, ids: Sequence[int] | np.ndarray, *,
             observations: bool = True) -> MultiAgentArrays:
        return self._imported.read(ids, observations=observations)

    def close(self) -> None:
        self._cleanup()
