"""``load_dataset`` and ``check_dataset``: the public entry points that need a dataset itself,
through the one door (:func:`~marl_minari.sources.resolve.open_source`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, overload

from marl_minari.errors import LayoutError
from marl_minari.sources.base import DatasetSource
from marl_minari.sources.folders import FolderSource
from marl_minari.sources.resolve import Reference, open_source
from marl_minari.sources.streaming import StreamingDataset, StreamingSource
from marl_minari.sources.vault import VaultSource
from marl_minari.storage.check import CheckReport, check_data_folder
from marl_minari.storage.dataset import MultiAgentDataset


@overload
def load_dataset(dataset_id: Reference, download: bool = False, *,
                 streaming: Literal[False] = False) -> MultiAgentDataset: ...


@overload
def load_dataset(dataset_id: Reference, download: bool = False, *,
                 streaming: Literal[True]) -> MultiAgentDataset | StreamingDataset: ...


def load_dataset(dataset_id: Reference, download: bool = False, *,
                 streaming: bool = False) -> MultiAgentDataset | StreamingDataset:
    """Load a multi-agent dataset, as ``minari.load_dataset`` loads a plain one.

    Args:
        dataset_id: anything :func:`~marl_minari.sources.open_source` opens that holds a
            Minari dataset in the multi-agent layout: an id, a dataset folder (or a file in
            it), a ``file://`` or registry URL, a ``minari.MinariDataset`` (its episodes).
        download: fetch an id that is not local from Minari's default remote.
        streaming: read a registry URL in place (the name Hugging Face ``datasets`` uses):
            a :class:`~marl_minari.sources.streaming.StreamingDataset` whose episodes are
            fetched by verified byte ranges when read; a local dataset is returned as usual.

    Raises:
        DatasetNotFoundError: no such dataset (the message names the closest local ids).
        LayoutError: it is a plain single-agent Minari dataset, or a Flashbax vault.
        CorruptedDataError: its files are damaged.
    """
    source = open_source(dataset_id, download=download, streaming=streaming)
    if isinstance(source, StreamingSource) and source.multi_agent:
        return StreamingDataset(source)
    if isinstance(source, FolderSource) and source.multi_agent:
        dataset: MultiAgentDataset = source.dataset
        return dataset
    raise LayoutError(_not_multi_agent(source))


def check_dataset(dataset: Reference, *, chunk_steps: int | None = None
                  ) -> CheckReport:
    """Check every episode of a dataset against ``docs/format.md`` (plain Minari datasets
    against Minari's part of it), or read every episode of a vault through its checks.

    Args:
        dataset: anything :func:`~marl_minari.sources.open_source` opens.
        chunk_steps: steps read at a time from a vault.

    Raises:
        DatasetNotFoundError: no such dataset.
        LayoutError: the dataset does not follow the layout; the message names the episode
            and the HDF5 path.
        CorruptedDataError: the file or metadata is damaged, or data lives outside the file.
    """
    source = open_source(dataset)
    if isinstance(source, FolderSource):
        return check_data_folder(source.data_path)
    for _ in source.chunks(chunk_steps):  # a vault is checked as it is read
        pass
    path = source.vault_path if isinstance(source, VaultSource) else Path(source.name)
    return CheckReport(path=path, kind=source.kind,
                       total_episodes=source.total_episodes, total_steps=source.total_steps,
                       index_checked=False)


def _not_multi_agent(source: DatasetSource) -> str:
    if source.kind == "vault":
        return (f"{source.name} is a Flashbax vault, not a Minari dataset: convert it with "
                "marl_minari.adapters.from_vault (or read it with describe, make_buffer, "
                "open_source)")
    if isinstance(source, StreamingSource):
        return (f"{source.name} is a plain single-agent Minari dataset: it has no "
                "'marl_minari' metadata. Read it in place as one agent 'agent_0' with "
                "marl_minari.open_source(url, streaming=True), or download it for "
                "minari.load_dataset")
    return (f"dataset {source.dataset_id!r} has no 'marl_minari' metadata: it is not a "
            "multi-agent dataset written by marl-minari. Read it with minari.load_dataset, "
            "or as one agent 'agent_0' through marl_minari.sources.open_source")
