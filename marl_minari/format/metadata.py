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
import numbers
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import minari

from marl_minari.errors import (
    CorruptedDataError,
    DatasetNotFoundError,
    InvalidOptionError,
    MarlMinariError,
)
from marl_minari.format import layout
from marl_minari.format.env_descriptor import EnvDescriptor
from marl_minari.format.json_text import load_json
from marl_minari.format.recovered_layout import with_recovered_layout
from marl_minari.format.regular_files import read_regular
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
    metadata = load_json(read_regular(path), str(path),
                         "; restore it from a copy or re-create the dataset")
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


EVAL_ENV_SPEC_KEY = "eval_env_spec"
"""Minari's key for the evaluation env: a joint-view ``EnvSpec`` JSON whose
``kwargs.descriptor`` is the evaluation env's descriptor (``docs/format.md``)."""


def eval_env_descriptor(metadata: dict[str, Any], data_path: Path) -> EnvDescriptor | None:
    """The env descriptor of a dataset's evaluation env (``None`` when it records none).

    Raises:
        CorruptedDataError: ``eval_env_spec`` is not a joint-view spec with a descriptor.
    """
    text = metadata.get(EVAL_ENV_SPEC_KEY)
    if text is None:
        return None
    where = f"{Path(data_path) / layout.METADATA_FILE_NAME}: {EVAL_ENV_SPEC_KEY}"
    try:
        parsed = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        parsed = None
    kwargs = parsed.get("kwargs") if isinstance(parsed, dict) else None
    described = kwargs.get("descriptor") if isinstance(kwargs, dict) else None
    if not isinstance(described, dict):
        raise CorruptedDataError(
            f"{where} is not an EnvSpec JSON whose kwargs hold an env descriptor; restore the "
            "metadata from a copy, or drop the key to evaluate on the recorded env")
    try:
        return EnvDescriptor.from_dict(described)
    except MarlMinariError as exc:
        raise CorruptedDataError(f"{where}: {exc}") from exc


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
        InvalidOptionError: a metadata value of the wrong type (:func:`check_minari_metadata`).
    """
    check_minari_metadata({
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


MINARI_METADATA_KEYS: Final = ("algorithm_name", "author", "author_email", "code_permalink",
                               "description", "requirements", "ref_min_score", "ref_max_score")
"""The Minari metadata a new dataset may be given (every writer takes them by these names)."""


def check_minari_metadata(metadata: Mapping[str, Any], *, extra: bool = True) -> None:
    """Check the Minari metadata given for a new dataset, before any work: the one rule for
    every door that writes one (recorders, ``collect``, ``from_vault``, ``subsample``,
    :func:`marl_minari.storage.writer.write_dataset`).

    ``None`` means "not given". ``algorithm_name``, ``code_permalink`` and ``description``
    are strings; ``author`` and ``author_email`` a string or a list of strings;
    ``requirements`` a list of strings; the reference scores finite numbers; ``extra`` (where
    ``extra`` is true) a dict of more top-level keys.

    Raises:
        InvalidOptionError: an unknown key, or a value of the wrong kind (named).
    """
    allowed = (*MINARI_METADATA_KEYS, "extra") if extra else MINARI_METADATA_KEYS
    for key, value in metadata.items():
        if key not in allowed:
            raise InvalidOptionError(
                f"unknown metadata {key!r}; a new dataset takes {sorted(allowed)}")
        if value is None or _valid_metadata(key, value):
            continue
        raise InvalidOptionError(f"metadata {key}={value!r} is not {_METADATA_KINDS[key]}")


_METADATA_KINDS: Final = {
    "algorithm_name": "a string", "code_permalink": "a string", "description": "a string",
    "author": "a string or a list of strings", "author_email": "a string or a list of strings",
    "requirements": "a list of strings (pip requirement specifiers)",
    "ref_min_score": "a finite number", "ref_max_score": "a finite number",
    "extra": "a dict of top-level metadata keys",
}


def _valid_metadata(key: str, value: Any) -> bool:
    if key in ("algorithm_name", "code_permalink", "description"):
        return isinstance(value, str)
    if key in ("author", "author_email"):
        return isinstance(value, str) or (isinstance(value, (list, tuple, set, frozenset))
                                          and all(isinstance(v, str) for v in value))
    if key == "requirements":
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    if key in ("ref_min_score", "ref_max_score"):
        return (isinstance(value, numbers.Real) and not isinstance(value, bool)
                and math.isfinite(value))
    return isinstance(value, dict)  # extra
