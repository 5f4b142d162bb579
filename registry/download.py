"""Downloading a published dataset: every file verified, then installed in one rename.

Every file goes to a hidden staging folder under the datasets root and is checked against the
manifest (size and BLAKE3, or SHA-256 for older manifests); only then is the dataset moved
into place with one rename (:mod:`.install`). On any error the staging folder is removed and
nothing partial is left where Minari looks for datasets. All requests of one download (the
manifest, every file, the datasets it combines, namespace metadata) share one deadline.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from marl_minari.errors import CorruptedDataError, DatasetExistsError, InvalidDatasetIdError
from marl_minari.format.ids import dataset_dir, datasets_root, parse_dataset_id
from marl_minari.user_warnings import warn

from .backend import Backend
from .install import install, staging_area
from .jsonfiles import read_json_object, typed
from .kinds import open_backend
from .manifest import Manifest
from .namespaces import complete_local_namespaces
from .published import METADATA_PATH, read_manifest
from .settings import RemoteSettings
from .transfer import Progress, ProgressArg, episode_progress, progress_reporter


def fetch_into(backend: Backend, dataset_id: str, work: Path, manifest: Manifest,
               progress: Progress | None = None) -> Path:
    """Download every file of ``dataset_id`` under ``work`` and verify it.

    Returns the staged dataset folder (``work/fetch-<random>``).

    Raises:
        CorruptedDataError: a manifest path leaves the folder, a file's size or digest differs
            from the manifest, or the downloaded metadata names another dataset.
        RemoteError: the remote failed (connection dropped, permission, the deadline, ...).
    """
    parse_dataset_id(dataset_id)
    staged = work / f"fetch-{uuid.uuid4().hex}"
    staged.mkdir(parents=True)
    root = staged.resolve()
    for number, entry in enumerate(manifest.files):
        target = staged.joinpath(*entry.path.split("/"))
        if not target.resolve().is_relative_to(root):  # checked in the manifest too
            raise CorruptedDataError(f"manifest of {dataset_id!r} on {backend.location}: "
                                     f"files[{number}].path {entry.path!r} leaves the dataset")
        target.parent.mkdir(parents=True, exist_ok=True)
        key = f"{dataset_id}/{entry.path}"
        size, digest = backend.get_file(key, target, entry.size, entry.check_algorithm,
                                        progress)
        entry.check_arrived(f"{backend.location}/{key}", size, digest)
    metadata = read_json_object(staged / METADATA_PATH)
    if metadata.get("dataset_id") != dataset_id:
        raise CorruptedDataError(f"{dataset_id!r} on {backend.location}: its metadata names "
                                 f"{metadata.get('dataset_id')!r}")
    _settle_offset_index(staged, metadata, show_progress=progress is not None)
    return staged


def _settle_offset_index(staged: Path, metadata: dict[str, Any], *,
                         show_progress: bool) -> None:
    """Compare every entry of a downloaded offset index with the data file, whatever their
    number, and delete the index if any disagrees; where all agree, remember the data file's
    digests as its local writer, so that readers in every later process trust the whole index
    at once (they trust a whole file only on what a local writer remembered, never on the
    index's own header, which whoever published the dataset wrote). ``show_progress``: a
    progress bar of episodes (on a terminal, once comparing takes more than a second)."""
    from marl_minari.errors import MarlMinariError
    from marl_minari.format import layout, offset_index
    from marl_minari.storage.reader_state import metadata_read_as

    data = staged / "data"
    episodes, steps = metadata.get("total_episodes"), metadata.get("total_steps")
    try:
        read_as = metadata_read_as(metadata, data)
    except MarlMinariError:  # reported where the dataset is opened; no index meanwhile
        read_as = None
    if not (isinstance(episodes, int) and isinstance(steps, int)) or read_as is None:
        (data / layout.INDEX_FILE_NAME).unlink(missing_ok=True)
        return
    update, close = (episode_progress(episodes, "verifying the offset index")
                     if show_progress else (None, lambda: None))
    try:
        verified = offset_index.verify_or_drop(data, episodes, steps, read_as,
                                               progress=update)
    finally:
        close()
    if verified:
        offset_index.vouch(data)


def install_published(backend: Backend, dataset_id: str, root: Path, *, replace: bool,
                      progress: Progress | None = None,
                      manifest: Manifest | None = None) -> Path:
    """Download and verify one dataset (not the ones it combines) and install it under the
    datasets root ``root``, with its missing namespace metadata; its local folder.

    This is what Minari's ``download_dataset`` drives (``replace``: Minari has already
    decided to replace a local copy).
    """
    manifest = manifest or read_manifest(backend, dataset_id)
    with staging_area(root) as work:
        staged = fetch_into(backend, dataset_id, work, manifest, progress)
        complete_local_namespaces(backend, dataset_id, root)
        return install(staged, root, dataset_id, replace=replace, work=work)


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
        remote: a registry; default :func:`~.kinds.default_registry`.
        force: replace an existing local dataset with that id (after the new copy is verified).
        progress: ``True`` for progress bars, or a callable receiving byte counts.
        settings: timeouts and the rate the download must keep (:class:`RemoteSettings`);
            default from the environment.
        strict: refuse (rather than warn about) a dataset whose environment descriptor or
            ``env_spec`` names code outside the trusted environment packages.

    Returns:
        The local dataset folder.

    Raises:
        InvalidDatasetIdError: malformed id (``..``, absolute paths, ...).
        DatasetExistsError: a local dataset with that id exists and ``force`` is off.
        DatasetNotFoundError: not published on the remote.
        CorruptedDataError: a file is truncated or tampered with, or the manifest or metadata
            is unsafe or malformed (the message names the file and key).
        EnvDescriptorError: ``strict`` and the dataset names untrusted environment code.
        RemoteError: the remote failed (dropped connection, permissions, past the deadline,
            ...).
    """
    parse_dataset_id(dataset_id)
    backend = open_backend(remote, settings=settings)
    if dataset_dir(dataset_id).exists() and not force:
        raise DatasetExistsError(
            f"dataset {dataset_id!r} already exists locally at {dataset_dir(dataset_id)}; pass "
            "force=True (--force) to replace it with the published copy"
        )
    return _download_tree(backend, dataset_id, force, progress, set(), strict)


def _download_tree(backend: Backend, dataset_id: str, force: bool, progress: ProgressArg,
                   seen: set[str], strict: bool) -> Path:
    """Download ``dataset_id`` after the datasets it combines (each verified and installed
    before the one combining it)."""
    seen.add(dataset_id)
    root = datasets_root()
    manifest = read_manifest(backend, dataset_id)
    update, close = progress_reporter(progress, manifest.total_size, f"download {dataset_id}")
    try:
        with staging_area(root) as work:
            staged = fetch_into(backend, dataset_id, work, manifest, update)
            close()
            where = f"{backend.location}/{dataset_id}/{METADATA_PATH}"
            metadata = read_json_object(staged / METADATA_PATH)
            _warn_if_unsupported(dataset_id, metadata, where)
            _check_env_references(dataset_id, metadata, strict)
            for sub in _combined(metadata, where):
                if sub not in seen and not dataset_dir(sub).exists():
                    _download_tree(backend, sub, False, progress, seen, strict)
            complete_local_namespaces(backend, dataset_id, root)
            return install(staged, root, dataset_id, replace=force, work=work)
    finally:
        close()


def _combined(metadata: dict[str, Any], where: str) -> list[str]:
    """The ids in ``combined_datasets`` (none when absent).

    Raises:
        CorruptedDataError: not a list of well-formed ids.
    """
    combined = typed(metadata, "combined_datasets", list, where, required=False) or []
    for number, sub in enumerate(combined):
        if not isinstance(sub, str):
            raise CorruptedDataError(f"{where}: combined_datasets[{number}] must be a string, "
                                     f"not {type(sub).__name__}")
        try:
            parse_dataset_id(sub)
        except InvalidDatasetIdError as exc:
            raise CorruptedDataError(f"{where}: combined_datasets[{number}] is a malformed "
                                     f"id: {exc}") from exc
    return combined


def _warn_if_unsupported(dataset_id: str, metadata: dict[str, Any], where: str) -> None:
    from minari import supported_dataset_versions

    version = metadata.get("minari_version")
    if not isinstance(version, str) or version not in supported_dataset_versions:
        warn(f"{dataset_id!r} was written for Minari {version!r} ({where}), which this Minari "
             "may not read")


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
    warn(message)
