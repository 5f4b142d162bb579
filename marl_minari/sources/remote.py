"""Remote datasets named by URL: a registry followed by a dataset id, downloaded once.

``http://host/registry/mpe2/spread/random-v0``, ``s3://bucket/prefix/mpe2/spread/random-v0``
and ``file:///shared/registry/mpe2/spread/random-v0`` name the dataset
``mpe2/spread/random-v0`` published on the registry before it. Where the registry ends is
not visible in the URL (namespaces nest), and every split names the same files (the registry
followed by the id), so each split whose tail is a dataset id is tried, longest registry
first, and the first whose index (at the registry's root) lists that id wins; for a registry
that lost its index, the first whose manifest describes that id.
``hf://org/namespace/name-vN`` (and any other kind Minari serves itself) is split as Minari
splits it, after the first path component, and downloaded by ``minari.download_dataset``.

A download goes through :func:`marl_minari.registry.download` (every file checked against
the manifest, installed with one rename) into the datasets root, and is recorded in an origin
file beside it (:func:`origin_path`): the remote and the BLAKE3 of the dataset's
``metadata.json``. A later use of the same URL reads the local copy without touching the
network. A local dataset with that id that has no such record is used only if it holds the
published files (the copy it was published from, say); one with other files (recorded here,
downloaded from elsewhere, or changed since) is never used in its place: the error says how
to name the one meant. An origin file is checked like any file read from disk: a damaged one
is a :class:`~marl_minari.errors.CorruptedDataError` naming it and its key, and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    RemoteError,
)
from marl_minari.format import layout
from marl_minari.format.digests import is_hex_digest
from marl_minari.format.ids import dataset_dir, parse_dataset_id

if TYPE_CHECKING:
    from marl_minari.registry.manifest import Manifest
    from marl_minari.registry.settings import RemoteSettings

ORIGINS_FOLDER: Final = "origins"
"""Folder of origin files, under the hidden staging folder of the datasets root."""


def is_remote_source(name: str) -> bool:
    """``name`` is a URL (``kind://...``), not a dataset id or a local path."""
    return "://" in name


def candidate_splits(url: str) -> list[tuple[str, str]]:
    """Every ``(registry, dataset_id)`` that ``url`` can be read as, longest registry first.

    The registry keeps at least its first path component (a host, bucket or folder).

    Raises:
        InvalidDatasetIdError: no tail of ``url`` is a dataset id.
    """
    kind, _, rest = url.partition("://")
    parts = rest.rstrip("/").split("/")
    splits = []
    for cut in range(len(parts) - 1, 0, -1):
        registry, dataset_id = "/".join(parts[:cut]), "/".join(parts[cut:])
        if not registry.strip("/"):
            continue  # file:///x: the registry is at least one folder deep
        try:
            parse_dataset_id(dataset_id)
        except InvalidDatasetIdError:
            continue
        splits.append((f"{kind}://{registry}", dataset_id))
    if not splits:
        raise InvalidDatasetIdError(
            f"{shown_url(url)} does not end in a dataset id: write the registry followed by the "
            "id, e.g. http://host/registry/mpe2/spread/random-v0")
    return splits


def split_remote_source(url: str) -> tuple[str, str]:
    """The registry and dataset id ``url`` names (one index read per candidate, all within
    one deadline: see ``RemoteSettings``).

    Raises:
        InvalidDatasetIdError: ``url`` does not end in a dataset id.
        DatasetNotFoundError: no registry along ``url`` publishes the id at its end.
        CorruptedDataError: no index lists it, and its manifest is damaged.
        RemoteError: a registry failed to answer, or the deadline passed.
    """
    from marl_minari.registry import find_published, serves_remote

    splits = candidate_splits(url)
    if not serves_remote(url):  # Minari's own kinds: its split, after the first component
        return splits[-1]
    found = find_published(splits)
    if found is None:
        raise _published_nowhere(url, splits)
    return found


def find_remote_version(url: str, settings: RemoteSettings, *, warm_connections: int = 0
                        ) -> tuple[str, str, Manifest]:
    """The registry, the dataset id and the published manifest ``url`` names, the manifest
    read with ``settings`` and requested together with the registries' indexes, while
    connections to its server are opened until ``warm_connections`` are (see
    :func:`~marl_minari.registry.lookup.find_published_manifest`).

    Raises:
        as :func:`split_remote_source`, and DatasetNotFoundError where the version found has
        no manifest.
    """
    from marl_minari.registry import open_backend, serves_remote
    from marl_minari.registry.lookup import find_published_manifest
    from marl_minari.registry.published import read_manifest

    splits = candidate_splits(url)
    if not serves_remote(url):  # Minari's own kinds: its split, after the first component
        registry, dataset_id = splits[-1]
        return registry, dataset_id, read_manifest(open_backend(registry, settings=settings),
                                                   dataset_id)
    found = find_published_manifest(splits, settings=settings, manifest_settings=settings,
                                    warm_connections=warm_connections)
    if found is None:
        raise _published_nowhere(url, splits)
    return found


def _published_nowhere(url: str, splits: list[tuple[str, str]]) -> DatasetNotFoundError:
    tried = ", ".join(shown_url(r) for r, _ in splits)
    return DatasetNotFoundError(
        f"no registry along {shown_url(url)} publishes the dataset at its end (tried the "
        f"registries {tried}); "
        "list a registry's datasets with `marl-minari remote list --remote REGISTRY`")


def fetch_remote_source(url: str, *, progress: bool = False) -> Path:
    """The local ``data/`` folder of the dataset ``url`` names, downloaded on first use.

    Raises:
        DatasetExistsError: a local dataset with that id exists that holds other files than
            the published one; the message says how to use either copy.
        InvalidDatasetIdError, DatasetNotFoundError, RemoteError, CorruptedDataError: as
            :func:`split_remote_source` and :func:`marl_minari.registry.download`.
    """
    from marl_minari.storage.locking import dataset_lock

    for registry, dataset_id in candidate_splits(url):  # fetched before: no network at all
        if _is_downloaded_copy(dataset_id, _origin_name(registry)):
            return (dataset_dir(dataset_id) / "data").resolve()
    registry, dataset_id = split_remote_source(url)
    origin = _origin_name(registry)
    # One fetch per id at a time: a second job waits, then reads the first one's copy.
    with dataset_lock(dataset_id):
        if not dataset_dir(dataset_id).exists():
            _download(registry, dataset_id, progress)
            _record_origin(dataset_id, origin)
        _check_origin(registry, dataset_id, url)
    return (dataset_dir(dataset_id) / "data").resolve()


def _download(registry: str, dataset_id: str, progress: bool) -> None:
    from marl_minari.registry import download, serves_remote

    if serves_remote(registry):
        download(dataset_id, registry, progress=progress)
        return
    import minari

    try:  # Minari's kinds have no manifests: its own download, unverified
        minari.download_dataset(f"{registry}/{dataset_id}")
    except Exception as exc:  # Minari raises ValueError, its backends their own errors
        raise RemoteError(f"Minari could not download {dataset_id!r} from {shown_url(registry)}: "
                          f"{type(exc).__name__}: {shown_url(registry, str(exc))}") from exc


def origin_path(dataset_id: str) -> Path:
    """Where the origin of the downloaded dataset ``dataset_id`` is recorded."""
    from marl_minari.storage.locking import staging_root

    return staging_root().joinpath(ORIGINS_FOLDER, *dataset_id.split("/")).with_suffix(".json")


def _metadata_digest(dataset_id: str) -> str | None:
    from marl_minari.format.digests import BLAKE3, hash_file

    try:
        return hash_file(dataset_dir(dataset_id) / "data" / layout.METADATA_FILE_NAME,
                         (BLAKE3,))[1][BLAKE3]
    except FileNotFoundError:
        return None


def _record_origin(dataset_id: str, origin: str) -> None:
    from marl_minari.registry.jsonfiles import write_json_atomically

    write_json_atomically(origin_path(dataset_id), {
        "dataset_id": dataset_id, "remote": origin,
        "metadata_blake3": _metadata_digest(dataset_id)})


def _recorded_origin(dataset_id: str) -> dict[str, Any]:
    """The origin recorded for ``dataset_id``; ``{}`` when none is.

    Raises:
        CorruptedDataError: the origin file is not JSON, names another dataset (its path and
            its content must agree: nothing in it is used as a path), or holds a key of the
            wrong type; the message names the file and key, and says to delete it.
    """
    from marl_minari.registry.jsonfiles import parse_json_object, typed

    path = origin_path(dataset_id)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise CorruptedDataError(f"cannot read the origin file {path}: {exc}") from exc
    fix = (f"; it only records where {dataset_id!r} was downloaded from: delete it, and the "
           "dataset is compared with the published one on its next use")
    recorded = parse_json_object(raw, f"origin file {path}", fix)
    try:
        if typed(recorded, "dataset_id", str, f"origin file {path}") != dataset_id:
            raise CorruptedDataError(f"origin file {path}: 'dataset_id' is "
                                     f"{recorded['dataset_id']!r}, not {dataset_id!r}")
        typed(recorded, "remote", str, f"origin file {path}")
        digest = recorded.get("metadata_blake3")
        if digest is not None and not is_hex_digest(digest):
            raise CorruptedDataError(f"origin file {path}: 'metadata_blake3' is not a BLAKE3 "
                                     "digest (64 lowercase hex digits)")
    except CorruptedDataError as exc:
        raise CorruptedDataError(f"{exc}{fix}") from None
    return recorded


def _is_downloaded_copy(dataset_id: str, origin: str) -> bool:
    """The local ``dataset_id`` is, unchanged, the one downloaded from ``origin``."""
    recorded = _recorded_origin(dataset_id)
    return bool(recorded.get("remote") == origin and dataset_dir(dataset_id).exists()
                and recorded.get("metadata_blake3") == _metadata_digest(dataset_id))


def _check_origin(registry: str, dataset_id: str, url: str) -> None:
    """Accept the local ``dataset_id`` for ``url`` only if it holds the published files."""
    from marl_minari.registry import local_manifest, published_manifest, serves_remote

    origin = _origin_name(registry)
    if _is_downloaded_copy(dataset_id, origin):
        return
    local = dataset_dir(dataset_id)
    if serves_remote(registry) and published_manifest(dataset_id, registry).same_content(
            local_manifest(dataset_id, local)):
        _record_origin(dataset_id, origin)  # e.g. the copy it was published from
        return
    recorded = _recorded_origin(dataset_id).get("remote")
    came = (f"was downloaded from {recorded}" if recorded and recorded != origin else
            "holds other files than the published one (recorded here, or changed since)")
    raise DatasetExistsError(
        f"{shown_url(url)}: the local dataset {dataset_id!r} at {local} {came}, so it is not "
        f"used in place of the published one. Name it by its id {dataset_id!r} to use the "
        "local copy, or move it away (or set MINARI_DATASETS_PATH to another root) to "
        "download the published one")


def _origin_name(registry: str) -> str:
    """``registry`` without user-info (no credentials are written to disk)."""
    from marl_minari.registry.credentials import split_userinfo

    kind, _, rest = registry.partition("://")
    return f"{kind}://{split_userinfo(rest)[1]}"


def shown_url(url: str, text: str | None = None) -> str:
    """``text`` (default ``url`` itself) with ``url``'s credentials removed, fit to print."""
    from marl_minari.registry.credentials import scrub, url_secrets

    return str(scrub(url if text is None else text, url_secrets(url)))


__all__ = [
    "candidate_splits",
    "fetch_remote_source",
    "is_remote_source",
    "origin_path",
    "shown_url",
    "split_remote_source",
]
