"""The registry index (``_index.json``) and the names a registry holds.

The index lists every namespace and dataset of a registry, with the dataset's metadata, so
listing a registry is one read. It is derived data: :meth:`RegistryStorage.reindex` rebuilds
it from the manifests (:func:`rebuild_index`). The layout is described in ``docs/registry.md``.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from typing import TYPE_CHECKING, Any, Final

from marl_minari.errors import (
    CorruptedDataError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    RemoteError,
)
from marl_minari.format.ids import parse_dataset_id

from .manifest import MANIFEST_FILE_NAME, Manifest

if TYPE_CHECKING:
    from .storage import RegistryStorage

INDEX_FILE_NAME: Final = "_index.json"
"""Root object of a registry: every namespace and dataset with its metadata."""

INDEX_FORMAT: Final = "marl-minari-registry"
INDEX_FORMAT_VERSION: Final = 1

NAMESPACE_METADATA_FILE_NAME: Final = "namespace_metadata.json"
METADATA_PATH: Final = "data/metadata.json"

MAX_INDEX_BYTES: Final = 64 << 20
"""Largest ``_index.json`` read: tens of thousands of datasets with typical metadata (2-5 kB
each); a larger one is damaged or hostile, and would otherwise be read whole on every list."""
MAX_METADATA_BYTES: Final = 16 << 20
"""Largest ``metadata.json`` or ``namespace_metadata.json`` read from a remote."""


def empty_index() -> dict[str, Any]:
    """An index with no namespaces and no datasets."""
    return {"format": INDEX_FORMAT, "format_version": INDEX_FORMAT_VERSION,
            "namespaces": {}, "datasets": {}}


def parse_index(raw: bytes | None, location: str) -> dict[str, Any]:
    """The index stored at ``location`` (``raw`` ``None``: the registry has none yet).

    Raises:
        CorruptedDataError: not JSON, or not a marl-minari index.
        RemoteError: written by a newer marl-minari.
    """
    if raw is None:
        return empty_index()
    where = f"{location}/{INDEX_FILE_NAME}"
    try:
        index = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptedDataError(
            f"registry index {where} is not valid JSON ({exc}); rebuild it with "
            "marl_minari.registry.reindex"
        ) from exc
    if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
        raise CorruptedDataError(f"{where} is not a marl-minari registry index; rebuild it "
                                 "with marl_minari.registry.reindex")
    version = index.get("format_version")
    if not isinstance(version, int) or version > INDEX_FORMAT_VERSION:
        raise RemoteError(f"registry {location} has index format {version!r}; this "
                          f"marl-minari reads version {INDEX_FORMAT_VERSION}: upgrade it")
    for key in ("namespaces", "datasets"):
        if not isinstance(index.get(key), dict):
            index[key] = {}
    return index


def serialize_index(index: dict[str, Any]) -> bytes:
    """The bytes stored for ``index``."""
    return (json.dumps(index, indent=1, sort_keys=True) + "\n").encode()


def index_entry(metadata: dict[str, Any], manifest: Manifest) -> dict[str, Any]:
    """The index entry of a published version."""
    return {"metadata": metadata, "manifest_sha256": manifest.digest(),
            "total_size": manifest.total_size, "files": len(manifest.files),
            "published": manifest.created}


def parse_json_object(raw: bytes, where: str) -> dict[str, Any]:
    """A JSON object read from a remote (metadata files).

    Raises:
        CorruptedDataError: not JSON, or not an object.
    """
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptedDataError(f"{where} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise CorruptedDataError(f"{where} does not hold a JSON object")
    return value


def check_namespace(namespace: str) -> str:
    """Validate a namespace with the same rules as dataset ids.

    Raises:
        InvalidDatasetIdError: malformed namespace (``..``, absolute, too short parts, ...).
    """
    if not isinstance(namespace, str) or not namespace:
        raise InvalidDatasetIdError(f"malformed namespace {namespace!r}")
    try:
        parsed = parse_dataset_id(f"{namespace}/x-v0")[0]
    except InvalidDatasetIdError as exc:
        raise InvalidDatasetIdError(f"malformed namespace {namespace!r}: {exc}") from None
    if parsed != namespace:
        raise InvalidDatasetIdError(f"malformed namespace {namespace!r}")
    return namespace


def namespace_levels(namespace: str | None) -> list[str]:
    """``a/b/c`` -> ``["a", "a/b", "a/b/c"]``; ``None`` -> ``[]``."""
    if not namespace:
        return []
    parts = namespace.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def rebuild_index(storage: RegistryStorage) -> dict[str, Any]:
    """Rebuild the index of ``storage`` from the manifests and namespace files it holds.

    Recovers entries lost to a publish interrupted after its files were in place but
    before its index entry, or to concurrent writers on a backend without conditional
    writes. A version whose files are not all there (a publish stopped right after its
    claim) is skipped with a warning: publishing the same files again completes it.
    """
    storage._require_writable()
    keys = list(storage._list_keys(""))
    manifests = [key.rpartition("/")[0] for key in keys
                 if key.rpartition("/")[2] == MANIFEST_FILE_NAME and "/" in key]
    present = set(keys)
    datasets: dict[str, Any] = {}
    for dataset_id in manifests:
        try:
            manifest = storage.manifest(dataset_id)
            missing = [e.path for e in manifest.files
                       if f"{dataset_id}/{e.path}" not in present]
            if missing:
                raise DatasetNotFoundError(
                    f"its publish stopped before {missing[0]} was in place; publish the "
                    "same files again to complete it")
            metadata = storage.get_dataset_metadata_file(dataset_id)
        except (InvalidDatasetIdError, CorruptedDataError, DatasetNotFoundError) as exc:
            warnings.warn(f"reindex skips {dataset_id!r}: {exc}", stacklevel=2)
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
            raw = storage._read(key, MAX_METADATA_BYTES)
            try:
                value = parse_json_object(raw, key) if raw is not None else {}
            except CorruptedDataError:
                value = {}
            namespaces[parent] = value

    def replace(index: dict[str, Any]) -> bool:
        index["namespaces"] = namespaces
        index["datasets"] = datasets
        return True

    storage._update_index(replace)
    return storage.read_index()
