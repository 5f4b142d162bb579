"""Episode rows as Parquet, for RLlib's multi-agent offline training without the datasets.

:func:`export_episodes` writes one row per episode with the datasets' specs in a manifest;
:func:`marl_minari.ray.rllib_offline.multi_agent_offline` trains from the folder;
:func:`load_episodes_export` reads the manifest back. See ``docs/ray.md``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from marl_minari.errors import CorruptedDataError
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.ray.data import SourceLike, open_sources, read_dataset
from marl_minari.ray.export_files import clear_out, parquet_rows, read_manifest
from marl_minari.version import __version__

EPISODES_MANIFEST = "marl_minari_episodes.json"
"""File written next to the Parquet files by :func:`export_episodes`."""
EPISODES_FORMAT = "marl-minari-episodes-parquet"
EPISODES_FORMAT_VERSION = 1
"""Version of the episode rows and manifest :func:`export_episodes` writes; a manifest of
another version is refused rather than misread."""


@dataclass(frozen=True)
class EpisodesExport:
    """Result of :func:`export_episodes` (and :func:`load_episodes_export`).

    Attributes:
        path: folder of the Parquet files: ``ray.data.read_parquet(str(path))``.
        specs: each source's spec, by the name its rows carry in the ``dataset`` column.
        episodes: episode rows written.
    """

    path: Path
    specs: dict[str, MultiAgentSpec]
    episodes: int


def export_episodes(sources: SourceLike | Sequence[SourceLike],
                    out: str | os.PathLike[str], *,
                    override_num_blocks: int | None = None,
                    overwrite: bool = False) -> EpisodesExport:
    """Write episode rows (``read_dataset(sources, rows="episodes")``) as Parquet.

    One row per recorded episode, columns as :func:`marl_minari.rows.patterns.episode_rows`
    (whole episodes as Arrow tensors, variable-shaped where episode lengths differ), written
    with ``Dataset.write_parquet(out)``. A manifest (:data:`EPISODES_MANIFEST`) holds each
    source's spec (agents, spaces, api), so that ``multi_agent_offline(config, out)`` trains
    from the folder through RLlib's own ``read_parquet`` without the original datasets.
    Unlike :func:`export_rllib`'s agent-step rows, a row never splits an episode, which RLlib's
    batching would do.

    Args:
        sources: as for :func:`marl_minari.ray.data.read_dataset` (whole datasets).
        out: output folder (must not exist or be empty, unless ``overwrite`` and it holds a
            previous episode export).
        override_num_blocks: read tasks (see :func:`marl_minari.ray.data.read_dataset`).
        overwrite: replace a previous episode export in ``out``.

    Raises:
        IncompatibleSourcesError: sources give different columns.
        DatasetExistsError: ``out`` is not empty (a ``FileExistsError``).
    """
    opened = open_sources(sources)
    out_path = clear_out(out, EPISODES_MANIFEST, overwrite)
    read_dataset(opened, "episodes", override_num_blocks=override_num_blocks).write_parquet(
        str(out_path))
    export = EpisodesExport(out_path, {s.name: s.spec for s in opened},
                            parquet_rows(out_path))
    manifest = {
        "format": EPISODES_FORMAT,
        "format_version": EPISODES_FORMAT_VERSION,
        "library_version": __version__,
        "episodes": export.episodes,
        "specs": {name: json.loads(spec.to_json()) for name, spec in export.specs.items()},
    }
    out_path.mkdir(parents=True, exist_ok=True)
    (out_path / EPISODES_MANIFEST).write_text(json.dumps(manifest, indent=2))
    return export


def load_episodes_export(path: str | os.PathLike[str]) -> EpisodesExport:
    """Read back what :func:`export_episodes` wrote (from its manifest).

    Raises:
        DatasetNotFoundError: the folder has no :data:`EPISODES_MANIFEST`.
        CorruptedDataError: the manifest is not one :func:`export_episodes` of this format
            version writes.
    """
    out_path = Path(path).resolve()
    manifest = read_manifest(out_path, EPISODES_MANIFEST, "episode export", "export_episodes")
    found = (manifest.get("format"), manifest.get("format_version"))
    if found != (EPISODES_FORMAT, EPISODES_FORMAT_VERSION):
        raise CorruptedDataError(
            f"{out_path / EPISODES_MANIFEST} is format {found[0]!r} version {found[1]!r} "
            f"(marl-minari {manifest.get('library_version')!r}); this marl-minari reads "
            f"{EPISODES_FORMAT!r} version {EPISODES_FORMAT_VERSION}: export the datasets "
            "again with export_episodes")
    try:
        specs = {name: MultiAgentSpec.from_json(json.dumps(spec))
                 for name, spec in manifest["specs"].items()}
        return EpisodesExport(out_path, specs, int(manifest["episodes"]))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CorruptedDataError(f"{out_path / EPISODES_MANIFEST} lacks or mangles "
                                 f"{exc}; export again with export_episodes") from exc
