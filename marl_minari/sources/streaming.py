"""Datasets on a registry read in place: ``open_source(url, streaming=True)``.

A :class:`StreamingSource` fetches the small files of a published version (its manifest,
``metadata.json`` and offset index, each verified against the manifest) and reads episodes
from ``main_data.hdf5`` by byte ranges when they are asked for: HDF5 opens the file over
:class:`~marl_minari.storage.byte_ranges.RangesFile` and the indexed leaves of the episodes
read come in one ``read_ranges`` call of a verified
:class:`~marl_minari.registry.remote_file.RemoteFile` (``docs/registry.md``, *Reading in
place*). Everything that reads through a source (episodes, chunks, describe, subsets,
buffers, vaults, Ray, TorchRL) reads a streaming one the same way.

A source pickles to its URL and manifest entries, never its bytes: a process or a Ray node
that unpickles it fetches what it reads itself, and writes the small files to its own cache.
The offset-index entries a reader compares with HDF5 are remembered for the bytes the
manifest pins (:attr:`StreamingSource.published_bytes`), so each is compared once per
machine (``docs/format.md``, *Remembered entry comparisons*).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, Final

import h5py
import numpy as np

from marl_minari.errors import (
    CorruptedDataError,
    LayoutError,
    MarlMinariError,
)
from marl_minari.format import layout, offset_index
from marl_minari.format.comparison_record import PublishedBytes
from marl_minari.format.digests import hash_file
from marl_minari.format.metadata import metadata_count, metadata_space, read_metadata
from marl_minari.format.returns import episode_returns
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.sources.base import DEFAULT_CHUNK_STEPS, DatasetSource, EpisodeAttributes
from marl_minari.sources.plain import plain_file_episodes, spec_of
from marl_minari.sources.remote import find_remote_version, shown_url
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.byte_ranges import RangesFile
from marl_minari.storage.datafile import (
    attribute_steps,
    cross_check,
    file_episode_attributes,
    hdf5_errors,
)
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.episode_ids import episode_position
from marl_minari.storage.episode_reader import EpisodeReader
from marl_minari.storage.reader_state import IndexCache, ReadScratch
from marl_minari.user_warnings import called_from_here

MAIN_PATH: Final = f"data/{layout.MAIN_FILE_NAME}"
SMALL_PATHS: Final = (f"data/{layout.METADATA_FILE_NAME}", f"data/{layout.INDEX_FILE_NAME}")
"""The files a streaming source fetches whole when it opens (the index only if published)."""
COMPARISONS_FILE_NAME: Final = "entry_comparisons.json"
COMPARISONS_KEY_NAME: Final = ".entry_comparisons.key"


def _small_files_folder(wanted: Path) -> Path:
    """``wanted`` (made if need be), the folder that keeps a streamed version's small files;
    where it cannot be made (a read-only or full disk), a folder of this process's own for it,
    deleted when the process ends, said once with a warning."""
    try:
        wanted.mkdir(parents=True, exist_ok=True)
        return wanted
    except OSError as exc:
        failure = exc
    with _OWN_FOLDERS_LOCK:
        own = _OWN_FOLDERS.get(wanted)
        if own is not None:
            return own
        made = Path(tempfile.mkdtemp(prefix="marl-minari-stream-"))
        atexit.register(shutil.rmtree, made, ignore_errors=True)
        own = _OWN_FOLDERS[wanted] = made / "data"
        own.mkdir()
    from marl_minari.registry.stream_warnings import warn_own_small_files_folder

    warn_own_small_files_folder(wanted.parents[2], own, failure)
    return own


_OWN_FOLDERS: dict[Path, Path] = {}
"""Folders this process made for the small files of versions whose cache folder it could not
write, by the folder it could not make."""
_OWN_FOLDERS_LOCK = threading.Lock()


def _holds_small(entry: Any, target: Path) -> bool:
    """Whether ``target`` holds the small published file ``entry``: its size and digest."""
    if not target.is_file():
        return False
    size, digests = hash_file(target, (entry.check_algorithm,))
    return size == entry.size and digests[entry.check_algorithm] == entry.check_digest


class StreamingSource(DatasetSource):
    """A published dataset read in place (see the module docstring): in the multi-agent
    layout, or a plain single-agent Minari dataset seen as one agent ``agent_0``.

    Args:
        url: a registry URL followed by a dataset id (``https://host/registry/ns/name-v0``,
            ``s3://bucket/registry/...``, ``file:///srv/registry/...``).
        settings: caching, parallelism and timeouts
            (:class:`~marl_minari.registry.StreamSettings`).
        episode_indices: the stored episodes to read (all by default).

    Raises:
        DatasetNotFoundError: nothing along ``url`` publishes the dataset at its end.
        LayoutError: it is not an HDF5 dataset.
        CorruptedDataError: a file does not match the manifest, or the data is damaged.
        RemoteError: the registry failed, or a deadline passed.
    """

    def __init__(self, url: str, *, settings: Any = None,
                 episode_indices: np.ndarray | None = None) -> None:
        from marl_minari.registry import StreamSettings
        from marl_minari.registry.remote_file import RemoteFile

        self.url = url
        self.settings = settings or StreamSettings()
        self.registry, published_id, manifest = find_remote_version(
            url, self.settings.remote, warm_connections=self._connections_ahead())
        entries = {entry.path: entry for entry in manifest.files}
        if MAIN_PATH not in entries:
            raise LayoutError(f"{shown_url(url)} has no {MAIN_PATH}: only HDF5 datasets are "
                              "read in place; download it instead (marl-minari download)")
        self.published_id = published_id
        self.manifest_digest = manifest.digest()
        self.small_entries = [entries[path] for path in SMALL_PATHS if path in entries]
        self.remote_file = RemoteFile(self.registry, published_id, entries[MAIN_PATH],
                                      settings=self.settings)
        self._local: Path | None = None
        self._fetch_small_files(entries[MAIN_PATH].open_blocks)
        metadata = read_metadata(self.local_data_path)
        if metadata.get("data_format", "hdf5") != "hdf5":
            raise LayoutError(f"{shown_url(url)} is a {metadata.get('data_format')!r} dataset: "
                              "only HDF5 datasets are read in place; download it instead "
                              "(marl-minari download)")
        total = metadata_count(metadata, "total_episodes", self.local_data_path)
        metadata_count(metadata, "total_steps", self.local_data_path)
        multi_agent = layout.METADATA_KEY in metadata
        spec = spec_of(metadata, multi_agent, (
            metadata_space(metadata, "observation_space", self.local_data_path),
            metadata_space(metadata, "action_space", self.local_data_path)))
        with self._open() as file, hdf5_errors(Path(self.remote_file.name)):
            cross_check(file, metadata, spec if multi_agent else None,
                        Path(self.remote_file.name))
        super().__init__(shown_url(url), "multi_agent" if multi_agent else "single_agent",
                         spec, metadata,
                         np.arange(total) if episode_indices is None else episode_indices)
        self._index_cache: IndexCache | None = IndexCache()
        self._all_steps: np.ndarray | None = None

    def _connections_ahead(self) -> int:
        """Connections to open while the lookup is in flight: for the small files and the
        blocks that open the file, all requested together once the manifest is read."""
        from marl_minari.registry.connections import on_loopback

        if self.settings.connections_ahead is not None:
            return self.settings.connections_ahead
        return 0 if on_loopback(self.url) else self.settings.parallel_requests + len(SMALL_PATHS)

    def _transient(self) -> tuple[str, ...]:
        return ("_index_cache", "_all_steps", "_local")

    def subset(self, episode_indices: Sequence[int] | np.ndarray) -> StreamingSource:
        """The same published dataset, reading only the stored episodes ``episode_indices``."""
        chosen = object.__new__(StreamingSource)
        chosen.__setstate__(self.__getstate__())
        chosen._ids = np.asarray(episode_indices, dtype=np.int64)
        chosen._ids.setflags(write=False)
        chosen._lengths = None
        return chosen

    # ------------------------------------------------------------------ the small files
    @property
    def local_data_path(self) -> Path:
        """A local folder holding the verified ``metadata.json`` and offset index (never the
        data file), in the cache next to the block cache, one per published version."""
        if self._local is None:
            self._fetch_small_files()
        assert self._local is not None
        return self._local

    def _fetch_small_files(self, open_blocks: Sequence[int] = ()) -> None:
        """Make :attr:`local_data_path` hold the verified small files, and fetch the data
        file's ``open_blocks`` meanwhile: all depend on the manifest alone, so the requests
        of those not held already go out together (on a first open, one round trip instead
        of three)."""
        folder = _small_files_folder(self.settings.cache().folder.parent / "streams"
                                     / self.manifest_digest[:32] / "data")
        missing = [entry for entry in self.small_entries
                   if not _holds_small(entry, folder / Path(entry.path).name)]
        fetches = [partial(self._download_small, entry, folder / Path(entry.path).name)
                   for entry in missing]
        if open_blocks:
            fetches.append(partial(self.remote_file.prefetch, open_blocks))
        if len(fetches) > 1:
            with ThreadPoolExecutor(len(fetches) - 1,
                                    thread_name_prefix="marl-minari-open") as pool:
                later = [pool.submit(called_from_here(fetch)) for fetch in fetches[1:]]
                fetches[0]()
                for future in later:  # errors in order: a small file's before the blocks'
                    future.result()
        elif fetches:
            fetches[0]()
        self._local = folder

    @property
    def published_bytes(self) -> PublishedBytes:
        """The digests that pin the data file's bytes, and where this machine remembers the
        offset-index comparisons made over them: ``streams/<manifest digest>/`` beside the
        small files, signed with the user's key in ``streams/`` (``docs/format.md``,
        *Remembered entry comparisons*)."""
        streams = self.local_data_path.parent.parent
        return PublishedBytes(self.remote_file.pinned_digest,
                              self.local_data_path.parent / COMPARISONS_FILE_NAME,
                              streams / COMPARISONS_KEY_NAME)

    def _download_small(self, entry: Any, target: Path) -> None:
        """Fetch the small published file ``entry`` (verified) to ``target``, atomically."""
        from marl_minari.registry.remote_file import RemoteFile, read_whole

        data = read_whole(RemoteFile(self.registry, self.published_id, entry,
                                     settings=self.settings))
        temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        try:
            temporary.write_bytes(data)
            os.replace(temporary, target)
        finally:
            temporary.unlink(missing_ok=True)

    # ------------------------------------------------------------------ reading
    @contextlib.contextmanager
    def _supplier_errors(self) -> Iterator[None]:
        """Errors of reads through HDF5 as the supplier raised them (a block that failed its
        check names the range and the mirror; HDF5 would report a missing object), and the
        remote file named where the reader named its local stand-in. The blocks fetched
        are in the disk cache when the operation returns (a bulk read leaves their writes to
        the cache writer while it compares the offset index)."""
        try:
            with self.remote_file.one_operation():
                yield
        except MarlMinariError as exc:
            failure = self.remote_file.failure
            if failure is not None and failure is not exc:
                raise failure from None
            local = str(self.local_data_path / layout.MAIN_FILE_NAME)
            if local in str(exc):
                raise type(exc)(str(exc).replace(local, self.remote_file.name)) from None
            raise
        finally:
            self.remote_file.settle()

    @contextlib.contextmanager
    def _open(self) -> Iterator[h5py.File]:
        with self._supplier_errors():
            try:
                file = h5py.File(RangesFile(self.remote_file), "r")
            except OSError as exc:
                raise CorruptedDataError(f"{self.remote_file.name} is damaged and cannot be "
                                         f"opened ({exc})") from exc
            with file:
                yield file

    def _stored_lengths(self, ids: np.ndarray) -> np.ndarray:
        if self._all_steps is None:
            self._all_steps = self._published_steps()
        return self._all_steps[np.asarray(ids, dtype=np.int64)]

    def _published_steps(self) -> np.ndarray:
        """Steps of every stored episode, from the offset index the manifest pins when the
        cheap checks pass (its counts agree with ``metadata.json``, its size with the file's,
        the file's seal with its content: :func:`~marl_minari.format.offset_index.load`
        without the sampled comparisons, which would fetch episodes' headers). Nothing beyond
        the blocks that opened the file is fetched, so counts and lengths (a metadata-only
        ``describe``, Ray's read plan) cost nothing more. These lengths only plan reads:
        every entry a read uses is still compared with HDF5's offset, type and shape.
        Without a usable index, each episode's ``total_steps`` attribute is read from the
        file (HDF5 metadata of every episode)."""
        total = int(self.metadata["total_episodes"])
        with self._open() as file, hdf5_errors(Path(self.remote_file.name)):
            index = offset_index.load(self.local_data_path, file, total,
                                      int(self.metadata["total_steps"]),
                                      file_size=self.remote_file.size, sample=False)
            if index is not None:
                return np.asarray(index.steps, dtype=np.int64)
            return attribute_steps(file, Path(self.remote_file.name), np.arange(total))

    def episode_attributes(self, ids: Sequence[int] | np.ndarray) -> list[EpisodeAttributes]:
        checked = self.stored_ids(ids).tolist()
        with self._open() as file:
            return file_episode_attributes(file, self.remote_file.name, checked)

    def _reader(self) -> EpisodeReader:
        if self._index_cache is None:
            self._index_cache = IndexCache()
        return EpisodeReader(self.local_data_path, self.spec, self.metadata,
                             self._index_cache, byte_source=self.remote_file,
                             published=self.published_bytes)

    def read(self, ids: Sequence[int] | np.ndarray, *,
             observations: bool = True) -> MultiAgentArrays:
        ids = self.stored_ids(ids)
        if not self.multi_agent:  # no offset index: HDF5 reads it over the ranges
            with self._open() as file:
                return plain_file_episodes(
                    file, self.remote_file.name, self.spec, ids.tolist(),
                    jpeg_encoding=bool(self.metadata.get("jpeg_encoding", True)),
                    observations=observations)
        with self._supplier_errors(), self._reader() as reader:
            return reader.read(ids, observations=observations)

    def read_batches(self, batches: Iterable[np.ndarray], *, observations: bool = True,
                     reuse_arrays: bool = False,
                     scratch: ReadScratch | None = None) -> Iterator[MultiAgentArrays]:
        if not self.multi_agent:
            yield from super().read_batches(batches, observations=observations)
            return
        # One reader for the whole pass, as a local dataset's: the file is opened over the
        # ranges and the index loaded once, not once per batch.
        if scratch is None and reuse_arrays:
            scratch = ReadScratch()
        with self._supplier_errors(), self._reader() as reader:
            for batch in batches:
                yield reader.read(np.asarray(batch, dtype=np.int64).reshape(-1),
                                  observations=observations, scratch=scratch)

    def team_returns(self, chunk_steps: int | None = None) -> np.ndarray:
        """The team return of each episode from the reward column alone: its ranges (and
        the HDF5 metadata binding each index entry) are all that moves, not observations,
        actions or agent columns (``docs/registry.md``, *Reading in place*)."""
        if not self.multi_agent:
            return super().team_returns(chunk_steps)
        if not self.total_episodes:
            return np.zeros(0)
        with self._supplier_errors(), self._reader() as reader:
            parts = [episode_returns(*reader.team_rewards(batch))
                     for batch in self.batches(
                         DEFAULT_CHUNK_STEPS if chunk_steps is None else chunk_steps)]
        return np.concatenate(parts)


class StreamingDataset:
    """What ``marl_minari.load_dataset(url, streaming=True)`` returns: a published dataset
    read in place, with :class:`~marl_minari.MultiAgentDataset`'s reading methods (episodes
    by position, iteration, ``to_arrays``, ``episode_attributes``) over a
    :class:`StreamingSource` (:attr:`source`, for everything that takes a source)."""

    def __init__(self, source: StreamingSource) -> None:
        self.source = source

    @property
    def spec(self) -> MultiAgentSpec:
        """Agents, per-agent spaces and env descriptor."""
        return self.source.spec

    @property
    def possible_agents(self) -> tuple[str, ...]:
        """Agent names in the environment's order."""
        return self.source.spec.possible_agents

    @property
    def metadata(self) -> dict[str, Any]:
        """The published ``metadata.json``."""
        return self.source.metadata

    @property
    def total_episodes(self) -> int:
        """Number of episodes."""
        return self.source.total_episodes

    @property
    def total_steps(self) -> int:
        """Number of environment steps over all episodes."""
        return self.source.total_steps

    @property
    def episode_indices(self) -> np.ndarray:
        """The stored episode ids this dataset holds, in order."""
        return self.source.episode_indices.copy()

    def __len__(self) -> int:
        return self.total_episodes

    def __repr__(self) -> str:
        return (f"StreamingDataset({self.source.name!r}, {self.total_episodes} episodes, "
                f"agents={list(self.possible_agents)})")

    def __getitem__(self, index: int) -> MultiAgentEpisode:
        episode_id = int(self.source.episode_indices[episode_position(index,
                                                                      self.total_episodes)])
        seed, options = self.source.episode_attributes([episode_id])[0]
        return replace(self.to_arrays([episode_id]).episode(0), seed=seed, options=options)

    def __iter__(self) -> Iterator[MultiAgentEpisode]:
        return self.iterate_episodes()

    def iterate_episodes(self, episode_indices: Iterable[int] | None = None,
                         *, batch_size: int = 256) -> Iterator[MultiAgentEpisode]:
        """Yield episodes (stored ids; all by default) in order, ``batch_size`` at a time."""
        indices = self._ids(episode_indices).tolist()
        for start in range(0, len(indices), batch_size):
            chunk = indices[start:start + batch_size]
            arrays = self.to_arrays(chunk)
            for position, (seed, options) in enumerate(self.source.episode_attributes(chunk)):
                yield replace(arrays.episode(position), seed=seed, options=options)

    def to_arrays(self, episode_indices: Sequence[int] | None = None) -> MultiAgentArrays:
        """Episodes (stored ids; all by default) as contiguous per-agent arrays, fetched by
        ranges."""
        return self.source.read(self._ids(episode_indices))

    def episode_attributes(self, episode_indices: Iterable[int]) -> list[EpisodeAttributes]:
        """``(seed, options)`` of stored episodes."""
        return self.source.episode_attributes(self._ids(episode_indices))

    def _ids(self, episode_indices: Iterable[int] | None) -> np.ndarray:
        if episode_indices is None:
            return self.source.episode_indices
        return self.source.stored_ids(episode_indices)
