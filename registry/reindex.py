"""Rebuilding a registry's index from the manifests and namespace files it holds.

The index is a cache of the manifests. Rebuilding it recovers entries lost to a publish
interrupted after its files were in place but before its index entry, to concurrent writers
on a store without conditional writes, or to a deleted or damaged ``_index.json``.
"""

from __future__ import annotations

import contextlib
from typing import Any

from marl_minari.errors import CorruptedDataError, DatasetNotFoundError, InvalidDatasetIdError
from marl_minari.user_warnings import warn

from .backend import Backend
from .index import Index, empty_index, index_entry, replace_index
from .jsonfiles import parse_json_object
from .kinds import open_backend
from .manifest import MANIFEST_FILE_NAME
from .namespaces import NAMESPACE_METADATA_FILE_NAME, check_namespace
from .published import MAX_METADATA_BYTES, read_manifest, read_metadata_file
from .settings import RemoteSettings


def reindex(remote: str | None = None, *, settings: RemoteSettings | None = None) -> int:
    """Rebuild a writable registry's index from its manifests; return the dataset count.

    It reads every manifest: each dataset read gets a deadline of its own, so a registry of
    thousands of datasets is not held to the deadline of one.

    Raises:
        RemoteError: the remote is read-only (rebuild it where it is published), failed, or
            a read passed its deadline.
    """
    backend = open_backend(remote, settings=settings)
    return len(rebuild_index(backend)["datasets"])


def rebuild_index(backend: Backend) -> Index:
    """Rebuild the index of ``backend``'s registry, whatever the stored one holds; the index
    written.

    A version whose files are not all there (a publish stopped right after its claim) is
    skipped with a warning: publishing the same files again completes it. Damaged manifests
    and malformed ids are skipped with a warning too.
    """
    backend.require_writable()
    keys = list(backend.list_keys(""))
    manifests = [key.rpartition("/")[0] for key in keys
                 if key.rpartition("/")[2] == MANIFEST_FILE_NAME and "/" in key]
    present = set(keys)
    datasets: dict[str, Any] = {}
    for dataset_id in manifests:
        backend.deadline.restart()
        try:
            manifest = read_manifest(backend, dataset_id)
            missing = [e.path for e in manifest.files
                       if f"{dataset_id}/{e.path}" not in present]
            if missing:
                raise DatasetNotFoundError(
                    f"its publish stopped before {missing[0]} was in place; publish the "
                    "same files again to complete it")
            metadata = read_metadata_file(backend, dataset_id)
        except (InvalidDatasetIdError, CorruptedDataError, DatasetNotFoundError) as exc:
            warn(f"reindex skips {dataset_id!r}: {exc}")
            continue
        datasets[dataset_id] = index_entry(metadata, manifest)
    namespaces: dict[str, Any] = {}
    for key in keys:
        parent, _, name = key.rpartition("/")
        inside_dataset = any(parent == d or parent.startswith(f"{d}/") for d in manifests)
        if name != NAMESPACE_METADATA_FILE_NAME or not parent or inside_dataset:
            continue
        with contextlib.suppress(InvalidDatasetIdError):
            check_namespace(parent)
            backend.deadline.restart()
            raw = backend.read(key, MAX_METADATA_BYTES)
            try:
                value = parse_json_object(raw, key) if raw is not None else {}
            except CorruptedDataError:
                value = {}
            namespaces[parent] = value
    backend.deadline.restart()
    return replace_index(backend, {**empty_index(), "namespaces": namespaces,
                                   "datasets": datasets})
