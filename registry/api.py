"""Public registry functions: publish, download, list, reindex, and remote resolution."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minari.storage.remotes.cloud_storage import CloudStorage

from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    LayoutError,
    MarlMinariError,
    RemoteError,
)
from marl_minari.format.ids import dataset_dir, datasets_root, parse_dataset_id

from .credentials import scrub, url_secrets
from .index import METADATA_PATH, rebuild_index
from .local import install, read_json_object, staging_area
from .manifest import Manifest
from .settings import RemoteSettings
from .storage import RegistryStorage
from .transfer import Progress, tqdm_progress

REGISTRY_ENV_VAR = "MARL_MINARI_REGISTRY"
DEFAULT_REGISTRY_PATH = Path("~") / ".minari" / "registry"

ProgressArg = bool | Callable[[int], None]
"""``False``: silent; ``True``: tqdm bars; a callable: called with byte counts."""


def default_registry() -> str:
    """The registry used when no remote is given.

    ``$MARL_MINARI_REGISTRY`` (a ``kind://`` remote or a plain directory path), else the
    folder ``~/.minari/registry`` next to Minari's datasets, as ``file://``. Needs no setup:
    the folder is created on the first publish.
    """
    value = os.environ.get(REGISTRY_ENV_VAR, "").strip()
    if not value:
        return f"file://{DEFAULT_REGISTRY_PATH.expanduser()}"
    return resolve_remote(value)


def resolve_remote(remote: str | None) -> str:
    """Normalise a remote: ``None`` -> :func:`default_registry`; a bare path -> ``file://``."""
    if remote is None:
        return default_registry()
    if not isinstance(remote, str) or not remote.strip():
        raise RemoteError("a remote must be a non-empty string such as file:///srv/registry")
    remote = remote.strip()
    if "://" not in remote:
        return f"file://{Path(remote).expanduser().absolute()}"
    return remote


def open_remote(remote: str | None = None, token: str | None = None, *,
                settings: RemoteSettings | None = None) -> CloudStorage:
    """The storage object Minari uses for ``remote`` (any registered kind, ``hf://`` too).

    Args:
        remote: ``kind://...`` or a directory path; default :func:`default_registry`.
        token: Minari's token (``http(s)://``: sent as a Bearer token).
        settings: timeouts and flushing of this package's kinds; default
            :meth:`RemoteSettings.from_env`. Ignored by Minari's own kinds.

    Raises:
        RemoteError: unknown kind (the message lists the known ones) or a backend that cannot
            be set up (missing package, malformed name).
    """
    from minari.storage.remotes import _registry

    register_remote_kinds()
    remote = resolve_remote(remote)
    secrets = [token, *url_secrets(remote)]
    kind, name = remote.split("://", maxsplit=1)
    factory = _registry.get(kind)
    if factory is None:
        raise RemoteError(scrub(f"unknown remote kind {kind!r} in {remote}; known kinds: "
                                f"{', '.join(sorted(_registry))}", secrets))
    try:
        if kind in KINDS and factory is KINDS[kind]:
            return factory()(name, token, settings=settings)  # type: ignore[call-arg]
        return factory()(name, token)
    except MarlMinariError:
        raise
    except ImportError as exc:
        raise RemoteError(scrub(f"remote kind {kind!r} is not available: {exc}; install the "
                                "package it names", secrets)) from None


def _registry_storage(remote: str | None,
                      settings: RemoteSettings | None = None) -> RegistryStorage:
    from minari.storage.remotes import _registry

    register_remote_kinds()
    kind = resolve_remote(remote).split("://", 1)[0]
    storage = (open_remote(remote, settings=settings)
               if kind not in _registry or kind in KINDS else None)
    if not isinstance(storage, RegistryStorage):
        raise RemoteError(
            f"{kind}:// remotes are served by Minari's own backend, without manifests: use "
            "minari.upload_dataset / minari.download_dataset for them"
        )
    return storage


def _progress(progress: ProgressArg, total: int,
              description: str) -> tuple[Progress | None, Callable[[], None]]:
    if callable(progress):
        return progress, lambda: None
    if progress:
        return tqdm_progress(total, description)
    return None, lambda: None


# ---------------------------------------------------------------------------- publish
@dataclass(frozen=True)
class PublishResult:
    """What :func:`publish` did."""

    dataset_id: str
    remote: str
    """The remote, without credentials."""
    manifest: Manifest
    outcomes: dict[str, str] = field(default_factory=dict)
    """Per dataset id (the dataset and its combined datasets): ``published``, ``completed``
    (finished an interrupted publish) or ``unchanged`` (already published with the same
    files: nothing to do, and no error)."""


def validate_local_dataset(dataset_id: str, *, allow_single_agent: bool = False) -> list[str]:
    """Check that a local dataset can be published; return its combined datasets' ids.

    Opens it with ``minari.load_dataset``, checks the multi-agent layout with
    ``marl_minari.load_dataset`` and runs the conformance check (:func:`marl_minari.check_dataset`)
    on every episode.

    Raises:
        InvalidDatasetIdError: malformed id.
        DatasetNotFoundError: no such local dataset.
        LayoutError: not in the multi-agent layout (and ``allow_single_agent`` is off).
        CorruptedDataError: Minari cannot open it, or its files disagree with its metadata.
    """
    import minari

    from marl_minari.storage.check import check_data_folder
    from marl_minari.storage.dataset import MultiAgentDataset

    parse_dataset_id(dataset_id)
    folder = dataset_dir(dataset_id)
    if not (folder / METADATA_PATH).exists():
        raise DatasetNotFoundError(f"no local dataset {dataset_id!r} (looked in {folder})")
    try:
        dataset = minari.load_dataset(dataset_id)
    except MarlMinariError:
        raise
    except Exception as exc:
        raise CorruptedDataError(f"Minari cannot open {dataset_id!r}: {exc}") from exc
    try:
        MultiAgentDataset(dataset)
    except LayoutError as exc:
        if not allow_single_agent:
            raise LayoutError(f"{exc} Publish it anyway as a plain Minari dataset with "
                              "allow_single_agent=True (--allow-single-agent).") from exc
    metadata = read_json_object(folder / METADATA_PATH)
    if metadata.get("data_format", "hdf5") == "hdf5":
        # every episode against docs/format.md, before any upload
        check_data_folder(folder / "data")
    combined = list(dataset.spec.combined_datasets or [])
    for sub in combined:
        parse_dataset_id(sub)
    return combined


def publish(dataset_id: str, remote: str | None = None, *, allow_single_agent: bool = False,
            progress: ProgressArg = False,
            settings: RemoteSettings | None = None) -> PublishResult:
    """Publish a local dataset (and the datasets it combines) to a registry.

    Validates first (:func:`validate_local_dataset`), then for every dataset, combined ones
    first: publishes missing parent namespaces, uploads every file below a hidden pending
    prefix, claims the version by creating its manifest only if absent (size, SHA-256 and
    BLAKE3 of each file; digests the dataset remembers from when it was written are reused
    while its files are unchanged), moves the files into place, then adds the index entry. Of
    two concurrent publishers of one version, exactly one claims it; the other gets
    :class:`DatasetExistsError` (or ``unchanged`` if its files are the same). A publish
    interrupted before its claim leaves no visible dataset; run it again. A version already
    published with the same files is success (outcome ``unchanged``). A ``README.md`` dataset
    card in the dataset folder is published with it.

    Args:
        dataset_id: local dataset id, ``(namespace/)name-vN``.
        remote: ``file://``, ``s3://`` or a directory path; default :func:`default_registry`.
        allow_single_agent: also publish plain (single-agent) Minari datasets.
        progress: ``True`` for progress bars, or a callable receiving byte counts.
        settings: timeouts and flushing (:class:`RemoteSettings`); default from the
            environment.

    Raises:
        DatasetExistsError: this version (or a combined dataset) is already published with
            different files (versions are immutable: bump ``-vN``).
        LayoutError, CorruptedDataError, DatasetNotFoundError: validation failed.
        RemoteError: the remote failed or is read-only.
    """
    parse_dataset_id(dataset_id)
    storage = _registry_storage(remote, settings)
    storage._require_writable()
    order: list[str] = []
    _plan(dataset_id, allow_single_agent, order, set())
    results: dict[str, str] = {}
    manifest = None
    for current in order:
        local = dataset_dir(current)
        total = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
        update, close = _progress(progress, total, f"publish {current}")
        try:
            manifest, outcome = storage.publish_dataset(current, local, progress=update)
        finally:
            close()
        results[current] = outcome
    assert manifest is not None
    return PublishResult(dataset_id, storage.location, manifest, results)


def _plan(dataset_id: str, allow_single_agent: bool, order: list[str], seen: set[str]) -> None:
    """Post-order over combined datasets: parts are published before what combines them."""
    if dataset_id in seen:
        return
    seen.add(dataset_id)
    for sub in validate_local_dataset(dataset_id, allow_single_agent=allow_single_agent):
        _plan(sub, allow_single_agent, order, seen)
    order.append(dataset_id)


# ---------------------------------------------------------------------------- download
def download(dataset_id: str, remote: str | None = None, force: bool = False, *,
             progress: ProgressArg = False, settings: RemoteSettings | None = None,
             strict: bool = False) -> Path:
    """Download a published dataset (and the datasets it combines) into the datasets root.

    Every file goes to a hidden staging folder under the datasets root and is checked against
    the manifest (size and BLAKE3, or SHA-256 for older manifests); only then is the dataset
    moved into place with one rename. On any error the staging folder is removed and no
    partial dataset is left. Missing parent namespace metadata is fetched too, as Minari does.

    Args:
        dataset_id: ``(namespace/)name-vN``.
        remote: a registry; default :func:`default_registry`.
        force: replace an existing local dataset with that id (after the new copy is verified).
        progress: ``True`` for progress bars, or a callable receiving byte counts.
        settings: timeouts and the download deadline (:class:`RemoteSettings`); default from
            the environment.
        strict: refuse (rather than warn about) a dataset whose environment descriptor or
            ``env_spec`` names code outside the trusted environment packages.

    Returns:
        The local dataset folder.

    Raises:
        InvalidDatasetIdError: malformed id (``..``, absolute paths, ...).
        DatasetExistsError: a local dataset with that id exists and ``force`` is off.
        DatasetNotFoundError: not published on the remote.
        CorruptedDataError: a file is truncated or tampered with, or the manifest is unsafe.
        EnvDescriptorError: ``strict`` and the dataset names untrusted environment code.
        RemoteError: the remote failed (dropped connection, permissions, a file past its
            deadline, ...).
    """
    parse_dataset_id(dataset_id)
    storage = _registry_storage(remote, settings)
    if dataset_dir(dataset_id).exists() and not force:
        raise DatasetExistsError(
            f"dataset {dataset_id!r} already exists locally at {dataset_dir(dataset_id)}; pass "
            "force=True (--force) to replace it with the published copy"
        )
    return _download_tree(storage, dataset_id, force, progress, set(), strict)


def _download_tree(storage: RegistryStorage, dataset_id: str, force: bool,
                   progress: ProgressArg, seen: set[str], strict: bool) -> Path:
    from minari import supported_dataset_versions

    seen.add(dataset_id)
    root = datasets_root()
    manifest = storage.manifest(dataset_id)
    update, close = _progress(progress, manifest.total_size, f"download {dataset_id}")
    try:
        with staging_area(root) as work:
            staged = storage.fetch_into(dataset_id, work, manifest=manifest, progress=update)
            close()
            metadata = read_json_object(staged / METADATA_PATH)
            if metadata.get("minari_version") not in supported_dataset_versions:
                warnings.warn(
                    f"{dataset_id!r} was written for Minari {metadata.get('minari_version')}, "
                    "which this Minari may not read", UserWarning, stacklevel=3)
            _check_env_references(dataset_id, metadata, strict)
            for sub in metadata.get("combined_datasets") or []:
                try:
                    parse_dataset_id(sub)
                except InvalidDatasetIdError as exc:
                    raise CorruptedDataError(f"{dataset_id!r} combines a malformed id: {exc}"
                                             ) from exc
                if sub not in seen and not dataset_dir(sub).exists():
                    _download_tree(storage, sub, False, progress, seen, strict)
            storage.ensure_local_namespaces(dataset_id, root)
            return install(staged, root, dataset_id, replace=force, work=work)
    finally:
        close()


def _check_env_references(dataset_id: str, metadata: dict[str, Any], strict: bool) -> None:
    from marl_minari.envs.resolve import TRUSTED_ENV_PACKAGES_VAR, untrusted_env_references
    from marl_minari.errors import EnvDescriptorError

    found = untrusted_env_references(metadata)
    if not found:
        return
    message = (f"{dataset_id!r} names environment code outside the trusted packages "
               f"({'; '.join(found)}); recover_environment() refuses it unless you trust the "
               f"dataset's author (trust_remote_code=True or ${TRUSTED_ENV_PACKAGES_VAR}).")
    if strict:
        raise EnvDescriptorError(f"{message} Not downloaded (strict).")
    warnings.warn(message, UserWarning, stacklevel=4)


# ---------------------------------------------------------------------------- listing
@dataclass(frozen=True)
class RemoteDataset:
    """One dataset listed on a remote."""

    dataset_id: str
    metadata: dict[str, Any]
    total_size: int | None = None
    """Bytes of all files (from the manifest), when the remote records it."""
    published: str | None = None
    """UTC time of publishing, when the remote records it."""


def list_datasets(remote: str | None = None, prefix: str | None = None, *,
                  settings: RemoteSettings | None = None) -> list[RemoteDataset]:
    """Datasets published on a remote, sorted by id (one index read on marl-minari remotes).

    Other kinds (``hf://``) are listed through ``minari.list_remote_datasets``.

    Raises:
        RemoteError: the remote failed, or does not exist (a ``file://`` folder that is not
            there is an error, not an empty registry).
        CorruptedDataError: its index is damaged or larger than the size cap.
    """
    storage = open_remote(remote, settings=settings)
    if not isinstance(storage, RegistryStorage):
        import minari

        found = minari.list_remote_datasets(remote_path=resolve_remote(remote), prefix=prefix)
        return [RemoteDataset(k, dict(v)) for k, v in sorted(found.items())]
    storage.check_exists()
    index = storage.read_index()
    listed = []
    for dataset_id in storage.dataset_ids(prefix):
        entry = index["datasets"][dataset_id]
        entry = entry if isinstance(entry, dict) else {}
        metadata = entry.get("metadata") if isinstance(entry.get("metadata"), dict) else {}
        size = entry.get("total_size")
        listed.append(RemoteDataset(dataset_id, dict(metadata or {}),
                                    size if isinstance(size, int) else None,
                                    str(entry["published"]) if entry.get("published") else None))
    return listed


def reindex(remote: str | None = None, *, settings: RemoteSettings | None = None) -> int:
    """Rebuild a writable registry's index from its manifests; return the dataset count."""
    storage = _registry_storage(remote, settings)
    return len(rebuild_index(storage)["datasets"])


# ---------------------------------------------------------------------------- registration
def _file_kind() -> type[CloudStorage]:
    from .file import FileStorage

    return FileStorage


def _s3_kind() -> type[CloudStorage]:
    from .s3 import S3Storage

    return S3Storage


def _http_kind() -> type[CloudStorage]:
    from .http import HttpStorage

    return HttpStorage


def _https_kind() -> type[CloudStorage]:
    from .http import HttpsStorage

    return HttpsStorage


KINDS: dict[str, Callable[[], type[CloudStorage]]] = {
    "file": _file_kind, "s3": _s3_kind, "http": _http_kind, "https": _https_kind,
}


def register_remote_kinds() -> None:
    """Add ``file``, ``s3``, ``http`` and ``https`` to ``minari.storage.remotes._registry``.

    Minari's own kinds (``hf``, ``gcp``) are left as they are; a kind another package has
    already registered is not replaced (a warning says so).
    """
    from minari.storage.remotes import _registry

    for kind, factory in KINDS.items():
        current = _registry.get(kind)
        if current is None or current in KINDS.values():
            _registry[kind] = factory
        else:
            warnings.warn(f"remote kind {kind!r} is registered by another package; "
                          "marl-minari leaves it alone", UserWarning, stacklevel=2)
