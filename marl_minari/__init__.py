"""marl-minari: multi-agent reinforcement-learning datasets in the Minari standard.

Record PettingZoo environments (:class:`ParallelDataCollector`, :class:`AECDataCollector`),
load the result with plain ``minari.load_dataset`` or per agent with :func:`load_dataset`, read
anything a user can name through one door (:func:`open_source`), convert to and from Flashbax
(:mod:`marl_minari.adapters`) and publish to registries (:mod:`marl_minari.registry`). The
map of the package is ``docs/architecture.md``.
"""

from __future__ import annotations

from typing import Any

from marl_minari.derive.combine import combine_datasets
from marl_minari.derive.subsets import subsample
from marl_minari.describe import DatasetDescription, dataset_card, describe, plot_descriptions
from marl_minari.envs.joint import JointEnv
from marl_minari.envs.make import make_env
from marl_minari.envs.resolve import trust_env_package, trusted_env_packages
from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    EmptyDatasetError,
    EnvDescriptorError,
    EpisodeIndexError,
    ForeignStorageError,
    IncompatibleSourcesError,
    InfoStructureError,
    InvalidDatasetIdError,
    InvalidOptionError,
    LayoutError,
    LockedError,
    MarlMinariError,
    MissingExtraError,
    NotWritableError,
    RemoteError,
    StepDataError,
    StorageFullError,
    UnsupportedSpaceError,
)
from marl_minari.format.env_descriptor import EnvDescriptor
from marl_minari.format.layout import LAYOUT_VERSION
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.sources import DatasetSource, check_dataset, load_dataset, open_source
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.check import CheckReport
from marl_minari.storage.dataset import MultiAgentDataset, split_dataset
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.recording import discard_recording, list_recordings, recover_recording
from marl_minari.storage.writer import write_dataset
from marl_minari.version import __version__  # noqa: I001

__all__ = [
    "LAYOUT_VERSION",
    "AECDataCollector",
    "CheckReport",
    "CorruptedDataError",
    "DatasetDescription",
    "DatasetExistsError",
    "DatasetSource",
    "DatasetNotFoundError",
    "EnvDescriptor",
    "EnvDescriptorError",
    "EpisodeIndexError",
    "ForeignStorageError",
    "IncompatibleSourcesError",
    "InfoStructureError",
    "InvalidDatasetIdError",
    "InvalidOptionError",
    "JointEnv",
    "LayoutError",
    "LockedError",
    "MarlMinariError",
    "MissingExtraError",
    "NotWritableError",
    "MultiAgentArrays",
    "MultiAgentDataset",
    "MultiAgentEpisode",
    "MultiAgentSpec",
    "RemoteError",
    "StepDataError",
    "EmptyDatasetError",
    "StorageFullError",
    "UnsupportedSpaceError",
    "ParallelDataCollector",
    "__version__",
    "check_dataset",
    "combine_datasets",
    "dataset_card",
    "describe",
    "plot_descriptions",
    "list_recordings",
    "load_dataset",
    "make_env",
    "open_source",
    "recover_recording",
    "discard_recording",
    "trust_env_package",
    "trusted_env_packages",
    "split_dataset",
    "subsample",
    "write_dataset",
]


def __getattr__(name: str) -> Any:
    # Collectors import PettingZoo wrappers; load them on first use to keep `import` light.
    if name == "ParallelDataCollector":
        from marl_minari.collectors import ParallelDataCollector

        return ParallelDataCollector
    if name == "AECDataCollector":
        from marl_minari.collectors import AECDataCollector

        return AECDataCollector
    raise AttributeError(f"module 'marl_minari' has no attribute {name!r}")
