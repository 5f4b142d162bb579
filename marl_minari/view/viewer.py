"""The entry points: serve a dataset's page on 127.0.0.1, or write it as one offline file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import numpy as np

from marl_minari.errors import InvalidOptionError
from marl_minari.sources import DatasetSource, open_source
from marl_minari.sources.streaming import StreamingSource
from marl_minari.view.compare import comparison
from marl_minari.view.episode import episode_payload
from marl_minari.view.page import render_page, to_json
from marl_minari.view.server import ViewServer
from marl_minari.view.summary import dataset_summary

SAMPLE_EPISODES: Final = 12
"""Most episodes a page written to a file holds (the best, the worst, the median by team
return, then evenly spaced ones)."""
SAMPLE_BYTES: Final = 3 * 2**20
"""Most bytes of episode data a page written to a file holds (frames included): with the
summary and the scripts the file stays under 5 MB."""


def view(source: Any, *, out: str | os.PathLike[str] | None = None, port: int = 0,
         compare: Any = None, coverage: bool = False) -> ViewServer | Path:
    """Look at a dataset in the browser.

    Args:
        source: what :func:`marl_minari.open_source` opens (a local id, a dataset folder, a
            vault folder, a registry URL and id, a dataset object).
        out: write the page to this ``.html`` file (self-contained, opens offline, holds a
            bounded sample of episodes) instead of serving it.
        port: the server's port on 127.0.0.1 (0: any free one).
        compare: a second dataset to set beside the first (return distributions, identical
            episodes).
        coverage: also measure SACo and OACo for the card (reads the observations).

    Returns:
        The running :class:`ViewServer` (its ``url``; ``close()`` it), or the file written.
    """
    if out is not None:
        return write_page(source, out, compare=compare, coverage=coverage)
    return serve(source, port=port, compare=compare, coverage=coverage)


def serve(source: Any, *, port: int = 0, compare: Any = None,
          coverage: bool = False) -> ViewServer:
    """Serve the page of ``source`` on 127.0.0.1 (see :func:`view`); episodes are read
    when the page opens them."""
    opened = open_source(source)
    try:
        summary = dataset_summary(opened, coverage=coverage)
        compared = _compared(opened, summary, compare, coverage)
        page = render_page(summary, mode="server", comparison=compared)
        return ViewServer(opened, page, port=port, owns_source=opened is not source)
    except BaseException:
        if opened is not source:
            opened.close()
        raise


def write_page(source: Any, out: str | os.PathLike[str], *, compare: Any = None,
               coverage: bool = False, sample_episodes: int = SAMPLE_EPISODES,
               sample_bytes: int = SAMPLE_BYTES) -> Path:
    """Write the page of ``source`` as one self-contained HTML file (see :func:`view`).

    Raises:
        InvalidOptionError: ``out`` is a folder or its folder does not exist.
    """
    path = Path(out).expanduser()
    if path.is_dir() or not path.parent.is_dir():
        raise InvalidOptionError(
            f"cannot write the page to {path}: give a file name in an existing folder "
            "(--out FOLDER/NAME.html)")
    opened = open_source(source)
    try:
        summary = dataset_summary(opened, coverage=coverage)
        compared = _compared(opened, summary, compare, coverage)
        sample = sample_payloads(opened, summary, sample_episodes, sample_bytes)
    finally:
        if opened is not source:
            opened.close()
    note = (f"This file holds {len(sample)} of the {summary['counts']['episodes']} episodes "
            "(the best, the worst, the median by team return, then evenly spaced ones); "
            f"`{_serve_command(opened, summary['name'])}` serves every episode.")
    page = render_page(summary, mode="file", sample=sample, sample_note=note,
                       comparison=compared)
    path.write_text(page, encoding="utf-8")
    return path


def _serve_command(source: DatasetSource, name: str) -> str:
    """The command that serves every episode of ``source``: a dataset read in place is named
    by its URL and read in place again (its id alone names no local dataset)."""
    if isinstance(source, StreamingSource):
        return f"marl-minari view {source.name} --streaming"
    return f"marl-minari view {name}"


def sample_payloads(source: DatasetSource, summary: dict[str, Any], episodes: int,
                    budget: int) -> dict[int, dict[str, Any]]:
    """The episodes a file holds: chosen by :func:`sample_order`, added while their JSON fits
    ``budget`` bytes (the first one always, without its frames if they do not fit)."""
    chosen: dict[int, dict[str, Any]] = {}
    used = 0
    for episode_id in sample_order(summary["episodes"]["id"],
                                   summary["episodes"]["team_return"])[:episodes]:
        payload = episode_payload(source, episode_id)
        size = len(to_json(payload))
        if used + size > budget and chosen:
            continue
        if used + size > budget:
            payload = episode_payload(source, episode_id, max_frames=0)
            size = len(to_json(payload))
        chosen[episode_id] = payload
        used += size
    return chosen


def sample_order(ids: list[int], team_returns: list[float]) -> list[int]:
    """Episode ids, most telling first: the best, the worst and the median by team return,
    then the rest evenly spaced over the dataset (each id once)."""
    if not ids:
        return []
    ranked = [ids[i] for i in np.argsort(np.asarray(team_returns, dtype=np.float64),
                                         kind="stable")]
    order = [ranked[-1], ranked[0], ranked[len(ranked) // 2]]
    for step in (len(ids) // 2, len(ids) // 4, len(ids) // 8, len(ids) // 16, 1):
        order += ids[:: max(step, 1)]
    return list(dict.fromkeys(order))


def _compared(first: DatasetSource, summary: dict[str, Any], other: Any,
              coverage: bool) -> dict[str, Any] | None:
    if other is None:
        return None
    second = open_source(other)
    try:
        return comparison(summary, dataset_summary(second, coverage=coverage), first, second)
    finally:
        if second is not other:
            second.close()
