"""``add_to_dataset``'s target as Minari takes it: the dataset object, updated in place.

Minari's ``DataCollector.add_to_dataset(dataset)`` appends to the dataset's storage and
extends the object's ``episode_indices`` by the new episodes' ids, so the caller's object
sees them. The collectors here take such an object (a ``MultiAgentDataset`` or the
``MinariDataset`` under it) or a dataset id.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from minari.dataset.minari_dataset import MinariDataset

from marl_minari.errors import InvalidOptionError
from marl_minari.format.ids import dataset_dir
from marl_minari.sources import load_dataset
from marl_minari.storage.dataset import MultiAgentDataset


def dataset_id_of(dataset: Any) -> str:
    """The id of the local dataset ``dataset`` names (an id, or a dataset object).

    Raises:
        InvalidOptionError: ``dataset`` is neither, or an object not stored under its id in
            the local datasets root (appending by id would change another dataset).
    """
    if isinstance(dataset, str):
        return dataset
    if isinstance(dataset, MultiAgentDataset):
        dataset_id, data_path = dataset.id, dataset.data_path
    elif isinstance(dataset, MinariDataset):
        dataset_id, data_path = dataset.id, Path(dataset.storage.data_path)
    else:
        raise InvalidOptionError(
            "add_to_dataset takes a dataset id, a MultiAgentDataset or a MinariDataset, got "
            f"{type(dataset).__name__}")
    expected = dataset_dir(dataset_id) / "data"
    if Path(data_path).resolve() != expected.resolve():
        raise InvalidOptionError(
            f"add_to_dataset: the dataset object {dataset_id!r} is stored at {data_path}, not "
            f"at {expected} where its id points: append only to datasets in the local "
            "datasets root ($MINARI_DATASETS_PATH), or copy it there first")
    return dataset_id


def stored_episode_count(dataset: Any) -> int | None:
    """Episodes stored in ``dataset``'s files now (``None`` for an id)."""
    if isinstance(dataset, MultiAgentDataset):
        return int(dataset.minari.storage.total_episodes)
    if isinstance(dataset, MinariDataset):
        return int(dataset.storage.total_episodes)
    return None


def refreshed(dataset: Any, before: int | None) -> Any:
    """``dataset`` after an append: the object given, whose view now includes the episodes
    stored since it held ``before`` (as Minari does), or the dataset an id names."""
    if isinstance(dataset, MultiAgentDataset):
        dataset.include_new_episodes(int(before or 0))
        return dataset
    if isinstance(dataset, MinariDataset):
        added = np.arange(int(before or 0), int(dataset.storage.total_episodes))
        dataset.episode_indices = np.append(dataset.episode_indices, added)
        return dataset
    return load_dataset(dataset)
