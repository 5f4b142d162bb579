"""Files of the Parquet exports: the output folder, the manifest beside the Parquet files.

Shared by :mod:`marl_minari.ray.rllib_export` and :mod:`marl_minari.ray.episodes_export`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from marl_minari.errors import CorruptedDataError, DatasetExistsError, DatasetNotFoundError


def clear_out(out: str | os.PathLike[str], manifest: str, overwrite: bool) -> Path:
    """The resolved output folder, emptied when it holds a previous export (its manifest)."""
    out_path = Path(out).resolve()
    if out_path.exists() and any(out_path.iterdir()):
        if not (overwrite and (out_path / manifest).exists()):
            raise DatasetExistsError(f"{out_path} is not empty (overwrite=True replaces a "
                                     "previous export; or pick an empty folder)")
        shutil.rmtree(out_path)
    return out_path


def parquet_rows(folder: Path) -> int:
    if not folder.exists():
        return 0
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(folder.rglob("*.parquet")))


def read_manifest(out_path: Path, name: str, what: str, writer: str) -> dict[str, Any]:
    try:
        manifest = json.loads((out_path / name).read_text())
    except FileNotFoundError as exc:
        raise DatasetNotFoundError(f"no {what} at {out_path}: {name} is missing ({writer} "
                                   "writes it)") from exc
    except json.JSONDecodeError as exc:
        raise CorruptedDataError(f"{out_path / name} is not valid JSON ({exc}); "
                                 "export again") from exc
    if not isinstance(manifest, dict):
        raise CorruptedDataError(f"{out_path / name} holds no manifest object; export again")
    return manifest
