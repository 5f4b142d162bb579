"""JSON objects the registry reads and writes: parsed strictly, typed, written atomically.

Everything a registry reads (its index, manifests, metadata files, a download's origin
record) comes from someone else and may be damaged or hostile. Parsing it here means that
whatever the bytes hold, the caller gets a dict or a
:class:`~marl_minari.errors.CorruptedDataError` naming the file and the key, never a
``JSONDecodeError``, ``KeyError`` or ``TypeError``.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from marl_minari.errors import CorruptedDataError, DatasetNotFoundError
from marl_minari.format.json_text import load_json

_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer",
               bool: "true or false"}


def parse_json_object(raw: bytes, where: str, fix: str = "") -> dict[str, Any]:
    """The JSON object in ``raw``, read from ``where`` (named in errors, with ``fix``).

    Raises:
        CorruptedDataError: not UTF-8 JSON, nested deeper than the parser's stack, an integer
            longer than Python converts, or not an object.
    """
    value = load_json(raw, where, fix)
    if not isinstance(value, dict):
        raise CorruptedDataError(f"{where} does not hold a JSON object{fix}")
    return value


def typed(document: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, *,
          required: bool = True, label: str | None = None, fix: str = "") -> Any:
    """``document[key]`` if it has the JSON type ``kind`` (``bool`` never counts as ``int``).

    Args:
        document: a parsed JSON object.
        key: the key to read.
        kind: the accepted Python type(s).
        where: the file (and the path to ``document`` inside it), for the error.
        required: a missing key (or ``null``) is an error; otherwise it gives ``None``.
        label: how the key is named in the error (default ``key``).
        fix: appended to the error: how to repair the file.

    Raises:
        CorruptedDataError: the key is missing (and ``required``) or holds another type.
    """
    name = label or repr(key)
    value = document.get(key)
    if value is None:
        if required:
            raise CorruptedDataError(f"{where}: {name} is missing{fix}")
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise CorruptedDataError(f"{where}: {name} must be {wanted}, not "
                                 f"{type(value).__name__} {_short(value)}{fix}")
    return value


def read_json_object(path: Path) -> dict[str, Any]:
    """A local JSON object file (metadata).

    Raises:
        DatasetNotFoundError: no such file.
        CorruptedDataError: not JSON, or not an object.
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError as exc:
        raise DatasetNotFoundError(f"{path} does not exist") from exc
    return parse_json_object(raw, str(path))


def write_json_atomically(path: Path, value: dict[str, Any]) -> None:
    """Write ``value`` to ``path`` under a temporary name, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        temporary.write_text(json.dumps(value))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."
