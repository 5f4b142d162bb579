"""Dataset ids and where their files live."""

from __future__ import annotations

import re
from pathlib import Path

from minari.storage.datasets_root_dir import get_dataset_path

from marl_minari.errors import InvalidDatasetIdError

_PART = r"[A-Za-z0-9][\w.-]*"
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
    match = _ID_RE.fullmatch(dataset_id)
    reason = None
    if match is None:
        reason = "it does not match (namespace/)name-vN"
    elif any(part in ("", ".", "..") for part in dataset_id.split("/")) or "\\" in dataset_id:
        reason = "it contains an empty, '.' or '..' path part"
    elif match["namespace"] and any(len(p) < 2 for p in match["namespace"].split("/")):
        reason = "namespace parts need at least two characters (Minari refuses shorter ones)"
    if reason is not None or match is None:
        raise InvalidDatasetIdError(
            f"malformed dataset id {dataset_id!r}: {reason}. Use e.g. "
            "'mpe2/simple_spread/random-v0' (letters, digits, '_', '-', '.'; a version suffix "
            "'-vN' is required)."
        )
    return match["namespace"], match["name"], int(match["version"])


def dataset_dir(dataset_id: str) -> Path:
    """The folder of ``dataset_id`` under the Minari datasets root (it may not exist)."""
    parse_dataset_id(dataset_id)
    return Path(get_dataset_path(dataset_id))


def datasets_root() -> Path:
    """Minari's datasets root (``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``)."""
    return Path(get_dataset_path())
