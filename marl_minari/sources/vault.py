"""Flashbax vaults as sources, read in place (OG-MARL's, Mava's and this library's;
``docs/adapters.md``).

A vault written by ``to_vault`` gives back the original dataset exactly; any other vault's
streams are cut into episodes on their done flags (:mod:`marl_minari.vaults`). Nothing is
copied: describing, combining or converting a vault reads its arrays directly.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np

from marl_minari.errors import InvalidOptionError, LayoutError, MarlMinariError
from marl_minari.format.json_text import load_json
from marl_minari.format.metadata import dataset_metadata
from marl_minari.format.regular_files import read_regular
from marl_minari.sources.base import DatasetSource, EpisodeAttributes
from marl_minari.sources.plain import spec_of
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.vaults.imported import ImportedVault
from marl_minari.vaults.layout import import_options
from marl_minari.vaults.restore import RestoredVault
from marl_minari.vaults.rows import concat_arrays
from marl_minari.vaults.store import VAULT_METADATA_KEY, VaultReader

VAULT_METADATA_FILE: Final = "metadata.json"
IMPORTED_ID: Final = "vault/imported-v0"
"""The ``dataset_id`` in the metadata of a vault read as a dataset (it has none of its own)."""
IMPORT_OPTIONS: Final = ("trailing", "final_observation", "cut_on", "infer_dead",
                         "reward_aggregation")
READ_OPTIONS: Final = ("keys", "agents", "observation_spaces", "action_spaces")
VAULT_OPTIONS: Final = (*IMPORT_OPTIONS, *READ_OPTIONS, "restore")
"""Options a vault is read with (``vault_options``; see ``from_vault``)."""


def is_vault(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a vault folder (``metadata.json`` with a ``structure_shape``)."""
    meta = Path(path) / VAULT_METADATA_FILE
    try:
        document = load_json(read_regular(meta), str(meta), "")
    except (OSError, MarlMinariError):  # none, not readable, not a regular file, not JSON
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
        vault_options: how to read it (see :data:`VAULT_OPTIONS` and
            :func:`marl_minari.adapters.from_vault`): ``restore`` (rebuild the original
            dataset of a ``to_vault`` vault; default whenever it is one), ``keys``, ``agents``,
            spaces, ``trailing``, ``cut_on``...

    Raises:
        DatasetNotFoundError: no vault there.
        EmptyVaultError: it holds no time step.
        LayoutError: its keys or shapes do not fit (named), or it holds no episode.
        InvalidOptionError: an unknown or invalid option.
    """

    def __init__(self, path: Path, vault_options: dict[str, Any] | None = None) -> None:
        self._vault_options = dict(vault_options or {})
        options = dict(self._vault_options)
        unknown = sorted(set(options) - set(VAULT_OPTIONS))
        if unknown:
            raise InvalidOptionError(f"unknown vault options {unknown}; the options are "
                                     f"{list(VAULT_OPTIONS)}")
        self.vault_path = Path(path).resolve()
        reader = VaultReader(self.vault_path)
        ours = reader.metadata.get(VAULT_METADATA_KEY)
        restore = options.pop("restore", None)
        restorable = isinstance(ours, dict) and "exact" in ours
        if restore is None:
            restore = restorable
        self._restored: RestoredVault | None = None
        self._imported: ImportedVault | None = None
        if restore:
            if not restorable:
                raise LayoutError(f"vault {reader.path} was not written by marl-minari's "
                                  "to_vault: nothing to restore (use restore=False)")
            assert isinstance(ours, dict)
            metadata = dict(ours["minari_metadata"])
            spec = spec_of(metadata, bool(ours["multi_agent"]))
            self._restored = RestoredVault(reader, ours, spec)
            count = len(self._restored.lengths)
        else:
            settings = import_options(**{k: options.pop(k) for k in IMPORT_OPTIONS
                                         if k in options})
            self._imported = ImportedVault(reader, settings, **options)
            spec = self._imported.spec
            count = len(self._imported.episodes)
            # What the dataset converted from it would hold (provenance in marl_minari.vault).
            metadata = dataset_metadata(
                IMPORTED_ID, spec, total_episodes=count,
                total_steps=int(self._imported.episodes.lengths.sum()), jpeg_encoding=False)
        super().__init__(str(self.vault_path), "vault", spec, metadata,
                         np.arange(count, dtype=np.int64))

    @property
    def restored(self) -> bool:
        """The source gives back the original dataset of a ``to_vault`` vault."""
        return self._restored is not None

    def _stored_lengths(self, ids: np.ndarray) -> np.ndarray:
        if self._restored is not None:
            return self._restored.lengths[ids]
        assert self._imported is not None
        return self._imported.episodes.lengths[ids]

    def episode_attributes(self, ids: Sequence[int] | np.ndarray) -> list[EpisodeAttributes]:
        ids = np.asarray(ids, dtype=np.int64)
        if self._restored is None:
            return [(None, None)] * len(ids)
        out: list[EpisodeAttributes] = []
        for start, stop in _runs(ids):
            out += self._restored.attributes(start, stop)
        return out

    def read(self, ids: Sequence[int] | np.ndarray, *,
             observations: bool = True) -> MultiAgentArrays:
        ids = np.asarray(ids, dtype=np.int64)
        if self._imported is not None:
            return self._imported.read(ids)
        assert self._restored is not None
        parts = [self._restored.read(start, stop) for start, stop in _runs(ids)]
        return parts[0] if len(parts) == 1 else concat_arrays(parts)

    def __getstate__(self) -> dict[str, Any]:
        # Open tensorstore handles do not pickle: a worker reopens the vault.
        return {"vault_path": self.vault_path, "_vault_options": self._vault_options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Reopening is exactly what construction does; mypy forbids naming __init__ directly.
        type(self).__init__(self, state["vault_path"], state["_vault_options"])


def _runs(ids: np.ndarray) -> list[tuple[int, int]]:
    """``ids`` as runs of consecutive ids ``[start, stop)``, in order."""
    if len(ids) == 0:
        return []
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    return [(int(run[0]), int(run[-1]) + 1) for run in np.split(ids, breaks)]
