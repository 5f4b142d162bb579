"""Minari's own functions on this package's remotes, when the user asks for it.

Minari finds a remote's ``CloudStorage`` class by its kind in a private table
(:func:`~.kinds.minari_remote_kinds`). :func:`register_remote_kinds` adds ``file``, ``s3``,
``http`` and ``https`` to it, each served by a :class:`MinariRemote`: a thin adapter whose
methods are the registry's own functions (publish, verified download, index, namespaces), so
``minari.upload_dataset``, ``list_remote_datasets``, ``download_dataset`` and
``load_dataset(..., download=True)`` get the same guarantees. Nothing registers them on
import: a process that wants Minari's functions to know these kinds calls
``marl_minari.registry.register_remote_kinds()`` once.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

from minari.storage.remotes.cloud_storage import CloudStorage

from marl_minari.errors import DatasetNotFoundError, MarlMinariError, RemoteError
from marl_minari.format.ids import parse_dataset_id
from marl_minari.user_warnings import warn

from .backend import Backend
from .credentials import scrub, url_secrets
from .download import install_published
from .index import Index, listed_ids, read_index
from .kinds import BACKENDS, minari_remote_kinds, open_backend, resolve_remote, unknown_kind
from .namespaces import (
    check_namespace,
    download_namespace,
    list_namespaces,
    publish_namespace,
)
from .publish import publish_dataset
from .published import read_manifest, read_metadata_file
from .settings import RemoteSettings
from .transfer import tqdm_progress


class MinariRemote(CloudStorage):
    """Minari's ``CloudStorage`` interface over one of this package's registries.

    Each method is one operation (with its own deadline) of the registry's functions. The
    index read by :meth:`list_datasets` is kept for the :meth:`get_dataset_metadata` calls
    Minari makes next, so listing a registry reads one object.

    Args:
        kind: ``file``, ``s3``, ``http`` or ``https``.
        name: the remote after ``kind://``.
        token: Minari's token (``http(s)://``: sent as a Bearer token).
        settings: timeouts, rates and flushing; default :meth:`RemoteSettings.from_env`
            (Minari's functions construct remotes without it).

    Raises:
        RemoteError: a malformed remote (checked here, before any request).
        MissingExtraError: ``s3://`` without boto3.
    """

    def __init__(self, kind: str, name: str, token: str | None = None, *,
                 settings: RemoteSettings | None = None) -> None:
        self.kind = kind
        self._remote = f"{kind}://{name}"
        self._token = token
        self._first: Backend | None = open_backend(self._remote, token=token,
                                                   settings=settings)
        self.settings = self._first.settings
        self.location = self._first.location
        """The remote, without credentials."""
        self._index: Index | None = None
        self._lock = threading.Lock()

    def backend(self) -> Backend:
        """A backend of this remote for one operation (a deadline of its own)."""
        with self._lock:
            first, self._first = self._first, None
        if first is not None:
            return first
        return open_backend(self._remote, token=self._token, settings=self.settings)

    def _cached_index(self) -> Index:
        with self._lock:
            index = self._index
        if index is None:
            index = read_index(self.backend())
            with self._lock:
                self._index = index
        return index

    def list_datasets(self, prefix: str | None = None) -> Iterable[str]:
        """Ids of the published datasets (one read of the index).

        A registry that does not exist yet lists as empty here (Minari's upload lists the
        remote before its first publish).
        """
        index = read_index(self.backend())
        with self._lock:
            self._index = index
        return listed_ids(index, self.location, prefix)

    def get_dataset_metadata(self, dataset_id: str) -> dict:
        """``metadata.json`` of a published dataset, from the index when it is there."""
        parse_dataset_id(dataset_id)
        entry = self._cached_index()["datasets"].get(dataset_id)
        if entry is not None:
            return dict(entry["metadata"])
        return read_metadata_file(self.backend(), dataset_id)

    def upload_dataset(self, dataset_id: str) -> None:
        """Publish one local dataset (Minari's upload entry point; Minari validates nothing).

        A version that is already published with identical files is left alone, one with
        different files raises :class:`~marl_minari.errors.DatasetExistsError`.
        """
        from minari.storage.datasets_root_dir import get_dataset_path

        parse_dataset_id(dataset_id)
        backend = self.backend()
        backend.require_writable()
        local = Path(get_dataset_path(dataset_id))
        size = sum(p.stat().st_size for p in local.rglob("*") if p.is_file())
        update, close = tqdm_progress(size, f"upload {dataset_id}")
        try:
            publish_dataset(backend, dataset_id, local, progress=update)
        finally:
            close()

    def download_dataset(self, dataset_id: str, path: Path) -> None:
        """Download and verify one dataset into the root ``path`` (Minari's entry point).

        Minari calls this after its own checks, also with ``force_download``: an existing
        local copy is replaced, in one rename, only after the new one is complete.
        """
        parse_dataset_id(dataset_id)
        backend = self.backend()
        manifest = read_manifest(backend, dataset_id)
        update, close = tqdm_progress(manifest.total_size, f"download {dataset_id}")
        try:
            install_published(backend, dataset_id, Path(path), replace=True, progress=update,
                              manifest=manifest)
        finally:
            close()

    def list_namespaces(self) -> Iterable[str]:
        """Namespaces recorded in the index."""
        return list_namespaces(read_index(self.backend()))

    def download_namespace_metadata(self, namespace: str, path: Path) -> None:
        """Write the remote metadata of ``namespace`` under the local root ``path``."""
        check_namespace(namespace)
        if not download_namespace(self.backend(), namespace, Path(path)):
            raise DatasetNotFoundError(f"namespace {namespace!r} is not on {self.location}")

    def upload_namespace(self, namespace: str) -> None:
        """Publish the local ``namespace_metadata.json`` of ``namespace`` (and record it)."""
        check_namespace(namespace)
        publish_namespace(self.backend(), namespace)


def _adapter(kind: str) -> Callable[[], Callable[..., CloudStorage]]:
    """The loader Minari's table holds for ``kind``: Minari calls ``loader()(name, token)``."""
    return lambda: functools.partial(MinariRemote, kind)


MINARI_FACTORIES: Final[dict[str, Callable[[], Callable[..., CloudStorage]]]] = {
    kind: _adapter(kind) for kind in BACKENDS}
"""What :func:`register_remote_kinds` adds to Minari's table: kind -> loader of its class."""


def register_remote_kinds() -> None:
    """Let Minari's own functions use ``file://``, ``s3://``, ``http://`` and ``https://``.

    Adds these kinds to Minari's remote table (Minari has no public API for it; see
    :func:`~.kinds.minari_remote_kinds`), so ``minari.list_remote_datasets``,
    ``minari.download_dataset``, ``minari.upload_dataset`` and ``minari.load_dataset(...,
    download=True)`` work with them (``MINARI_REMOTE=<remote>``). Call it once per process;
    calling it again changes nothing. Importing marl-minari never calls it, and this
    package's own functions do not need it. Minari's own kinds (``hf``, ``gcp``) are left as
    they are; a kind another package has registered is not replaced (a warning says so).
    """
    table = minari_remote_kinds()
    for kind, factory in MINARI_FACTORIES.items():
        current = table.get(kind)
        if current is None or current in MINARI_FACTORIES.values():
            table[kind] = factory
        else:
            warn(f"remote kind {kind!r} is registered by another package; marl-minari leaves "
                 "it alone")


def open_remote(remote: str | None = None, token: str | None = None, *,
                settings: RemoteSettings | None = None) -> CloudStorage:
    """The ``CloudStorage`` object Minari's functions use for ``remote`` (``hf://`` too).

    For this package's kinds, a :class:`MinariRemote` (whether or not they are registered
    with Minari); for Minari's own, the class Minari registered.

    Args:
        remote: ``kind://...`` or a directory path; default :func:`~.kinds.default_registry`.
        token: Minari's token (``http(s)://``: sent as a Bearer token).
        settings: timeouts, rates and flushing of this package's kinds; default
            :meth:`RemoteSettings.from_env`. Ignored by Minari's own kinds.

    Raises:
        RemoteError: unknown kind (the message lists the known ones) or a backend that cannot
            be set up (missing package, malformed name).
        MissingExtraError: ``s3://`` without boto3.
    """
    remote = resolve_remote(remote)
    kind, name = remote.split("://", maxsplit=1)
    if kind in BACKENDS:
        return MinariRemote(kind, name, token, settings=settings)
    factory = minari_remote_kinds().get(kind)
    if factory is None:
        raise unknown_kind(remote)
    try:
        return factory()(name, token)
    except MarlMinariError:
        raise
    except ImportError as exc:
        raise RemoteError(scrub(f"remote kind {kind!r} is not available: {exc}; install the "
                                "package it names", [token, *url_secrets(remote)])) from None

