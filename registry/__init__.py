"""Registries: publishing, listing and downloading datasets, with manifests and verification.

:func:`publish` and :func:`download` add what Minari's remotes do not have: validation before
publishing, immutable versions, per-file SHA-256 and BLAKE3 manifests, verified atomic
downloads, and one deadline per operation. Remotes: ``file://`` (or a directory path),
``s3://`` (extra ``s3``) and read-only ``http(s)://``.

Importing this package changes nothing in Minari. To let Minari's own functions
(``minari.download_dataset``, ``list_remote_datasets``, ``upload_dataset``,
``load_dataset(..., download=True)``) use these remotes too, call
:func:`register_remote_kinds` once. See ``docs/registry.md`` for the remote layout and the
guarantees.
"""

from __future__ import annotations

from .backend import Backend
from .deadline import Deadline
from .download import download
from .index import INDEX_FILE_NAME
from .kinds import (
    DEFAULT_REGISTRY_PATH,
    REGISTRY_ENV_VAR,
    default_registry,
    open_backend,
    resolve_remote,
    serves_remote,
)
from .lookup import RemoteDataset, find_published, list_datasets, published_manifest
from .manifest import MANIFEST_FILE_NAME, FileEntry, Manifest, local_manifest
from .minari_remote import MinariRemote, open_remote, register_remote_kinds
from .publish import PublishResult, publish, validate_local_dataset
from .reindex import reindex
from .remote_file import RemoteFile, StreamSettings, open_remote_file
from .settings import RemoteSettings
from .stream_warnings import StreamingWarning

__all__ = [
    "DEFAULT_REGISTRY_PATH",
    "INDEX_FILE_NAME",
    "MANIFEST_FILE_NAME",
    "REGISTRY_ENV_VAR",
    "Backend",
    "Deadline",
    "FileEntry",
    "Manifest",
    "MinariRemote",
    "PublishResult",
    "RemoteDataset",
    "RemoteFile",
    "RemoteSettings",
    "StreamSettings",
    "StreamingWarning",
    "default_registry",
    "download",
    "find_published",
    "list_datasets",
    "local_manifest",
    "open_backend",
    "open_remote",
    "open_remote_file",
    "publish",
    "published_manifest",
    "register_remote_kinds",
    "reindex",
    "resolve_remote",
    "serves_remote",
    "validate_local_dataset",
]
