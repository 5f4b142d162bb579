"""Read-only questions to registries: what one lists, a version's manifest, and which
registry along a URL publishes the dataset at its end. Each question is one operation with
one deadline for all its requests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

from marl_minari.errors import CorruptedDataError, MarlMinariError, RemoteError

from .backend import Backend, Forbidden
from .connections import IDLE_PER_SERVER
from .credentials import scrub, url_secrets
from .deadline import Deadline
from .index import Index, listed_ids, read_index
from .kinds import minari_remote_kinds, open_backend, resolve_remote, serves_remote, unknown_kind
from .manifest import MAX_MANIFEST_BYTES, Manifest
from .published import find_manifest, manifest_key, read_manifest
from .settings import RemoteSettings

MAX_PARALLEL_INDEXES: Final = 8
"""Candidate registries of one URL whose indexes are requested at once."""


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
        RemoteError: the remote failed, passed its deadline, or does not exist (a ``file://``
            folder that is not there is an error, not an empty registry).
        CorruptedDataError: its index is damaged (the message names the key) or larger than
            the size cap.
    """
    if not serves_remote(remote):
        return _list_with_minari(resolve_remote(remote), prefix)
    backend = open_backend(remote, settings=settings)
    backend.check_exists()
    index = read_index(backend)
    listed = []
    for dataset_id in listed_ids(index, backend.location, prefix):
        entry = index["datasets"][dataset_id]
        listed.append(RemoteDataset(dataset_id, dict(entry["metadata"]),
                                    entry.get("total_size"), entry.get("published")))
    return listed


def _list_with_minari(remote: str, prefix: str | None) -> list[RemoteDataset]:
    """List a remote of Minari's own kinds (``hf://``) with Minari's function."""
    import minari

    if remote.partition("://")[0] not in minari_remote_kinds():
        raise unknown_kind(remote)  # an error here, not a KeyError inside Minari
    try:
        found = minari.list_remote_datasets(remote_path=remote, prefix=prefix)
    except ImportError as exc:
        raise RemoteError(scrub(f"remote kind {remote.partition('://')[0]!r} is not "
                                f"available: {exc}; install the package it names",
                                url_secrets(remote))) from None
    return [RemoteDataset(k, dict(v)) for k, v in sorted(found.items())]


def published_manifest(dataset_id: str, remote: str | None = None, *,
                       settings: RemoteSettings | None = None) -> Manifest:
    """The manifest of a published version: its files with sizes and digests.

    Raises:
        InvalidDatasetIdError: malformed id.
        DatasetNotFoundError: the version is not published on ``remote``.
        CorruptedDataError: the manifest is damaged or unsafe (the message names the key).
        RemoteError: the remote failed or passed its deadline; a kind without manifests.
    """
    return read_manifest(open_backend(remote, settings=settings), dataset_id)


def find_published(candidates: Iterable[tuple[str, str]], *,
                   settings: RemoteSettings | None = None) -> tuple[str, str] | None:
    """The first ``(registry, dataset_id)`` of ``candidates`` whose registry publishes the id.

    First the registry whose index (at its root) lists the id; for registries that lost
    their index, the first whose manifest describes the id. All requests, to every
    candidate, share one deadline. Every registry must be of a kind this package serves. A
    candidate whose host refuses a file (:class:`~.backend.Forbidden`: S3 and the hosts in
    front of a bucket answer 403 for a file they do not have) publishes nothing there.

    Returns:
        The pair, or ``None`` when no candidate publishes its id.

    Raises:
        CorruptedDataError: no index lists the id, and a manifest at a candidate is damaged.
        RemoteError: a registry failed to answer, or the deadline passed; every candidate
            refused its index (:class:`~.backend.Forbidden`, saying what 403 may mean).
    """
    settings = settings if settings is not None else RemoteSettings.from_env()
    deadline = Deadline(settings)
    backends = [(open_backend(registry, settings=settings, deadline=deadline), registry,
                 dataset_id) for registry, dataset_id in candidates]
    refused: list[Forbidden] = []
    # A URL can be read as several registries (one per dataset id its path could end in:
    # eight for a Hugging Face `resolve/main` URL of a namespaced id), and asked one after
    # the other each would cost a round trip: all indexes are asked for at once, and looked
    # at in order (an error is raised only where its index is reached). Those after the one
    # that lists the id are never looked at nor waited for: a slow one finishes on its
    # thread, within the lookup's deadline.
    pool = ThreadPoolExecutor(max(1, min(MAX_PARALLEL_INDEXES, len(backends) - 1)),
                              thread_name_prefix="marl-minari-registry-index")
    try:
        later = [pool.submit(_index_unless_refused, backend) for backend, _, _ in backends[1:]]
        for position, (backend, registry, dataset_id) in enumerate(backends):
            index = (_index_unless_refused(backend) if not position
                     else later[position - 1].result())
            if isinstance(index, Forbidden):
                refused.append(index)
            elif dataset_id in index["datasets"]:
                return registry, dataset_id
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    damaged: CorruptedDataError | None = None
    for backend, registry, dataset_id in backends:
        try:
            if find_manifest(backend, dataset_id) is not None:
                return registry, dataset_id
        except CorruptedDataError as exc:  # at a wrong split: the manifest names its own id
            damaged = damaged or exc
        except Forbidden:
            pass
    if damaged is not None:
        raise damaged
    if refused and len(refused) == len(backends):
        raise Forbidden(f"{refused[0]}; every registry along the URL refused its index. Hosts "
                        "such as S3 answer 403 for a file they do not have as well as for one "
                        "you may not read: check the URL and the dataset id, or give "
                        "credentials (user:password@ in an http(s) URL or a token; AWS "
                        "credentials for s3://)")
    return None


def find_published_manifest(candidates: Sequence[tuple[str, str]], *,
                            settings: RemoteSettings | None = None,
                            manifest_settings: RemoteSettings | None = None,
                            warm_connections: int = 0) -> tuple[str, str, Manifest] | None:
    """:func:`find_published`, and the manifest of the version found (read with
    ``manifest_settings``).

    Every candidate ``(registry, dataset_id)`` of one URL names the same manifest, the URL
    followed by ``manifest.json``: it is requested together with the candidates' indexes,
    which saves a far reader the round trip it would wait for after them. Its bytes are
    parsed for the registry the lookup finds, exactly as read there; where that request
    failed, the manifest is read again, and its error, if any, raised then.

    Meanwhile, connections to the URL's server are opened until ``warm_connections`` are
    open, idle or in use, those of the lookup's own requests counted
    (:meth:`~.backend.Backend.warm`): the caller's next requests, sent together once the
    manifest is read, then wait for no new connection (one round trip each on a far host,
    two under HTTPS).

    Raises:
        as :func:`find_published`, and :func:`~.published.read_manifest`.
    """
    first_registry, first_id = candidates[0]
    early = open_backend(first_registry, settings=manifest_settings)
    early_key = manifest_key(first_id)
    in_flight = 2 + min(MAX_PARALLEL_INDEXES, len(candidates) - 1)  # indexes, the manifest
    # More connections than a server keeps idle would be closed as they are opened.
    warm_connections = min(warm_connections, IDLE_PER_SERVER)
    warming = max(0, warm_connections - in_flight)
    pool = ThreadPoolExecutor(1 + warming, thread_name_prefix="marl-minari-registry-manifest")
    try:
        fetched = pool.submit(early.read, early_key, MAX_MANIFEST_BYTES)
        for _ in range(warming):
            pool.submit(early.warm, warm_connections)
        found = find_published(candidates, settings=settings)
        if found is None:
            return None
        registry, dataset_id = found
        backend = open_backend(registry, settings=manifest_settings)
        raw = None
        if f"{backend.location}/{manifest_key(dataset_id)}" == f"{early.location}/{early_key}":
            with contextlib.suppress(MarlMinariError):
                raw = fetched.result()
        return registry, dataset_id, read_manifest(backend, dataset_id, fetched=raw)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _index_unless_refused(backend: Backend) -> Index | Forbidden:
    """The registry's index, or the host's refusal to serve it."""
    try:
        return read_index(backend)
    except Forbidden as exc:
        return exc
