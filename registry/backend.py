"""What every remote kind does: move bytes, and nothing else.

A :class:`Backend` (``file://``, ``s3://``, ``http(s)://``) reads and writes small objects
with a size cap, creates an object only if absent, puts and gets one file, stages, commits
or discards the files of a publish, lists keys and holds the index lock. Everything the
registry builds on top (the index, manifests, namespaces, publishing, verified downloads)
is a set of functions over these primitives, in the modules named after each concept, and
the same for every kind.

A backend serves one operation: it carries that operation's :class:`Deadline`, which every
request it makes spends from (see :mod:`.deadline`). Keys are relative POSIX paths below the
registry root, built only from validated ids, namespaces and manifest paths.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final

from marl_minari.errors import RemoteError
from marl_minari.format.digests import FileDigests, RememberedDigests

from .credentials import scrub, url_secrets
from .deadline import Deadline
from .settings import RemoteSettings
from .transfer import Progress

PENDING_PREFIX: Final = ".pending-"
"""Hidden folder inside a dataset's folder on the remote that holds one publish's files until
it has claimed the version."""


class RangesIgnored(RemoteError):
    """A server answered a range request with the whole file (HTTP 200 instead of 206)."""


class Forbidden(RemoteError):
    """An ``http(s)://`` server refused to serve a file (HTTP 403). S3's HTTPS and website
    endpoints answer so for a file they do not have (to a reader who may not list the
    bucket) as well as for one the reader may not read."""


@dataclass
class Staging:
    """The files of one publish on their way to becoming a version (see :meth:`Backend.stage`)."""

    dataset_id: str
    prefix: str
    """Hidden key prefix, ``<dataset>/.pending-<random>``, for kinds that stage below it."""
    uploads: dict[str, Any] = field(default_factory=dict)
    """Per file, what a kind needs to commit or discard it (e.g. an S3 multipart upload)."""


class Backend(ABC):
    """Byte primitives of one remote kind, for one operation (see the module docstring).

    Subclasses set :attr:`kind` and implement the primitives; read-only kinds leave the write
    primitives as they are here (they raise :meth:`read_only`).

    Args:
        name: the remote after ``kind://``.
        token: Minari's token (used by ``http(s)://`` as a Bearer token).
        settings: timeouts, rates and flushing; default :meth:`RemoteSettings.from_env`.
        deadline: the operation's deadline, shared with the other backends it uses; default a
            new one.
    """

    kind: ClassVar[str] = ""
    writable: ClassVar[bool] = True

    def __init__(self, name: str, token: str | None = None, *,
                 settings: RemoteSettings | None = None,
                 deadline: Deadline | None = None) -> None:
        self.secrets = [s for s in [token, *url_secrets(f"{self.kind}://{name}")] if s]
        """Values no message about this remote may show."""
        self.settings = settings if settings is not None else RemoteSettings.from_env()
        self.deadline = deadline if deadline is not None else Deadline(self.settings)

    @property
    @abstractmethod
    def location(self) -> str:
        """The remote as ``kind://...``, without credentials (safe to print)."""

    def warm(self, enough: int) -> None:  # noqa: B027 - most kinds keep no connections
        """Open connections to the remote's server ahead of requests about to be sent, until
        ``enough`` are open (idle, or in use by other requests); nothing for kinds that keep
        no connections of ours. Best effort: a failure is left to the requests that follow."""

    # ------------------------------------------------------------------ small objects
    @abstractmethod
    def read(self, key: str, limit: int) -> bytes | None:
        """The bytes stored at ``key``; ``None`` if there is nothing there.

        More than ``limit`` bytes raise :func:`.transfer.too_large` (checked before reading
        them all when the size is announced).
        """

    def read_versioned(self, key: str, limit: int) -> tuple[bytes | None, str | None]:
        """Bytes at ``key`` and a version token for :meth:`write_if`."""
        return self.read(key, limit), None

    def write(self, key: str, data: bytes) -> None:
        """Create or replace ``key`` (small objects: metadata)."""
        raise self.read_only()

    def write_if(self, key: str, data: bytes, version: str | None) -> bool:
        """Replace ``key`` if it still has ``version`` (``None``: if it does not exist).

        Returns False when someone else changed it first. Backends without conditional
        writes rely on :meth:`index_lock` and always succeed.
        """
        raise self.read_only()

    def write_new(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent, atomically; False if it exists."""
        raise self.read_only()

    # ------------------------------------------------------------------ files
    def put_file(self, key: str, source: Path, progress: Progress | None,
                 known: RememberedDigests | None) -> FileDigests:
        """Upload a local file to ``key``; size and digests of the bytes sent.

        ``known``: digests remembered for ``source``. The upload then hashes nothing and only
        checks that the file still has the identity it had when it was hashed (see
        :func:`.transfer.uploaded_digests`).
        """
        raise self.read_only()

    def flush(self, prefix: str) -> None:
        """Make the files just put below ``prefix`` durable (``file://``: flush folders)."""
        return  # durable once written, on every other kind

    @abstractmethod
    def get_file(self, key: str, target: Path, size: int, algorithm: str,
                 progress: Progress | None) -> tuple[int, str]:
        """Download ``key`` into ``target``; ``(size, hex digest)`` of the bytes written.

        Must stop (``CorruptedDataError``) once more than ``size`` bytes arrive, and
        (``RemoteError``, :meth:`deadline_passed`) once the operation's deadline has passed.
        """

    def read_range(self, key: str, offset: int, length: int) -> bytes | memoryview:
        """Bytes ``[offset, offset + length)`` of the file at ``key``, unverified.

        Never more than ``length`` bytes; fewer when the file is shorter (the caller's
        verification turns that into a :class:`CorruptedDataError`).

        Raises:
            RangesIgnored: the server answered with the whole file (``http(s)://``).
            CorruptedDataError: the file is missing.
            RemoteError: the remote failed, or the deadline passed.
        """
        raise self.fail(f"{self.location} cannot serve byte ranges")

    # ------------------------------------------------------------------ publishing
    def stage(self, staging: Staging, relative: str, source: Path,
              progress: Progress | None, known: RememberedDigests | None) -> FileDigests:
        """Upload ``source`` as the file ``relative`` of a new version, invisibly.

        Nothing a reader or another publisher sees may change until :meth:`commit`.
        """
        raise self.read_only()

    def commit(self, staging: Staging, files: list[str]) -> None:
        """Put every staged file at its published key (after the version was claimed)."""
        raise self.read_only()

    def discard(self, staging: Staging) -> None:
        """Remove what is left of a staging (all of it if it was never committed)."""
        raise self.read_only()

    # ------------------------------------------------------------------ the registry
    def list_keys(self, prefix: str) -> Iterator[str]:
        """Every key starting with ``prefix`` (used to rebuild the index)."""
        raise RemoteError(f"{self.location} cannot list its files; rebuild the index at the "
                          "source registry instead")

    def check_exists(self) -> None:
        """Raise :class:`RemoteError` if the registry itself does not exist.

        Only kinds that can tell (``file://``: its folder) check anything; publishing creates
        the registry, so only reading calls this.
        """
        return  # a server or bucket answers for itself

    def index_lock(self) -> contextlib.AbstractContextManager[None]:
        """Held while the index is read, changed and written back."""
        return contextlib.nullcontext()

    # ------------------------------------------------------------------ errors
    def fail(self, message: str, exc: BaseException | None = None) -> RemoteError:
        """A :class:`RemoteError` whose message carries no credentials."""
        detail = f": {type(exc).__name__}: {exc}" if exc is not None else ""
        return RemoteError(scrub(f"{message}{detail}", self.secrets))

    def forbidden(self, message: str) -> Forbidden:
        """A :class:`Forbidden` whose message carries no credentials."""
        return Forbidden(scrub(message, self.secrets))

    def deadline_passed(self, what: str) -> RemoteError:
        """The error for ``what`` (``"download of <url>"``) still running at the deadline."""
        settings = self.settings
        return self.fail(
            f"{what} did not finish within {self.deadline.allowed():.1f} s, the deadline of "
            f"this operation (http_timeout {settings.http_timeout:g} s + "
            f"{self.deadline.received} bytes received / min_download_rate "
            f"{settings.min_download_rate:g} bytes/s, RemoteSettings): the server is stalled "
            "or too slow; try again later, or raise http_timeout or lower min_download_rate "
            "for a slow link")

    def read_only(self) -> RemoteError:
        """The error for a write to a read-only kind."""
        return RemoteError(
            f"{self.location} is read-only ({self.kind}:// serves a published registry); "
            "publish to the file:// or s3:// registry it serves instead"
        )

    def require_writable(self) -> None:
        """Raise :meth:`read_only` for a read-only kind."""
        if not self.writable:
            raise self.read_only()
