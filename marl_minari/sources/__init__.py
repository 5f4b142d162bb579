"""The one door: anything a user can name (an id, a folder, a file, a URL, a dataset object,
a vault) as a :class:`DatasetSource` of whole episodes; :func:`load_dataset` and
:func:`check_dataset` go through it too.

The rules every reader follows live here: a plain single-agent Minari dataset is one agent,
:data:`SINGLE_AGENT` (``agent_0``), always present and acting; an id that is not local is
downloaded only when the caller asks (``download=True`` or a ``remote``); chunks hold whole
episodes, at most ``chunk_steps`` steps each, by default as many as fit
:data:`DEFAULT_CHUNK_BYTES` (:func:`steps_per_chunk`, the one policy every reader follows).
"""

from marl_minari.sources.base import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_CHUNK_STEPS,
    MIN_CHUNK_BYTES,
    DatasetSource,
    EpisodeAttributes,
    SourceKind,
    check_chunk_steps,
    check_source_weights,
    holding_chunk_bytes,
    space_bytes,
    steps_per_chunk,
)
from marl_minari.sources.datasets import check_dataset, load_dataset
from marl_minari.sources.folders import FolderSource
from marl_minari.sources.plain import (
    MOVED_KEYS,
    SINGLE_AGENT,
    SINGLE_AGENT_KEY,
    single_agent_arrays,
    single_agent_spec,
    spec_of,
)
from marl_minari.sources.resolve import Reference, locate_dataset, open_source, open_sources
from marl_minari.sources.streaming import StreamingDataset, StreamingSource
from marl_minari.sources.vault import VaultSource, is_vault, vault_path_parts

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "DEFAULT_CHUNK_STEPS",
    "MIN_CHUNK_BYTES",
    "MOVED_KEYS",
    "SINGLE_AGENT",
    "SINGLE_AGENT_KEY",
    "DatasetSource",
    "EpisodeAttributes",
    "FolderSource",
    "Reference",
    "SourceKind",
    "StreamingDataset",
    "StreamingSource",
    "VaultSource",
    "check_chunk_steps",
    "check_dataset",
    "check_source_weights",
    "holding_chunk_bytes",
    "is_vault",
    "load_dataset",
    "locate_dataset",
    "open_source",
    "open_sources",
    "single_agent_arrays",
    "single_agent_spec",
    "space_bytes",
    "spec_of",
    "steps_per_chunk",
    "vault_path_parts",
]
