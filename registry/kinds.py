"""Which remotes exist: naming a remote, the kinds this package serves, and Minari's own.

A remote is ``kind://name``: ``file://``, ``s3://``, ``http://`` and ``https://`` are served
here by a :class:`~.backend.Backend` (:func:`open_backend`); Minari's own kinds (``hf://``,
``gcp://``) and any other package registered with Minari are served by Minari's
``CloudStorage`` classes, without manifests. A bare directory path means ``file://``, and no
remote at all means the default registry (:func:`default_registry`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from marl_minari.errors import RemoteError
from marl_minari.minari_compat import remote_kinds

from .credentials import scrub, url_secrets
from .deadline import Deadline
from .settings import RemoteSettings

if TYPE_CHECKING:
    from minari.storage.remotes.cloud_storage import CloudStorage

    from .backend import Backend

REGISTRY_ENV_VAR: Final = "MARL_MINARI_REGISTRY"
DEFAULT_REGISTRY_PATH: Final = Path("~") / ".minari" / "registry"


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
        # A path is taken as written: as a URL, its '%' and '#' are escaped (file:// is read
        # percent-decoded, as every URL is).
        return Path(remote).expanduser().absolute().as_uri()
    kind, separator, rest = remote.partition("://")
    return kind.lower() + separator + rest  # schemes are case-insensitive (RFC 3986)


def _file() -> type[Backend]:
    from .file import FileBackend

    return FileBackend


def _s3() -> type[Backend]:
    from .s3 import S3Backend

    return S3Backend


def _http() -> type[Backend]:
    from .http import HttpBackend

    return HttpBackend


def _https() -> type[Backend]:
    from .http import HttpsBackend

    return HttpsBackend


BACKENDS: Final[dict[str, Callable[[], type[Backend]]]] = {
    "file": _file, "s3": _s3, "http": _http, "https": _https,
}
"""The kinds this package serves, each with a loader of its backend class (imported on first
use, so ``boto3`` is needed only for ``s3://``)."""


def serves_remote(remote: str | None) -> bool:
    """True when ``remote`` (``None``: the default registry) is of a kind this package serves:
    ``file://``, ``s3://``, ``http(s)://``, with manifests and verified downloads. False for
    Minari's own kinds (``hf://``, ``gcp://``) and unknown ones."""
    return resolve_remote(remote).partition("://")[0] in BACKENDS


def minari_remote_kinds() -> dict[str, Callable[[], Callable[..., CloudStorage]]]:
    """Minari's table of remote kinds: ``kind`` -> loader of its ``CloudStorage`` class.

    The one place this package touches it, through :mod:`marl_minari.minari_compat` (Minari
    0.5 has no public API to add a remote kind or to list the known ones:
    ``minari.storage.remotes.get_cloud_storage`` looks the kind up in a private module-level
    dict). It is read to name Minari's kinds and to open them
    (:func:`~.minari_remote.open_remote`), and changed only by
    :func:`~.minari_remote.register_remote_kinds`, when a user asks for it.
    """
    return remote_kinds()


def unknown_kind(remote: str) -> RemoteError:
    """The error for a remote whose kind nobody serves (lists the known kinds)."""
    kind = remote.partition("://")[0]
    known = sorted({*BACKENDS, *minari_remote_kinds()})
    return RemoteError(scrub(f"unknown remote kind {kind!r} in {remote}; known kinds: "
                             f"{', '.join(known)}", url_secrets(remote)))


def open_backend(remote: str | None = None, *, token: str | None = None,
                 settings: RemoteSettings | None = None,
                 deadline: Deadline | None = None) -> Backend:
    """The backend of ``remote`` for one operation.

    Args:
        remote: ``kind://...`` or a directory path; default :func:`default_registry`.
        token: Minari's token (``http(s)://``: sent as a Bearer token).
        settings: timeouts, rates and flushing; default :meth:`RemoteSettings.from_env`.
        deadline: the operation's deadline, when it spans several backends; default a new
            one, started at the first request.

    Raises:
        RemoteError: a kind served by Minari (it has no manifests), an unknown kind, or a
            remote that cannot be set up (malformed name, credentials where none are taken).
        MissingExtraError: ``s3://`` without boto3.
    """
    remote = resolve_remote(remote)
    kind, name = remote.split("://", maxsplit=1)
    loader = BACKENDS.get(kind)
    if loader is None:
        if kind in minari_remote_kinds():
            hub = ("; a marl-minari registry kept in a Hugging Face dataset repository is "
                   "downloaded and read in place through its https://huggingface.co/datasets/"
                   "ORG/REPO/resolve/main URL" if kind == "hf" else "")
            raise RemoteError(
                f"{kind}:// remotes are served by Minari's own backend, without manifests: "
                f"use minari.upload_dataset / minari.download_dataset for them{hub}")
        raise unknown_kind(remote)
    return loader()(name, token, settings=settings, deadline=deadline)
