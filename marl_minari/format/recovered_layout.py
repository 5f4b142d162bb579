"""Multi-agent datasets that lost their ``marl_minari`` metadata to ``minari.combine_datasets``.

Minari's ``combine_datasets`` copies the episodes' HDF5 groups (the multi-agent layout stays
intact) but writes a fresh ``metadata.json`` without our key, so the result would read as one
agent with Dict actions. When the parts it lists in ``combined_datasets`` are local and agree,
their key is taken over; otherwise, and whenever the data file holds the multi-agent layout
but the metadata does not say so, a warning says the dataset is read as single-agent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py

from marl_minari.errors import MarlMinariError
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir
from marl_minari.format.in_file import group_in_file
from marl_minari.user_warnings import warn

MARL_GROUP = f"infos/{layout.INFOS_GROUP}"
"""HDF5 group every episode of the multi-agent layout has."""

_LIBRARY_KEYS = (layout.META_LIBRARY_VERSION,)


class SingleAgentReadingWarning(UserWarning):
    """A dataset in the multi-agent layout is read as a single-agent one."""


def with_recovered_layout(metadata: dict[str, Any], data_path: Path) -> dict[str, Any]:
    """``metadata``, with the ``marl_minari`` key of its parts if Minari combined it from
    local multi-agent datasets that agree; warns when multi-agent data stays single-agent."""
    if layout.METADATA_KEY in metadata:
        return metadata
    parts = metadata.get("combined_datasets")
    recovered = _from_parts(parts, metadata) if isinstance(parts, list) and parts else None
    if recovered is not None:
        return {**metadata, layout.METADATA_KEY: recovered}
    if _holds_multi_agent_layout(Path(data_path) / layout.MAIN_FILE_NAME):
        why = (f"its parts {parts} are not all local multi-agent datasets that agree"
               if isinstance(parts, list) else "its metadata has no 'marl_minari' key")
        warn(f"dataset {metadata.get('dataset_id')!r} ({data_path}) holds multi-agent episodes "
             f"but is read as single-agent: {why}. Combine multi-agent datasets with "
             "marl_minari.combine_datasets, or download the parts and read it again.",
             SingleAgentReadingWarning)
    return metadata


def _from_parts(parts: list[Any], metadata: dict[str, Any]) -> dict[str, Any] | None:
    keys: list[dict[str, Any]] = []
    for part in parts:
        try:
            path = dataset_dir(str(part)) / "data" / layout.METADATA_FILE_NAME
            part_metadata = json.loads(path.read_text())
        except (MarlMinariError, OSError, ValueError):
            return None
        key = part_metadata.get(layout.METADATA_KEY) if isinstance(part_metadata, dict) else None
        if not isinstance(key, dict) or any(
                _parsed(part_metadata.get(name)) != _parsed(metadata.get(name))
                for name in ("observation_space", "action_space")):
            return None
        keys.append(key)
    comparable = [{k: v for k, v in key.items() if k not in _LIBRARY_KEYS} for key in keys]
    if any(c != comparable[0] for c in comparable[1:]):
        return None
    return keys[0]


def _parsed(space_json: Any) -> Any:
    """A serialised space as JSON values: writers differ in whitespace (Minari's combine
    re-serialises the spaces), not in meaning."""
    try:
        return json.loads(space_json) if isinstance(space_json, str) else space_json
    except ValueError:
        return space_json


def _holds_multi_agent_layout(h5_path: Path) -> bool:
    try:
        with h5py.File(h5_path, "r") as file:
            first = next(iter(file.keys()), None)
            return first is not None and group_in_file(
                file.id, f"{first}/{MARL_GROUP}".encode()) is not None
    except (OSError, KeyError, TypeError):
        return False
