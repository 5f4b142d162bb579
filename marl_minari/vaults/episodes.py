"""Streams of time steps cut into episodes on their done flags: the one cutting policy.

A vault (or a Flashbax buffer) holds ``B`` streams of time steps; an episode of a stream ends
at a step where its done flags are set (``cut_on="any"`` agent, as OG-MARL and Mava copy the
team's done to every agent, or ``"all"``). Steps after a stream's last done belong to an
episode that has not finished yet. :class:`StreamCutter` takes the flags block after block
(a vault read in windows, a buffer write after write) and gives every finished episode once,
in the order episodes finish: by end step, then by stream. Converting a vault and collecting
the buffer states it was written from therefore give the same episodes in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from marl_minari.errors import LayoutError

CutOn = Literal["any", "all"]


@dataclass(frozen=True)
class Episodes:
    """Episodes found in streams, in order.

    Attributes:
        streams: ``(E,)`` the stream of each episode.
        starts: ``(E,)`` its first step in its stream.
        lengths: ``(E,)`` its number of steps.
        finished: ``(E,)`` it ends on a done flag (``False``: cut at the end of the data, an
            unfinished episode kept as truncated).
    """

    streams: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    finished: np.ndarray

    def __len__(self) -> int:
        return len(self.lengths)

    @classmethod
    def empty(cls) -> Episodes:
        """No episode."""
        none = np.zeros(0, dtype=np.int64)
        return cls(none, none, none, np.zeros(0, dtype=bool))

    @classmethod
    def concat(cls, parts: Sequence[Episodes]) -> Episodes:
        """The episodes of ``parts``, one after another."""
        if not parts:
            return cls.empty()
        return cls(*(np.concatenate([getattr(p, name) for p in parts])
                     for name in ("streams", "starts", "lengths", "finished")))

    def select(self, positions: np.ndarray) -> Episodes:
        """The episodes at ``positions``."""
        return Episodes(self.streams[positions], self.starts[positions],
                        self.lengths[positions], self.finished[positions])


def check_flags(values: np.ndarray, name: str, offset: int, where: str,
                stream: int = 0) -> None:
    """Refuse done flags or masks ``(B, n, ...)`` (streams ``stream..``, steps ``offset..``)
    holding anything but 0 and 1.

    Raises:
        LayoutError: naming the leaf, stream and step of the first bad value.
    """
    if values.dtype == bool:
        return
    bad = (values != 0) & (values != 1)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise LayoutError(f"{where}: {name!r} holds {values[index]} at (stream "
                          f"{stream + index[0]}, step {offset + index[1]}); flags are 0 or 1")


def done_steps(flags: Sequence[np.ndarray], cut_on: CutOn) -> np.ndarray:
    """``(B, n)`` steps that end an episode, from per-agent done flags ``(B, n, N)`` (any of
    the flag arrays set counts: terminated or truncated)."""
    done = np.asarray(flags[0]) != 0
    for more in flags[1:]:
        done = done | (np.asarray(more) != 0)
    return done.any(axis=-1) if cut_on == "any" else done.all(axis=-1)


class StreamCutter:
    """Cuts ``B`` streams into episodes, a block of time steps at a time.

    Args:
        streams: ``B``.
        start: the step the first block starts at.
    """

    def __init__(self, streams: int, start: int = 0) -> None:
        self.position = start
        self.open_starts = np.full(streams, start, dtype=np.int64)
        """First step of each stream's unfinished episode."""

    def push(self, done: np.ndarray) -> Episodes:
        """The episodes that end in the next ``(B, n)`` block of done steps."""
        stream_ids, steps = np.nonzero(np.asarray(done, dtype=bool))  # stream-major order
        ends = self.position + steps.astype(np.int64)
        starts = np.empty_like(ends)
        if len(ends):
            first = np.ones(len(ends), dtype=bool)
            first[1:] = stream_ids[1:] != stream_ids[:-1]
            starts[first] = self.open_starts[stream_ids[first]]
            starts[~first] = ends[np.flatnonzero(~first) - 1] + 1
            last = np.ones(len(ends), dtype=bool)
            last[:-1] = first[1:]
            self.open_starts[stream_ids[last]] = ends[last] + 1
        self.position += int(np.shape(done)[1])
        order = np.lexsort((stream_ids, ends))
        return Episodes(stream_ids[order].astype(np.int64), starts[order],
                        (ends - starts + 1)[order], np.ones(len(ends), dtype=bool))

    def unfinished(self) -> Episodes:
        """Each stream's steps after its last done, as one episode per stream (in stream
        order; streams with none are left out)."""
        rest = self.position - self.open_starts
        streams = np.flatnonzero(rest > 0).astype(np.int64)
        return Episodes(streams, self.open_starts[streams].copy(), rest[streams],
                        np.zeros(len(streams), dtype=bool))


def stream_rows(block: Mapping[tuple[str, ...], np.ndarray], episodes: Episodes,
                offset: int, stream: int = 0) -> dict[tuple[str, ...], np.ndarray]:
    """The step rows of ``episodes``, one after another, from ``(B, n, ...)`` leaves whose
    first stream is ``stream`` and first step ``offset``."""
    rows_of = np.repeat(episodes.streams - stream, episodes.lengths)
    ends = np.cumsum(episodes.lengths)
    within = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) - np.repeat(
        ends - episodes.lengths, episodes.lengths)
    steps = np.repeat(episodes.starts - offset, episodes.lengths) + within
    return {path: np.asarray(values)[rows_of, steps] for path, values in block.items()}
