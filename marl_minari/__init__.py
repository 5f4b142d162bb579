"""marl-minari: multi-agent reinforcement-learning datasets in the Minari standard.

Record PettingZoo environments (:class:`ParallelDataCollector`), load the result with plain
``minari.load_dataset`` or per agent with :func:`load_dataset`, convert to and from Flashbax
(:mod:`marl_minari.adapters`) and publish to registries (:mod:`marl_minari.registry`).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

# Registers the file://, s3:// and http(s):// remotes in Minari's remote registry.
import marl_minari.registry  # noqa: E402,F401,I001
from marl_minari.combine import combine_datasets
from marl_minari.describe import DatasetDescription, dataset_card, describe, plot_descriptions
from marl_minari.descriptor import EnvDescriptor, make_env
from marl_minari.episode import MultiAgentEpisode
from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    EnvDescriptorError,
    IncompatibleSourcesError,
    InfoStructureError,
    InvalidDatasetIdError,
    LayoutError,
    MarlMinariError,
    RemoteError,
    StepDataError,
    UnsupportedSpaceError,
)
from marl_minari.joint import JointEnv
from marl_minari.layout import LAYOUT_VERSION
from marl_minari.reader import MultiAgentArrays, MultiAgentDataset, load_dataset
from marl_minari.recording import list_recordings, recover_recording
from marl_minari.selection import split_dataset
from marl_minari.spec import MultiAgentSpec
from marl_minari.writer import write_dataset

__all__ = [
    "LAYOUT_VERSION",
    "CorruptedDataError",
    "DatasetDescription",
    "DatasetExistsError",
    "DatasetNotFoundError",
    "EnvDescriptor",
    "EnvDescriptorError",
    "IncompatibleSourcesError",
    "InfoStructureError",
    "InvalidDatasetIdError",
    "JointEnv",
    "LayoutError",
    "MarlMinariError",
    "MultiAgentArrays",
    "MultiAgentDataset",
    "MultiAgentEpisode",
    "MultiAgentSpec",
    "RemoteError",
    "StepDataError",
    "UnsupportedSpaceError",
    "ParallelDataCollector",
    "__version__",
    "combine_datasets",
    "dataset_card",
    "describe",
    "plot_descriptions",
    "list_recordings",
    "load_dataset",
    "make_env",
    "recover_recording",
    "split_dataset",
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
