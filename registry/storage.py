"""The registry protocol shared by every remote kind, on top of a few storage primitives.

:class:`RegistryStorage` is a :class:`minari.storage.remotes.cloud_storage.CloudStorage`, so
Minari's own ``upload_dataset``, ``list_remote_datasets``, ``download_dataset`` and
``load_dataset(..., download=True)`` drive it. Subclasses (``file://``, ``s3://``,
``http(s)://``) only move bytes: read/write small objects, upload/download one file, stage
and commit a publish's files, list keys. Everything that makes the registry safe lives here, once:

* publishing stages every file where nobody sees it (a hidden per-publish prefix, or an open
  S3 multipart upload), then claims the version by creating its manifest only if absent (the
  commit point: of two concurrent publishers exactly one wins), then puts its staged files in
  place and adds the index entry; the loser discards its staged files, which never touched
  the winner's; a published version is never overwritten;
* downloading reads the manifest, fetches every file into a hidden staging folder under the
  datasets root, checks the size and digest (BLAKE3, or SHA-256 in older manifests) of each,
  within a deadline scaled to its size, and moves the dataset into place with one ``rename``
  (:mod:`.local`); any failure removes the staging folder;
* every id, namespace and manifest path is validated before it becomes a key or a local path,
  and small objects (index, manifest, metadata) are read only up to a size cap;
* every error message passes through :func:`.credentials.scrub`.

The remote layout is described in ``docs/registry.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
import warnings
from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final

from minari.storage.remotes.cloud_storage import CloudStorage

from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    RemoteError,
)
from marl_minari.format.digests import (
    FileDigests,
    RememberedDigests,
    remembered_digests,
)
from marl_minari.format.ids import parse_dataset_id

from .credentials import scrub, url_secrets
from .index import (
    INDEX_FILE_NAME,
    MAX_INDEX_BYTES,
    MAX_METADATA_BYTES,
    METADATA_PATH,
    NAMESPACE_METADATA_FILE_NAME,
    check_namespace,
    index_entry,
    namespace_levels,
    parse_index,
    parse_json_object,
    serialize_index,
)
from .local import install, read_json_object, staging_area, write_json_atomically
from .manifest import (
    MANIFEST_FILE_NAME,
    MAX_MANIFEST_BYTES,
    FileEntry,
    Manifest,
    dataset_files,
    local_manifest,
    new_manifest,
)
from .settings import RemoteSettings
from .transfer import Progress, tqdm_progress

logger = logging.getLogger("marl_minari.registry")

PENDING_PREFIX: Final = ".pending-"
"""Hidden folder inside a dataset's folder on the remote that holds one publish's files until
it has claimed the version."""


@dataclass
class Staging:
    """The files of one publish on their way to becoming a version (see ``_stage_file``)."""

    dataset_id: str
    prefix: str
    """Hidden key prefix, ``<dataset>/.pending-<random>``, for kinds that stage below it."""
    uploads: dict[str, Any] = field(default_factory=dict)
    """Per file, what a kind needs to commit or discard it (e.g. an S3 multipart upload)."""


class RegistryStorage(CloudStorage):
    """Base of the marl-minari remote kinds; see the module docstring.

    Subclasses set :attr:`kind` and implement the primitives (the methods starting with
    ``_``; read-only kinds leave the write primitives as they are here). Keys are relative
    POSIX paths below the registry root, built only from validated ids, namespaces and
    manifest paths.

    Args:
        name: the remote after ``kind://``.
        token: Minari's token (used by ``http(s)://`` as a Bearer token).
        settings: timeouts, deadlines and flushing; default :meth:`RemoteSettings.from_env`.
    """

    kind: ClassVar[str] = ""
    writable: ClassVar[bool] = True

    def __init__(self, name: str, token: str | None = None, *,
                 settings: RemoteSettings | None = None) -> None:
        self._token = token
        self._secrets = [s for s in [token, *url_secrets(f"{self.kind}://{name}")] if s]
        self.settings = settings if settings is not None else RemoteSettings.from_env()
        self._index_cache: dict[str, Any] | None = None
        self._cache_lock = threading.Lock()

    # ------------------------------------------------------------------ primitives
    @property
    @abstractmethod
    def location(self) -> str:
        """The remote as ``kind://...``, without credentials (safe to print)."""

    @abstractmethod
    def _read(self, key: str, limit: int) -> bytes | None:
        """The bytes stored at ``key``; ``None`` if there is nothing there.

        More than ``limit`` bytes raise :func:`too_large` (checked before reading them all).
        """

    def _read_versioned(self, key: str, limit: int) -> tuple[bytes | None, str | None]:
        """Bytes at ``key`` and a version token for :meth:`_write_if`."""
        return self._read(key, limit), None

    def _write_if(self, key: str, data: bytes, version: str | None) -> bool:
        """Replace ``key`` if it still has ``version`` (``None``: if it does not exist).

        Returns False when someone else changed it first. Backends without conditional
        writes rely on :meth:`_index_lock` and always succeed.
        """
        raise self._read_only()

    def _write_new(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent, atomically; False if it exists."""
        raise self._read_only()

    def _write(self, key: str, data: bytes) -> None:
        """Create or replace ``key`` (small objects: metadata)."""
        raise self._read_only()

    def _put_file(self, key: str, source: Path, progress: Progress | None,
                  known: RememberedDigests | None) -> FileDigests:
        """Upload a local file to ``key``; size and digests of the bytes sent.

        ``known``: digests remembered for ``source``. The upload then hashes nothing and only
        checks that the file still has the identity it had when it was hashed (see
        :func:`uploaded_digests`).
        """
        raise self._read_only()

    def _stage_file(self, staging: Staging, relative: str, source: Path,
                    progress: Progress | None, known: RememberedDigests | None) -> FileDigests:
        """Upload ``source`` as the file ``relative`` of a new version, invisibly.

        Nothing a reader or another publisher sees may change until :meth:`_commit_staging`.
        By default the file goes below the hidden key prefix ``staging.prefix``.
        """
        return self._put_file(f"{staging.prefix}/{relative}", source, progress, known)

    def _commit_staging(self, staging: Staging, files: list[str]) -> None:
        """Put every staged file at its published key (after the version was claimed)."""
        for relative in files:
            self._move(f"{staging.prefix}/{relative}", f"{staging.dataset_id}/{relative}")
        self._finish_moves(staging.dataset_id)

    def _discard_staging(self, staging: Staging) -> None:
        """Remove what is left of a staging (all of it if it was never committed)."""
        self._delete_tree(staging.prefix)

    def _move(self, source: str, target: str) -> None:
        """Move the object at key ``source`` to key ``target`` (replacing it)."""
        raise self._read_only()

    def _finish_moves(self, prefix: str) -> None:
        """Called after files were put in place below ``prefix``: make them durable."""

    def _delete_tree(self, prefix: str) -> None:
        """Delete every key below ``prefix/`` (best effort: leftovers are hidden)."""
        raise self._read_only()

    @abstractmethod
    def _get_file(self, key: str, target: Path, size: int, algorithm: str,
                  progress: Progress | None) -> tuple[int, str]:
        """Download ``key`` into ``target``; ``(size, hex digest)`` of the bytes written.

        Must stop (``CorruptedDataError``) once more than ``size`` bytes arrive, and
        (``RemoteError``) once the download takes longer than
        ``settings.download_deadline(size)``.
        """

    def _list_keys(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix`` (used to rebuild the index)."""
        raise RemoteError(f"{self.location} cannot list its files; rebuild the index at the "
                          "source registry instead")

    def check_exists(self) -> None:
        """Raise :class:`RemoteError` if the registry itself does not exist.

        Only kinds that can tell (``file://``: its folder) check anything; publishing creates
        the registry, so only reading calls this.
        """

    def _index_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while the index is read, changed and written back."""
        return contextlib.nullcontext()

    def _fail(self, message: str, exc: BaseException | None = None) -> RemoteError:
        """A :class:`RemoteError` whose message carries no credentials."""
        detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        return RemoteError(scrub(f"{message}{detail}", self._secrets))

    def _read_only(self) -> RemoteError:
        return RemoteError(
            f"{self.location} is read-only ({self.kind}:// serves a published registry); "
            "publish to the file:// or s3:// registry it serves instead"
        )

    def _require_writable(self) -> None:
        if not self.writable:
            raise self._read_only()

    # ------------------------------------------------------------------ index
    def read_index(self, *, refresh: bool = True) -> dict[str, Any]:
        """The registry index (an empty one when the registry has none yet)."""
        with self._cache_lock:
            if refresh or self._index_cache is None:
                raw = self._read(INDEX_FILE_NAME, MAX_INDEX_BYTES)
                self._index_cache = parse_index(raw, self.location)
            return self._index_cache

    def _update_index(self, change: Callable[[dict[str, Any]], bool]) -> None:
        """Apply ``change`` to the index and write it back (``change`` False: no write)."""
        for attempt in range(50):
            with self._index_lock():
                raw, version = self._read_versioned(INDEX_FILE_NAME, MAX_INDEX_BYTES)
                index = parse_index(raw, self.location)
                if not change(index):
                    with self._cache_lock:
                        self._index_cache = index
                    return
                if self._write_if(INDEX_FILE_NAME, serialize_index(index), version):
                    with self._cache_lock:
                        self._index_cache = index
                    return
            time.sleep(min(0.05 * (attempt + 1), 1.0))
        raise self._fail(f"the index of {self.location} kept changing under concurrent writers")

    def dataset_ids(self, prefix: str | None = None) -> list[str]:
        """Published dataset ids (from the index), optionally only those starting with prefix.

        A registry that does not exist yet lists as empty here (Minari's upload lists the
        remote before its first publish); :func:`~marl_minari.registry.list_datasets` calls
        :meth:`check_exists` first.
        """
        ids = []
        for dataset_id in self.read_index()["datasets"]:
            try:
                parse_dataset_id(dataset_id)
            except InvalidDatasetIdError:
                warnings.warn(f"skipping malformed id {dataset_id!r} in {self.location}",
                              stacklevel=2)
                continue
            if prefix is None or dataset_id.startswith(prefix):
                ids.append(dataset_id)
        return sorted(ids)

    # ------------------------------------------------------------------ CloudStorage
    def list_datasets(self, prefix: str | None = None) -> Iterable[str]:
        """Ids of the published datasets (one read of the index)."""
        return self.dataset_ids(prefix)

    def get_dataset_metadata(self, dataset_id: str) -> dict:
        """``metadata.json`` of a published dataset, from the index when it is there."""
        parse_dataset_id(dataset_id)
        index = self.read_index(refresh=False)
        entry = index["datasets"].get(dataset_id)
        if isinstance(entry, dict) and isinstance(entry.get("metadata"), dict):
            return dict(entry["metadata"])
        return self.get_dataset_metadata_file(dataset_id)

    def get_dataset_metadata_file(self, dataset_id: str) -> dict[str, Any]:
        """The published ``data/metadata.json`` of ``dataset_id``, read from its file."""
        parse_dataset_id(dataset_id)
        key = f"{dataset_id}/{METADATA_PATH}"
        raw = self._read(key, MAX_METADATA_BYTES)
        if raw is None:
            raise DatasetNotFoundError(f"{dataset_id!r} is not published on {self.location}")
        return parse_json_object(raw, f"metadata {self.location}/{key}")

    def list_namespaces(self) -> Iterable[str]:
        """Namespaces recorded in the index."""
        found = []
        for namespace in self.read_index()["namespaces"]:
            try:
                found.append(check_namespace(namespace))
            except InvalidDatasetIdError:
                continue
        return sorted(found)

    def upload_namespace(self, namespace: str) -> None:
        """Publish the local ``namespace_metadata.json`` of ``namespace`` (and record it)."""
        from minari.storage.datasets_root_dir import get_dataset_path

        check_namespace(namespace)
        self._require_writable()
        local = Path(get_dataset_path(namespace)) / NAMESPACE_METADATA_FILE_NAME
        metadata = read_json_object(local) if local.exists() else {}
        self._put_namespace(namespace, metadata)

    def download_namespace_metadata(self, namespace: str, path: Path) -> None:
        """Write the remote metadata of ``namespace`` under the local root ``path``."""
        check_namespace(namespace)
        metadata = self.namespace_metadata(namespace)
        if metadata is None:
            raise DatasetNotFoundError(f"namespace {namespace!r} is not on {self.location}")
        write_json_atomically(Path(path).joinpath(*namespace.split("/"))
                              / NAMESPACE_METADATA_FILE_NAME, metadata)

    def upload_dataset(self, dataset_id: str) -> None:
        """Publish one local dataset (Minari's upload entry point).

        Minari checks the remote itself before calling; a version that is already published
        with identical files is left alone, one with different files raises
        :class:`DatasetExistsError`.
        """
        from minari.storage.datasets_root_dir import get_dataset_path

        parse_dataset_id(dataset_id)
        local = Path(get_dataset_path(dataset_id))
        size = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
        update, close = tqdm_progress(size, f"upload {dataset_id}")
        try:
            self.publish_dataset(dataset_id, local, progress=update)
        finally:
            close()

    def download_dataset(self, dataset_id: str, path: Path) -> None:
        """Download and verify one dataset into the root ``path`` (Minari's entry point).

        Minari calls this after its own checks, also with ``force_download``: an existing
        local copy is replaced, in one rename, only after the new one is complete.
        """
        parse_dataset_id(dataset_id)
        manifest = self.manifest(dataset_id)
        update, close = tqdm_progress(manifest.total_size, f"download {dataset_id}")
        try:
            with staging_area(Path(path)) as work:
                staged = self.fetch_into(dataset_id, work, manifest=manifest, progress=update)
                self.ensure_local_namespaces(dataset_id, Path(path))
                install(staged, Path(path), dataset_id, replace=True, work=work)
        finally:
            close()

    # ------------------------------------------------------------------ namespaces
    def namespace_metadata(self, namespace: str) -> dict[str, Any] | None:
        """Remote metadata of ``namespace``; ``None`` if it is not published."""
        check_namespace(namespace)
        entry = self.read_index(refresh=False)["namespaces"].get(namespace)
        if isinstance(entry, dict):
            return dict(entry)
        key = f"{namespace}/{NAMESPACE_METADATA_FILE_NAME}"
        raw = self._read(key, MAX_METADATA_BYTES)
        if raw is None:
            return None
        try:
            return parse_json_object(raw, f"{self.location}/{key}")
        except CorruptedDataError:
            return None

    def _put_namespace(self, namespace: str, metadata: dict[str, Any]) -> None:
        self._write(f"{namespace}/{NAMESPACE_METADATA_FILE_NAME}",
                    (json.dumps(metadata) + "\n").encode())

        def record(index: dict[str, Any]) -> bool:
            index["namespaces"][namespace] = metadata
            return True

        self._update_index(record)

    def ensure_remote_namespaces(self, dataset_id: str) -> dict[str, dict[str, Any]]:
        """Write the metadata file of every parent namespace of ``dataset_id`` missing remotely.

        The local ``namespace_metadata.json`` is used where it exists, ``{}`` otherwise (Minari's
        download needs every level to be listed). Returns what was written; the caller records
        it in the index (:meth:`_record`), together with the dataset.
        """
        from minari.storage.datasets_root_dir import get_dataset_path

        namespace = parse_dataset_id(dataset_id)[0]
        present = self.read_index()["namespaces"]
        written: dict[str, dict[str, Any]] = {}
        for level in namespace_levels(namespace):
            if level in present:
                continue
            local = Path(get_dataset_path(level)) / NAMESPACE_METADATA_FILE_NAME
            metadata = read_json_object(local) if local.exists() else {}
            logger.info("publishing namespace %s to %s", level, self.location)
            self._write(f"{level}/{NAMESPACE_METADATA_FILE_NAME}",
                        (json.dumps(metadata) + "\n").encode())
            written[level] = metadata
        return written

    # ------------------------------------------------------------------ manifests
    def manifest(self, dataset_id: str) -> Manifest:
        """The manifest of a published version.

        Raises:
            DatasetNotFoundError: the version is not published (or its publish never claimed
                it).
            CorruptedDataError: the manifest is damaged, unsafe or too large.
            RemoteError: the registry does not exist.
        """
        parse_dataset_id(dataset_id)
        found = self.find_manifest(dataset_id)
        if found is None:
            self.check_exists()
            raise DatasetNotFoundError(
                f"{dataset_id!r} is not published on {self.location} (no manifest)"
            )
        return found

    def find_manifest(self, dataset_id: str) -> Manifest | None:
        """The manifest of ``dataset_id``, or ``None`` if it has none."""
        parse_dataset_id(dataset_id)
        key = f"{dataset_id}/{MANIFEST_FILE_NAME}"
        raw = self._read(key, MAX_MANIFEST_BYTES)
        if raw is None:
            return None
        return Manifest.from_json(raw, dataset_id, f"{self.location}/{key}")

    # ------------------------------------------------------------------ publishing
    def publish_dataset(self, dataset_id: str, local: Path, *,
                        progress: Progress | None = None) -> tuple[Manifest, str]:
        """Upload one local dataset folder and commit it as a new immutable version.

        Files go under a hidden per-publish prefix first; the manifest, created only if
        absent, claims the version; only the publish that claimed it moves its files into
        place and adds the index entry. A concurrent publisher of other files loses the claim
        before it touches any published key.

        Args:
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
        self._require_writable()
        parse_dataset_id(dataset_id)
        metadata = read_json_object(local / METADATA_PATH)
        if metadata.get("dataset_id") != dataset_id:
            raise CorruptedDataError(
                f"{local / METADATA_PATH} says dataset_id {metadata.get('dataset_id')!r}, but "
                f"it is published as {dataset_id!r}"
            )
        files = dataset_files(local)
        existing = self.find_manifest(dataset_id)
        if existing is not None:
            return self._already_published(dataset_id, local, files, existing, metadata)
        namespaces = self.ensure_remote_namespaces(dataset_id)
        staging = Staging(dataset_id, f"{dataset_id}/{PENDING_PREFIX}{uuid.uuid4().hex}")
        try:
            manifest = new_manifest(dataset_id, self._upload(staging, local, files, progress))
            if not self._write_new(f"{dataset_id}/{MANIFEST_FILE_NAME}", manifest.to_json()):
                winner = self.manifest(dataset_id)
                if not winner.same_content(manifest):
                    raise DatasetExistsError(
                        f"{dataset_id!r} was published on {self.location} with different files by "
                        "another publisher while this publish ran; versions are immutable: "
                        "bump the version (-vN+1) and publish again"
                    )
                return self._already_published(dataset_id, local, files, winner, metadata)
            self._commit_staging(staging, files)
        finally:
            self._discard_staging(staging)
        self._record(dataset_id, metadata, manifest, namespaces)
        logger.info("published %s to %s (%d files, %d bytes)", dataset_id, self.location,
                    len(manifest.files), manifest.total_size)
        return manifest, "published"

    def _upload(self, target: Staging | str, local: Path, files: list[str],
                progress: Progress | None) -> list[FileEntry]:
        """Upload ``files`` of ``local``; their manifest entries.

        ``target``: a :class:`Staging` (invisible until committed), or the dataset id (the
        published keys, once the version is claimed with these files).
        """
        known = remembered_digests(local)
        entries = []
        for relative in files:
            source, remembered = local / relative, known.get(relative)
            digests = (self._stage_file(target, relative, source, progress, remembered)
                       if isinstance(target, Staging) else
                       self._put_file(f"{target}/{relative}", source, progress, remembered))
            entries.append(FileEntry(relative, digests.size, digests.sha256, digests.blake3))
        return entries

    def _already_published(self, dataset_id: str, local: Path, files: list[str],
                           existing: Manifest, metadata: dict[str, Any]) -> tuple[Manifest, str]:
        """Outcome of publishing a version that has a manifest already."""
        if not existing.same_content(local_manifest(dataset_id, local, files)):
            raise DatasetExistsError(
                f"{dataset_id!r} is already published on {self.location} with different files "
                "(the local dataset changed since it was published); published versions are "
                "immutable: bump the version (-vN+1) and publish that"
            )
        if dataset_id in self.read_index()["datasets"]:
            return existing, "unchanged"
        # The version was claimed with these files, but its publish stopped (or is still
        # running) before the index entry: its files may be missing. Uploading the same bytes
        # to the published keys again is safe, whoever else does it at the same time.
        namespaces = self.ensure_remote_namespaces(dataset_id)
        uploaded = new_manifest(dataset_id, self._upload(dataset_id, local, files, None))
        if not existing.same_content(uploaded):
            raise CorruptedDataError(f"{local} changed while it was published; publish again")
        self._finish_moves(dataset_id)
        self._record(dataset_id, metadata, existing, namespaces)
        return existing, "completed"

    def _record(self, dataset_id: str, metadata: dict[str, Any], manifest: Manifest,
                namespaces: dict[str, dict[str, Any]]) -> None:
        """One index update: the dataset's entry and the namespaces published with it."""
        entry = index_entry(metadata, manifest)

        def record(index: dict[str, Any]) -> bool:
            missing = {k: v for k, v in namespaces.items() if k not in index["namespaces"]}
            if index["datasets"].get(dataset_id) == entry and not missing:
                return False
            index["namespaces"].update(missing)
            index["datasets"][dataset_id] = entry
            return True

        self._update_index(record)

    # ------------------------------------------------------------------ downloading
    def fetch_into(self, dataset_id: str, work: Path, *, manifest: Manifest | None = None,
                   progress: Progress | None = None) -> Path:
        """Download every file of ``dataset_id`` under ``work`` and verify it.

        Returns the staged dataset folder (``work/<name>-vN``).

        Raises:
            DatasetNotFoundError: not published.
            CorruptedDataError: a file's size or digest differs from the manifest, or the
                downloaded metadata names another dataset.
            RemoteError: the remote failed (connection dropped, permission, ...).
        """
        parse_dataset_id(dataset_id)
        manifest = manifest or self.manifest(dataset_id)
        staged = work / f"fetch-{uuid.uuid4().hex}"
        staged.mkdir(parents=True)
        for entry in manifest.files:
            target = staged.joinpath(*entry.path.split("/"))
            if not target.resolve().is_relative_to(staged.resolve()):
                raise CorruptedDataError(f"manifest path {entry.path!r} leaves the dataset")
            target.parent.mkdir(parents=True, exist_ok=True)
            key = f"{dataset_id}/{entry.path}"
            size, digest = self._get_file(key, target, entry.size, entry.check_algorithm,
                                          progress)
            entry.check_arrived(f"{self.location}/{key}", size, digest)
        metadata = read_json_object(staged / METADATA_PATH)
        if metadata.get("dataset_id") != dataset_id:
            raise CorruptedDataError(f"{dataset_id!r} on {self.location}: its metadata names "
                                     f"{metadata.get('dataset_id')!r}")
        return staged

    def ensure_local_namespaces(self, dataset_id: str, root: Path) -> None:
        """Give every parent namespace of ``dataset_id`` under ``root`` its metadata file.

        Missing ones come from the remote (``{}`` if the remote has none), as Minari does.
        """
        namespace = parse_dataset_id(dataset_id)[0]
        for level in namespace_levels(namespace):
            path = root.joinpath(*level.split("/")) / NAMESPACE_METADATA_FILE_NAME
            if path.exists():
                continue
            metadata = self.namespace_metadata(level) or {}
            write_json_atomically(path, metadata)
