"""The local side of a download: a staging folder, and installing a verified dataset.

A download never writes where Minari looks for datasets until it is verified: files go to a
hidden staging folder on the same file system, and the dataset folder is moved into place
with one ``rename``.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from marl_minari.errors import DatasetExistsError, RemoteError
from marl_minari.format.ids import parse_dataset_id

STAGING_FOLDER: Final = ".marl_minari"


@contextlib.contextmanager
def staging_area(root: Path) -> Iterator[Path]:
    """A fresh hidden folder under ``root`` (same file system: renames are atomic).

    It is removed on exit, whatever happened; Minari does not list hidden folders. Folders
    left by killed downloads are removed here, once their writer is dead.
    """
    from marl_minari.format.ids import datasets_root
    from marl_minari.storage.locking import remove_stale_staging, staging_folder, staging_root

    parent = (staging_root() if root.resolve() == datasets_root().resolve()
              else root / STAGING_FOLDER)
    remove_stale_staging(parent)
    with staging_folder(parent, "download") as work:
        yield work


def install(staged: Path, root: Path, dataset_id: str, *, replace: bool, work: Path) -> Path:
    """Move a verified staged dataset to its place under ``root`` in one rename.

    With ``replace`` an existing copy is first renamed into ``work`` (deleted with it), and put
    back if the final rename fails.

    Raises:
        DatasetExistsError: a local dataset with that id exists and ``replace`` is off.
        RemoteError: the rename failed (permissions, full disk, ...).
    """
    parse_dataset_id(dataset_id)
    target = root.joinpath(*dataset_id.split("/"))
    target.parent.mkdir(parents=True, exist_ok=True)
    old = None
    if target.exists():
        if not replace:
            raise DatasetExistsError(
                f"dataset {dataset_id!r} already exists locally at {target}; pass force=True "
                "to replace it with the published copy"
            )
        old = work / f"replaced-{uuid.uuid4().hex}"
        os.rename(target, old)
    try:
        os.rename(staged, target)
    except OSError as exc:
        if old is not None:
            os.rename(old, target)
        if target.exists():
            raise DatasetExistsError(f"dataset {dataset_id!r} appeared locally while it was "
                                     "downloading") from exc
        raise RemoteError(f"cannot move the downloaded {dataset_id!r} to {target}: {exc}; "
                          "check the permissions and free space of the datasets root") from exc
    return target
