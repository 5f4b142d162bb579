"""Namespaces on a registry and locally: validated names, and their metadata files.

Minari keeps a ``namespace_metadata.json`` in every namespace folder, and its download needs
every level of a dataset's namespace to have one. A registry stores the same file per level
(and a copy in its index); a publish writes the levels missing remotely, a download those
missing locally. Namespace metadata is never overwritten by either.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Final

from marl_minari.errors import CorruptedDataError, InvalidDatasetIdError
from marl_minari.format.ids import parse_dataset_id

from .backend import Backend
from .index import Index, read_index, update_index
from .jsonfiles import parse_json_object, read_json_object, write_json_atomically
from .published import MAX_METADATA_BYTES

logger = logging.getLogger("marl_minari.registry")

NAMESPACE_METADATA_FILE_NAME: Final = "namespace_metadata.json"


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


def list_namespaces(index: Index) -> list[str]:
    """The well-formed namespaces an index records, sorted (others never become paths)."""
    found = []
    for namespace in index["namespaces"]:
        try:
            found.append(check_namespace(namespace))
        except InvalidDatasetIdError:
            continue
    return sorted(found)


def local_namespace_metadata(namespace: str) -> dict[str, Any]:
    """The local ``namespace_metadata.json`` of ``namespace``; ``{}`` when there is none."""
    from minari.storage.datasets_root_dir import get_dataset_path

    local = Path(get_dataset_path(check_namespace(namespace))) / NAMESPACE_METADATA_FILE_NAME
    return read_json_object(local) if local.exists() else {}


def remote_namespace_metadata(backend: Backend, namespace: str,
                              index: Index | None = None) -> dict[str, Any] | None:
    """Remote metadata of ``namespace`` (from ``index`` when it records it, else its file);
    ``None`` if it is not published (or its file is damaged)."""
    check_namespace(namespace)
    entry = (index if index is not None else read_index(backend))["namespaces"].get(namespace)
    if isinstance(entry, dict):
        return dict(entry)
    key = f"{namespace}/{NAMESPACE_METADATA_FILE_NAME}"
    raw = backend.read(key, MAX_METADATA_BYTES)
    if raw is None:
        return None
    try:
        return parse_json_object(raw, f"{backend.location}/{key}")
    except CorruptedDataError:
        return None


def _write(backend: Backend, namespace: str, metadata: dict[str, Any]) -> None:
    backend.write(f"{namespace}/{NAMESPACE_METADATA_FILE_NAME}",
                  (json.dumps(metadata) + "\n").encode())


def publish_namespace(backend: Backend, namespace: str) -> None:
    """Publish the local metadata of ``namespace`` and record it in the index."""
    backend.require_writable()
    metadata = local_namespace_metadata(namespace)
    _write(backend, namespace, metadata)

    def record(index: Index) -> bool:
        index["namespaces"][namespace] = metadata
        return True

    update_index(backend, record)


def publish_missing_namespaces(backend: Backend, dataset_id: str) -> dict[str, dict[str, Any]]:
    """Write the metadata file of every parent namespace of ``dataset_id`` missing remotely.

    The local ``namespace_metadata.json`` is used where it exists, ``{}`` otherwise (Minari's
    download needs every level to be listed). Returns what was written; the caller records
    it in the index together with the dataset.
    """
    namespace = parse_dataset_id(dataset_id)[0]
    present = read_index(backend)["namespaces"]
    written: dict[str, dict[str, Any]] = {}
    for level in namespace_levels(namespace):
        if level in present:
            continue
        metadata = local_namespace_metadata(level)
        logger.info("publishing namespace %s to %s", level, backend.location)
        _write(backend, level, metadata)
        written[level] = metadata
    return written


def download_namespace(backend: Backend, namespace: str, root: Path) -> bool:
    """Write the remote metadata of ``namespace`` under the local datasets root ``root``;
    False (nothing written) when the remote has none."""
    metadata = remote_namespace_metadata(backend, namespace)
    if metadata is None:
        return False
    write_json_atomically(root.joinpath(*namespace.split("/")) / NAMESPACE_METADATA_FILE_NAME,
                          metadata)
    return True


def complete_local_namespaces(backend: Backend, dataset_id: str, root: Path) -> None:
    """Give every parent namespace of ``dataset_id`` under ``root`` its metadata file.

    Missing ones come from the remote (``{}`` if the remote has none), as Minari does.
    """
    namespace = parse_dataset_id(dataset_id)[0]
    index: Index | None = None
    for level in namespace_levels(namespace):
        path = root.joinpath(*level.split("/")) / NAMESPACE_METADATA_FILE_NAME
        if path.exists():
            continue
        index = index if index is not None else read_index(backend)
        write_json_atomically(path, remote_namespace_metadata(backend, level, index) or {})
