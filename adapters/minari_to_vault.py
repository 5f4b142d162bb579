"""Minari dataset -> Flashbax vault, streaming in chunks of whole episodes."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, get_args

import numpy as np
from tqdm.auto import tqdm

from marl_minari.errors import InvalidOptionError, LayoutError
from marl_minari.format.spaces import leaves, nest
from marl_minari.sources import DatasetSource, check_chunk_steps, open_source
from marl_minari.vaults.exact import ExactSink, columns
from marl_minari.vaults.store import (
    DEFAULT_COMPRESSION,
    TIME_AXIS_LENGTH,
    VAULT_METADATA_KEY,
    VAULT_VERSION,
    ZARR_COMPRESSORS,
    Appender,
    VaultWriter,
    default_vault_name,
    default_vault_uid,
    time_chunk,
    vault_dir,
    wait,
)
from marl_minari.vaults.view import view_rows
from marl_minari.vaults.view_plan import (
    VAULT_SOURCE_KEY,
    Dones,
    StateMode,
    Terminals,
    ViewPlan,
    plan_from_spec,
    plan_from_vault_record,
)
from marl_minari.version import __version__

from .sources import Chunk, require_layout
from .sources import chunks as episode_chunks

FORMAT: Final = "marl_minari/vault"
FORMAT_VERSION: Final = 1


def to_vault(
    dataset_or_id: Any,
    *,
    vault_name: str | None = None,
    rel_dir: str | os.PathLike[str] = "vaults",
    vault_uid: str | None = None,
    chunk_steps: int | None = None,
    compression: dict[str, Any] | None | str = "default",
    dones: Dones | None = None,
    terminals: Terminals | None = None,
    state: StateMode = "auto",
    seeds: bool = True,
    progress: bool = False,
    download: bool = False,
    remote: str | None = None,
) -> Path:
    """Convert a Minari dataset into a Flashbax vault in OG-MARL's conventions.

    The vault is named by keywords, Flashbax's ``Vault`` names (``vault_name``, ``rel_dir``,
    ``vault_uid``): ``to_vault(ds, vault_name="spread.vlt", vault_uid="Random")`` writes
    ``vaults/spread.vlt/Random``; a positional folder part is a ``TypeError``, never a swap.

    The vault holds one stream (``B = 1``; a dataset converted from a ``B > 1`` vault gets its
    streams back) with ``observations`` f32 ``(B, T, N, O)``, ``actions`` int32 ``(B, T, N)``
    (float32 ``(B, T, N, A)`` for other action spaces), ``rewards`` / ``terminals`` /
    ``truncations`` f32 ``(B, T, N)``, ``infos.legals`` f32 ``(B, T, N, A)`` (discrete actions)
    and ``infos.state`` f32 ``(B, T, S)``. Everything else needed to rebuild the dataset exactly
    (final observations, per-agent flags, infos, seeds, spaces, metadata) goes into restoration
    arrays and the ``marl_minari`` metadata key, which ``Vault`` and OG-MARL ignore.

    Args:
        dataset_or_id: anything :func:`marl_minari.sources.open_source` opens: a dataset id,
            a dataset folder, a ``MinariDataset`` or a ``MultiAgentDataset``. A plain
            single-agent dataset becomes one agent, ``agent_0``.
        vault_name: the vault's name (may hold ``/``, as OG-MARL's do); by default the
            dataset id with ``.vlt`` appended: ``mpe2/simple_spread/random-v0.vlt``.
        rel_dir: base folder of vaults (relative to the working directory, as Flashbax does).
        vault_uid: the vault's uid; by default the dataset's ``algorithm_name`` with its first
            letter upper-cased (``random`` -> ``Random``, as OG-MARL names uids), or the
            current time (Flashbax's default) when it has none that is one path-safe word.
        chunk_steps: steps read, converted and written at a time; peak memory is about
            ``2 * chunk_steps`` steps of data plus one episode.
        compression: zarr compressor (``{"id": "gzip", "level": 5}`` is Flashbax's default and
            ours; ``{"id": "zstd", "level": 3}`` writes about 3x faster; ``None`` for none).
        dones: ``"team"`` (default) copies the episode's termination/truncation to every agent,
            as OG-MARL does; ``"agent"`` writes each agent's own flags.
        terminals: ``"end"`` (default) sets ``terminals`` at the end of every episode,
            truncated ones too, as OG-MARL's learners need to see episodes end;
            ``truncations`` says which ended by time. ``"strict"`` sets ``terminals`` only
            where the episode terminated.
        state: ``infos.state`` from the recorded global state (``"auto"``, ``"env"``), from all
            agents' observation rows concatenated (``"auto"`` without a recorded state,
            ``"observations"``), or none (``"none"``).
        seeds: keep every episode's reset seed and options for restoration (HDF5 attributes
            read one episode at a time: about a tenth of the conversion of 43k-episode
            data); ``False`` skips them, and the restored dataset has none.
        progress: show a progress bar.
        download: fetch an id that is not local from ``$MINARI_REMOTE``.
        remote: fetch an id that is not local from this registry.

    Returns:
        The vault's folder, ``rel_dir/vault_name/vault_uid``.

    Raises:
        DatasetNotFoundError: no such dataset.
        DatasetExistsError: the vault exists.
        LayoutError: the dataset cannot be laid out as asked (empty, no state for
            ``state="env"``...).
        InvalidOptionError: ``chunk_steps`` < 1, or ``dones``, ``state`` or ``compression`` is
            not one of the values above.
    """
    check_chunk_steps(chunk_steps)
    for option, value, allowed in (("dones", dones, (None, *get_args(Dones))),
                                   ("state", state, get_args(StateMode))):
        if value not in allowed:
            raise InvalidOptionError(f"{option} must be one of {', '.join(map(repr, allowed))}, "
                                     f"got {value!r}")
    if isinstance(compression, str):
        if compression != "default":
            raise InvalidOptionError("compression must be 'default', None or a zarr compressor "
                                     f"dict such as {DEFAULT_COMPRESSION}, got {compression!r}")
        compression = DEFAULT_COMPRESSION
    if compression is not None and (not isinstance(compression, dict)
                                    or compression.get("id") not in ZARR_COMPRESSORS):
        raise InvalidOptionError(
            f"compression={compression!r}: give a zarr compressor dict whose 'id' is one of "
            f"{', '.join(map(repr, ZARR_COMPRESSORS))} (e.g. {DEFAULT_COMPRESSION}), None for "
            "none, or leave it out")
    source = open_source(dataset_or_id, download=download, remote=remote)
    require_layout(source)
    if vault_name is None:
        vault_name = default_vault_name(source.dataset_id)
    if vault_uid is None:
        vault_uid = default_vault_uid(source.metadata.get("algorithm_name"))
    path = vault_dir(rel_dir, vault_name, vault_uid)
    writer = VaultWriter(path, compression)
    try:
        _convert(source, writer, chunk_steps=chunk_steps, dones=dones, terminals=terminals,
                 state=state, seeds=seeds, progress=progress)
    except BaseException:
        writer.abort()
        raise
    return path


def _convert(source: DatasetSource, writer: VaultWriter, *, chunk_steps: int | None,
             dones: Dones | None, terminals: Terminals | None, state: StateMode, seeds: bool,
             progress: bool) -> None:
    record = source.spec.extra.get(VAULT_SOURCE_KEY)
    streams = 1 if record is None else int(record["streams"])
    chunk_steps = source.steps_per_chunk(chunk_steps)
    chunks = episode_chunks(source, chunk_steps, None if record is None else _source_streams(
        source, record, streams), attributes=seeds)
    first = next(chunks)
    plan = _plan(source, first, record, dones, terminals, state)
    keys = plan.keys()
    widest = max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                 for shape, dtype in keys.values())
    rows_per_chunk = max(1, min(time_chunk(widest * streams), chunk_steps // streams))
    appenders = {path: Appender(writer.create(_name(path), (streams, TIME_AXIS_LENGTH, *shape),
                                              dtype, (streams, rows_per_chunk, *shape)),
                                rows_per_chunk, streams=True)
                 for path, (shape, dtype) in keys.items()}
    sink = ExactSink(writer, rows_per_chunk)
    assembler = StreamAssembler(streams, keys)
    pending: list[Any] = []
    futures: list[Any] = []
    episodes = steps = 0
    bar = tqdm(total=source.total_steps or None, unit="step", disable=not progress,
               desc=f"{source.name} -> vault")
    try:
        for chunk in _chain(first, chunks):
            rows = view_rows(plan, chunk.arrays)
            assembler.push(chunk.info.streams, chunk.arrays.episode_lengths, rows)
            futures = sink.append(columns(plan, chunk.arrays, chunk.info))
            for path, block in assembler.pop().items():
                futures += appenders[path].append(block)
            wait(pending)
            pending = futures
            count = int(chunk.arrays.episode_lengths.sum())
            episodes += len(chunk.arrays.episode_lengths)
            steps += count
            bar.update(count)
        bar.close()
        futures = sink.close()
        for path, block in assembler.pop(final=True).items():
            futures += appenders[path].append(block)
        for appender in appenders.values():
            futures += appender.close()
        wait(pending)
        wait(futures)
    except BaseException:
        # Writes in flight finish before the staging folder is removed: one finishing later
        # would make its files again there (a half-written vault left behind).
        for future in (*pending, *futures):
            with contextlib.suppress(Exception):
                future.result()
        raise
    length = assembler.length
    metadata = _metadata(source, plan, sink, record, streams, length, assembler.lengths,
                         episodes, steps)
    writer.commit(length, metadata)


def _plan(source: DatasetSource, first: Chunk, record: dict[str, Any] | None,
          dones: Dones | None, terminals: Terminals | None, state: StateMode) -> ViewPlan:
    if record is not None:
        if dones == "team" or terminals is not None:
            raise LayoutError("this dataset came from a vault: its per-agent dones are the "
                              "vault's; dones='team' or a terminals= choice would not "
                              "reproduce them (leave both out)")
        return plan_from_vault_record(source.spec, record)
    infos = first.arrays.agent_infos or {}
    info_paths = {agent: {path for path, _ in leaves(tree)} for agent, tree in infos.items()}
    return plan_from_spec(source.spec, info_paths, dones=dones or "team", state=state,
                          terminals=terminals or "end")


def _chain(first: Chunk, rest: Iterator[Chunk]) -> Iterator[Chunk]:
    yield first
    yield from rest


def _name(path: tuple[str, ...]) -> str:
    return "".join(f"{part}." for part in path)


def _expand_runs(runs: list[list[int]]) -> Iterator[int]:
    for stream, count in runs:
        for _ in range(int(count)):
            yield int(stream)


def _source_streams(source: DatasetSource, record: dict[str, Any], streams: int) -> np.ndarray:
    """The vault stream of each episode ``source`` reads, in its order: the record lists
    every stored episode's, so a selection (filtered, subsampled) takes its episodes' own.

    Raises:
        LayoutError: the record does not cover the stored episodes, or a selection of a
            several-stream vault's episodes is not in stored order (a stream's episodes,
            its unfinished tail last, go into the vault in the order they were stored).
    """
    stored = np.fromiter(_expand_runs(record["episode_streams"]), dtype=np.int32)
    ids = source.episode_indices
    if len(ids) and int(ids.max()) >= len(stored):
        raise LayoutError(
            f"dataset {source.name!r} came from a vault whose record names the streams of "
            f"{len(stored)} episodes, but it holds episode {int(ids.max())}: its metadata is "
            "damaged; restore it from a copy")
    if streams > 1 and np.any(np.diff(ids) <= 0):
        raise LayoutError(
            f"dataset {source.name!r} came from a vault of {streams} streams, and this "
            "selection holds its episodes in another order than they were stored (as "
            "split_dataset draws them): each stream's episodes go into the vault in stored "
            "order; convert dataset.subset(sorted(dataset.episode_indices)) instead")
    return stored[ids]


class StreamAssembler:
    """Groups the view rows of episodes by stream and releases ``(B, n, ...)`` blocks.

    Episodes arrive in dataset order, each tagged with its stream; a block holds the rows
    that every stream has (the shortest stream's count). At the end, shorter streams are
    padded with zero rows (only datasets whose trailing vault steps were dropped have
    streams of different lengths).

    Args:
        streams: ``B``.
        keys: ``{leaf path: (per-step shape, dtype)}`` of the rows.
    """

    def __init__(self, streams: int,
                 keys: dict[tuple[str, ...], tuple[tuple[int, ...], str]]) -> None:
        self._streams = streams
        self._keys = keys
        self._pending: list[list[dict[tuple[str, ...], np.ndarray]]] = [
            [] for _ in range(streams)]
        self._counts = [0] * streams
        self.lengths = [0] * streams
        self.length = 0

    def push(self, streams: np.ndarray, lengths: np.ndarray,
             rows: dict[tuple[str, ...], np.ndarray]) -> None:
        """Add the rows of a chunk's episodes (``streams``: each episode's stream)."""
        if self._streams == 1:
            self._add(0, rows)
            return
        step_streams = np.repeat(streams, lengths)
        for stream in np.unique(streams).tolist():
            if not 0 <= stream < self._streams:
                raise LayoutError(f"episode stream {stream} out of range "
                                  f"(0..{self._streams - 1})")
            mask = step_streams == stream
            self._add(stream, {k: v[mask] for k, v in rows.items()})

    def _add(self, stream: int, rows: dict[tuple[str, ...], np.ndarray]) -> None:
        count = len(next(iter(rows.values())))
        self._pending[stream].append(rows)
        self._counts[stream] += count
        self.lengths[stream] += count

    def pop(self, final: bool = False) -> dict[tuple[str, ...], np.ndarray]:
        """The ``(B, n, ...)`` block every stream can fill (all, padded, if ``final``)."""
        n = max(self._counts) if final else min(self._counts)
        if n == 0:
            return {}
        per_stream = [self._take(stream, n) for stream in range(self._streams)]
        self.length += n
        if self._streams == 1:
            return {key: values[None] for key, values in per_stream[0].items()}
        return {key: np.stack([rows[key] for rows in per_stream]) for key in self._keys}

    def _take(self, stream: int, n: int) -> dict[tuple[str, ...], np.ndarray]:
        parts = self._pending[stream]
        taken, rest = {}, {}
        for key, (shape, dtype) in self._keys.items():
            if not parts:
                values = np.zeros((0, *shape), dtype=dtype)
            elif len(parts) == 1:
                values = parts[0][key]
            else:
                values = np.concatenate([p[key] for p in parts])
            if len(values) < n:
                pad = np.zeros((n - len(values), *shape), dtype=dtype)
                values = np.concatenate([values, pad])
            taken[key], rest[key] = values[:n], values[n:].copy()
        remaining = self._counts[stream] - min(n, self._counts[stream])
        self._pending[stream] = [rest] if remaining else []
        self._counts[stream] = remaining
        return taken


def _metadata(source: DatasetSource, plan: ViewPlan, sink: ExactSink,
              record: dict[str, Any] | None, streams: int, length: int,
              stream_lengths: list[int], episodes: int, steps: int) -> dict[str, Any]:
    keys = plan.keys()
    if record is not None:
        shapes = {tuple(k.split(".")): v for k, v in record["shapes"].items()}
        dtypes = {tuple(k.split(".")): v for k, v in record["dtypes"].items()}
        user = dict(record.get("user_metadata") or {})
    else:
        shapes = {path: str((streams, length, *shape)) for path, (shape, _) in keys.items()}
        dtypes = {path: dtype for path, (_, dtype) in keys.items()}
        user = {}
    user.pop(VAULT_METADATA_KEY, None)
    ours = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "library_version": __version__,
        "dataset_id": source.dataset_id,
        "episodes": episodes,
        "steps": steps,
        "streams": streams,
        "stream_lengths": stream_lengths,
        "view": plan.to_dict(),
        "multi_agent": source.multi_agent,
        "minari_metadata": source.metadata,
        "exact": [field.to_dict() for field in sink.fields],
    }
    return {
        "version": VAULT_VERSION,
        "structure_shape": nest({p: shapes[p] for p in sorted(keys)}),
        "structure_dtype": nest({p: dtypes[p] for p in sorted(keys)}),
        **user,
        VAULT_METADATA_KEY: ours,
    }
