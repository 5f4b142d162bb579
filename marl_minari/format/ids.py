"""Dataset ids and where their files live."""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from minari.storage.datasets_root_dir import get_dataset_path

from marl_minari.errors import DatasetNotFoundError, InvalidDatasetIdError

_PART = r"[A-Za-z0-9][\w.-]*"
MAX_PART_LENGTH = 100
"""Longest namespace or name part: file systems refuse names over 255 bytes, and staging and
temporary names add to a part."""
MAX_ID_LENGTH = 200
"""Longest whole id (it becomes a path under the datasets root)."""
_ID_RE = re.compile(
    rf"(?:(?P<namespace>{_PART}(?:/{_PART})*)/)?(?P<name>\w[\w.-]*?)-v(?P<version>\d+)")


def parse_dataset_id(dataset_id: str) -> tuple[str | None, str, int]:
    """Split ``(namespace/)name-vN`` into ``(namespace, name, version)``.

    Stricter than Minari's parser where Minari would accept an id and then misbehave: the
    version is required, namespace parts have at least two characters, and nothing may escape
    the datasets root (``..``, absolute paths, backslashes).

    Raises:
        InvalidDatasetIdError: with the reason and the expected form.
    """
    if not isinstance(dataset_id, str):
        raise InvalidDatasetIdError(f"dataset id must be a str, got {type(dataset_id).__name__}")
    # Length first: a regular expression over a huge string is wasted work.
    match = _ID_RE.fullmatch(dataset_id) if len(dataset_id) <= 4 * MAX_ID_LENGTH else None
    reason = None
    if match is None:
        reason = "it does not match (namespace/)name-vN"
    elif any(part in ("", ".", "..") for part in dataset_id.split("/")) or "\\" in dataset_id:
        reason = "it contains an empty, '.' or '..' path part"
    elif match["namespace"] and any(len(p) < 2 for p in match["namespace"].split("/")):
        reason = "namespace parts need at least two characters (Minari refuses shorter ones)"
    elif len(dataset_id) > MAX_ID_LENGTH or any(
            len(part) > MAX_PART_LENGTH for part in dataset_id.split("/")):
        reason = (f"it is longer than {MAX_ID_LENGTH} characters or has a part longer than "
                  f"{MAX_PART_LENGTH} (parts become folder names)")
    if reason is not None or match is None:
        raise InvalidDatasetIdError(
            f"malformed dataset id {dataset_id!r}: {reason}. Use e.g. "
            "'mpe2/simple_spread/random-v0' (letters, digits, '_', '-', '.'; a version suffix "
            "'-vN' is required)."
        )
    return match["namespace"], match["name"], int(match["version"])


_ROOT_OVERRIDE: ContextVar[Path | None] = ContextVar("marl_minari_datasets_root", default=None)


def dataset_dir(dataset_id: str) -> Path:
    """The folder of ``dataset_id`` under the datasets root (it may not exist)."""
    parse_dataset_id(dataset_id)
    return datasets_root() / dataset_id


def datasets_root() -> Path:
    """Minari's datasets root (``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``), unless
    :func:`using_datasets_root` set another one for the current thread or task."""
    override = _ROOT_OVERRIDE.get()
    if override is None:
        return Path(get_dataset_path())
    override.mkdir(parents=True, exist_ok=True)
    return override


@contextmanager
def using_datasets_root(root: Path) -> Iterator[Path]:
    """Write and read this package's datasets under ``root`` while the block runs.

    Only the current thread (or asyncio task) sees the change, and ``MINARI_DATASETS_PATH``
    is left alone, so Minari's own functions and other threads keep the usual root.
    """
    token = _ROOT_OVERRIDE.set(Path(root))
    try:
        yield Path(root)
    finally:
        _ROOT_OVERRIDE.reset(token)


def not_found_locally(dataset_id: str) -> DatasetNotFoundError:
    """The one "no such local dataset" error: it names the closest local ids and how to
    download (the same words in Python and at the command line; it names no option of any
    one command: a command that has ``--download`` adds it, see ``cli/checks.py``)."""
    close = difflib.get_close_matches(dataset_id, local_dataset_ids(), n=3)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return DatasetNotFoundError(
        f"dataset {dataset_id!r} not found locally (looked in {dataset_dir(dataset_id)}); "
        f"{hint}record it, or download it: download=True or a remote in Python, "
        f"`marl-minari download {dataset_id}` at the command line.")


def local_dataset_ids() -> list[str]:
    """Ids of the datasets under the datasets root (folders holding ``data/metadata.json``)."""
    root = datasets_root()
    found: list[str] = []
    for folder, children, _ in os.walk(root):
        here = Path(folder)
        if (here / "data" / "metadata.json").is_file():
            found.append(here.relative_to(root).as_posix())
            children.clear()
        else:
            children[:] = [c for c in children if not c.startswith(".")]
    return sorted(found)
