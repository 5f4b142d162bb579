"""Checks the command line makes before any work starts: ids, JSON options, local datasets.

Typer parsers and callbacks raise :class:`typer.BadParameter`, so a mistake is reported with
the option's name and exit code 2 before an env is made or a file is read (see
:mod:`marl_minari.cli.errors`).
"""

from __future__ import annotations

import json
from typing import Any

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
