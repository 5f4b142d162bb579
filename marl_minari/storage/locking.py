"""Who may write what: one OS file lock per dataset, per recording and per staging folder.

Every writer of a dataset (create, append, recovery) holds the dataset's lock across its
read-modify-write, a live recorder holds its recording's lock, and a staging folder's lock is
held by the writer filling it. Locks are :mod:`filelock` locks (``flock`` on POSIX,
``LockFileEx`` on Windows) on files under ``<datasets root>/.marl_minari/locks/``, outside
the folders that get renamed. The operating system drops a lock when its process dies, so a
lock that can be taken proves that its previous owner is gone: only then is a staging folder
or recording treated as abandoned.

``flock`` works between processes on one machine and on local file systems. On NFS it is
emulated with byte-range locks where the client and server support them (Linux NFSv4 does);
on file systems without working locks, do not write one dataset from two machines at once.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from filelock import FileLock, Timeout

from marl_minari.errors import ConfigurationError, LockedError, NotWritableError
from marl_minari.format.ids import datasets_root

STAGING_FOLDER = ".marl_minari"
LOCK_TIMEOUT_ENV = "MARL_MINARI_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 600.0
_STAGED = re.compile(r"[a-z]+-[0-9a-f]{32}")


def staging_root() -> Path:
    """Hidden folder under the datasets root for datasets being written, recordings and locks.

    Minari skips hidden folders when listing datasets.
    """
    path = datasets_root() / STAGING_FOLDER
    path.mkdir(parents=True, exist_ok=True)
    return path


def lock_timeout() -> float:
    """Seconds a writer waits for a dataset's lock (``MARL_MINARI_LOCK_TIMEOUT``, default 600).

    Raises:
        ConfigurationError: the variable is not a number of seconds >= 0.
    """
    raw = os.environ.get(LOCK_TIMEOUT_ENV)
    if raw is None:
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ConfigurationError(
            f"{LOCK_TIMEOUT_ENV}={raw!r} is not a number of seconds >= 0; set it to e.g. 600")
    return value


NOT_PERMITTED: Final = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
"""``errno`` values meaning "this user may not write there" (mode bits, an immutable or
append-only file, a read-only mount)."""


def not_writable(exc: OSError, path: Path | str, what: str) -> OSError:
    """:class:`NotWritableError` for an OS refusal that means "may not write there" (naming
    ``path`` and saying that nothing was changed), else ``exc`` itself."""
    if exc.errno not in NOT_PERMITTED:
        return exc
    return NotWritableError(
        f"cannot write {path} ({exc.strerror}) to {what}: this user may not write there "
        "(another user's files, a read-only mount or an immutable file). The data is "
        "unchanged; make the folder and its files writable by this user, or write to a "
        "copy elsewhere (MINARI_DATASETS_PATH).")


def _file_lock(path: Path) -> FileLock:
    """An OS lock on ``path`` that any thread of this process may release.

    A recorder claims its recording in whichever thread finishes the first episode and may be
    closed from another. filelock's default per-thread locks would make that release a no-op
    and leave the lock to the garbage collector, whose finalizer can then deadlock a thread
    being started (it asks an exited thread ``is_alive`` inside ``threading``'s own lock).
    Each call makes a new object, so threads of one process still exclude each other through
    the OS lock.
    """
    return FileLock(path, thread_local=False)


def _lock_path(kind: str, key: str) -> Path:
    """A short, unique lock file name for ``key`` (ids and paths may be long or nested)."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", key)[-60:]
    return staging_root() / "locks" / f"{kind}-{readable}-{digest}.lock"


@contextlib.contextmanager
def dataset_lock(dataset_id: str) -> Iterator[None]:
    """Hold the lock of ``dataset_id`` (waiting up to :func:`lock_timeout` seconds).

    Raises:
        LockedError: another process kept the dataset locked for the whole timeout.
        NotWritableError: this user may not create the lock file.
    """
    path = _lock_path("dataset", dataset_id)
    timeout = lock_timeout()
    lock = _file_lock(path)
    try:
        path.parent.mkdir(exist_ok=True)
        lock.acquire(timeout=timeout)
    except Timeout as exc:  # before OSError: filelock's Timeout is one
        raise LockedError(
            f"dataset {dataset_id!r} is being written by another process (lock {path}); "
            f"waited {timeout:g} s. Retry when it is done, or wait longer by setting "
            f"{LOCK_TIMEOUT_ENV} (seconds)."
        ) from exc
    except OSError as exc:
        raise not_writable(exc, path, f"lock dataset {dataset_id!r}") from exc
    try:
        yield
    finally:
        lock.release()


def claim_recording(folder: Path) -> FileLock:
    """Take the lock of a recording folder for as long as the returned lock is held.

    Raises:
        LockedError: a live process is recording into (or recovering) ``folder``.
    """
    path = _lock_path("recording", str(Path(folder).resolve()))
    lock = _file_lock(path)
    try:
        path.parent.mkdir(exist_ok=True)
        lock.acquire(timeout=0)
    except Timeout as exc:  # before OSError: filelock's Timeout is one
        raise LockedError(
            f"recording {folder} is in use by a live process (lock {path}); close that "
            "recorder first, or record into another folder."
        ) from exc
    except OSError as exc:
        raise not_writable(exc, path, f"lock the recording {folder}") from exc
    return lock


def recording_in_use(folder: Path) -> bool:
    """Whether a live process holds the recording folder's lock."""
    try:
        claim_recording(folder).release()
    except LockedError:
        return True
    return False


@contextlib.contextmanager
def staging_folder(parent: Path, kind: str) -> Iterator[Path]:
    """A fresh folder ``parent/<kind>-<hex>`` owned by this writer, removed on exit.

    Its lock (``<kind>-<hex>.lock`` beside it) is taken before the folder exists and dropped
    after it is gone, so :func:`remove_stale_staging` never removes a live writer's folder.
    """
    if not re.fullmatch(r"[a-z]+", kind):
        raise ValueError(f"staging kind must be lowercase letters, got {kind!r}")
    name = f"{kind}-{uuid.uuid4().hex}"
    lock_file = parent / f"{name}.lock"
    lock = _file_lock(lock_file)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        lock.acquire(timeout=0)
    except OSError as exc:
        raise not_writable(exc, parent, "stage the files being written") from exc
    work = parent / name
    try:
        try:
            work.mkdir()
        except OSError as exc:
            raise not_writable(exc, parent, "stage the files being written") from exc
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)
        lock_file.unlink(missing_ok=True)
        lock.release()


def remove_stale_staging(parent: Path) -> list[Path]:
    """Remove the staging folders under ``parent`` whose writers are dead; return them.

    A folder is stale when its lock can be taken (its writer's process is gone). Folders of
    live writers, and anything not named like a staging folder, are left alone.
    """
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for folder in sorted(parent.iterdir()):
        if not (_STAGED.fullmatch(folder.name) and folder.is_dir()):
            continue
        lock_file = parent / f"{folder.name}.lock"
        lock = _file_lock(lock_file)
        try:
            lock.acquire(timeout=0)
        except OSError:  # a live writer's (Timeout), or one this user may not remove
            continue
        try:
            if folder.exists():
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
            lock_file.unlink(missing_ok=True)
        finally:
            lock.release()
    return removed
