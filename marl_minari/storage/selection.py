"""Choosing episodes of a :class:`MultiAgentDataset`, with Minari's names and semantics.

``MultiAgentDataset.sample_episodes``, ``filter_episodes`` and :func:`split_dataset` behave as
``MinariDataset.sample_episodes``, ``filter_episodes`` and ``minari.split_dataset``, on
multi-agent episodes; a selection is a dataset over some stored episodes (its
``episode_indices``), reading the same files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from minari.dataset.minari_dataset import MinariDataset

from marl_minari.errors import InvalidOptionError

if TYPE_CHECKING:
    from marl_minari.storage.episode import MultiAgentEpisode
    from marl_minari.storage.reader import MultiAgentDataset


def subset(dataset: MultiAgentDataset, episode_ids: np.ndarray) -> MultiAgentDataset:
    """The dataset over the stored episodes ``episode_ids`` of ``dataset``'s files."""
    from marl_minari.storage.reader import MultiAgentDataset

    return MultiAgentDataset(MinariDataset(dataset.minari.storage,
                                           episode_indices=np.asarray(episode_ids, np.int64)))


def sample_ids(dataset: MultiAgentDataset, n_episodes: int,
               generator: np.random.Generator) -> np.ndarray:
    """``n_episodes`` distinct stored ids drawn from the dataset's, as Minari draws them.

    Raises:
        InvalidOptionError: more episodes asked for than the dataset holds.
    """
    if not 0 <= n_episodes <= dataset.total_episodes:
        raise InvalidOptionError(
            f"cannot sample {n_episodes} episodes from a dataset of {dataset.total_episodes}; "
            "ask for at most that many")
    return np.asarray(generator.choice(dataset.episode_indices, size=n_episodes,
                                       replace=False), dtype=np.int64)


def filter_ids(dataset: MultiAgentDataset,
               condition: Callable[[MultiAgentEpisode], bool]) -> np.ndarray:
    """Stored ids of the episodes for which ``condition(episode)`` is true, in order."""
    return np.asarray([int(e.id) for e in dataset.iterate_episodes()  # type: ignore[arg-type]
                       if condition(e)], dtype=np.int64)


def split_dataset(dataset: MultiAgentDataset, sizes: Sequence[int],
                  seed: int | None = None) -> list[MultiAgentDataset]:
    """Split ``dataset`` into datasets of ``sizes`` episodes with disjoint random episodes,
    as ``minari.split_dataset`` does (the same ``seed`` gives the same split).

    Raises:
        InvalidOptionError: a negative size, or sizes summing to more than the dataset holds.
    """
    if any(size < 0 for size in sizes) or sum(sizes) > dataset.total_episodes:
        raise InvalidOptionError(
            f"split sizes {list(sizes)} must be non-negative and sum to at most the dataset's "
            f"{dataset.total_episodes} episodes")
    order = np.random.default_rng(seed).permutation(dataset.episode_indices)
    ends = np.cumsum(sizes)
    return [subset(dataset, order[end - size:end]) for size, end in zip(sizes, ends,
                                                                        strict=True)]
