"""The registry index (``_index.json``): every namespace and dataset a registry holds.

The index lists every namespace and dataset of a registry, with the dataset's metadata, so
listing a registry is one read. It is derived data: :func:`~.reindex.reindex` rebuilds it from
the manifests. It is checked strictly when read (a damaged one is a
:class:`~marl_minari.errors.CorruptedDataError` naming the file and key, and asking for a
rebuild), and changed only by read-modify-write under the backend's index lock or a
conditional write. The layout is described in ``docs/registry.md``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Final

from marl_minari.errors import CorruptedDataError, InvalidDatasetIdError, RemoteError
from marl_minari.format.ids import parse_dataset_id
from marl_minari.user_warnings import warn

from .backend import Backend
from .jsonfiles import parse_json_object, typed
from .manifest import Manifest

INDEX_FILE_NAME: Final = "_index.json"
"""Root object of a registry: every namespace and dataset with its metadata."""

INDEX_FORMAT: Final = "marl-minari-registry"
INDEX_FORMAT_VERSION: Final = 1

MAX_INDEX_BYTES: Final = 64 << 20
"""Largest ``_index.json`` read: tens of thousands of datasets with typical metadata (2-5 kB
each); a larger one is damaged or hostile, and would otherwise be read whole on every list."""

_UPDATE_ATTEMPTS: Final = 50
_REBUILD = "; rebuild it with marl_minari.registry.reindex"

Index = dict[str, Any]
"""A parsed index: ``{"format", "format_version", "namespaces": {...}, "datasets": {...}}``."""


def empty_index() -> Index:
    """An index with no namespaces and no datasets."""
    return {"format": INDEX_FORMAT, "format_version": INDEX_FORMAT_VERSION,
            "namespaces": {}, "datasets": {}}


def parse_index(raw: bytes | None, location: str) -> Index:
    """The index stored at ``location`` (``raw`` ``None``: the registry has none yet).

    Raises:
        CorruptedDataError: not JSON, not a marl-minari index, or a key of the wrong type
            (named in the message).
        RemoteError: written by a newer marl-minari.
    """
    if raw is None:
        return empty_index()
    where = f"registry index {location}/{INDEX_FILE_NAME}"
    index = parse_json_object(raw, where, _REBUILD)
    if index.get("format") != INDEX_FORMAT:
        raise CorruptedDataError(f"{location}/{INDEX_FILE_NAME} is not a marl-minari registry "
                                 f"index ('format' is {index.get('format')!r}){_REBUILD}")
    version = typed(index, "format_version", int, where, fix=_REBUILD)
    if version > INDEX_FORMAT_VERSION:
        raise RemoteError(f"registry {location} has index format {version!r}; this "
                          f"marl-minari reads version {INDEX_FORMAT_VERSION}: upgrade it")
    for name, value in typed(index, "namespaces", dict, where, fix=_REBUILD).items():
        if not isinstance(value, dict):
            raise CorruptedDataError(f"{where}: namespaces[{name!r}] must be an object, not "
                                     f"{type(value).__name__}{_REBUILD}")
    for name, entry in typed(index, "datasets", dict, where, fix=_REBUILD).items():
        _check_entry(entry, f"datasets[{name!r}]", where)
    return index


def _check_entry(entry: Any, key: str, where: str) -> None:
    """Check one dataset entry (see :func:`index_entry`): the types a reader relies on."""
    if not isinstance(entry, dict):
        raise CorruptedDataError(f"{where}: {key} must be an object, not "
                                 f"{type(entry).__name__}{_REBUILD}")
    typed(entry, "metadata", dict, where, label=f"{key}.metadata", fix=_REBUILD)
    size = typed(entry, "total_size", int, where, required=False, label=f"{key}.total_size",
                 fix=_REBUILD)
    if size is not None and size < 0:
        raise CorruptedDataError(f"{where}: {key}.total_size is negative{_REBUILD}")
    typed(entry, "published", str, where, required=False, label=f"{key}.published",
          fix=_REBUILD)


def serialize_index(index: Index) -> bytes:
    """The bytes stored for ``index``."""
    return (json.dumps(index, indent=1, sort_keys=True) + "\n").encode()


def index_entry(metadata: dict[str, Any], manifest: Manifest) -> dict[str, Any]:
    """The index entry of a published version."""
    return {"metadata": metadata, "manifest_sha256": manifest.digest(),
            "total_size": manifest.total_size, "files": len(manifest.files),
            "published": manifest.created}


def read_index(backend: Backend) -> Index:
    """The index of ``backend``'s registry (an empty one when it has none yet)."""
    return parse_index(backend.read(INDEX_FILE_NAME, MAX_INDEX_BYTES), backend.location)


def update_index(backend: Backend, change: Callable[[Index], bool]) -> Index:
    """Apply ``change`` to the index and write it back (``change`` False: no write).

    Read, changed and written under the backend's index lock, and written only if nobody
    wrote it meanwhile (backends with conditional writes); retried otherwise. Returns the
    index as written.

    Raises:
        RemoteError: concurrent writers kept changing it (50 attempts).
    """
    for attempt in range(_UPDATE_ATTEMPTS):
        with backend.index_lock():
            raw, version = backend.read_versioned(INDEX_FILE_NAME, MAX_INDEX_BYTES)
            index = parse_index(raw, backend.location)
            if not change(index):
                return index
            if backend.write_if(INDEX_FILE_NAME, serialize_index(index), version):
                return index
        time.sleep(min(0.05 * (attempt + 1), 1.0))
    raise backend.fail(f"the index of {backend.location} kept changing under concurrent writers")


def replace_index(backend: Backend, index: Index) -> Index:
    """Write ``index`` whole, whatever the stored one holds (damaged or oversized included):
    what rebuilding an index needs. Under the index lock; unconditional, since a rebuild
    drops what it did not find anyway."""
    with backend.index_lock():
        backend.write(INDEX_FILE_NAME, serialize_index(index))
    return index


def listed_ids(index: Index, location: str, prefix: str | None = None) -> list[str]:
    """Dataset ids the index lists, sorted, optionally only those starting with ``prefix``.

    Malformed ids are skipped with a warning: they never become keys or paths.
    """
    ids = []
    for dataset_id in index["datasets"]:
        try:
            parse_dataset_id(dataset_id)
        except InvalidDatasetIdError:
            warn(f"skipping malformed id {dataset_id!r} in {location}")
            continue
        if prefix is None or dataset_id.startswith(prefix):
            ids.append(dataset_id)
    return sorted(ids)
