"""A TorchRL sampler that draws whole-episode slices from several sources by weight.

TorchRL's own ``PrioritizedSliceSampler`` needs its compiled segment trees, which not every
torchrl build ships; this sampler needs none: a table of valid slice starts per source
(slices never cross an episode), a source drawn by weight per slice, a start uniformly within
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torchrl.data.replay_buffers.samplers import Sampler

from marl_minari.errors import InvalidOptionError


def slice_starts(episode_lengths: np.ndarray, slice_len: int, offset: int) -> np.ndarray:
    """Storage positions where a slice of ``slice_len`` steps fits inside one episode, for
    episodes laid end to end from ``offset``."""
    ends = offset + np.cumsum(episode_lengths)
    firsts = ends - episode_lengths
    parts = [np.arange(a, b - slice_len + 1) for a, b in zip(firsts.tolist(), ends.tolist(),
                                                           strict=True) if b - a >= slice_len]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


class WeightedSliceSampler(Sampler):
    """Slices of ``slice_len`` steps: a source by its weight, then one of its slices.

    Args:
        episode_lengths: per source, the lengths of its episodes in storage order.
        weights: relative probability of each source.
        slice_len: steps per slice (``1``: single transitions).
        names: the sources' names, for error messages.
    """

    def __init__(self, episode_lengths: Sequence[np.ndarray], weights: Sequence[float],
                 slice_len: int, names: Sequence[str]) -> None:
        super().__init__()
        self.slice_len = slice_len
        offset = 0
        starts = []
        for lengths, weight, name in zip(episode_lengths, weights, names, strict=True):
            table = slice_starts(np.asarray(lengths, dtype=np.int64), slice_len, offset)
            if weight > 0 and len(table) == 0:
                raise InvalidOptionError(
                    f"source {name!r} has weight {weight} but no episode of {slice_len} steps "
                    "to sample a slice from; lower slice_len or drop its weight")
            starts.append(torch.from_numpy(table))
            offset += int(np.sum(lengths))
        self._starts = starts
        chosen = torch.as_tensor(np.asarray(weights, dtype=np.float64))
        self._weights = chosen / chosen.sum()

    def sample(self, storage: Any, batch_size: int) -> tuple[torch.Tensor, dict[str, Any]]:
        if batch_size % self.slice_len:
            raise InvalidOptionError(f"batch_size {batch_size} is not a multiple of slice_len "
                                     f"{self.slice_len}")
        slices = batch_size // self.slice_len
        sources = torch.multinomial(self._weights, slices, replacement=True)
        firsts = torch.empty(slices, dtype=torch.int64)
        for source in sources.unique().tolist():
            picked = sources == source
            table = self._starts[source]
            firsts[picked] = table[torch.randint(len(table), (int(picked.sum()),))]
        index = (firsts[:, None] + torch.arange(self.slice_len)[None, :]).reshape(-1)
        return index, {}

    def _empty(self) -> None:
        """Nothing to clear: the table describes read-only offline data."""

    def dumps(self, path: Any) -> None:
        """Nothing to save: the table is rebuilt from the sources."""

    def loads(self, path: Any) -> None:
        """Nothing to load: the table is rebuilt from the sources."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        return None
