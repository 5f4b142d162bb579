"""The registry protocol shared by every remote kind, on top of a few storage primitives.

:class:`RegistryStorage` is a :class:`minari.storage.remotes.cloud_storage.CloudStorage`, so
Minari's own ``upload_dataset``, ``list_remote_datasets``, ``download_dataset`` and
``load_dataset(..., download=True)`` drive it. Subclasses (``file://``, ``s3://``,
``http(s)://``) only move bytes: read/write small objects, upload/download one file, list
keys. Everything that makes the registry safe lives here, once:

* publishing writes every file first, then the manifest (the commit record, created only if
  absent), then the index entry; a published version is never overwritten;
* downloading reads the manifest, fetches every file into a hidden staging folder under the
  datasets root, checks the size and digest (BLAKE3, or SHA-256 in older manifests) of each,
  and moves the dataset into place with one ``rename``; any failure removes the staging
  folder;
* every id, namespace and manifest path is validated before it becomes a key or a local path.

The remote layout is described in ``docs/registry.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, ClassVar, Final

from minari.storage.remotes.cloud_storage import CloudStorage

from marl_minari.digests import (
    ALGORITHMS,
    BLAKE3,
    SHA256,
    FileDigests,
    RememberedDigests,
    hash_file,
    remembered_digests,
)
from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    InvalidDatasetIdError,
    RemoteError,
)
from marl_minari.ids import parse_dataset_id

from .manifest import (
    MANIFEST_FILE_NAME,
    Digests,
    FileEntry,
    Manifest,
    Progress,
    changed_since_hashed,
    dataset_files,
    new_manifest,
    wrong_size,
)

logger = logging.getLogger("marl_minari.registry")

INDEX_FILE_NAME: Final = "_index.json"
"""Root object of a registry: every namespace and dataset with its metadata."""

INDEX_FORMAT: Final = "marl-minari-registry"
INDEX_FORMAT_VERSION: Final = 1

NAMESPACE_METADATA_FILE_NAME: Final = "namespace_metadata.json"
METADATA_PATH: Final = "data/metadata.json"
STAGING_FOLDER: Final = ".marl_minari"

_DIGEST_LABELS: Final = {SHA256: "SHA-256", BLAKE3: "BLAKE3"}
_SECRET_ENV_VARS: Final = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
                           "AWS_SECURITY_TOKEN")
_USERINFO_RE = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)[^/@\s]+@")
_SIGNED_QUERY_RE = re.compile(r"([?&](?:X-Amz-[A-Za-z-]+|Signature|AWSAccessKeyId|token|"
                              r"access_token|sig)=)[^&\s'\"]+", re.IGNORECASE)


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with credentials removed: URL user-info, signed query strings, known secrets.

    Every message this package raises or logs about a remote goes through here.
    """
    text = _USERINFO_RE.sub(r"\g<scheme>***@", text)
    text = _SIGNED_QUERY_RE.sub(r"\1***", text)
    values = [os.environ.get(name) for name in _SECRET_ENV_VARS]
    for secret in [*values, *secrets]:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def upload_algorithms(known: RememberedDigests | None) -> tuple[str, ...]:
    """The digests an upload computes on the way: none when they are remembered."""
    return () if known is not None else ALGORITHMS


def uploaded_digests(source: Path, size: int, computed: Digests,
                     known: RememberedDigests | None) -> FileDigests:
    """Size and digests of a file just uploaded: the remembered ones, or those computed.

    The upload has already checked that ``source`` kept the identity ``known`` was hashed
    with; the size is checked again here.
    """
    if known is None:
        return FileDigests(size, computed[SHA256], computed[BLAKE3])
    if size != known.digests.size:
        raise changed_since_hashed(source)
    return known.digests


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


def empty_index() -> dict[str, Any]:
    """An index with no namespaces and no datasets."""
    return {"format": INDEX_FORMAT, "format_version": INDEX_FORMAT_VERSION,
            "namespaces": {}, "datasets": {}}


def tqdm_progress(total: int, description: str) -> tuple[Progress, Callable[[], None]]:
    """A byte progress bar (shown only on a terminal): ``(update, close)``."""
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=description, unit="B", unit_scale=True, unit_divisor=1024,
               disable=None, leave=False)
    lock = threading.Lock()

    def update(count: int) -> None:
        with lock:
            bar.update(count)

    return update, bar.close


class RegistryStorage(CloudStorage):
    """Base of the marl-minari remote kinds; see the module docstring.

    Subclasses set :attr:`kind` and implement the primitives (the methods starting with
    ``_`` that raise ``NotImplementedError`` here). Keys are relative POSIX paths below the
    registry root, built only from validated ids, namespaces and manifest paths.
    """

    kind: ClassVar[str] = ""
    writable: ClassVar[bool] = True

    def __init__(self, name: str, token: str | None = None) -> None:
        self._token = token
        self._index_cache: dict[str, Any] | None = None
        self._cache_lock = threading.Lock()

    # ------------------------------------------------------------------ primitives
    @property
    def location(self) -> str:
        """The remote as ``kind://...``, without credentials (safe to print)."""
        raise NotImplementedError

    def _read(self, key: str) -> bytes | None:
        """The bytes stored at ``key``; ``None`` if there is nothing there."""
        raise NotImplementedError

    def _read_versioned(self, key: str) -> tuple[bytes | None, str | None]:
        """Bytes at ``key`` and a version token for :meth:`_write_if`."""
        return self._read(key), None

    def _write_if(self, key: str, data: bytes, version: str | None) -> bool:
        """Replace ``key`` if it still has ``version`` (``None``: if it does not exist).

        Returns False when someone else changed it first. Backends without conditional
        writes rely on :meth:`_index_lock` and always succeed.
        """
        raise NotImplementedError

    def _write_new(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent; False if it exists."""
        raise NotImplementedError

    def _write(self, key: str, data: bytes) -> None:
        """Create or replace ``key`` (small objects: metadata)."""
        raise NotImplementedError

    def _put_file(self, key: str, source: Path, progress: Progress | None,
                  known: RememberedDigests | None) -> FileDigests:
        """Upload a local file to ``key``; size and digests of the bytes sent.

        ``known``: digests remembered for ``source``. The upload then hashes nothing and only
        checks that the file still has the identity it had when it was hashed (see
        :func:`uploaded_digests`).
        """
        raise NotImplementedError

    def _get_file(self, key: str, target: Path, size: int, algorithm: str,
                  progress: Progress | None) -> tuple[int, str]:
        """Download ``key`` into ``target``; ``(size, hex digest)`` of the bytes written.

        Must stop (``CorruptedDataError``) once more than ``size`` bytes arrive.
        """
        raise NotImplementedError

    def _list_keys(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix`` (used to rebuild the index)."""
        raise RemoteError(f"{self.location} cannot list its files; rebuild the index at the "
                          "source registry instead")

    def _index_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while the index is read, changed and written back."""
        return contextlib.nullcontext()

    def _fail(self, message: str, exc: BaseException | None = None) -> RemoteError:
        """A :class:`RemoteError` whose message carries no credentials."""
        detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        return RemoteError(scrub(f"{message}{detail}", [self._token]))

    def _require_writable(self) -> None:
        if not self.writable:
            raise RemoteError(
                f"{self.location} is read-only ({self.kind}:// serves a published registry); "
                "publish to the file:// or s3:// registry it serves instead"
            )

    # ------------------------------------------------------------------ index
    def read_index(self, *, refresh: bool = True) -> dict[str, Any]:
        """The registry index (an empty one when the registry has none yet)."""
        with self._cache_lock:
            if refresh or self._index_cache is None:
                self._index_cache = self._parse_index(self._read(INDEX_FILE_NAME))
            return self._index_cache

    def _parse_index(self, raw: bytes | None) -> dict[str, Any]:
        if raw is None:
            return empty_index()
        where = f"{self.location}/{INDEX_FILE_NAME}"
        try:
            index = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptedDataError(
                f"registry index {where} is not valid JSON ({exc}); rebuild it with "
                "marl_minari.registry.reindex"
            ) from exc
        if not isinstance(index, dict) or index.get("format") != INDEX_FORMAT:
            raise CorruptedDataError(f"{where} is not a marl-minari registry index")
        version = index.get("format_version")
        if not isinstance(version, int) or version > INDEX_FORMAT_VERSION:
            raise RemoteError(f"registry {self.location} has index format {version!r}; this "
                              f"marl-minari reads version {INDEX_FORMAT_VERSION}: upgrade it")
        for key in ("namespaces", "datasets"):
            if not isinstance(index.get(key), dict):
                index[key] = {}
        return index

    def _update_index(self, change: Callable[[dict[str, Any]], bool]) -> None:
        """Apply ``change`` to the index and write it back (``change`` False: no write)."""
        for attempt in range(50):
            with self._index_lock():
                raw, version = self._read_versioned(INDEX_FILE_NAME)
                index = self._parse_index(raw)
                if not change(index):
                    with self._cache_lock:
                        self._index_cache = index
                    return
                data = (json.dumps(index, indent=1, sort_keys=True) + "\n").encode()
                if self._write_if(INDEX_FILE_NAME, data, version):
                    with self._cache_lock:
                        self._index_cache = index
                    return
            time.sleep(min(0.05 * (attempt + 1), 1.0))
        raise self._fail(f"the index of {self.location} kept changing under concurrent writers")

    def dataset_ids(self, prefix: str | None = None) -> list[str]:
        """Published dataset ids (from the index), optionally only those starting with prefix."""
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
        raw = self._read(f"{dataset_id}/{METADATA_PATH}")
        if raw is None:
            raise DatasetNotFoundError(f"{dataset_id!r} is not published on {self.location}")
        try:
            metadata = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptedDataError(f"metadata of {dataset_id!r} on {self.location} is not "
                                     f"valid JSON: {exc}") from exc
        if not isinstance(metadata, dict):
            raise CorruptedDataError(f"metadata of {dataset_id!r} on {self.location} is not "
                                     "an object")
        return metadata

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
        metadata = _read_json_object(local) if local.exists() else {}
        self._put_namespace(namespace, metadata)

    def download_namespace_metadata(self, namespace: str, path: Path) -> None:
        """Write the remote metadata of ``namespace`` under the local root ``path``."""
        check_namespace(namespace)
        metadata = self.namespace_metadata(namespace)
        if metadata is None:
            raise DatasetNotFoundError(f"namespace {namespace!r} is not on {self.location}")
        _write_json_atomically(Path(path).joinpath(*namespace.split("/"))
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
            self.publish_dataset(dataset_id, local, progress=update, identical_ok=True)
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

    # ------------------------------------------------------------------ publishing
    def namespace_metadata(self, namespace: str) -> dict[str, Any] | None:
        """Remote metadata of ``namespace``; ``None`` if it is not published."""
        check_namespace(namespace)
        entry = self.read_index(refresh=False)["namespaces"].get(namespace)
        if isinstance(entry, dict):
            return dict(entry)
        raw = self._read(f"{namespace}/{NAMESPACE_METADATA_FILE_NAME}")
        if raw is None:
            return None
        try:
            value = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return None
        return value if isinstance(value, dict) else None

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
            metadata = _read_json_object(local) if local.exists() else {}
            logger.info("publishing namespace %s to %s", level, self.location)
            self._write(f"{level}/{NAMESPACE_METADATA_FILE_NAME}",
                        (json.dumps(metadata) + "\n").encode())
            written[level] = metadata
        return written

    def manifest(self, dataset_id: str) -> Manifest:
        """The manifest of a published version.

        Raises:
            DatasetNotFoundError: the version is not published (or its publish never finished).
            CorruptedDataError: the manifest is damaged or unsafe.
        """
        parse_dataset_id(dataset_id)
        found = self.find_manifest(dataset_id)
        if found is None:
            raise DatasetNotFoundError(
                f"{dataset_id!r} is not published on {self.location} (no manifest)"
            )
        return found

    def find_manifest(self, dataset_id: str) -> Manifest | None:
        """The manifest of ``dataset_id``, or ``None`` if it has none."""
        parse_dataset_id(dataset_id)
        key = f"{dataset_id}/{MANIFEST_FILE_NAME}"
        raw = self._read(key)
        if raw is None:
            return None
        return Manifest.from_json(raw, dataset_id, f"{self.location}/{key}")

    def publish_dataset(self, dataset_id: str, local: Path, *, progress: Progress | None = None,
                        identical_ok: bool = False) -> tuple[Manifest, str]:
        """Upload one local dataset folder; files first, then manifest, then index entry.

        Args:
            dataset_id: validated id; ``local`` is its folder.
            progress: called with byte counts.
            identical_ok: a version already published with the same files is not an error.

        Returns:
            ``(manifest, outcome)``; outcome ``"published"``, ``"completed"`` (files and
            manifest were there from an earlier publish interrupted before its index entry) or
            ``"unchanged"`` (already published, identical).

        Raises:
            DatasetExistsError: the version is published with other files (or was published
                concurrently), or is published and listed while ``identical_ok`` is off.
        """
        self._require_writable()
        parse_dataset_id(dataset_id)
        metadata = _read_json_object(local / METADATA_PATH)
        if metadata.get("dataset_id") != dataset_id:
            raise CorruptedDataError(
                f"{local / METADATA_PATH} says dataset_id {metadata.get('dataset_id')!r}, but "
                f"it is published as {dataset_id!r}"
            )
        files = dataset_files(local)
        existing = self.find_manifest(dataset_id)
        if existing is not None:
            return self._already_published(dataset_id, local, files, existing, metadata,
                                           identical_ok)
        namespaces = self.ensure_remote_namespaces(dataset_id)
        known = remembered_digests(local)
        entries = []
        for relative in files:
            digests = self._put_file(f"{dataset_id}/{relative}", local / relative, progress,
                                     known.get(relative))
            entries.append(FileEntry(relative, digests.size, digests.sha256, digests.blake3))
        manifest = new_manifest(dataset_id, entries)
        if not self._write_new(f"{dataset_id}/{MANIFEST_FILE_NAME}", manifest.to_json()):
            raise DatasetExistsError(
                f"{dataset_id!r} was published on {self.location} by someone else while this "
                "publish ran; versions are immutable: bump the version (-vN+1) and publish again"
            )
        self._record(dataset_id, metadata, manifest, namespaces)
        logger.info("published %s to %s (%d files, %d bytes)", dataset_id, self.location,
                    len(manifest.files), manifest.total_size)
        return manifest, "published"

    def _already_published(self, dataset_id: str, local: Path, files: list[str],
                           existing: Manifest, metadata: dict[str, Any],
                           identical_ok: bool) -> tuple[Manifest, str]:
        known = remembered_digests(local)
        entries = []
        for relative in files:
            if relative in known:
                size, sha = known[relative].digests.size, known[relative].digests.sha256
            else:
                size, computed = hash_file(local / relative, (SHA256,))
                sha = computed[SHA256]
            entries.append(FileEntry(relative, size, sha))
        same = existing.same_content(new_manifest(dataset_id, entries))
        listed = dataset_id in self.read_index()["datasets"]
        if same and not listed:
            # An earlier publish committed its manifest but stopped before the index entry.
            namespaces = self.ensure_remote_namespaces(dataset_id)
            self._record(dataset_id, metadata, existing, namespaces)
            return existing, "completed"
        if same and identical_ok:
            return existing, "unchanged"
        detail = ("with the same files" if same else
                  "with different files (the local dataset changed since it was published)")
        raise DatasetExistsError(
            f"{dataset_id!r} is already published on {self.location} {detail}; published "
            "versions are immutable: bump the version (-vN+1) and publish that"
        )

    def _record(self, dataset_id: str, metadata: dict[str, Any], manifest: Manifest,
                namespaces: dict[str, dict[str, Any]]) -> None:
        """One index update: the dataset's entry and the namespaces published with it."""
        entry = {"metadata": metadata, "manifest_sha256": manifest.digest(),
                 "total_size": manifest.total_size, "files": len(manifest.files),
                 "published": manifest.created}

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
            where = f"{self.location}/{key}"
            if size != entry.size:
                raise wrong_size(where, size, entry.size)
            if digest != entry.check_digest:
                label = _DIGEST_LABELS[entry.check_algorithm]
                raise CorruptedDataError(
                    f"{where} has {label} {digest}, the manifest records {entry.check_digest}: "
                    "the remote file was modified or damaged after publishing"
                )
        metadata = _read_json_object(staged / METADATA_PATH)
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
            _write_json_atomically(path, metadata)

    # ------------------------------------------------------------------ maintenance
    def reindex(self) -> dict[str, Any]:
        """Rebuild the index from the manifests and namespace files on the remote.

        Recovers entries lost to a publish interrupted between its manifest and its index
        entry, or to concurrent writers on a backend without conditional writes.
        """
        self._require_writable()
        keys = list(self._list_keys(""))
        manifests = [key.rpartition("/")[0] for key in keys
                     if key.rpartition("/")[2] == MANIFEST_FILE_NAME and "/" in key]
        datasets: dict[str, Any] = {}
        for dataset_id in manifests:
            try:
                manifest = self.manifest(dataset_id)
                metadata = self.get_dataset_metadata_file(dataset_id)
            except (InvalidDatasetIdError, CorruptedDataError, DatasetNotFoundError) as exc:
                warnings.warn(f"reindex skips {dataset_id!r}: {exc}", stacklevel=2)
                continue
            datasets[dataset_id] = {"metadata": metadata, "manifest_sha256": manifest.digest(),
                                    "total_size": manifest.total_size,
                                    "files": len(manifest.files), "published": manifest.created}
        namespaces: dict[str, Any] = {}
        for key in keys:
            parent, _, name = key.rpartition("/")
            inside_dataset = any(parent == d or parent.startswith(f"{d}/") for d in manifests)
            if name != NAMESPACE_METADATA_FILE_NAME or not parent or inside_dataset:
                continue
            with contextlib.suppress(InvalidDatasetIdError):
                check_namespace(parent)
                raw = self._read(key)
                try:
                    value = json.loads(raw) if raw is not None else {}
                except (UnicodeDecodeError, json.JSONDecodeError):
                    value = {}
                namespaces[parent] = value if isinstance(value, dict) else {}

        def replace(index: dict[str, Any]) -> bool:
            index["namespaces"] = namespaces
            index["datasets"] = datasets
            return True

        self._update_index(replace)
        return self.read_index()


@contextlib.contextmanager
def staging_area(root: Path) -> Iterator[Path]:
    """A fresh hidden folder under ``root`` (same file system: renames are atomic).

    It is removed on exit, whatever happened; Minari does not list hidden folders. Folders
    left by killed downloads are removed here, once their writer is dead.
    """
    from marl_minari.ids import datasets_root
    from marl_minari.locking import remove_stale_staging, staging_folder, staging_root

    parent = (staging_root() if root.resolve() == datasets_root().resolve()
              else root / STAGING_FOLDER)
    remove_stale_staging(parent)
    with staging_folder(parent, "download") as work:
        yield work


def install(staged: Path, root: Path, dataset_id: str, *, replace: bool, work: Path) -> Path:
    """Move a verified staged dataset to its place under ``root`` in one rename.

    With ``replace`` an existing copy is first renamed into ``work`` (deleted with it), and put
    back if the final rename fails.

    Raises:
        DatasetExistsError: a local dataset with that id exists and ``replace`` is off.
    """
    parse_dataset_id(dataset_id)
    target = root.joinpath(*dataset_id.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if target.exists():
        if not replace:
            raise DatasetExistsError(
                f"dataset {dataset_id!r} already exists locally at {target}; pass force=True "
                "to replace it with the published copy"
            )
        old = work / f"replaced-{uuid.uuid4().hex}"
        os.rename(target, old)
    try:
        os.rename(staged, target)
    except OSError as exc:
        if old is not None:
            os.rename(old, target)
        if target.exists():
            raise DatasetExistsError(f"dataset {dataset_id!r} appeared locally while it was "
                                     "downloading") from exc
        raise
    return target


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise DatasetNotFoundError(f"{path} does not exist") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptedDataError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise CorruptedDataError(f"{path} does not hold a JSON object")
    return value


def _write_json_atomically(path: Path, value: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)
