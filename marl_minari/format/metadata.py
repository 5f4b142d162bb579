"""A dataset's ``metadata.json``: the one reader (checked, with damage typed) and what a
writer puts in it.

Minari parses metadata with whatever exception a malformed value makes its parser hit
(``KeyError``, ``AssertionError``, numpy's ``TypeError``). The functions here check what every
reader needs first and turn the rest into :class:`~marl_minari.errors.CorruptedDataError`
naming the file, so nothing a dataset's author wrote reaches the user untyped.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import minari

from marl_minari.errors import CorruptedDataError, DatasetNotFoundError, InvalidOptionError
from marl_minari.format import layout
from marl_minari.format.recovered_layout import with_recovered_layout
from marl_minari.format.space_json import space_from_json, space_to_json
from marl_minari.format.spec import MultiAgentSpec


def read_metadata(data_path: Path) -> dict[str, Any]:
    """The ``metadata.json`` of the dataset whose ``data/`` folder is ``data_path``: the one
    way every part of the library reads it.

    A multi-agent dataset that plain Minari combined lost its ``marl_minari`` key; it gets
    back that of its parts when they are local and agree (:mod:`.recovered_layout`).

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
    return with_recovered_layout(metadata, Path(data_path))


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


_TEXT_KEYS = ("algorithm_name", "code_permalink", "description")
_TEXTS_KEYS = ("author", "author_email")
_SCORE_KEYS = ("ref_min_score", "ref_max_score")


def check_metadata_values(metadata: dict[str, Any]) -> None:
    """Check the types of the Minari metadata a dataset is given (``None`` means "not given").

    The one check of metadata values, run wherever metadata is accepted (every writer builds
    ``metadata.json`` through :func:`dataset_metadata`; doors that choose or write episodes
    first call this before doing so).

    Raises:
        InvalidOptionError: naming the key, the value's type and what is accepted.
    """
    for key, value in metadata.items():
        if value is None:
            continue
        if key in _TEXT_KEYS:
            fits, wanted = isinstance(value, str), "a string"
        elif key in _TEXTS_KEYS:
            fits = isinstance(value, str) or (
                isinstance(value, (list, tuple, set, frozenset))
                and all(isinstance(item, str) for item in value))
            wanted = "a string or a list of strings"
        elif key == "requirements":
            fits = isinstance(value, (list, tuple)) and all(isinstance(r, str) for r in value)
            wanted = "a list of strings (pip requirement specifiers)"
        elif key in _SCORE_KEYS:
            fits = (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and math.isfinite(value))
            wanted = "a finite number"
        elif key == "extra":
            fits, wanted = isinstance(value, dict), "a dict"
        else:
            continue
        if not fits:
            raise InvalidOptionError(
                f"metadata {key!r} must be {wanted}, not {type(value).__name__} {value!r}")


def dataset_metadata(
    dataset_id: str,
    spec: MultiAgentSpec,
    *,
    total_episodes: int,
    total_steps: int,
    jpeg_encoding: bool,
    algorithm_name: str | None = None,
    author: str | Iterable[str] | None = None,
    author_email: str | Iterable[str] | None = None,
    code_permalink: str | None = None,
    description: str | None = None,
    requirements: list[str] | None = None,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``metadata.json`` of a dataset: Minari's keys plus ``marl_minari``.

    Raises:
        InvalidOptionError: a metadata value of the wrong type (:func:`check_metadata_values`).
    """
    check_metadata_values({
        "algorithm_name": algorithm_name, "author": author, "author_email": author_email,
        "code_permalink": code_permalink, "description": description,
        "requirements": requirements, "ref_min_score": ref_min_score,
        "ref_max_score": ref_max_score, "extra": extra})
    metadata: dict[str, Any] = {
        "dataset_id": dataset_id,
        "total_episodes": total_episodes,
        "total_steps": total_steps,
        "data_format": "hdf5",
        "jpeg_encoding": jpeg_encoding,
        "observation_space": space_to_json(spec.observation_space),
        "action_space": space_to_json(spec.action_space),
        "minari_version": minari.__version__,
    }
    env_spec = spec.joint_env_spec()
    if env_spec is not None:
        metadata["env_spec"] = env_spec.to_json()
    optional: dict[str, Any] = {
        "algorithm_name": algorithm_name,
        "author": [author] if isinstance(author, str) else author,
        "author_email": [author_email] if isinstance(author_email, str) else author_email,
        "code_permalink": code_permalink,
        "description": description,
        "requirements": requirements,
        "ref_min_score": ref_min_score,
        "ref_max_score": ref_max_score,
    }
    for key, value in optional.items():
        if value is not None:
            metadata[key] = sorted(value) if key in ("author", "author_email") else value
    metadata.update(extra or {})
    metadata[layout.METADATA_KEY] = spec.to_metadata()
    return metadata
