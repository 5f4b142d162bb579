"""Checks the command line makes before any work starts: ids, JSON options, local datasets.

Typer parsers and callbacks raise :class:`typer.BadParameter`, so a mistake is reported with
the option's name and exit code 2 before an env is made or a file is read (see
:mod:`marl_minari.cli.errors`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import typer

from marl_minari.errors import DatasetNotFoundError, InvalidDatasetIdError
from marl_minari.format.ids import parse_dataset_id


def dataset_id(value: str | None) -> str | None:
    """Typer callback: ``value`` is a well-formed dataset id (``None`` passes)."""
    if value is None:
        return None
    try:
        parse_dataset_id(value)
    except InvalidDatasetIdError as exc:
        raise typer.BadParameter(str(exc)) from None
    return value


VAULT_LAYOUT: Final = "a vault folder is rel_dir/vault_name/vault_uid"
SOURCE_LAYOUT: Final = ("a dataset folder holds data/metadata.json, a vault folder is "
                        "rel_dir/vault_name/vault_uid")


def named(value: Any) -> Any:
    """Typer callback: a path or id argument (or each of a list of them) is not empty.

    An empty name would be read as the current folder, or as an id nobody can have typed on
    purpose (a shell variable that was never set): refused as a mistake in the command line.
    """
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, str) and not item.strip():
            raise typer.BadParameter(
                "is empty: give the id, path or URL it asks for (an empty one would mean the "
                "current folder; was a shell variable left unset?)")
    return value


def source(value: Any) -> Any:
    """Typer callback: each dataset argument is not empty (:func:`named`) and names something
    that can exist: a registry URL, an existing path, or a dataset id.

    Raises:
        DatasetNotFoundError: a path that does not exist and is no dataset id either; the
            message says what the deepest existing folder on it holds.
    """
    named(value)
    for item in value if isinstance(value, (list, tuple)) else [value]:
        if isinstance(item, str):
            _require_source(item)
    return value


def _require_source(value: str) -> None:
    from marl_minari.sources.remote import is_remote_source
    from marl_minari.sources.resolve import path_exists

    if is_remote_source(value) or path_exists(Path(value).expanduser()):
        return
    try:
        parse_dataset_id(value)
    except InvalidDatasetIdError as exc:
        # The nearest folder comes first: what looks like no id is likelier a mistyped path.
        raise DatasetNotFoundError(
            f"no dataset folder or vault at {value}: {nearby(Path(value), SOURCE_LAYOUT)}. "
            f"Nor is it a dataset id: {exc}") from None


def nearby(path: Path, layout: str) -> str:
    """What the deepest existing folder on ``path`` holds, for a "no vault at" message."""
    missing = path
    while not missing.parent.is_dir() and missing.parent != missing.parent.parent:
        missing = missing.parent
    if not missing.parent.is_dir() or missing.parent in (Path("."), Path("")):
        return f"{missing} does not exist ({layout})"
    entries = sorted(p.name for p in missing.parent.iterdir() if p.is_dir())
    shown = ", ".join(entries[:10]) + (", ..." if len(entries) > 10 else "")
    return f"{missing.parent} holds {shown or 'no folders'} ({layout})"


def json_object(text: str) -> dict[str, Any]:
    """Typer parser: a JSON object such as ``{"max_cycles": 50}``."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(
            f"{text!r} is not JSON ({exc.msg} at character {exc.pos + 1}): write an object "
            """with double-quoted keys, e.g. '{"max_cycles": 50}'""") from None
    if not isinstance(value, dict):
        raise typer.BadParameter(
            f"{text!r} is a JSON {type(value).__name__}, not an object: write e.g. "
            """'{"max_cycles": 50}'""")
    return value


def require_local_dataset(value: str, *, download: bool = False) -> None:
    """Check that ``value`` names a local dataset, downloading it only when asked.

    Raises:
        InvalidDatasetIdError: ``value`` is not a dataset id.
        DatasetNotFoundError: no local dataset of that id (and ``download`` is off); the
            message lists the local ids that are close and how to download it.
    """
    from marl_minari.sources import locate_dataset

    try:
        locate_dataset(value, download=download)
    except DatasetNotFoundError as exc:
        # Only the commands that call this have --download: say it here, not in the library.
        if not download:
            exc.add_note("Or rerun this command with --download.")
        raise
