"""The one door: anything a user can name, resolved into one :class:`DatasetSource`.

Every public entry point (``load_dataset``, ``check_dataset``, ``describe``, ``to_vault``,
``make_buffer``, ``combine_datasets``, Ray, TorchRL, the command line) resolves what it is
given here, so the same reference is accepted everywhere and the same mistake gets the same
error. In order:

1. a :class:`DatasetSource` (as is), a ``MultiAgentDataset`` or a ``minari.MinariDataset``
   (the episodes it holds);
2. a URL: ``file://`` of a local dataset folder, ``main_data.hdf5`` or vault (read in place),
   else a registry followed by a dataset id (downloaded once and verified,
   :mod:`marl_minari.sources.remote`);
3. an existing path: a dataset folder, its ``data/`` folder or a file in it, or a Flashbax
   vault folder (``rel_dir/vault_name/vault_uid``);
4. a dataset id under the datasets root; one that is not local is downloaded only when the
   caller asks (``download=True``, or a ``remote``).

Anything else is :class:`~marl_minari.errors.DatasetNotFoundError` naming what was looked
for (a path that does not exist is never called a malformed id).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from marl_minari.errors import (
    DatasetNotFoundError,
    InvalidDatasetIdError,
    NotADatasetError,
)
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir, not_found_locally, parse_dataset_id
from marl_minari.sources.base import DatasetSource
from marl_minari.sources.folders import FolderSource, object_source
from marl_minari.sources.remote import fetch_remote_source, is_remote_source, shown_url
from marl_minari.sources.vault import VaultSource, is_vault

Reference = Any
"""What :func:`open_source` accepts (see the module's docs)."""


def open_source(reference: Reference, *, download: bool = False, remote: str | None = None,
                vault_options: dict[str, Any] | None = None, streaming: bool = False,
                stream_settings: Any = None) -> DatasetSource:
    """Resolve what a user named into a :class:`DatasetSource`.

    Args:
        reference: a dataset id, a dataset folder (or its ``data/`` folder, or a file in it),
            a Flashbax vault folder, a ``file://`` URL of one of those, a registry URL
            followed by a dataset id, a ``minari.MinariDataset``, a ``MultiAgentDataset`` or
            a :class:`DatasetSource` (returned as is).
        download: fetch an id that is not local from Minari's default remote
            (``$MINARI_REMOTE``), as ``minari.load_dataset(id, download=True)`` does.
        remote: fetch an id that is not local from this registry (every file checked).
        vault_options: how to read a vault that was not written by this library (agent
            names, spaces, ``cut_on``...: see :func:`marl_minari.adapters.from_vault`).
        streaming: read a registry URL in place instead of downloading it: metadata,
            manifest and index are fetched, episodes by verified byte ranges when read
            (:class:`~marl_minari.sources.streaming.StreamingSource`). Local datasets are
            read in place anyway.
        stream_settings: caching and parallelism of a streaming source
            (:class:`marl_minari.registry.StreamSettings`).

    Raises:
        DatasetNotFoundError: nothing at that path, or no such dataset (the message names the
            closest local ids and how to download).
        NotADatasetError: ``reference`` is none of the above.
        CorruptedDataError, LayoutError: what it names cannot be read as a dataset.
        RemoteError: a remote failed.
    """
    if isinstance(reference, DatasetSource):
        return reference
    opened = object_source(reference)
    if opened is not None:
        return opened
    if not isinstance(reference, (str, os.PathLike)):
        raise NotADatasetError(
            f"cannot read {reference!r} ({type(reference).__name__}) as a dataset: give a "
            "dataset id, a dataset or vault folder, a registry URL, a minari.MinariDataset or "
            "a marl_minari.MultiAgentDataset")
    name = os.fspath(reference)
    if isinstance(name, bytes):
        raise NotADatasetError(f"cannot read {name!r}: give the path as a str")
    if is_remote_source(name):
        local = _local_url_path(name)
        if local is None and streaming:
            from marl_minari.sources.streaming import StreamingSource

            return StreamingSource(name, settings=stream_settings)
        if local is None:
            return FolderSource(shown_url(name), fetch_remote_source(name))
        return _open_path(name, local, vault_options)
    path = Path(name).expanduser()
    if path_exists(path):
        return _open_path(name, path, vault_options)
    try:
        parse_dataset_id(name)
    except InvalidDatasetIdError as exc:
        raise DatasetNotFoundError(
            f"no dataset at {name!r}: there is no such file or folder, and it is not a "
            f"dataset id either ({exc})") from None
    return FolderSource(name, locate_dataset(name, download=download, remote=remote))


def open_sources(references: Reference | Sequence[Reference], **options: Any
                 ) -> list[DatasetSource]:
    """One reference or a list of them, each opened with :func:`open_source`."""
    if isinstance(references, (str, os.PathLike)) or not isinstance(references, Sequence):
        references = [references]
    return [open_source(reference, **options) for reference in references]


def locate_dataset(dataset_id: str, *, download: bool = False,
                   remote: str | None = None) -> Path:
    """The ``data/`` folder of the dataset ``dataset_id``: the local one, else (only when asked)
    one downloaded from ``remote`` or Minari's default remote (``download``).

    Raises:
        InvalidDatasetIdError: not a dataset id.
        DatasetNotFoundError: not local, and no download asked (see
            :func:`~marl_minari.format.ids.not_found_locally`).
    """
    parse_dataset_id(dataset_id)
    data_path = dataset_dir(dataset_id) / "data"
    if (data_path / layout.METADATA_FILE_NAME).exists():  # a FIFO there is named when read
        return data_path.resolve()
    if remote is not None:
        from marl_minari.registry import download as registry_download

        return (registry_download(dataset_id, remote) / "data").resolve()
    if download:
        return _minari_download(dataset_id)
    raise not_found_locally(dataset_id)


def _minari_download(dataset_id: str) -> Path:
    import minari

    from marl_minari.errors import MarlMinariError, RemoteError
    from marl_minari.registry import register_remote_kinds

    register_remote_kinds()  # $MINARI_REMOTE may name a file://, s3:// or http(s):// remote
    try:
        minari.download_dataset(dataset_id)
    except MarlMinariError:
        raise
    except Exception as exc:  # Minari's backends raise their own errors
        raise RemoteError(f"Minari could not download {dataset_id!r} from its default remote "
                          f"($MINARI_REMOTE): {type(exc).__name__}: {exc}") from exc
    return (dataset_dir(dataset_id) / "data").resolve()


def _local_url_path(url: str) -> Path | None:
    """The local path of a ``file://`` URL naming a dataset folder, a file in one or a vault;
    ``None`` for every other URL (a registry followed by an id, or another kind).

    A dataset published on a ``file://`` registry is also a dataset folder: it is recognised
    by its manifest and goes through the verified download like any remote dataset.
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # a malformed URL: the remote it names says so, by name
        return None
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    path = Path(unquote(parts.path))
    if not path_exists(path) or (path / "manifest.json").is_file():
        return None
    return path


def path_exists(path: Path) -> bool:
    """Whether ``path`` exists; a name the OS refuses (too long, say) is a path that does
    not, so what it names is looked up as a dataset id instead."""
    try:
        return path.exists()
    except OSError:
        return False


def _open_path(name: str, path: Path, vault_options: dict[str, Any] | None) -> DatasetSource:
    if is_vault(path):
        return VaultSource(path, vault_options)
    return FolderSource(name, _data_folder(path))


def _data_folder(path: Path) -> Path:
    """The ``data/`` folder of a dataset folder, a ``data/`` folder or a file in it."""
    candidates = [path.parent if path.is_file() else path, path / "data"]
    data_path = next((c for c in candidates if (c / layout.METADATA_FILE_NAME).exists()),
                     None)
    if data_path is None:
        raise DatasetNotFoundError(
            f"no Minari dataset at {path}: it is neither a dataset folder (holding "
            "data/metadata.json), a file in one, nor a Flashbax vault folder "
            "(rel_dir/vault_name/vault_uid)")
    return data_path.resolve()
