"""Ray Data datasource for marl-minari (and plain Minari) datasets.

Install with ``pip install "marl-minari[ray]"``. Nothing here imports ray at module level:
the row tables (:func:`local_rows`) work without it, and ray is imported when a Ray dataset is
made.

* :func:`read_dataset` reads one or more datasets into a ``ray.data.Dataset``. Read tasks
  cover contiguous episode ranges balanced by steps; each task reads its range in blocks of
  whole episodes through :class:`marl_minari.sources.DatasetSource` (the one way in), so
  reading is parallel and streaming and no process holds more than a block. Columns are
  those of :mod:`marl_minari.rows.patterns`'s row builders.
* :func:`map_pattern` applies a pattern of :mod:`marl_minari.rows.patterns` (transitions, n-step,
  sequences) to such a dataset, one block (whole episodes) per batch, giving exactly the rows
  the same pattern gives on local arrays.

The RLlib export and offline training build on this module; all three are imported through
:mod:`marl_minari.ray`. See ``docs/ray.md``.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from marl_minari.errors import IncompatibleSourcesError, InvalidOptionError
from marl_minari.extras import require
from marl_minari.format.spaces import leaf_dtype, leaf_shape, leaf_spaces
from marl_minari.rows import patterns as P
from marl_minari.sources import SINGLE_AGENT, DatasetSource, open_source

if TYPE_CHECKING:
    import ray.data

Source = DatasetSource
"""What Ray reads: :class:`marl_minari.sources.DatasetSource` (paths only, so it pickles)."""
SourceLike = Any
"""Anything :func:`marl_minari.sources.open_source` opens (id, folder, dataset object)."""


# --------------------------------------------------------------------------- sources


def episode_steps(source: DatasetSource) -> np.ndarray:
    """``(E,)`` steps of every episode the source reads."""
    return source.episode_lengths()


def open_sources(sources: Any, *, streaming: bool = False) -> list[DatasetSource]:
    """One source or a list of them, each opened with :func:`open_source` (``streaming``: a
    registry URL is read in place instead of downloaded)."""
    if isinstance(sources, (str, os.PathLike)) or not isinstance(sources, Sequence):
        sources = [sources]
    opened = [open_source(s, streaming=streaming) for s in sources]
    if not opened:
        raise InvalidOptionError("no sources given: name at least one dataset")
    return opened


def _check_compatible(sources: Sequence[DatasetSource], kind: str, agents: Sequence[str] | None,
                      only_acted: bool) -> None:
    """All sources must give one row schema (checked on their first episode)."""
    if len(sources) < 2:
        return
    signatures: list[dict[str, Any]] = []
    for source in sources:
        batch = P.build_rows(kind, source.read(source.episode_indices[:1]), source.spec,
                             dataset=source.name, agents=agents, only_acted=only_acted)
        if kind == "episodes":
            signatures.append({k: np.asarray(v[0]).dtype.str for k, v in batch.items()})
        else:
            signatures.append({k: (v.dtype.str, v.shape[1:]) for k, v in batch.items()})
    for source, signature in zip(sources[1:], signatures[1:], strict=True):
        if signature != signatures[0]:
            differing = sorted(set(signature.items()) ^ set(signatures[0].items()))
            raise IncompatibleSourcesError(
                f"{source.name!r} gives other {kind} columns than {sources[0].name!r}: "
                f"{differing[:6]}")


def local_rows(sources: SourceLike | Sequence[SourceLike],
               rows: str = "agent_steps", *, agents: Sequence[str] | None = None,
               only_acted: bool = True) -> P.Batch:
    """All rows of ``sources`` in one local batch: what :func:`read_dataset` yields.

    Meant for small datasets and checks; large ones belong in :func:`read_dataset`.
    """
    opened = open_sources(sources)
    _check_compatible(opened, rows, agents, only_acted)
    return P.concat([P.build_rows(rows, s.read(s.episode_indices), s.spec,
                                  dataset=s.name, agents=agents, only_acted=only_acted)
                     for s in opened])


# --------------------------------------------------------------------------- read plan


def _leaf_bytes(space: spaces.Space) -> int:
    total = 0
    for _, leaf in leaf_spaces(space):
        dtype = leaf_dtype(leaf)
        total += (32 if dtype.kind == "O" else dtype.itemsize) * int(
            np.prod(leaf_shape(leaf), dtype=np.int64))
    return total


def _step_row_bytes(source: DatasetSource, kind: str, agents: Sequence[str] | None) -> int:
    """Rough in-memory bytes of the rows one environment step produces."""
    spec = source.spec
    selected = P.select_agents(spec, agents) if kind == "agent_steps" else spec.possible_agents
    state = 0 if spec.state_space is None else _leaf_bytes(spec.state_space)
    per_agent = 0
    for agent in selected:
        action_space = spec.action_spaces[agent]
        mask = int(action_space.n) if isinstance(action_space, spaces.Discrete) else 0
        per_agent += (2 * _leaf_bytes(spec.observation_spaces[agent])
                      + _leaf_bytes(action_space) + 2 * mask + 16)
    if kind == "agent_steps":
        return per_agent + len(selected) * (2 * state + 72)
    if kind == "episodes":
        return per_agent // 2 + state + 6 * len(selected) + 16
    return per_agent + 2 * state + 6 * len(selected) + 40


@dataclass(frozen=True)
class _Chunk:
    source: DatasetSource
    indices: np.ndarray
    """Stored episode ids."""
    steps: int


@dataclass(frozen=True)
class _ReadOptions:
    kind: str
    agents: tuple[str, ...] | None
    only_acted: bool


def _plan_chunks(sources: Sequence[DatasetSource], steps: Sequence[np.ndarray], cap: int
                 ) -> list[_Chunk]:
    """Consecutive whole episodes per chunk, at most ``cap`` steps unless one episode is more."""
    chunks: list[_Chunk] = []
    for source, episode_steps in zip(sources, steps, strict=True):
        start, total = 0, 0
        ids = source.episode_indices
        for i, count in enumerate(episode_steps.tolist()):
            if i > start and total + count > cap:
                chunks.append(_Chunk(source, ids[start:i], total))
                start, total = i, 0
            total += count
        if start < len(episode_steps):
            chunks.append(_Chunk(source, ids[start:], total))
    return chunks


def _group_chunks(chunks: Sequence[_Chunk], parallelism: int) -> list[list[_Chunk]]:
    """Split chunks into at most ``parallelism`` contiguous groups of similar step counts."""
    total = sum(c.steps for c in chunks)
    budget = max(1, math.ceil(total / max(1, parallelism)))
    groups: list[list[_Chunk]] = [[]]
    filled = 0
    for chunk in chunks:
        if groups[-1] and filled + chunk.steps > budget and len(groups) < parallelism:
            groups.append([])
            filled = 0
        groups[-1].append(chunk)
        filled += chunk.steps
    return [g for g in groups if g]


def to_block(batch: Mapping[str, np.ndarray]) -> Any:
    """A numpy batch as the Arrow table Ray Data would make of it, built column by column.

    Same schema and values as ``BlockAccessor.batch_to_block`` (tensor columns as
    ``ArrowTensorTypeV2``), about 15x faster on agent-step rows: Ray converts 1-D integer and
    bool columns element by element. Columns of objects other than strings (whole episodes,
    info dicts) go through Ray's own conversion.
    """
    import pyarrow as pa
    from ray.data.block import BlockAccessor
    from ray.data.extensions import ArrowTensorArray

    columns: dict[str, Any] = {}
    for name, value in batch.items():
        value = np.asarray(value)
        if value.dtype.kind in "biuf" and value.ndim == 1:
            columns[name] = pa.array(value)
        elif value.dtype.kind in "biuf":
            columns[name] = ArrowTensorArray.from_numpy(value)
        elif value.ndim == 1 and len(value) and (
                value.dtype.kind == "U" or (value.dtype == object and isinstance(value[0], str))):
            columns[name] = pa.array(value, type=pa.string())
        else:
            columns[name] = BlockAccessor.batch_to_block({name: value}).column(name)
    return pa.table(columns)


def _read_chunks(chunks: Sequence[_Chunk], options: _ReadOptions) -> Iterator[Any]:
    """Body of one read task: one Arrow block per chunk of whole episodes."""
    # Consecutive chunks of one source are read in one pass (its file opened once).
    for _, run in itertools.groupby(chunks, key=lambda chunk: id(chunk.source)):
        members = list(run)
        source = members[0].source
        for arrays in source.read_batches(chunk.indices for chunk in members):
            batch = P.build_rows(options.kind, arrays, source.spec, dataset=source.name,
                                 agents=options.agents, only_acted=options.only_acted)
            yield to_block(batch)


def _read_task(chunks: Sequence[_Chunk], options: _ReadOptions) -> Callable[[], Iterator[Any]]:
    """A read task's function: named (Ray's warning of a large task names it; a
    ``functools.partial`` has no name, and that warning failed every read of an image
    dataset, whose spaces make a task of megabytes)."""
    def read_marl_minari_chunks() -> Iterator[Any]:
        return _read_chunks(chunks, options)

    return read_marl_minari_chunks


@functools.cache
def _datasource_class() -> type:
    """The ``ray.data.Datasource`` subclass, defined on first use (ray imported here)."""
    require("ray.data", "ray", "reading datasets with Ray Data")
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    class MarlMinariDatasource(Datasource):
        """Episodes of marl-minari / plain Minari datasets, split by episode ranges."""

        def __init__(self, sources: Sequence[DatasetSource], options: _ReadOptions,
                     block_steps: int | None) -> None:
            super().__init__()
            self._sources = list(sources)
            self._options = options
            self._steps = [episode_steps(s) for s in self._sources]
            self._row_bytes = max(_step_row_bytes(s, options.kind, options.agents)
                                  for s in self._sources)
            self._block_steps = block_steps

        def get_name(self) -> str:
            return "MarlMinari"

        def estimate_inmemory_data_size(self) -> int | None:
            return int(sum(int(s.sum()) for s in self._steps) * self._row_bytes)

        def _cap(self, parallelism: int, data_context: Any) -> int:
            if self._block_steps is not None:
                return max(1, int(self._block_steps))
            from ray.data.context import DataContext

            context = data_context or DataContext.get_current()
            target = context.target_max_block_size or 128 * 1024 * 1024
            cap = max(1, (target // 4) // max(1, self._row_bytes))
            total = sum(int(s.sum()) for s in self._steps)
            return max(1, min(cap, math.ceil(total / max(1, parallelism))))

        def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None,
                           data_context: Any = None) -> list[Any]:
            chunks = _plan_chunks(self._sources, self._steps,
                                  self._cap(parallelism, data_context))
            tasks = []
            for group in _group_chunks(chunks, parallelism):
                steps = sum(c.steps for c in group)
                episodes = sum(len(c.indices) for c in group)
                kind = self._options.kind
                if kind == "steps":
                    rows: int | None = steps
                elif kind == "episodes":
                    rows = episodes
                elif not self._options.only_acted:
                    rows = steps * len(P.select_agents(group[0].source.spec,
                                                       self._options.agents))
                else:
                    rows = None
                metadata = BlockMetadata(num_rows=rows, size_bytes=int(steps * self._row_bytes),
                                         exec_stats=None, input_files=None)
                tasks.append(ReadTask(_read_task(group, self._options), metadata,
                                      per_task_row_limit=per_task_row_limit))
            return tasks

    return MarlMinariDatasource


def make_datasource(sources: SourceLike | Sequence[SourceLike],
                    rows: str = "agent_steps", *, agents: Sequence[str] | None = None,
                    only_acted: bool = True, block_steps: int | None = None,
                    streaming: bool = True) -> Any:
    """The ``ray.data.Datasource`` behind :func:`read_dataset` (same arguments).

    For ``ray.data.read_datasource(make_datasource(...), ...)`` with Ray options that
    :func:`read_dataset` does not pass on.
    """
    if rows not in P.ROW_KINDS:
        raise InvalidOptionError(f"rows must be one of {P.ROW_KINDS}, got {rows!r}")
    opened = open_sources(sources, streaming=streaming)
    for source in opened:
        if rows == "agent_steps":
            P.check_uniform_agents(source.spec, P.select_agents(source.spec, agents))
    _check_compatible(opened, rows, agents, only_acted)
    options = _ReadOptions(rows, None if agents is None else tuple(agents), only_acted)
    return _datasource_class()(opened, options, block_steps)


def read_dataset(sources: SourceLike | Sequence[SourceLike],
                 rows: str = "agent_steps", *, agents: Sequence[str] | None = None,
                 only_acted: bool = True, block_steps: int | None = None,
                 override_num_blocks: int | None = None,
                 ray_remote_args: dict[str, Any] | None = None,
                 streaming: bool = True) -> ray.data.Dataset:
    """Read datasets into a ``ray.data.Dataset`` (parallel, streaming, by episode ranges).

    Args:
        sources: what :func:`marl_minari.sources.open_source` opens (dataset ids, dataset
            folders, ``data/`` folders, ``main_data.hdf5`` files, dataset objects), one or a
            list; marl-minari datasets and plain Minari datasets (one agent named
            :data:`~marl_minari.sources.SINGLE_AGENT`, ``agent_0``). All must give the same
            columns. Ids that are not local are not downloaded. A registry URL followed by
            a dataset id (``https://host/registry/ns/name-v0``, ``s3://...``, ``file://...``)
            is read in place (see ``streaming``), as is a streaming source
            (``open_source(url, streaming=True)``): the source is sent to the read tasks,
            never its data, and each task fetches its episodes' byte ranges on its own node.
        rows: ``"agent_steps"`` (one row per agent and step), ``"steps"`` (one row per
            environment step) or ``"episodes"`` (one row per episode); columns are documented
            in :func:`~marl_minari.rows.patterns.agent_step_rows`,
            :func:`~marl_minari.rows.patterns.step_rows`
            and :func:`~marl_minari.rows.patterns.episode_rows`.
        agents: for ``"agent_steps"``, the agents to emit (default all; equal spaces needed).
        only_acted: for ``"agent_steps"``, keep only rows where the agent acted.
        block_steps: environment steps per block (whole episodes; default: about a quarter
            of Ray's ``target_max_block_size``, and no more than the dataset split evenly
            over the read tasks).
        override_num_blocks: number of read tasks (Ray picks one from the CPUs otherwise);
            each task reads a contiguous episode range and yields several blocks.
        ray_remote_args: passed to ``ray.data.read_datasource`` (e.g. ``{"num_cpus": 1}``).
        streaming: open registry URLs in place (default: nodes need no shared disk, and the
            driver fetches only the small files and the blocks that open the data file).
            ``False``: the driver downloads each URL once into its datasets root
            (verified), and the read tasks read that copy, which every node must then
            see at the same path (a shared file system).

    Raises:
        DatasetNotFoundError: a source does not exist.
        IncompatibleSourcesError: sources (or selected agents) give different columns.
        MissingExtraError: Ray is not installed (``pip install "marl-minari[ray]"``).
    """
    require("ray.data", "ray", "read_dataset")
    import ray.data

    datasource = make_datasource(sources, rows, agents=agents, only_acted=only_acted,
                                 block_steps=block_steps, streaming=streaming)
    return ray.data.read_datasource(datasource, override_num_blocks=override_num_blocks,
                                    ray_remote_args=ray_remote_args or {})


def _apply_pattern(batch: dict[str, np.ndarray], pattern: str, kwargs: dict[str, Any]) -> Any:
    return to_block(P.PATTERNS[pattern](batch, **kwargs))


def map_pattern(dataset: ray.data.Dataset, pattern: str, **kwargs: Any) -> ray.data.Dataset:
    """Apply a pattern of :mod:`~marl_minari.rows.patterns` to :func:`read_dataset`'s rows.

    Each block (whole episodes) is one batch, so trajectories are never cut; the result
    equals the pattern applied to :func:`local_rows` (up to row order). A dataset whose
    blocks were re-shaped (``repartition``, ``random_shuffle``, ...) raises
    :class:`~marl_minari.rows.patterns.IncompleteTrajectoryError`.

    Args:
        dataset: ``read_dataset(..., rows="agent_steps")``.
        pattern: ``"transitions"``, ``"n_step"`` or ``"sequences"``.
        **kwargs: the pattern's arguments (``n``, ``gamma``, ``length``, ``stride``, ``pad``).
    """
    if pattern not in P.PATTERNS:
        raise InvalidOptionError(f"pattern must be one of {sorted(P.PATTERNS)}, got "
                                 f"{pattern!r}")
    # Ray annotates map_batches' function as taking its own batch union type; a function of a
    # numpy dict batch (batch_format="numpy") is what it calls, hence the ignore.
    return dataset.map_batches(_apply_pattern,  # type: ignore[arg-type]
                               batch_size=None, batch_format="numpy",
                               fn_kwargs={"pattern": pattern, "kwargs": kwargs})


__all__ = [
    "SINGLE_AGENT",
    "Source",
    "episode_steps",
    "local_rows",
    "make_datasource",
    "map_pattern",
    "open_source",
    "open_sources",
    "read_dataset",
    "to_block",
]
