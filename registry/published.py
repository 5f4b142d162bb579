"""One published version on a registry: its manifest and its metadata file.

A version is published once its ``manifest.json`` exists (the commit point of a publish);
``data/metadata.json`` is one of the files it lists. Both are read with a size cap and
checked before anything trusts them.
"""

from __future__ import annotations

from typing import Any, Final

from marl_minari.errors import DatasetNotFoundError
from marl_minari.format.ids import parse_dataset_id

from .backend import Backend
from .jsonfiles import parse_json_object
from .manifest import MANIFEST_FILE_NAME, MAX_MANIFEST_BYTES, Manifest

METADATA_PATH: Final = "data/metadata.json"
"""A dataset's Minari metadata, relative to its folder."""
MAX_METADATA_BYTES: Final = 16 << 20
"""Largest ``metadata.json`` or ``namespace_metadata.json`` read from a remote."""


def manifest_key(dataset_id: str) -> str:
    """Where the manifest of ``dataset_id`` lies in its registry.

    Raises:
        InvalidDatasetIdError: malformed id.
    """
    parse_dataset_id(dataset_id)
    return f"{dataset_id}/{MANIFEST_FILE_NAME}"


def find_manifest(backend: Backend, dataset_id: str,
                  fetched: bytes | None = None) -> Manifest | None:
    """The manifest of ``dataset_id``, or ``None`` if it has none.

    Args:
        fetched: the manifest's bytes, when they were read from ``backend`` already.

    Raises:
        InvalidDatasetIdError: malformed id.
        CorruptedDataError: the manifest is damaged, unsafe, another dataset's or too large.
    """
    key = manifest_key(dataset_id)
    raw = fetched if fetched is not None else backend.read(key, MAX_MANIFEST_BYTES)
    if raw is None:
        return None
    return Manifest.from_json(raw, dataset_id, f"{backend.location}/{key}")


def read_manifest(backend: Backend, dataset_id: str,
                  fetched: bytes | None = None) -> Manifest:
    """The manifest of a published version (``fetched``: as :func:`find_manifest`).

    Raises:
        DatasetNotFoundError: the version is not published (or its publish never claimed it).
        CorruptedDataError: the manifest is damaged, unsafe or too large.
        RemoteError: the registry does not exist.
    """
    found = find_manifest(backend, dataset_id, fetched)
    if found is None:
        backend.check_exists()
        raise DatasetNotFoundError(
            f"{dataset_id!r} is not published on {backend.location} (no manifest)")
    return found


def read_metadata_file(backend: Backend, dataset_id: str) -> dict[str, Any]:
    """The published ``data/metadata.json`` of ``dataset_id``, read from its file.

    Raises:
        DatasetNotFoundError: there is none.
        CorruptedDataError: it is not a JSON object, or too large.
    """
    parse_dataset_id(dataset_id)
    key = f"{dataset_id}/{METADATA_PATH}"
    raw = backend.read(key, MAX_METADATA_BYTES)
    if raw is None:
        raise DatasetNotFoundError(f"{dataset_id!r} is not published on {backend.location}")
    return parse_json_object(raw, f"metadata {backend.location}/{key}")
