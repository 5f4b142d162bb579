"""Ray Data datasource for marl-minari (and plain Minari HDF5) datasets, and RLlib export.

Install with ``pip install "marl-minari[ray]"``. Nothing here imports ray at module level:
the row tables (:func:`local_rows`) work without it, and ray is imported when a Ray dataset is
made.

* :func:`read_dataset` reads one or more datasets into a ``ray.data.Dataset``. Read tasks
  cover contiguous episode ranges balanced by steps; each task reads its range in blocks of
  whole episodes through :meth:`MultiAgentDataset.to_arrays` (plain Minari datasets through
  Minari's storage ``get_episodes``), so reading is parallel and streaming and no process
  holds more than a block. Columns are those of :mod:`marl_minari.patterns`'s row builders.
* :func:`map_pattern` applies a pattern of :mod:`marl_minari.patterns` (transitions, n-step,
  sequences) to such a dataset, one block (whole episodes) per batch, giving exactly the rows
  the same pattern gives on local arrays.
* :func:`export_rllib` writes RLlib's offline schema as Parquet, one row per agent-step, one
  folder per RLlib module, for ``AlgorithmConfig.offline_data(input_=...)``.

See ``docs/ray.md``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from marl_minari import layout, offset_index
from marl_minari import patterns as P
from marl_minari.errors import (
    CorruptedDataError,
    DatasetNotFoundError,
    IncompatibleSourcesError,
    UnsupportedSpaceError,
)
from marl_minari.metadata import read_metadata
from marl_minari.reader import (
    MultiAgentArrays,
    MultiAgentDataset,
    open_data_file,
    read_spec,
)
from marl_minari.self_contained import check_path
from marl_minari.spaces import build_tree, leaf_dtype, leaf_shape, leaf_spaces, leaves
from marl_minari.spec import MultiAgentSpec

if TYPE_CHECKING:
    import ray.data

PLAIN_AGENT = "agent"
"""Agent name given to the one agent of a plain (single-agent) Minari dataset."""

DEFAULT_MODULE_ID = "default_policy"
"""RLlib's default module id (``ray.rllib.core.DEFAULT_MODULE_ID``): all agents pooled."""

RLLIB_MANIFEST = "marl_minari_rllib.json"
"""File written next to the module folders by :func:`export_rllib`."""

SourceLike = str | os.PathLike[str]

# --------------------------------------------------------------------------- sources


@dataclass(frozen=True)
class Source:
    """A dataset to read, resolved on the driver so that workers need no id lookup.

    Attributes:
        name: what the caller passed (dataset id or path); the ``dataset`` column.
        data_path: absolute path of the dataset's ``data/`` folder.
        kind: ``"marl"`` (multi-agent layout) or ``"plain"`` (plain Minari, one agent).
        spec: per-agent spaces (for a plain dataset: one agent, :data:`PLAIN_AGENT`).
        total_episodes: number of episodes.
    """

    name: str
    data_path: str
    kind: str
    spec: MultiAgentSpec
    total_episodes: int

    def read(self, indices: Sequence[int] | np.ndarray) -> MultiAgentArrays:
        """Episodes ``indices`` as :class:`MultiAgentArrays`."""
        indices = np.asarray(indices, dtype=np.int64)
        if self.kind == "marl":
            from minari.dataset.minari_dataset import MinariDataset

            return MultiAgentDataset(MinariDataset(self.data_path)).to_arrays(
                indices.tolist())
        return _plain_arrays(self, indices)

    def episode_steps(self) -> np.ndarray:
        """``(E,)`` steps of every episode (from the offset index when it checks out, else
        HDF5)."""
        data_path = Path(self.data_path)
        with open_data_file(data_path / layout.MAIN_FILE_NAME) as file:
            if self.kind == "marl":
                total_steps = int(read_metadata(data_path)["total_steps"])
                index = offset_index.load(data_path, file, self.total_episodes, total_steps)
                if index is not None:
                    return index.steps
            try:
                return np.asarray([int(file[f"episode_{i}"].attrs["total_steps"])
                                   for i in range(self.total_episodes)], dtype=np.int64)
            except KeyError as exc:
                raise CorruptedDataError(
                    f"{data_path / layout.MAIN_FILE_NAME}: an episode of the "
                    f"{self.total_episodes} the metadata counts is missing or lacks "
                    f"total_steps ({exc})") from exc


def open_source(source: SourceLike | Source) -> Source:
    """Resolve a dataset id, a dataset folder, its ``data/`` folder or its HDF5 file.

    Raises:
        DatasetNotFoundError: nothing readable there.
    """
    if isinstance(source, Source):
        return source
    name = os.fspath(source)
    path = Path(name).expanduser()
    if path.exists():
        candidates = [path.parent if path.is_file() else path, path / "data"]
        data_path = next((c for c in candidates
                          if (c / layout.METADATA_FILE_NAME).exists()), None)
        if data_path is None:
            raise DatasetNotFoundError(f"no Minari dataset (data/metadata.json) at {path}")
    else:
        from marl_minari.ids import dataset_dir

        data_path = dataset_dir(name) / "data"
        if not (data_path / layout.METADATA_FILE_NAME).exists():
            raise DatasetNotFoundError(f"no local dataset {name!r} (looked in {data_path})")
    data_path = data_path.resolve()
    metadata = read_metadata(data_path)
    total = int(metadata["total_episodes"])
    if layout.METADATA_KEY in metadata:
        return Source(name, str(data_path), "marl", read_spec(data_path), total)
    from minari.dataset.minari_storage import MinariStorage

    storage = MinariStorage.read(data_path)
    spec = MultiAgentSpec(api="parallel", possible_agents=(PLAIN_AGENT,),
                          observation_spaces={PLAIN_AGENT: storage.observation_space},
                          action_spaces={PLAIN_AGENT: storage.action_space})
    return Source(name, str(data_path), "plain", spec, total)


def _plain_arrays(source: Source, indices: np.ndarray) -> MultiAgentArrays:
    """A plain Minari dataset's episodes as one agent's arrays (read with ``get_episodes``)."""
    from minari.dataset.minari_storage import MinariStorage

    check_path(Path(source.data_path) / layout.MAIN_FILE_NAME)
    storage = MinariStorage.read(source.data_path)
    obs_space = source.spec.observation_spaces[PLAIN_AGENT]
    act_space = source.spec.action_spaces[PLAIN_AGENT]
    obs_parts: dict[str, list[np.ndarray]] = {p: [] for p, _ in leaf_spaces(obs_space)}
    act_parts: dict[str, list[np.ndarray]] = {p: [] for p, _ in leaf_spaces(act_space)}
    rewards, terminations, truncations, lengths = [], [], [], []
    for episode in storage.get_episodes(indices.tolist()):
        for parts, tree, space in ((obs_parts, episode["observations"], obs_space),
                                   (act_parts, episode["actions"], act_space)):
            dtypes = {p: leaf_dtype(s) for p, s in leaf_spaces(space)}
            for path, value in leaves(tree):
                parts[path].append(np.asarray(value, dtype=dtypes[path]))
        rewards.append(np.asarray(episode["rewards"], dtype=np.float64).reshape(-1))
        terminations.append(np.asarray(episode["terminations"], dtype=bool).reshape(-1))
        truncations.append(np.asarray(episode["truncations"], dtype=bool).reshape(-1))
        lengths.append(len(rewards[-1]))
    steps_lengths = np.asarray(lengths, dtype=np.int64)
    reward = np.concatenate(rewards) if rewards else np.zeros(0)
    terminated = np.concatenate(terminations) if terminations else np.zeros(0, dtype=bool)
    truncated = np.concatenate(truncations) if truncations else np.zeros(0, dtype=bool)
    steps = len(reward)

    def joined(parts: dict[str, list[np.ndarray]], space: spaces.Space) -> Any:
        return build_tree(space, {p: np.concatenate(v) if v else np.zeros(
            (0, *leaf_shape(s)), dtype=leaf_dtype(s)) for (p, v), (_, s) in zip(
            parts.items(), leaf_spaces(space), strict=True)})

    return MultiAgentArrays(
        possible_agents=(PLAIN_AGENT,), episode_ids=indices.astype(np.int64),
        episode_lengths=steps_lengths, observations={PLAIN_AGENT: joined(obs_parts, obs_space)},
        actions={PLAIN_AGENT: joined(act_parts, act_space)},
        rewards=reward[:, None], terminations=terminated[:, None],
        truncations=truncated[:, None], active=np.ones((steps + len(indices), 1), dtype=bool),
        acted=np.ones((steps, 1), dtype=bool), team_rewards=reward,
        episode_terminations=terminated, episode_truncations=truncated)


def _as_sources(sources: SourceLike | Source | Sequence[SourceLike | Source]) -> list[Source]:
    if isinstance(sources, (str, os.PathLike, Source)):
        sources = [sources]
    opened = [open_source(s) for s in sources]
    if not opened:
        raise ValueError("no sources given")
    return opened


def _check_compatible(sources: Sequence[Source], kind: str, agents: Sequence[str] | None,
                      only_acted: bool) -> None:
    """All sources must give one row schema (checked on their first episode)."""
    if len(sources) < 2:
        return
    signatures: list[dict[str, Any]] = []
    for source in sources:
        batch = P.build_rows(kind, source.read([0]), source.spec, dataset=source.name,
                             agents=agents, only_acted=only_acted)
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


def local_rows(sources: SourceLike | Source | Sequence[SourceLike | Source],
               rows: str = "agent_steps", *, agents: Sequence[str] | None = None,
               only_acted: bool = True) -> P.Batch:
    """All rows of ``sources`` in one local batch: what :func:`read_dataset` yields.

    Meant for small datasets and checks; large ones belong in :func:`read_dataset`.
    """
    opened = _as_sources(sources)
    _check_compatible(opened, rows, agents, only_acted)
    return P.concat([P.build_rows(rows, s.read(np.arange(s.total_episodes)), s.spec,
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


def _step_row_bytes(source: Source, kind: str, agents: Sequence[str] | None) -> int:
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
    source: Source
    indices: np.ndarray
    steps: int


@dataclass(frozen=True)
class _ReadOptions:
    kind: str
    agents: tuple[str, ...] | None
    only_acted: bool


def _plan_chunks(sources: Sequence[Source], steps: Sequence[np.ndarray], cap: int
                 ) -> list[_Chunk]:
    """Consecutive whole episodes per chunk, at most ``cap`` steps unless one episode is more."""
    chunks: list[_Chunk] = []
    for source, episode_steps in zip(sources, steps, strict=True):
        start, total = 0, 0
        for i, count in enumerate(episode_steps.tolist()):
            if i > start and total + count > cap:
                chunks.append(_Chunk(source, np.arange(start, i, dtype=np.int64), total))
                start, total = i, 0
            total += count
        if start < len(episode_steps):
            chunks.append(_Chunk(source, np.arange(start, len(episode_steps), dtype=np.int64),
                                 total))
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
    for chunk in chunks:
        batch = P.build_rows(options.kind, chunk.source.read(chunk.indices), chunk.source.spec,
                             dataset=chunk.source.name, agents=options.agents,
                             only_acted=options.only_acted)
        yield to_block(batch)


@functools.cache
def _datasource_class() -> type:
    """The ``ray.data.Datasource`` subclass, defined on first use (ray imported here)."""
    from ray.data import Datasource, ReadTask
    from ray.data.block import BlockMetadata

    class MarlMinariDatasource(Datasource):
        """Episodes of marl-minari / plain Minari datasets, split by episode ranges."""

        def __init__(self, sources: Sequence[Source], options: _ReadOptions,
                     block_steps: int | None) -> None:
            super().__init__()
            self._sources = list(sources)
            self._options = options
            self._steps = [s.episode_steps() for s in self._sources]
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
                tasks.append(ReadTask(functools.partial(_read_chunks, group, self._options),
                                      metadata, per_task_row_limit=per_task_row_limit))
            return tasks

    return MarlMinariDatasource


def make_datasource(sources: SourceLike | Source | Sequence[SourceLike | Source],
                    rows: str = "agent_steps", *, agents: Sequence[str] | None = None,
                    only_acted: bool = True, block_steps: int | None = None) -> Any:
    """The ``ray.data.Datasource`` behind :func:`read_dataset` (same arguments).

    For ``ray.data.read_datasource(make_datasource(...), ...)`` with Ray options that
    :func:`read_dataset` does not pass on.
    """
    if rows not in P.ROW_KINDS:
        raise ValueError(f"rows must be one of {P.ROW_KINDS}, got {rows!r}")
    opened = _as_sources(sources)
    for source in opened:
        if rows == "agent_steps":
            P.check_uniform_agents(source.spec, P.select_agents(source.spec, agents))
    _check_compatible(opened, rows, agents, only_acted)
    options = _ReadOptions(rows, None if agents is None else tuple(agents), only_acted)
    return _datasource_class()(opened, options, block_steps)


def read_dataset(sources: SourceLike | Source | Sequence[SourceLike | Source],
                 rows: str = "agent_steps", *, agents: Sequence[str] | None = None,
                 only_acted: bool = True, block_steps: int | None = None,
                 override_num_blocks: int | None = None,
                 ray_remote_args: dict[str, Any] | None = None) -> ray.data.Dataset:
    """Read datasets into a ``ray.data.Dataset`` (parallel, streaming, by episode ranges).

    Args:
        sources: dataset ids, dataset folders, ``data/`` folders or ``main_data.hdf5`` files;
            marl-minari datasets and plain Minari HDF5 datasets (one agent named
            :data:`PLAIN_AGENT`). All must give the same columns.
        rows: ``"agent_steps"`` (one row per agent and step), ``"steps"`` (one row per
            environment step) or ``"episodes"`` (one row per episode); columns are documented
            in :func:`marl_minari.patterns.agent_step_rows`, :func:`~marl_minari.patterns.step_rows`
            and :func:`~marl_minari.patterns.episode_rows`.
        agents: for ``"agent_steps"``, the agents to emit (default all; equal spaces needed).
        only_acted: for ``"agent_steps"``, keep only rows where the agent acted.
        block_steps: environment steps per block (whole episodes; default: about a quarter
            of Ray's ``target_max_block_size``, and no more than the dataset split evenly
            over the read tasks).
        override_num_blocks: number of read tasks (Ray picks one from the CPUs otherwise);
            each task reads a contiguous episode range and yields several blocks.
        ray_remote_args: passed to ``ray.data.read_datasource`` (e.g. ``{"num_cpus": 1}``).

    Raises:
        DatasetNotFoundError: a source does not exist.
        IncompatibleSourcesError: sources (or selected agents) give different columns.
    """
    import ray.data

    datasource = make_datasource(sources, rows, agents=agents, only_acted=only_acted,
                                 block_steps=block_steps)
    return ray.data.read_datasource(datasource, override_num_blocks=override_num_blocks,
                                    ray_remote_args=ray_remote_args or {})


def _apply_pattern(batch: dict[str, np.ndarray], pattern: str, kwargs: dict[str, Any]) -> Any:
    return to_block(P.PATTERNS[pattern](batch, **kwargs))


def map_pattern(dataset: ray.data.Dataset, pattern: str, **kwargs: Any) -> ray.data.Dataset:
    """Apply a pattern of :mod:`marl_minari.patterns` to agent-step rows of :func:`read_dataset`.

    Each block (whole episodes) is one batch, so trajectories are never cut; the result
    equals the pattern applied to :func:`local_rows` (up to row order). A dataset whose
    blocks were re-shaped (``repartition``, ``random_shuffle``, ...) raises
    :class:`~marl_minari.patterns.IncompleteTrajectoryError`.

    Args:
        dataset: ``read_dataset(..., rows="agent_steps")``.
        pattern: ``"transitions"``, ``"n_step"`` or ``"sequences"``.
        **kwargs: the pattern's arguments (``n``, ``gamma``, ``length``, ``stride``, ``pad``).
    """
    if pattern not in P.PATTERNS:
        raise ValueError(f"pattern must be one of {sorted(P.PATTERNS)}, got {pattern!r}")
    return dataset.map_batches(_apply_pattern,  # type: ignore[arg-type]
                               batch_size=None, batch_format="numpy",
                               fn_kwargs={"pattern": pattern, "kwargs": kwargs})


# --------------------------------------------------------------------------- RLlib export


@dataclass(frozen=True)
class ModuleExport:
    """One RLlib module's offline data, as written by :func:`export_rllib`.

    Attributes:
        module_id: the module (policy) id.
        path: folder of its Parquet files: ``offline_data(input_=str(path))``.
        agents: agents mapped to it.
        observation_space: space of the ``obs`` column (flattened for Dict/Tuple spaces).
        action_space: space of the ``actions`` column.
        rows: agent-steps written.
    """

    module_id: str
    path: Path
    agents: tuple[str, ...]
    observation_space: spaces.Space
    action_space: spaces.Space
    rows: int

    def configure(self, config: Any) -> Any:
        """Set an RLlib ``AlgorithmConfig``'s spaces and offline input to this module's data.

        Returns the config (``config.environment(...).offline_data(input_=...)``).
        """
        return config.environment(observation_space=self.observation_space,
                                  action_space=self.action_space).offline_data(
            input_=str(self.path))


@dataclass(frozen=True)
class RLlibExport:
    """Result of :func:`export_rllib`: the output folder and one entry per module."""

    path: Path
    modules: dict[str, ModuleExport]


def _mapping(policy_mapping_fn: Callable[..., str] | Mapping[str, str] | None,
             agent: str) -> str:
    if policy_mapping_fn is None:
        return DEFAULT_MODULE_ID
    if isinstance(policy_mapping_fn, Mapping):
        return str(policy_mapping_fn[agent])
    return str(policy_mapping_fn(agent, None))


def _export_space(space: spaces.Space, obs_key: str | None, what: str,
                  obs_dtype: str | None = None) -> spaces.Space:
    """The space of the exported ``obs`` column (key picked, flattened, cast)."""
    exported = _exported_space(space, obs_key, what)
    if (obs_dtype is not None and isinstance(exported, spaces.Box)
            and not np.issubdtype(exported.dtype, np.floating)):
        return spaces.Box(exported.low.astype(obs_dtype), exported.high.astype(obs_dtype),
                          dtype=np.dtype(obs_dtype))  # type: ignore[arg-type]
    return exported


def _exported_space(space: spaces.Space, obs_key: str | None, what: str) -> spaces.Space:
    if obs_key is not None:
        if not isinstance(space, spaces.Dict) or obs_key not in space.spaces:
            raise UnsupportedSpaceError(f"{what} {space} has no key {obs_key!r}")
        space = space.spaces[obs_key]
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        for _, leaf in leaf_spaces(space):
            if isinstance(leaf, spaces.Text):
                raise UnsupportedSpaceError(f"{what} {space} holds Text, which RLlib cannot "
                                            "take; pick a key with obs_key")
        return spaces.flatten_space(space)
    if isinstance(space, spaces.Text):
        raise UnsupportedSpaceError(f"{what} is Text, which RLlib cannot take")
    return space


def flatten_columns(batch: Mapping[str, np.ndarray], prefix: str,
                    space: spaces.Space) -> np.ndarray:
    """Vectorised ``gymnasium.spaces.flatten`` of the ``prefix...`` columns of ``space``.

    Row ``i`` equals ``flatten(space, sample_i)`` exactly (same values and dtype).
    """
    parts = []
    for path, leaf in leaf_spaces(space):
        value = np.asarray(batch[P.column(prefix, path.replace("/", "."))])
        rows = len(value)
        if isinstance(leaf, spaces.Discrete):
            onehot = np.zeros((rows, int(leaf.n)), dtype=leaf.dtype)
            onehot[np.arange(rows), value - int(leaf.start)] = 1
            parts.append(onehot)
        elif isinstance(leaf, spaces.MultiDiscrete):
            nvec = leaf.nvec.reshape(-1)
            offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
            onehot = np.zeros((rows, int(nvec.sum())), dtype=leaf.dtype)
            hot = offsets[None, :] + (value.reshape(rows, -1) - leaf.start.reshape(1, -1))
            onehot[np.arange(rows)[:, None], hot] = 1
            parts.append(onehot)
        else:
            parts.append(np.asarray(value, dtype=leaf.dtype).reshape(rows, -1))
    return np.concatenate(parts, axis=1)


def _rllib_batch(batch: dict[str, np.ndarray], modules: Mapping[str, str],
                 obs_space: spaces.Space, obs_key: str | None, obs_dtype: str | None,
                 include_infos: bool) -> Any:
    """Agent-step rows -> RLlib's offline columns (``ray.rllib.offline.offline_prelearner``)."""
    rows = len(batch[P.T])
    agent_ids = np.asarray(batch[P.AGENT_ID], dtype=object)
    datasets = np.asarray(batch[P.DATASET], dtype=object)
    episodes = np.asarray(batch[P.EPISODE_ID], dtype=np.int64)
    # Labels are made once per run of rows of one trajectory (dataset, episode, agent).
    change = np.ones(rows, dtype=bool)
    if rows:
        change[1:] = ((episodes[1:] != episodes[:-1]) | (agent_ids[1:] != agent_ids[:-1])
                      | (datasets[1:] != datasets[:-1]))
    starts = np.flatnonzero(change).tolist()
    run_lengths = np.diff(np.append(starts, rows)).astype(np.int64)
    eps_id = np.repeat(np.asarray([f"{datasets[i]}:{episodes[i]}:{agent_ids[i]}"
                                   for i in starts], dtype=object), run_lengths)
    module_of = np.repeat(np.asarray([modules[agent_ids[i]] for i in starts], dtype=object),
                          run_lengths)

    def observation(prefix: str) -> np.ndarray:
        if obs_key is not None:
            prefix = P.column(prefix, obs_key)
            space = obs_space.spaces[obs_key]  # type: ignore[attr-defined]
        else:
            space = obs_space
        if isinstance(space, (spaces.Dict, spaces.Tuple)):
            value = flatten_columns(batch, prefix, space)
        else:
            value = np.asarray(batch[prefix])
        exported = _export_space(obs_space, obs_key, "observation space", obs_dtype)
        if isinstance(exported, spaces.Box) and value.dtype != exported.dtype:
            value = value.astype(exported.dtype)
        return value

    terminated = np.asarray(batch[P.TERMINATED], dtype=bool)
    ends = np.asarray(batch[P.AGENT_T]) == np.asarray(batch[P.TRAJ_LEN]) - 1
    out = {
        "eps_id": eps_id,
        "agent_id": agent_ids,
        "module_id": module_of,
        "agent_index": np.asarray(batch[P.AGENT_INDEX], dtype=np.int64),
        "obs": observation(P.OBS),
        "new_obs": observation(P.NEXT_OBS),
        "actions": np.asarray(batch[P.ACTION]),
        "rewards": np.asarray(batch[P.REWARD], dtype=np.float64),
        "terminateds": terminated,
        "truncateds": np.asarray(batch[P.TRUNCATED], dtype=bool) | (ends & ~terminated),
        "t": np.asarray(batch[P.AGENT_T], dtype=np.int64),
    }
    info_columns = [k for k in batch if k.startswith(P.NEXT_INFO + ".")]
    if include_infos and info_columns:
        infos = np.empty(rows, dtype=object)
        for i in range(rows):
            infos[i] = {k[len(P.NEXT_INFO) + 1:]: batch[k][i] for k in info_columns}
        out["infos"] = infos
    return to_block(out)


def export_rllib(sources: SourceLike | Source | Sequence[SourceLike | Source],
                 out: str | os.PathLike[str], *,
                 policy_mapping_fn: Callable[..., str] | Mapping[str, str] | None = None,
                 agents: Sequence[str] | None = None, obs_key: str | None = None,
                 obs_dtype: str | None = "float32", include_infos: bool = False,
                 override_num_blocks: int | None = None,
                 overwrite: bool = False) -> RLlibExport:
    """Write agent-steps in RLlib's offline schema as Parquet, one folder per module.

    One row per agent-step (where the agent acted), columns as RLlib's ``OfflinePreLearner``
    reads them: ``eps_id`` (``"<dataset>:<episode>:<agent>"``: one agent's trajectory, as
    RLlib's per-agent ``SingleAgentEpisode``), ``agent_id``, ``module_id``, ``agent_index``,
    ``obs``, ``new_obs``, ``actions``, ``rewards``, ``terminateds``, ``truncateds`` (also true
    at the last row of a trajectory that was cut), ``t`` (the agent's step), and ``infos``
    (the agent's recorded infos after the step, with ``include_infos``). Written with
    ``Dataset.write_parquet(out, partition_cols=["module_id"])``: module ``m`` lives in
    ``out/module_id=m/``, a valid ``offline_data(input_=...)`` for one single-agent module.
    A manifest (:data:`RLLIB_MANIFEST`) lists modules, agents, spaces and row counts.

    Args:
        sources: as for :func:`read_dataset`.
        out: output folder (must not exist or be empty, unless ``overwrite`` and it holds a
            previous export).
        policy_mapping_fn: ``fn(agent_id, episode) -> module_id`` as RLlib calls it (episode
            is ``None`` here), or a dict; default: every agent to :data:`DEFAULT_MODULE_ID`
            (pooled training). Agents of one module must share their spaces.
        agents: agents to export (default all).
        obs_key: for Dict observations, the key to export (e.g. ``"observation"``); by default
            Dict/Tuple observations are flattened with ``gymnasium.spaces.flatten``.
        obs_dtype: dtype that integer ``Box`` observations (after flattening: boards, masks,
            one-hot encodings) are cast to, since RLlib's default encoders take float input;
            ``None`` keeps the recorded dtype. Float observations are never cast.
        include_infos: write the ``infos`` column from recorded per-agent infos.
        override_num_blocks: read tasks (see :func:`read_dataset`).
        overwrite: replace a previous export in ``out``.

    Raises:
        IncompatibleSourcesError: agents of one module have different spaces.
        UnsupportedSpaceError: a space RLlib's offline path cannot take (Text, Dict actions).
        FileExistsError: ``out`` is not empty.
    """
    opened = _as_sources(sources)
    out_path = Path(out).resolve()
    if out_path.exists() and any(out_path.iterdir()):
        if not (overwrite and (out_path / RLLIB_MANIFEST).exists()):
            raise FileExistsError(f"{out_path} is not empty (overwrite=True replaces a "
                                  "previous export)")
        shutil.rmtree(out_path)

    # Group agents by their spaces: one read (one row schema) per group.
    modules: dict[str, dict[str, Any]] = {}
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for source in opened:
        spec = source.spec
        for agent in P.select_agents(spec, agents):
            obs_space, act_space = spec.observation_spaces[agent], spec.action_spaces[agent]
            if isinstance(act_space, (spaces.Dict, spaces.Tuple, spaces.Text)):
                raise UnsupportedSpaceError(f"action space of {agent!r} is {act_space}; RLlib's "
                                            "offline columns take Box/Discrete/MultiDiscrete")
            module_id = _mapping(policy_mapping_fn, agent)
            entry = modules.setdefault(module_id, {"agents": [], "obs": obs_space,
                                                   "act": act_space})
            if (entry["obs"], entry["act"]) != (obs_space, act_space):
                raise IncompatibleSourcesError(
                    f"module {module_id!r} gets agent {agent!r} with spaces {obs_space} / "
                    f"{act_space}, but earlier agents have {entry['obs']} / {entry['act']}")
            if agent not in entry["agents"]:
                entry["agents"].append(agent)
            group = groups.setdefault((repr(obs_space), repr(act_space)),
                                      {"obs": obs_space, "agents": []})
            if agent not in group["agents"]:
                group["agents"].append(agent)
    mapping = {a: m for m, e in modules.items() for a in e["agents"]}
    export_spaces = {m: _export_space(e["obs"], obs_key, f"observation space of module {m!r}",
                                      obs_dtype) for m, e in modules.items()}
    for group in groups.values():
        dataset = read_dataset(opened, "agent_steps", agents=group["agents"],
                               override_num_blocks=override_num_blocks)
        dataset = dataset.map_batches(
            _rllib_batch, batch_size=None, batch_format="numpy",  # type: ignore[arg-type]
            fn_kwargs={"modules": mapping, "obs_space": group["obs"], "obs_key": obs_key,
                       "obs_dtype": obs_dtype, "include_infos": include_infos})
        dataset.write_parquet(str(out_path), partition_cols=["module_id"])

    exports: dict[str, ModuleExport] = {}
    for module_id, entry in modules.items():
        folder = out_path / f"module_id={module_id}"
        exports[module_id] = ModuleExport(
            module_id=module_id, path=folder, agents=tuple(entry["agents"]),
            observation_space=export_spaces[module_id],
            action_space=entry["act"], rows=_parquet_rows(folder))
    _write_manifest(out_path, opened, exports)
    return RLlibExport(out_path, exports)


def _parquet_rows(folder: Path) -> int:
    if not folder.exists():
        return 0
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(folder.rglob("*.parquet")))


def _write_manifest(out_path: Path, sources: Sequence[Source],
                    exports: Mapping[str, ModuleExport]) -> None:
    from minari.serialization import serialize_space

    from marl_minari import __version__

    manifest = {
        "format": "rllib-offline-parquet",
        "library_version": __version__,
        "sources": [s.name for s in sources],
        "modules": {
            m: {"path": e.path.name, "agents": list(e.agents), "rows": e.rows,
                "observation_space": serialize_space(e.observation_space),
                "action_space": serialize_space(e.action_space)}
            for m, e in exports.items()},
    }
    out_path.mkdir(parents=True, exist_ok=True)
    (out_path / RLLIB_MANIFEST).write_text(json.dumps(manifest, indent=2))


def load_rllib_export(path: str | os.PathLike[str]) -> RLlibExport:
    """Read back what :func:`export_rllib` wrote (from its manifest)."""
    from minari.serialization import deserialize_space

    out_path = Path(path).resolve()
    manifest = json.loads((out_path / RLLIB_MANIFEST).read_text())
    return RLlibExport(out_path, {
        m: ModuleExport(module_id=m, path=out_path / e["path"], agents=tuple(e["agents"]),
                        observation_space=deserialize_space(e["observation_space"]),
                        action_space=deserialize_space(e["action_space"]), rows=int(e["rows"]))
        for m, e in manifest["modules"].items()})
