"""A dataset's ``metadata.json``: read, checked, and opened through Minari with damage typed.

Minari parses metadata with whatever exception a malformed value makes its parser hit
(``KeyError``, ``AssertionError``, numpy's ``TypeError``). The functions here check what every
reader needs first and turn the rest into :class:`~marl_minari.errors.CorruptedDataError`
naming the file, so nothing a dataset's author wrote reaches the user untyped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import minari
from minari.dataset.minari_dataset import MinariDataset

from marl_minari.errors import CorruptedDataError, DatasetNotFoundError, MarlMinariError
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir, not_found_locally
from marl_minari.format.space_json import space_from_json


def read_metadata(data_path: Path) -> dict[str, Any]:
    """The ``metadata.json`` of the dataset whose ``data/`` folder is ``data_path``.

    Raises:
        DatasetNotFoundError: there is none.
        CorruptedDataError: it is not a JSON object.
    """
    path = Path(data_path) / layout.METADATA_FILE_NAME
    if not path.exists():
        raise DatasetNotFoundError(f"no dataset metadata at {path}")
    try:
        metadata: dict[str, Any] = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CorruptedDataError(f"{path} is not valid JSON ({exc}); restore it from a copy or "
                                 "re-create the dataset") from exc
    if not isinstance(metadata, dict):
        raise CorruptedDataError(f"{path} holds a {type(metadata).__name__}, not a JSON object")
    return metadata


def metadata_count(metadata: dict[str, Any], key: str, data_path: Path) -> int:
    """``metadata[key]`` checked to be a non-negative integer (``total_episodes``...).

    Raises:
        CorruptedDataError: it is missing or not such an integer.
    """
    value = metadata.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise CorruptedDataError(
            f"{Path(data_path) / layout.METADATA_FILE_NAME}: {key} must be a non-negative "
            f"integer, got {value!r}; the metadata is damaged, restore it from a copy.")
    return value


def open_minari_dataset(dataset_id: str, *, download: bool = False) -> MinariDataset:
    """``minari.load_dataset(dataset_id)`` with the damage it can meet typed.

    The local metadata is checked first (JSON object, episode and step counts), and anything
    Minari raises on a damaged dataset becomes :class:`CorruptedDataError` naming the folder.

    Raises:
        InvalidDatasetIdError: malformed id.
        DatasetNotFoundError: no local dataset (and ``download`` is off).
        CorruptedDataError: its metadata or files are damaged.
    """
    data_path = dataset_dir(dataset_id) / "data"
    local = (data_path / layout.METADATA_FILE_NAME).exists()
    if not local and not download:
        raise not_found_locally(dataset_id)
    if local:
        metadata = read_metadata(data_path)
        metadata_count(metadata, "total_episodes", data_path)
        metadata_count(metadata, "total_steps", data_path)
    try:
        return (minari_dataset_at(data_path, metadata) if local
                else minari.load_dataset(dataset_id, download=True))
    except MarlMinariError:
        raise
    except Exception as exc:  # Minari raises whatever a damaged file makes its parser hit
        raise CorruptedDataError(
            f"Minari cannot open dataset {dataset_id!r} at {data_path}: "
            f"{type(exc).__name__}: {exc}. Run marl-minari check {dataset_id} for details; "
            "restore it from a copy or download it again.") from exc


def minari_dataset_at(data_path: Path, metadata: dict[str, Any],
                      joint_spaces: tuple[Any, Any] | None = None) -> MinariDataset:
    """``MinariDataset(data_path)``, its spaces parsed by :func:`space_from_json`.

    Minari's own parser makes a Python object of every element-wise Box bound: seconds for an
    image env's ``metadata.json`` (pistonball: 24 MB, 3 s), where ours reads them with numpy.
    Datasets without both spaces in their metadata are left to Minari (it makes the env).

    Args:
        joint_spaces: the observation and action spaces of ``metadata``, if the caller has
            parsed them already.
    """
    if not {"observation_space", "action_space"} <= metadata.keys():
        return MinariDataset(data_path)
    from minari.dataset._storages import get_minari_storage

    observation_space, action_space = joint_spaces or (
        metadata_space(metadata, "observation_space", data_path),
        metadata_space(metadata, "action_space", data_path))
    storage = get_minari_storage(metadata.get("data_format", "hdf5"))(
        Path(data_path), observation_space, action_space,
        jpeg_encoding=bool(metadata.get("jpeg_encoding", True)))
    return MinariDataset(storage)


def metadata_space(metadata: dict[str, Any], key: str, data_path: Path) -> Any:
    """The space ``metadata[key]`` (``observation_space``...) deserialised.

    Raises:
        CorruptedDataError: it is missing or not a serialised space.
    """
    try:
        return space_from_json(metadata[key])
    except Exception as exc:  # Minari's parser raises whatever malformed JSON makes it hit
        raise CorruptedDataError(
            f"{Path(data_path) / layout.METADATA_FILE_NAME}: {key} is missing or not a "
            f"serialised space ({type(exc).__name__}: {exc}); restore it from a copy.") from exc
