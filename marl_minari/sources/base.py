"""``DatasetSource``: whole episodes of a dataset, whatever holds them, as per-agent arrays.

Every reader of data in the library (describe, the adapters, Ray, TorchRL, combine, the
command line) takes a :class:`DatasetSource` from :func:`marl_minari.sources.open_source` and
uses only what is defined here: the spec, the metadata, the episodes it reads, their step
counts and reset attributes, and chunks of whole episodes as
:class:`~marl_minari.storage.arrays.MultiAgentArrays`.
"""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from typing import Any, Final, Literal

import numpy as np
from gymnasium import spaces

from marl_minari.errors import InvalidOptionError
from marl_minari.format.returns import episode_returns
from marl_minari.format.spaces import leaf_dtype, leaf_shape, leaf_spaces
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.episode_ids import episode_ids
from marl_minari.storage.reader_state import ReadScratch

DEFAULT_CHUNK_BYTES: Final = 32 * 2**20
"""Bytes of step data per chunk when no ``chunk_steps`` is given (:func:`steps_per_chunk`).

Reading a chunk holds it about twice (as read, then as converted), so a streaming reader's
temporaries stay near 64 MiB whatever the row size. Each chunk also pays a fixed cost (the
file opened, its leaves found, index entries checked): on 1,480-byte steps one pass took
0.64 s with 4 MiB chunks and 0.26 s with 32 MiB, the same as larger ones
(docs/benchmarks.md). What holds the whole dataset in memory anyway passes a smaller
``budget`` (:func:`holding_chunk_bytes`)."""
MIN_CHUNK_BYTES: Final = 2**20
"""The smallest chunk :func:`holding_chunk_bytes` gives."""
DEFAULT_CHUNK_STEPS: Final = 65_536
"""The most steps a chunk holds when no ``chunk_steps`` is given (narrow rows)."""

SourceKind = Literal["multi_agent", "single_agent", "vault"]
"""What holds a source's episodes: a dataset in the multi-agent layout, a plain
(single-agent) Minari dataset, or a Flashbax vault."""

EpisodeAttributes = tuple[int | None, dict[str, Any] | None]
"""An episode's reset ``(seed, options)``."""


class DatasetSource(ABC):
    """Whole episodes of one dataset, read in chunks.

    A source holds only paths and plain values (plus caches rebuilt on demand), so it can be
    pickled: Ray sends sources to its workers, which reopen the files.

    Args:
        name: what the caller named (dataset id, path or URL, without credentials).
        kind: what holds the episodes (:data:`SourceKind`).
        spec: agents and spaces (a plain dataset is one agent, ``agent_0``).
        metadata: the dataset's ``metadata.json`` (or what stands for it).
        episode_indices: the stored episodes this source reads, in order.
    """

    def __init__(self, name: str, kind: SourceKind, spec: MultiAgentSpec,
                 metadata: dict[str, Any], episode_indices: np.ndarray) -> None:
        self.name = name
        self.kind: SourceKind = kind
        self.spec = spec
        self.metadata = metadata
        self._ids = np.asarray(episode_indices, dtype=np.int64)
        self._ids.setflags(write=False)
        self._lengths: np.ndarray | None = None

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.name!r}, {self.kind}, "
                f"{self.total_episodes} episodes, agents={list(self.spec.possible_agents)})")

    # ------------------------------------------------------------------ what it holds

    @property
    def dataset_id(self) -> str:
        """The id the dataset's metadata gives (``name`` if it gives none)."""
        return str(self.metadata.get("dataset_id") or self.name)

    @property
    def multi_agent(self) -> bool:
        """The episodes come from data in the multi-agent layout (a dataset or a vault), not
        from a plain single-agent dataset."""
        return self.kind != "single_agent"

    @property
    def episode_indices(self) -> np.ndarray:
        """The stored episode ids this source reads, in order (read-only)."""
        return self._ids

    @property
    def total_episodes(self) -> int:
        """Episodes this source reads."""
        return len(self._ids)

    @property
    def total_steps(self) -> int:
        """Steps of the episodes this source reads."""
        return int(self.episode_lengths().sum())

    def stored_ids(self, ids: Iterable[int] | np.ndarray) -> np.ndarray:
        """``ids`` checked as stored episode ids of this dataset (integers, each stored).

        Raises:
            InvalidOptionError: an id that is not an integer.
            EpisodeIndexError: an id outside the stored episodes.
        """
        stored = self.metadata.get("total_episodes")
        return episode_ids(ids, stored if isinstance(stored, int) else None)

    @property
    def reads_all_episodes(self) -> bool:
        """The source reads every stored episode, in stored order."""
        stored = self.metadata.get("total_episodes")
        return isinstance(stored, int) and np.array_equal(self._ids, np.arange(stored))

    def episode_lengths(self) -> np.ndarray:
        """``(E,)`` steps of each episode this source reads, in order (read once)."""
        if self._lengths is None:
            lengths = np.asarray(self._stored_lengths(self._ids), dtype=np.int64)
            lengths.setflags(write=False)
            self._lengths = lengths
        return self._lengths

    @property
    def step_bytes(self) -> int:
        """Bytes of one step as read, estimated from the spec: every agent's observation,
        action, reward and flags, and the global state (infos are not in the spec)."""
        spec = self.spec
        per_agent = sum(space_bytes(spec.observation_spaces[agent])
                        + space_bytes(spec.action_spaces[agent]) + _AGENT_STEP_BYTES
                        for agent in spec.possible_agents)
        state = 0 if spec.state_space is None else space_bytes(spec.state_space)
        return per_agent + state

    def steps_per_chunk(self, chunk_steps: int | None = None) -> int:
        """Steps per chunk: ``chunk_steps`` as given, or by default (``None``) as many as fit
        :data:`DEFAULT_CHUNK_BYTES` of this source's steps (:func:`steps_per_chunk`)."""
        return steps_per_chunk(chunk_steps, self.step_bytes)

    # ------------------------------------------------------------------ reading

    @abstractmethod
    def _stored_lengths(self, ids: np.ndarray) -> np.ndarray:
        """Steps of the stored episodes ``ids``."""

    @abstractmethod
    def episode_attributes(self, ids: Sequence[int] | np.ndarray) -> list[EpisodeAttributes]:
        """``(seed, options)`` of the stored episodes ``ids``."""

    @abstractmethod
    def read(self, ids: Sequence[int] | np.ndarray, *,
             observations: bool = True) -> MultiAgentArrays:
        """The stored episodes ``ids`` as arrays.

        Args:
            ids: stored episode ids.
            observations: ``False`` lets a source skip observations and infos where that is
                cheaper (each agent's observation tree may then be ``{}``); what needs only
                actions and rewards reads faster.
        """

    def batches(self, chunk_steps: int | None = None) -> Iterator[np.ndarray]:
        """Stored episode ids in runs of at most ``chunk_steps`` steps (by default as many as
        fit :data:`DEFAULT_CHUNK_BYTES`; at least one episode each), in order."""
        chunk_steps = self.steps_per_chunk(chunk_steps)
        ends = np.cumsum(self.episode_lengths())
        start, done = 0, 0
        while start < len(ends):
            stop = max(start + 1, int(np.searchsorted(ends, done + chunk_steps, side="right")))
            yield self._ids[start:stop]
            start, done = stop, int(ends[stop - 1])

    def chunks(self, chunk_steps: int | None = None, *, observations: bool = True,
               reuse_arrays: bool = False,
               scratch: ReadScratch | None = None) -> Iterator[MultiAgentArrays]:
        """The episodes' arrays, at most ``chunk_steps`` steps at a time (see :meth:`batches`
        for the default, :meth:`read` for ``observations``, :meth:`read_batches` for
        ``reuse_arrays`` and ``scratch``)."""
        yield from self.read_batches(self.batches(chunk_steps), observations=observations,
                                     reuse_arrays=reuse_arrays, scratch=scratch)

    def read_batches(self, batches: Iterable[np.ndarray], *, observations: bool = True,
                     reuse_arrays: bool = False,
                     scratch: ReadScratch | None = None) -> Iterator[MultiAgentArrays]:
        """:meth:`read` of every batch of stored ids, in order: the one way a pass reads
        (a source that can keeps its files open between batches).

        ``reuse_arrays`` lets a source read every batch into the memory of the one before
        (allocated and first touched once per pass): for a caller that is done with each
        batch's arrays before it asks for the next. ``scratch`` is that memory, given by the
        caller (it implies ``reuse_arrays``), with the caller's own arrays for leaves it keeps
        as stored (:class:`~marl_minari.storage.reader_state.ReadScratch`: its ``written``
        says, after each batch, which leaves went there). A source may ignore both."""
        del reuse_arrays, scratch  # new arrays per batch: always valid
        for batch in batches:
            yield self.read(batch, observations=observations)

    def team_returns(self, chunk_steps: int | None = None) -> np.ndarray:
        """``(E,)`` team return of each episode this source reads, in order: its team
        rewards (Minari's ``rewards`` column) added in row order
        (:func:`~marl_minari.format.returns.episode_returns`).

        Reads actions and rewards chunk by chunk, observations left out; a source that can
        read the reward column alone (one read in place) does so.
        """
        parts = [episode_returns(arrays.team_rewards, arrays.episode_lengths)
                 for arrays in self.chunks(chunk_steps, observations=False)]
        return np.concatenate(parts) if parts else np.zeros(0)

    def episodes(self, chunk_steps: int | None = None) -> Iterator[MultiAgentEpisode]:
        """Every episode this source reads, with its reset seed and options, in order."""
        for batch in self.batches(chunk_steps):
            arrays = self.read(batch)
            for position, (seed, options) in enumerate(self.episode_attributes(batch)):
                yield replace(arrays.episode(position), seed=seed, options=options)

    def close(self) -> None:  # noqa: B027 - most sources hold nothing to release
        """Release what the source holds (temporary files); reading afterwards is an error."""

    def __enter__(self) -> DatasetSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        # Caches of open files are rebuilt in the process that unpickles the source.
        return {k: v for k, v in self.__dict__.items() if k not in self._transient()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        for name in self._transient():
            setattr(self, name, None)

    def _transient(self) -> tuple[str, ...]:
        """Attributes not pickled (open handles, per-process caches)."""
        return ()


_AGENT_STEP_BYTES: Final = 12
"""An agent's reward (float64) and flags (terminated, truncated, active, acted) per step."""


def space_bytes(space: spaces.Space) -> int:
    """Bytes of one sample of ``space`` as stored (a text leaf counts as a pointer)."""
    return sum(int(np.prod(leaf_shape(leaf), dtype=np.int64)) * leaf_dtype(leaf).itemsize
               for _, leaf in leaf_spaces(space))


def steps_per_chunk(chunk_steps: int | None, step_bytes: int, *,
                    budget: int | None = None) -> int:
    """The one chunking policy of every reader: ``chunk_steps`` as the caller gives it, or by
    default (``None``) as many steps of ``step_bytes`` as fit ``budget`` bytes
    (:data:`DEFAULT_CHUNK_BYTES`), at most :data:`DEFAULT_CHUNK_STEPS` and at least one.

    Raises:
        InvalidOptionError: ``chunk_steps`` is neither ``None`` nor an integer >= 1.
    """
    check_chunk_steps(chunk_steps)
    if chunk_steps is not None:
        return int(chunk_steps)
    budget = DEFAULT_CHUNK_BYTES if budget is None else budget
    return max(1, min(DEFAULT_CHUNK_STEPS, budget // max(1, step_bytes)))


def holding_chunk_bytes(total_bytes: int, *, in_place: bool = False,
                        reused: bool = False, slots: int = 1) -> int:
    """The chunk budget of a reader that fills arrays of ``total_bytes`` (``make_buffer``).

    A chunk converted on the host into new rows, then copied into the arrays, adds up to
    about five chunks' bytes to the arrays at its peak (the chunk's arrays, the rows made from
    them, the file's pages read for them), so it is a thirty-second of the arrays: on 338 MB
    of 10-36-step episodes the peak was 1.13x the arrays' bytes, 1.23x with a sixteenth.
    What is built straight into the arrays (``in_place``: a vault's windows, a dataset's rows
    made in the buffer's windows by ``make_buffer``) holds only the chunk as read, so it is a
    sixteenth: 1.14x on a 64 MB vault buffer, 1.43x with 32 MiB windows; 1.06x on the
    dataset of the memory test (1.04x at a thirty-second); smaller chunks only cost time.
    A dataset's chunks read into a reused memory and turned into rows in the arrays
    (``reused``: ``make_buffer``) hold that memory alone, ``slots`` times over where the
    next chunk is read while the one before is turned into rows, and are a sixth of it per
    slot (counted in the bytes that go through that memory: leaves read straight into the
    arrays are not): 1.16x on that dataset with one slot, 1.17x with two at a twelfth
    (1.12x at an eighth, 1.04x at a sixteenth, 1.21x at a quarter, one slot).
    All stay between :data:`MIN_CHUNK_BYTES` and :data:`DEFAULT_CHUNK_BYTES`
    (docs/benchmarks.md).
    """
    share = 6 * max(1, slots) if reused else 16 if in_place else 32
    return max(MIN_CHUNK_BYTES, min(DEFAULT_CHUNK_BYTES, total_bytes // share))


def check_chunk_steps(chunk_steps: int | None) -> None:
    """Raise :class:`InvalidOptionError` unless ``chunk_steps`` is ``None`` (chunks by bytes,
    the default) or an integer >= 1."""
    if chunk_steps is None:
        return
    if isinstance(chunk_steps, bool) or not isinstance(chunk_steps, (int, np.integer)) or (
            chunk_steps < 1):
        raise InvalidOptionError(f"chunk_steps must be an integer >= 1 (or None: chunks of "
                                 f"about 32 MiB), got {chunk_steps!r}")


def check_source_weights(weights: Sequence[float] | None, sources: int) -> None:
    """Raise :class:`InvalidOptionError` unless ``weights`` (when given) are one finite,
    non-negative number per source with a positive sum."""
    if weights is not None and (len(weights) != sources or any(
            isinstance(w, (bool, np.bool_)) or not isinstance(w, numbers.Real)
            or w < 0 or not np.isfinite(w) for w in weights) or sum(weights) <= 0):
        raise InvalidOptionError(
            f"weights must be {sources} finite non-negative numbers with a positive sum, "
            f"got {list(weights)}")
