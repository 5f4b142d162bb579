"""Sampling a buffer :func:`~marl_minari.adapters.make_buffer` built: where sequences may
start, how sources are drawn, and the ``sample``/``can_sample`` functions the buffer holds.

The table of valid starts is built once on the host from the episodes the sources wrote
(:func:`start_table`); ``sample`` draws a source by its weight, then a start uniformly among
that source's, so a sequence never crosses from one source (or vault stream) into the next.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flashbax.buffers.trajectory_buffer import (
    TrajectoryBuffer,
    TrajectoryBufferSample,
    TrajectoryBufferState,
)

from marl_minari.errors import InvalidOptionError


@dataclass(frozen=True)
class SamplingTable:
    """Where :func:`make_buffer`'s ``sample`` may start a sequence, and how sources are drawn.

    It lives in the buffer's ``sample`` function, not in its state, so that the state is a
    plain :class:`TrajectoryBufferState`, the exact type Flashbax's ``make_mixer`` accepts.

    Attributes:
        starts: ``(K,)`` int32, valid sequence start positions, grouped by source.
        source_offsets: ``(S + 1,)`` int32, source ``s``'s starts are
            ``starts[source_offsets[s]:source_offsets[s + 1]]``.
        source_weights: ``(S,)`` float32, probability of drawing a sequence from each source.
    """

    starts: jax.Array
    source_offsets: jax.Array
    source_weights: jax.Array


def sampling_table(buffer: TrajectoryBuffer) -> SamplingTable:
    """The :class:`SamplingTable` of a buffer :func:`make_buffer` built.

    Raises:
        InvalidOptionError: ``buffer`` was not built by :func:`make_buffer`.
    """
    table = getattr(buffer.sample, "keywords", {}).get("table")
    if not isinstance(table, SamplingTable):
        raise InvalidOptionError("sampling_table takes a buffer built by make_buffer")
    return table


def sample(state: TrajectoryBufferState, rng_key: chex.PRNGKey, *, table: SamplingTable,
           batch_size: int, sequence_length: int) -> TrajectoryBufferSample:
    """Draw ``batch_size`` sequences: a source by its weight, then a valid start uniformly."""
    source_key, item_key = jax.random.split(rng_key)
    if table.source_weights.shape[0] == 1:
        # One source: every start is equally likely, with no source to draw first.
        item = jax.random.randint(item_key, (batch_size,), 0, table.starts.shape[0])
    else:
        logits = jnp.log(table.source_weights)
        chosen = jax.random.categorical(source_key, logits, shape=(batch_size,))
        low = table.source_offsets[chosen]
        high = table.source_offsets[chosen + 1]
        item = jax.random.randint(item_key, (batch_size,), low, high)
    start = table.starts[item]
    index = start[:, None] + jnp.arange(sequence_length, dtype=start.dtype)
    experience = jax.tree.map(lambda x: x[0, index], state.experience)
    return TrajectoryBufferSample(experience=experience)


def can_sample(state: TrajectoryBufferState, *, table: SamplingTable) -> chex.Array:
    """Whether any valid sequence exists."""
    del state  # the offline data never changes: the table alone decides
    return jnp.asarray(table.starts.shape[0] > 0)


def start_table(segments: list[tuple[int, list[np.ndarray]]], length: int, period: int,
                 respect_episodes: bool) -> tuple[np.ndarray, np.ndarray]:
    """Valid start positions grouped by source, and each source's offset into them."""
    starts = []
    offsets = [0]
    for base, streams in segments:
        begins: list[np.ndarray] = []
        sizes: list[np.ndarray] = []
        cursor = base
        for episode_lengths in streams:
            pieces = np.asarray(episode_lengths if respect_episodes else
                                [int(episode_lengths.sum())], dtype=np.int64)
            begins.append(cursor + np.cumsum(pieces) - pieces)
            sizes.append(pieces)
            cursor += int(episode_lengths.sum())
        table = _sequence_starts(np.concatenate(begins), np.concatenate(sizes), length,
                                 period) if begins else np.zeros(0, dtype=np.int64)
        starts.append(table)
        offsets.append(offsets[-1] + len(table))
    return (np.concatenate(starts).astype(np.int32),
            np.asarray(offsets, dtype=np.int32))


def _sequence_starts(begins: np.ndarray, sizes: np.ndarray, length: int,
                     period: int) -> np.ndarray:
    """Every ``period``-th start of a ``length``-step sequence inside each piece
    (``begins[i]:begins[i] + sizes[i]``), piece after piece: the concatenated
    ``arange(begin, begin + size - length + 1, period)``, without a loop over pieces."""
    counts = np.where(sizes >= length, (sizes - length) // period + 1, 0)
    total = int(counts.sum())
    first = np.cumsum(counts) - counts  # each piece's first position in the output
    within = np.arange(total, dtype=np.int64) - np.repeat(first, counts)
    return np.repeat(begins, counts) + within * period


def source_probabilities(counts: np.ndarray, weights: Sequence[float] | None,
                         names: Sequence[str], length: int) -> np.ndarray:
    """Each source's probability of being drawn: ``weights`` normalised, else each source's
    share of the ``counts`` of its valid starts (every sequence equally likely).

    Raises:
        InvalidOptionError: no source has a sequence, or a weighted one has none.
    """
    if weights is None:
        if counts.sum() == 0:
            raise InvalidOptionError(f"no source has a sequence of {length} steps inside one "
                                     "episode" if length > 1 else "the sources are empty")
        return (counts / counts.sum()).astype(np.float32)
    chosen = np.asarray(weights, dtype=np.float64)
    for index, (weight, count) in enumerate(zip(chosen, counts, strict=True)):
        if weight > 0 and count == 0:
            raise InvalidOptionError(
                f"source {index} ({names[index]}) has weight {weight} but no sequence of "
                f"{length} steps to sample; lower sample_sequence_length or drop its weight")
    return (chosen / chosen.sum()).astype(np.float32)
