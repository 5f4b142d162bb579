"""Publishing, listing and downloading datasets on remotes Minari can use.

Importing this package (and so ``import marl_minari``) calls :func:`register_remote_kinds`,
which adds the remote kinds ``file://``, ``s3://``, ``http://`` and ``https://`` to Minari's
remote registry (the private ``minari.storage.remotes._registry``), next to Minari's own
``hf://`` and ``gcp://``, so ``minari.list_remote_datasets``, ``minari.download_dataset``,
``minari.upload_dataset`` and ``minari.load_dataset(..., download=True)`` work with them
(``MINARI_REMOTE=<remote>``). That call is the only change this package makes to Minari.

:func:`publish` and :func:`download` add what Minari's functions do not: validation before
publishing, immutable versions, per-file SHA-256 and BLAKE3 manifests, verified atomic
downloads. See ``docs/registry.md`` for the remote layout and the guarantees.
"""

from __future__ import annotations

from .api import (
    DEFAULT_REGISTRY_PATH,
    REGISTRY_ENV_VAR,
    PublishResult,
    RemoteDataset,
    default_registry,
    download,
    list_datasets,
    open_remote,
    publish,
    register_remote_kinds,
    reindex,
    resolve_remote,
    validate_local_dataset,
)
from .index import INDEX_FILE_NAME
from .manifest import MANIFEST_FILE_NAME, FileEntry, Manifest
from .settings import RemoteSettings
from .storage import RegistryStorage

register_remote_kinds()

__all__ = [
    "DEFAULT_REGISTRY_PATH",
    "INDEX_FILE_NAME",
    "MANIFEST_FILE_NAME",
    "REGISTRY_ENV_VAR",
    "FileEntry",
    "Manifest",
    "PublishResult",
    "RegistryStorage",
    "RemoteDataset",
    "RemoteSettings",
    "default_registry",
    "download",
    "list_datasets",
    "open_remote",
    "publish",
    "register_remote_kinds",
    "reindex",
    "resolve_remote",
    "validate_local_dataset",
]
