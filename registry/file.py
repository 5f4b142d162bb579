"""``file://`` remotes: a registry in a directory (local disk, a shared disk, NFS).

``file:///abs/path`` names an absolute directory, ``file://relative/path`` one relative to the
current directory (Minari's ``download_dataset("file://name/ns/x-v0")`` passes only the first
path component, so that form works with a registry folder ``./name``). A ``~`` is expanded.

Every file is written to a hidden temporary name and renamed into place, so a reader (or a web
server serving the directory) never sees a partial file. Data files are flushed to disk before
the manifest is created (``RemoteSettings(fsync=False)``, or ``MARL_MINARI_REGISTRY_FSYNC=0``
for Minari's functions, skips the flushes, e.g. on scratch disks). The manifest is created with
a hard link, which fails if another publisher created it first; a publish's files wait in a
hidden ``.pending-*`` folder until then and are moved into place by ``rename``. Index updates
hold an advisory ``flock`` on ``.index.lock``.

There is no server to wait for, so the operation's deadline is not checked here: a hung
network file system blocks these calls as it blocks any file access.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

from marl_minari.errors import RemoteError
from marl_minari.format.digests import FileDigests, RememberedDigests

from .backend import Backend, Staging
from .credentials import url_secrets
from .deadline import Deadline
from .settings import RemoteSettings
from .transfer import (
    Progress,
    copy_file_and_hash,
    missing_remote_file,
    too_large,
    upload_algorithms,
    uploaded_digests,
)

LOCK_FILE_NAME = ".index.lock"


class FileBackend(Backend):
    """A registry in a directory. ``name`` is the path after ``file://``."""

    kind = "file"
    writable = True

    def __init__(self, name: str, token: str | None = None, *,
                 settings: RemoteSettings | None = None,
                 deadline: Deadline | None = None) -> None:
        super().__init__(name, token, settings=settings, deadline=deadline)
        if url_secrets(f"file://{name}"):
            raise self.fail(f"file://{name} carries credentials (user-info before '@'); "
                             "file:// remotes take none: remove the part before '@'")
        path = Path(unquote(name)).expanduser() if name else Path(".")
        self.root = path if path.is_absolute() else Path.cwd() / path

    @property
    def location(self) -> str:
        """``file://`` and the absolute directory."""
        return f"file://{self.root}"

    def _path(self, key: str) -> Path:
        return self.root.joinpath(*key.split("/"))

    def read(self, key: str, limit: int) -> bytes | None:
        try:
            with open(self._path(key), "rb") as handle:
                if os.fstat(handle.fileno()).st_size > limit:
                    raise too_large(f"{self.location}/{key}", limit)
                data = handle.read(limit + 1)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise self.fail(f"cannot read {key} from {self.location}", exc) from None
        if len(data) > limit:
            raise too_large(f"{self.location}/{key}", limit)
        return data

    def check_exists(self) -> None:
        if not self.root.is_dir():
            raise RemoteError(f"registry {self.location} does not exist (no such folder): "
                              "check the path, or publish to it to create it")

    def write(self, key: str, data: bytes) -> None:
        target = self._path(key)
        temporary = self._temporary(target)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._write_file(temporary, data)
            os.replace(temporary, target)
            if self.settings.fsync:
                self._sync_dir(target.parent)
        except OSError as exc:
            raise self.fail(f"cannot write {key} to {self.location}", exc) from None
        finally:
            temporary.unlink(missing_ok=True)

    def write_if(self, key: str, data: bytes, version: str | None) -> bool:
        self.write(key, data)  # the index lock serialises writers
        return True

    def write_new(self, key: str, data: bytes) -> bool:
        target = self._path(key)
        temporary = self._temporary(target)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._write_file(temporary, data)
            try:
                os.link(temporary, target)
            except FileExistsError:
                return False
            except OSError as exc:
                if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                return self._create_exclusive(target, data)
            if self.settings.fsync:
                self._sync_dir(target.parent)
            return True
        except OSError as exc:
            raise self.fail(f"cannot create {key} on {self.location}", exc) from None
        finally:
            temporary.unlink(missing_ok=True)

    def _create_exclusive(self, target: Path, data: bytes) -> bool:
        """Fallback for file systems without hard links."""
        try:
            descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            if self.settings.fsync:
                os.fsync(handle.fileno())
        return True

    def put_file(self, key: str, source: Path, progress: Progress | None,
                 known: RememberedDigests | None) -> FileDigests:
        target = self._path(key)
        temporary = self._temporary(target)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            size, computed = copy_file_and_hash(
                source, temporary, upload_algorithms(known), progress=progress,
                sync=self.settings.fsync, expect=None if known is None else known.stat)
            os.replace(temporary, target)
            return uploaded_digests(source, size, computed, known)
        except OSError as exc:
            raise self.fail(f"cannot upload {source} to {self.location}/{key}", exc) from None
        finally:
            temporary.unlink(missing_ok=True)

    def stage(self, staging: Staging, relative: str, source: Path,
              progress: Progress | None, known: RememberedDigests | None) -> FileDigests:
        # Below the hidden per-publish folder: renamed into place by commit.
        return self.put_file(f"{staging.prefix}/{relative}", source, progress, known)

    def commit(self, staging: Staging, files: list[str]) -> None:
        for relative in files:
            self._move(f"{staging.prefix}/{relative}", f"{staging.dataset_id}/{relative}")
        self.flush(staging.dataset_id)

    def discard(self, staging: Staging) -> None:
        shutil.rmtree(self._path(staging.prefix), ignore_errors=True)

    def _move(self, source: str, target: str) -> None:
        destination = self._path(target)
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._path(source), destination)
        except OSError as exc:
            raise self.fail(f"cannot move {source} to {target} on {self.location}",
                             exc) from None

    def flush(self, prefix: str) -> None:
        # The renames are the published files: flush the folders that record them, and the
        # folders above, which may have been created by this publish.
        if self.settings.fsync:
            folder = self._path(prefix)
            self._sync_tree(folder)
            for parent in folder.relative_to(self.root).parents:
                self._sync_dir(self.root / parent)

    def get_file(self, key: str, target: Path, size: int, algorithm: str,
                 progress: Progress | None) -> tuple[int, str]:
        source = self._path(key)
        if not source.is_file():
            raise missing_remote_file(f"{self.location}/{key}")
        try:
            copied, digests = copy_file_and_hash(source, target, (algorithm,), limit=size,
                                                 progress=progress)
            return copied, digests[algorithm]
        except OSError as exc:
            raise self.fail(f"cannot copy {self.location}/{key}", exc) from None

    def read_range(self, key: str, offset: int, length: int) -> bytes | memoryview:
        try:
            with open(self._path(key), "rb", buffering=0) as handle:
                return os.pread(handle.fileno(), length, offset)
        except FileNotFoundError:
            raise missing_remote_file(f"{self.location}/{key}") from None
        except OSError as exc:
            raise self.fail(f"cannot read {self.location}/{key}", exc) from None

    def list_keys(self, prefix: str) -> Iterator[str]:
        for current, dirs, names in os.walk(self.root):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            base = Path(current).relative_to(self.root).as_posix()
            for name in sorted(names):
                if name.startswith("."):
                    continue
                key = name if base == "." else f"{base}/{name}"
                if key.startswith(prefix):
                    yield key

    @contextlib.contextmanager
    def index_lock(self) -> Iterator[None]:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            handle = open(self.root / LOCK_FILE_NAME, "a+b")  # noqa: SIM115
        except OSError as exc:
            raise self.fail(f"cannot lock the index of {self.location}", exc) from None
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    @staticmethod
    def _temporary(target: Path) -> Path:
        return target.with_name(f".{target.name}.{uuid.uuid4().hex}.part")

    def _write_file(self, path: Path, data: bytes) -> None:
        with open(path, "wb") as handle:
            handle.write(data)
            handle.flush()
            if self.settings.fsync:
                os.fsync(handle.fileno())

    @staticmethod
    def _sync_dir(folder: Path) -> None:
        descriptor = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        except OSError:
            pass  # some file systems cannot fsync directories
        finally:
            os.close(descriptor)

    def _sync_tree(self, folder: Path) -> None:
        for current, dirs, _ in os.walk(folder):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            self._sync_dir(Path(current))
