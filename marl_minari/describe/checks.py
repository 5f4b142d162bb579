"""Checks of what the figure and card functions are given, made before anything is drawn or
read, so a wrong argument costs nothing and the error names it with the fix.

:func:`output_file` is also the command line's policy for its file options (``describe
--plot``, ``--card``, ``--coverage-plot``, ``compare --plot``)."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from marl_minari.describe.results import DatasetDescription
from marl_minari.errors import InvalidOptionError


def output_file(path: str | os.PathLike[str], argument: str, example: str, *,
                existing_folder: bool = False) -> Path:
    """The file ``argument`` names, checked to be writable as a file: not a folder, and not
    below a file.

    ``example`` is the file name the error suggests inside a folder that was given (e.g.
    ``README.md`` for a card). With ``existing_folder``, the folder it goes in must exist too,
    as the command line asks: a mistyped folder there is refused rather than created.

    Raises:
        InvalidOptionError: naming ``argument`` and how to fix it.
    """
    target = Path(path)
    if target.is_dir():
        raise InvalidOptionError(f"{argument} {target} is a folder; name the file to write, "
                                 f"e.g. {target / example}")
    folder = target.parent
    if folder.is_dir():
        return target
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        raise InvalidOptionError(f"{argument} {target}: {existing} is a file, not a folder; "
                                 "name a file in a folder")
    if existing_folder:
        raise InvalidOptionError(f"{argument} {target}: the folder {folder} does not exist; "
                                 f"create it first (mkdir -p {folder}) or name a file in an "
                                 "existing folder")
    return target


def description_list(descriptions: Any, function: str) -> list[DatasetDescription]:
    """``descriptions`` as a list, each one what :func:`describe` returned.

    Raises:
        InvalidOptionError: one description, a string or another single object where the
            list goes, or an item that is not a description.
    """
    if isinstance(descriptions, (str, bytes, os.PathLike, DatasetDescription)) or not (
            isinstance(descriptions, Iterable)):
        raise InvalidOptionError(
            f"{function} takes a list of descriptions, not one {type(descriptions).__name__}: "
            f"e.g. {function}([describe('my/dataset-v0')], ...)")
    items = list(descriptions)
    for index, item in enumerate(items):
        description(item, function, f"descriptions[{index}]")
    return items


def description(item: Any, function: str, argument: str) -> DatasetDescription:
    """``item``, refused unless it is what :func:`describe` returned.

    Raises:
        InvalidOptionError: naming ``argument`` and what to pass instead.
    """
    if isinstance(item, DatasetDescription):
        return item
    shown = repr(item)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    source = repr(os.fspath(item)) if isinstance(item, (str, os.PathLike)) else "dataset"
    raise InvalidOptionError(
        f"{function}: {argument} is a {type(item).__name__} ({shown}), not a description: "
        f"pass what describe() returns, e.g. describe({source})")


def labels_list(labels: Any, count: int, what: str) -> list[str] | None:
    """One legend name per item, or ``None`` (the dataset ids).

    Raises:
        InvalidOptionError: one string where the list goes, or not ``count`` labels.
    """
    if labels is None:
        return None
    if isinstance(labels, (str, bytes)) or not isinstance(labels, Iterable):
        raise InvalidOptionError(
            f"labels={labels!r}: give a list of names, one per {what}, e.g. labels=['expert', "
            "'random']")
    names = [str(label) for label in labels]
    if len(names) != count:
        raise InvalidOptionError(
            f"{len(names)} labels for {count} {what}s: give one label per {what}, or none to "
            "use the dataset ids")
    return names


def dpi(value: Any) -> float:
    """A resolution in dots per inch: a positive finite number.

    Raises:
        InvalidOptionError: any other value.
    """
    number = float(value) if isinstance(value, numbers.Real) and not isinstance(
        value, bool) else math.nan
    if not (math.isfinite(number) and number > 0):
        raise InvalidOptionError(
            f"dpi={value!r}: give a positive number of dots per inch, e.g. dpi=100")
    return number
