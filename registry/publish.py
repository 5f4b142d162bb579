"""Publishing a local dataset as an immutable, verified version on a registry.

A publish stages every file where nobody sees it (a hidden per-publish prefix, or an open S3
multipart upload), then claims the version by creating its manifest only if absent (the
commit point: of two concurrent publishers exactly one wins), then puts its staged files in
place and adds the index entry; the loser discards its staged files, which never touched the
winner's. A published version is never overwritten. The remote's requests share one deadline,
which starts after the local validation.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    LayoutError,
    MarlMinariError,
)
from marl_minari.format.digests import remembered_digests
from marl_minari.format.ids import dataset_dir, not_found_locally, parse_dataset_id
from marl_minari.format.layout import MAIN_FILE_NAME, METADATA_FILE_NAME
from marl_minari.storage.open_blocks import opening_blocks

from .backend import PENDING_PREFIX, Backend, Staging
from .blocks import MIN_BLOCK_SIZE, block_digests, block_size_for
from .index import Index, index_entry, read_index, update_index
from .jsonfiles import read_json_object
from .kinds import open_backend
from .manifest import (
    MANIFEST_FILE_NAME,
    FileEntry,
    Manifest,
    dataset_files,
    local_manifest,
    new_manifest,
)
from .namespaces import publish_missing_namespaces
from .published import METADATA_PATH, find_manifest, read_manifest
from .settings import RemoteSettings
from .transfer import Progress, ProgressArg, progress_reporter

logger = logging.getLogger("marl_minari.registry")


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
        raise not_found_locally(dataset_id)
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
        remote: ``file://``, ``s3://`` or a directory path; default
            :func:`~.kinds.default_registry`.
        allow_single_agent: also publish plain (single-agent) Minari datasets.
        progress: ``True`` for progress bars, or a callable receiving byte counts.
        settings: timeouts, rates and flushing (:class:`RemoteSettings`); default from the
            environment.

    Raises:
        DatasetExistsError: this version (or a combined dataset) is already published with
            different files (versions are immutable: bump ``-vN``).
        LayoutError, CorruptedDataError, DatasetNotFoundError: validation failed.
        RemoteError: the remote failed, is read-only, or the deadline passed.
    """
    parse_dataset_id(dataset_id)
    backend = open_backend(remote, settings=settings)
    backend.require_writable()
    order: list[str] = []
    _plan(dataset_id, allow_single_agent, order, set())
    results: dict[str, str] = {}
    manifest = None
    for current in order:
        local = dataset_dir(current)
        total = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
        update, close = progress_reporter(progress, total, f"publish {current}")
        try:
            manifest, outcome = publish_dataset(backend, current, local, progress=update)
        finally:
            close()
        results[current] = outcome
    assert manifest is not None  # the plan holds at least dataset_id
    return PublishResult(dataset_id, backend.location, manifest, results)


def _plan(dataset_id: str, allow_single_agent: bool, order: list[str], seen: set[str]) -> None:
    """Post-order over combined datasets: parts are published before what combines them."""
    if dataset_id in seen:
        return
    seen.add(dataset_id)
    for sub in validate_local_dataset(dataset_id, allow_single_agent=allow_single_agent):
        _plan(sub, allow_single_agent, order, seen)
    order.append(dataset_id)


def publish_dataset(backend: Backend, dataset_id: str, local: Path, *,
                    progress: Progress | None = None) -> tuple[Manifest, str]:
    """Upload one local dataset folder and commit it as a new immutable version.

    Files are staged first; the manifest, created only if absent, claims the version; only
    the publish that claimed it puts its files in place and adds the index entry. A
    concurrent publisher of other files loses the claim before it touches any published key.
    No validation here (:func:`publish` validates; Minari's upload does not).

    Args:
        backend: the registry, for this operation.
        dataset_id: validated id; ``local`` is its folder.
        progress: called with byte counts.

    Returns:
        ``(manifest, outcome)``; outcome ``"published"``, ``"completed"`` (an earlier
        publish of the same files claimed the version but stopped before listing it; its
        files were uploaded again and it is listed now) or ``"unchanged"`` (already
        published and listed with the same files).

    Raises:
        DatasetExistsError: the version is published with other files (before, or by a
            concurrent publisher that claimed it first).
    """
    backend.require_writable()
    parse_dataset_id(dataset_id)
    metadata = read_json_object(local / METADATA_PATH)
    if metadata.get("dataset_id") != dataset_id:
        raise CorruptedDataError(
            f"{local / METADATA_PATH} says dataset_id {metadata.get('dataset_id')!r}, but "
            f"it is published as {dataset_id!r}"
        )
    files = dataset_files(local)
    existing = find_manifest(backend, dataset_id)
    if existing is not None:
        return _already_published(backend, dataset_id, local, files, existing, metadata)
    namespaces = publish_missing_namespaces(backend, dataset_id)
    staging = Staging(dataset_id, f"{dataset_id}/{PENDING_PREFIX}{uuid.uuid4().hex}")
    try:
        manifest = new_manifest(dataset_id, _upload(backend, staging, local, files, progress))
        if not backend.write_new(f"{dataset_id}/{MANIFEST_FILE_NAME}", manifest.to_json()):
            winner = read_manifest(backend, dataset_id)
            if not winner.same_content(manifest):
                raise DatasetExistsError(
                    f"{dataset_id!r} was published on {backend.location} with different files "
                    "by another publisher while this publish ran; versions are immutable: "
                    "bump the version (-vN+1) and publish again"
                )
            return _already_published(backend, dataset_id, local, files, winner, metadata)
        backend.commit(staging, files)
    finally:
        backend.discard(staging)
    _record(backend, dataset_id, metadata, manifest, namespaces)
    logger.info("published %s to %s (%d files, %d bytes)", dataset_id, backend.location,
                len(manifest.files), manifest.total_size)
    return manifest, "published"


def _upload(backend: Backend, target: Staging | str, local: Path, files: list[str],
            progress: Progress | None) -> list[FileEntry]:
    """Upload ``files`` of ``local``; their manifest entries.

    ``target``: a :class:`Staging` (invisible until committed), or the dataset id (the
    published keys, once the version is claimed with these files).
    """
    known = remembered_digests(local)
    entries = []
    for relative in files:
        source, remembered = local / relative, known.get(relative)
        digests = (backend.stage(target, relative, source, progress, remembered)
                   if isinstance(target, Staging) else
                   backend.put_file(f"{target}/{relative}", source, progress, remembered))
        entries.append(_with_range_digests(
            FileEntry(relative, digests.size, digests.sha256, digests.blake3), source))
    return entries


def _with_range_digests(entry: FileEntry, source: Path) -> FileEntry:
    """``entry`` with the range digests of ``source`` (files larger than one block), so that
    readers can verify byte ranges of it (``docs/registry.md``, *Range digests*).

    The blocks are hashed from the local file after its upload; their whole-file BLAKE3 must
    be the one the upload recorded, so they describe the bytes published.

    Raises:
        CorruptedDataError: the file changed since it was uploaded.
    """
    if entry.size <= MIN_BLOCK_SIZE:
        return entry
    block_size = block_size_for(entry.size)
    size, whole, blocks = block_digests(source, block_size)
    if size != entry.size or whole != entry.blake3:
        raise CorruptedDataError(f"{source} changed while it was published; publish again")
    opening: list[int] = []
    if entry.path == f"data/{MAIN_FILE_NAME}":
        opening = opening_blocks(source, read_json_object(source.parent / METADATA_FILE_NAME),
                                 block_size)
    return FileEntry(entry.path, entry.size, entry.sha256, entry.blake3, block_size, blocks,
                     tuple(opening))


def _already_published(backend: Backend, dataset_id: str, local: Path, files: list[str],
                       existing: Manifest, metadata: dict[str, Any]) -> tuple[Manifest, str]:
    """Outcome of publishing a version that has a manifest already."""
    if not existing.same_content(local_manifest(dataset_id, local, files)):
        raise DatasetExistsError(
            f"{dataset_id!r} is already published on {backend.location} with different files "
            "(the local dataset changed since it was published); published versions are "
            "immutable: bump the version (-vN+1) and publish that"
        )
    if dataset_id in read_index(backend)["datasets"]:
        return existing, "unchanged"
    # The version was claimed with these files, but its publish stopped (or is still
    # running) before the index entry: its files may be missing. Uploading the same bytes
    # to the published keys again is safe, whoever else does it at the same time.
    namespaces = publish_missing_namespaces(backend, dataset_id)
    uploaded = new_manifest(dataset_id, _upload(backend, dataset_id, local, files, None))
    if not existing.same_content(uploaded):
        raise CorruptedDataError(f"{local} changed while it was published; publish again")
    backend.flush(dataset_id)
    _record(backend, dataset_id, metadata, existing, namespaces)
    return existing, "completed"


def _record(backend: Backend, dataset_id: str, metadata: dict[str, Any], manifest: Manifest,
            namespaces: dict[str, dict[str, Any]]) -> None:
    """One index update: the dataset's entry and the namespaces published with it."""
    entry = index_entry(metadata, manifest)

    def record(index: Index) -> bool:
        missing = {k: v for k, v in namespaces.items() if k not in index["namespaces"]}
        if index["datasets"].get(dataset_id) == entry and not missing:
            return False
        index["namespaces"].update(missing)
        index["datasets"][dataset_id] = entry
        return True

    update_index(backend, record)
