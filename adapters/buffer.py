"""Combined, device-resident Flashbax trajectory buffers built from datasets and vaults.

:func:`make_buffer` lays every dataset's OG-MARL view (the arrays :func:`to_vault` writes) and
every vault's arrays as stored (plus ``source``, the index of the source of each step) end to
end along the time axis of one
stream (``B = 1``) and returns a Flashbax :class:`~flashbax.buffers.trajectory_buffer.
TrajectoryBuffer` whose ``sample`` draws sequences from a table of valid start positions:
sequences never cross from one source (or vault stream) into the next, optionally never cross
an episode boundary, and sources can be weighted.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Callable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flashbax.buffers.trajectory_buffer import (
    TrajectoryBuffer,
    TrajectoryBufferState,
)
from gymnasium import spaces

from marl_minari.errors import (
    IncompatibleSourcesError,
    InvalidOptionError,
    ReadOnlyBufferError,
)
from marl_minari.format import layout
from marl_minari.format.spaces import leaves, nest
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.sources import (
    DatasetSource,
    check_chunk_steps,
    check_source_weights,
    holding_chunk_bytes,
    is_vault,
    open_source,
    spec_of,
    steps_per_chunk,
)
from marl_minari.storage.datafile import MARL_GROUP
from marl_minari.storage.read_ahead import read_ahead
from marl_minari.storage.reader_state import ReadScratch
from marl_minari.vaults.episodes import StreamCutter, done_steps
from marl_minari.vaults.keys import resolve_keys
from marl_minari.vaults.restore import checked_plan
from marl_minari.vaults.store import VAULT_METADATA_KEY, VaultReader
from marl_minari.vaults.structure import leaf_name
from marl_minari.vaults.view import view_rows
from marl_minari.vaults.view_plan import (
    STATE,
    VAULT_SOURCE_KEY,
    ViewPlan,
    plan_from_spec,
    plan_from_vault_record,
)

from .sampling import SamplingTable, can_sample, sample, source_probabilities, start_table
from .sources import require_layout

SOURCE_KEY = "source"
"""Experience leaf holding, for every step, the index of its source in ``sources``."""


@dataclass(frozen=True)
class _Source:
    """One source's view: its name, arrays and how to fill them."""

    name: str
    keys: dict[tuple[str, ...], tuple[tuple[int, ...], str]]
    agents: tuple[str, ...] | None
    spaces: tuple[dict[str, spaces.Space], dict[str, spaces.Space]] | None
    length: int
    fill: Callable[[dict[tuple[str, ...], np.ndarray], int], list[np.ndarray]] = field(
        repr=False)


def make_buffer(
    sources: Sequence[Any],
    *,
    sample_batch_size: int,
    sample_sequence_length: int,
    period: int = 1,
    weights: Sequence[float] | None = None,
    respect_episode_boundaries: bool = True,
    chunk_steps: int | None = None,
    read_ahead: bool | None = None,
) -> tuple[TrajectoryBuffer, TrajectoryBufferState]:
    """Build a Flashbax trajectory buffer and its state on the default JAX device.

    Args:
        sources: datasets (anything :func:`marl_minari.sources.open_source` opens: local
            ids, dataset folders, remote datasets' URLs (a registry followed by the id,
            downloaded once), ``MinariDataset`` or ``MultiAgentDataset`` objects) and vault
            folders (``rel_dir/vault_name/vault_uid``). All must have the same agents, spaces,
            keys, shapes and dtypes.
        sample_batch_size: sequences per ``sample`` call.
        sample_sequence_length: steps per sequence.
        period: sequences start every ``period`` steps, counted from the start of each episode
            (or of each source/stream without ``respect_episode_boundaries``), as Flashbax's
            ``period``.
        weights: relative probability of drawing a sequence from each source; by default
            every valid sequence is equally likely (a source's weight is its sequence count).
        respect_episode_boundaries: only sample sequences inside one episode. Sequences never
            cross from one source or vault stream into the next either way.
        chunk_steps: steps read and converted at a time while loading; by default as many
            as fit a sixth of the buffer's bytes for a dataset (a twelfth with
            ``read_ahead``; its chunks are read into a reused memory and turned into rows
            in the buffer's windows; a recorded ``Box`` state is read straight into the
            buffer, not counted) and a sixteenth for a vault (its windows are read straight
            into the buffer), 1 to 32 MiB
            (:func:`~marl_minari.sources.holding_chunk_bytes`): this keeps peak memory near
            the buffer's own bytes (docs/benchmarks.md).
        read_ahead: read a dataset's next chunk on one background thread while the rows
            of the one before are built (two reused memories taken in turn, chunks half
            the size). By default on where this process may run on at least
            :data:`READ_AHEAD_MIN_CPUS` CPUs: with a core to spare it is 10-20% faster,
            on two busy cores slower (docs/benchmarks.md).

    Returns:
        ``(buffer, state)``: ``jax.jit(buffer.sample)(state, key).experience`` is a dict of
        ``(sample_batch_size, sample_sequence_length, ...)`` arrays: ``observations``
        ``(.., N, O)``, ``actions``, ``rewards``, ``terminals``, ``truncations`` ``(.., N)``,
        ``infos.legals`` ``(.., N, A)``, ``infos.state`` ``(.., S)`` (when the sources have
        them), and ``source`` ``(..)`` int32. ``state`` is a plain Flashbax
        ``TrajectoryBufferState`` (the sampling table lives in ``buffer.sample``, see
        :func:`sampling_table`), so ``flashbax.make_mixer([buffer, online_buffer], ...)``
        mixes it with a live ``make_trajectory_buffer`` whose timesteps have the same
        structure (``docs/adapters.md``). The buffer itself is read-only (``add`` and
        ``init`` raise, naming what to use instead).

    Raises:
        IncompatibleSourcesError: two sources differ; the message names the first mismatch.
        InvalidOptionError: bad sizes or weights, or a weighted source without a single
            sequence.
    """
    check_chunk_steps(chunk_steps)
    if not sources:
        raise InvalidOptionError("make_buffer needs at least one source")
    sizes = (sample_batch_size, sample_sequence_length, period)
    if any(isinstance(size, (bool, np.bool_)) or not isinstance(size, numbers.Integral)
           for size in sizes) or min(sizes) < 1:
        raise InvalidOptionError(
            "sample_batch_size, sample_sequence_length and period must be integers >= 1 "
            f"(got {sample_batch_size}, {sample_sequence_length}, {period})")
    check_source_weights(weights, len(sources))
    opened = [_open_source(s) for s in sources]
    # The buffer holds every step anyway: chunks sized to it keep the peak near its bytes.
    total_bytes = sum(_source_bytes(o) for o in opened)
    slots = 2 if _reads_ahead(read_ahead) else 1
    views = [_vault_source(o, chunk_steps, holding_chunk_bytes(total_bytes, in_place=True))
             if isinstance(o, VaultReader)
             else _dataset_source(o, chunk_steps,
                                  holding_chunk_bytes(total_bytes, reused=True, slots=slots),
                                  slots)
             for o in opened]
    _check_compatible(views)
    total = sum(v.length for v in views)
    experience_np = {path: _device_ready_empty((1, total, *shape), dtype)
                     for path, (shape, dtype) in views[0].keys.items()}
    source_ids = np.zeros((1, total), dtype=np.int32)
    segments: list[tuple[int, list[np.ndarray]]] = []
    offset = 0
    for index, view in enumerate(views):
        window = {path: array[0, offset:offset + view.length]
                  for path, array in experience_np.items()}
        episode_lengths = _filled(view, view.fill(window, offset))
        source_ids[0, offset:offset + view.length] = index
        segments.append((offset, episode_lengths))
        offset += view.length
    starts, offsets = start_table(segments, sample_sequence_length, period,
                                  respect_episode_boundaries)
    counts = np.diff(offsets)
    probabilities = source_probabilities(counts, weights, [v.name for v in views],
                                         sample_sequence_length)
    # On a CPU device the arrays are adopted as they are (no copy); on an accelerator they
    # are copied, popped one by one so that each host array is freed once it is there. (One
    # device_put call for them all saved about 2 ms, but raised the peak memory of a vault
    # read in 1,000-step windows from 1.20x to 1.29-1.31x the buffer: test_buffer_memory.)
    paths = list(experience_np)
    experience: dict[str, Any] = nest({path: jax.device_put(experience_np.pop(path))
                                       for path in paths})
    experience[SOURCE_KEY] = jax.device_put(source_ids)
    state = TrajectoryBufferState(
        experience=experience,
        current_index=jnp.asarray(total, dtype=jnp.int32),
        is_full=jnp.asarray(True),
    )
    table = SamplingTable(starts=jax.device_put(starts),
                          source_offsets=jax.device_put(offsets),
                          source_weights=jax.device_put(probabilities))
    buffer = TrajectoryBuffer(
        init=_read_only("init"),
        add=_read_only("add"),
        sample=partial(sample, table=table, batch_size=sample_batch_size,
                       sequence_length=sample_sequence_length),
        can_sample=partial(can_sample, table=table),
    )
    return buffer, state


HOST_ALIGNMENT = 4096
"""Bytes the host arrays' data is aligned to: JAX's CPU device adopts an aligned numpy array
without copying it (it needs 64; a page leaves room), and copies a misaligned one, which
held the buffer twice at its peak."""


def _device_ready_empty(shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    """An uninitialised, C-contiguous numpy array that ``jax.device_put`` can adopt on a CPU
    device without a copy: its data is aligned to :data:`HOST_ALIGNMENT` bytes and its dtype
    is the one JAX would convert it to (``int64`` becomes ``int32`` unless x64 is enabled,
    here by the fill rather than by a second full array at ``device_put``). Every value is
    written by the sources' fills (a fill covers every row and column of its window,
    :func:`_filled`): zeroing first would write the buffer twice, and the first write of
    its pages is then the read's own (or the rows' copy)."""
    dtype = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(size + HOST_ALIGNMENT, dtype=np.uint8)
    skip = -raw.ctypes.data % HOST_ALIGNMENT
    return raw[skip:skip + size].view(dtype).reshape(shape)


def _read_only(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ReadOnlyBufferError(
            f"the buffer from make_buffer holds read-only offline data: {name}() is not "
            "available. To learn from offline and new experience together, add the new "
            "experience to a flashbax.make_trajectory_buffer and sample both with "
            "flashbax.make_mixer([offline_buffer, online_buffer], batch_size, proportions) "
            "(docs/adapters.md, offline-to-online); to change the offline data, build a new "
            "buffer from the sources")

    return refuse


# --------------------------------------------------------------------------- sources


def _open_source(source: Any) -> DatasetSource | VaultReader:
    if isinstance(source, (str, os.PathLike)) and is_vault(source):
        return VaultReader(source)
    dataset = open_source(source)
    require_layout(dataset)
    return dataset


def _source_bytes(source: DatasetSource | VaultReader) -> int:
    if isinstance(source, VaultReader):
        return source.num_streams * source.length * source.step_bytes
    return source.total_steps * source.step_bytes


READ_AHEAD_MIN_CPUS = 4
"""``make_buffer`` reads ahead by default where the process may run on this many CPUs: on a
2-core machine shared with other work the background read only takes turns with the rows'
building (docs/benchmarks.md, *Bulk reads at the file's speed*, sixth round)."""


def _reads_ahead(read_ahead: bool | None) -> bool:
    if read_ahead is not None:
        return read_ahead
    return len(os.sched_getaffinity(0)) >= READ_AHEAD_MIN_CPUS


def _dataset_source(dataset: DatasetSource, chunk_steps: int | None, budget: int,
                    slots: int = 1) -> _Source:
    record = dataset.spec.extra.get(VAULT_SOURCE_KEY)
    # The buffer's arrays are laid out from the spec alone, before anything is read: the
    # sources of the legal-action masks (found in the first chunk's infos) change no shape.
    layout_plan = (plan_from_vault_record(dataset.spec, record) if record is not None
                   else plan_from_spec(dataset.spec, {}))
    direct = _direct_keys(layout_plan, dataset.spec)
    # The budget holds what a chunk reads into the reused memory: not the direct leaves.
    direct_bytes = sum(int(np.prod(shape)) * np.dtype(dtype).itemsize
                       for key, (shape, dtype) in layout_plan.keys().items() if key in direct)
    steps = steps_per_chunk(chunk_steps, max(1, dataset.step_bytes - direct_bytes),
                            budget=budget)

    def fill(out: dict[tuple[str, ...], np.ndarray], _: int) -> list[np.ndarray]:
        # Leaves the buffer keeps as stored are read straight into it; the rest of every
        # chunk is read into a reused memory (with two, taken in turn, chunk k + 1 is read
        # on a background thread while the rows of chunk k are built: read_ahead).
        scratch = ReadScratch({leaf: out[key].reshape(len(out[key]), -1)
                               for key, leaf in direct.items()}, slots=slots)
        plan = layout_plan if record is not None else None
        lengths = []
        cursor = 0
        # What a read wrote into the buffer is taken with its chunk, on the reading thread.
        read = ((arrays, scratch.written) for arrays in dataset.chunks(steps, scratch=scratch))
        with closing(read_ahead(read) if slots > 1 else read) as ahead:  # nothing left running
            for arrays, written in ahead:
                if plan is None:
                    infos = arrays.agent_infos or {}
                    plan = plan_from_spec(dataset.spec, {a: {p for p, _ in leaves(t)}
                                                         for a, t in infos.items()})
                count = int(arrays.episode_lengths.sum())
                # Rows are built straight into the buffer's windows (no copy in between).
                view_rows(plan, arrays, {path: array[cursor:cursor + count]
                                         for path, array in out.items()},
                          written=frozenset(key for key, leaf in direct.items()
                                            if leaf in written))
                lengths.append(arrays.episode_lengths)
                cursor += count
        return [np.concatenate(lengths)] if lengths else [np.zeros(0, dtype=np.int64)]

    return _Source(name=f"dataset {dataset.name!r}", keys=layout_plan.keys(),
                   agents=dataset.spec.possible_agents,
                   spaces=(dataset.spec.observation_spaces, dataset.spec.action_spaces),
                   length=dataset.total_steps, fill=fill)


def _direct_keys(plan: ViewPlan, spec: MultiAgentSpec) -> dict[tuple[str, ...], str]:
    """The buffer's leaves that hold a dataset leaf's stored values as they are, with the
    leaf's path in an episode group: the recorded global state of a plain ``Box`` state
    space of the view's dtype. A read writes their rows straight from the file into the
    buffer where the stored leaf is as the spec says
    (:class:`~marl_minari.storage.reader_state.ReadScratch`), and :func:`view_rows` leaves
    them be."""
    state_space = spec.state_space
    if (plan.state != "env" or not isinstance(state_space, spaces.Box)
            or np.dtype(state_space.dtype) != np.dtype(plan.state_dtype)):
        return {}
    return {STATE: f"{MARL_GROUP}/{layout.STATE}"}


def _vault_source(reader: VaultReader, chunk_steps: int | None, budget: int) -> _Source:
    keys = {leaf.path: (leaf.row_shape, leaf.dtype) for leaf in reader.leaves}
    ours = reader.metadata.get(VAULT_METADATA_KEY)
    agents = None
    spaces_ = None
    if isinstance(ours, dict) and "view" in ours:
        spec = spec_of(ours["minari_metadata"], bool(ours["multi_agent"]))
        agents = checked_plan(reader, ours, spec).agents
        spaces_ = (spec.observation_spaces, spec.action_spaces)
    streams, length = reader.num_streams, reader.length
    window = max(1, steps_per_chunk(chunk_steps, reader.step_bytes, budget=budget)
                 // max(1, streams))
    if chunk_steps is None:
        # Whole zarr chunks by default: each is decoded once, not once per window it spans
        # (1.14x the buffer's bytes at peak, 1.19x for windows across chunk boundaries).
        rows = reader.time_chunk_rows()
        window = max(rows, round(window / rows) * rows)

    def fill(out: dict[tuple[str, ...], np.ndarray], _: int) -> list[np.ndarray]:
        # Stream s fills out[path][s * length:(s + 1) * length]: as (streams, length, ...) the
        # window's blocks are read straight into the buffer's arrays.
        by_stream = {path: array.reshape(streams, length, *array.shape[1:])
                     for path, array in out.items()}
        for t0 in range(0, length, window):
            t1 = min(length, t0 + window)
            futures = [reader.read_into(leaf_name(path), (slice(None), slice(t0, t1)),
                                        by_stream[path][:, t0:t1]) for path in keys]
            for future in futures:
                future.result()
        # Episodes are cut by the one cutting policy (marl_minari.vaults.episodes).
        lengths = []
        for stream in range(streams):
            rows = slice(stream * length, (stream + 1) * length)
            cutter = StreamCutter(1)
            ended = cutter.push(done_steps([out[p][rows][None] for p in flags], "any"))
            lengths.append(np.concatenate([ended.lengths, cutter.unfinished().lengths]))
        return lengths

    key_layout = resolve_keys(keys, None, f"vault {reader.path}")
    flags = [key_layout.paths[role] for role in key_layout.flag_roles]
    return _Source(name=f"vault {str(reader.path)!r}", keys=keys, agents=agents,
                   spaces=spaces_, length=streams * length, fill=fill)


def _filled(view: _Source, episode_lengths: list[np.ndarray]) -> list[np.ndarray]:
    """``episode_lengths``, the episodes a fill wrote, checked to cover its whole window
    (the buffer's arrays are not zeroed first: a row left unwritten would hold whatever the
    memory held). A fill's steps are its source's own count of steps, so this holds by
    construction; a bug that broke it must not pass silently."""
    written = sum(int(lengths.sum()) for lengths in episode_lengths)
    if written != view.length:
        raise RuntimeError(f"{view.name}: its fill wrote {written} steps of its "
                           f"{view.length}")
    return episode_lengths


def _check_compatible(views: list[_Source]) -> None:
    """Raise :class:`IncompatibleSourcesError` at the first difference from source 0."""
    base = views[0]
    for index, view in enumerate(views[1:], start=1):
        where = f"source {index} ({view.name}) and source 0 ({base.name})"
        if base.agents is not None and view.agents is not None and base.agents != view.agents:
            raise IncompatibleSourcesError(
                f"{where} have different agents: {list(view.agents)} vs {list(base.agents)}")
        missing = sorted(leaf_name(p)[:-1] for p in set(base.keys) ^ set(view.keys))
        if missing:
            raise IncompatibleSourcesError(
                f"{where} have different arrays: {missing} is in only one of them")
        for path, (shape, dtype) in base.keys.items():
            other_shape, other_dtype = view.keys[path]
            if (tuple(shape), str(dtype)) != (tuple(other_shape), str(other_dtype)):
                raise IncompatibleSourcesError(
                    f"{where} differ in '{leaf_name(path)[:-1]}': per-step shape "
                    f"{tuple(other_shape)} {other_dtype} vs {tuple(shape)} {dtype}")
        if base.spaces is not None and view.spaces is not None and base.agents is not None:
            for kind, a, b in (("observation", view.spaces[0], base.spaces[0]),
                               ("action", view.spaces[1], base.spaces[1])):
                for agent in base.agents:
                    if a[agent] != b[agent]:
                        raise IncompatibleSourcesError(
                            f"{where} differ in the {kind} space of {agent!r}: {a[agent]} vs "
                            f"{b[agent]}")
