"""The ``marl-minari view`` command (registered by :func:`register`): a dataset's page in the
browser, served on 127.0.0.1 or written as one offline file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from marl_minari.cli import checks
from marl_minari.cli.reading import Streaming, opened


def register(app: typer.Typer) -> None:
    """Add the ``view`` command to ``app``."""
    app.command("view")(view_command)


def view_command(
    source: Annotated[str, typer.Argument(
        metavar="SOURCE", callback=checks.source,
        help="Dataset id, dataset folder, file:// or registry URL, or vault folder.")],
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="FILE.html",
        help="Write the page as one self-contained file (opens offline; holds a sample of "
             "episodes) instead of serving it.")] = None,
    port: Annotated[int, typer.Option(
        "--port", min=0, max=65535,
        help="Port on 127.0.0.1 to serve the page on (0: any free one).")] = 0,
    compare: Annotated[str | None, typer.Option(
        "--compare", metavar="OTHER", callback=checks.source,
        help="A second dataset to set beside the first: return distributions and identical "
             "episodes.")] = None,
    coverage: Annotated[bool, typer.Option(
        "--coverage", help="Also measure SACo and OACo for the card (reads the "
                           "observations).")] = False,
    streaming: Streaming = False,
) -> None:
    """See a dataset in the browser: its card, distributions, episode table and timelines.

    The page shows the dataset's card, return and step distributions, the episode table, and
    each episode on the step axis (rewards, actions, presence, masks, state, frames, turns).
    It is served on 127.0.0.1 until Ctrl-C, or written as one file with --out."""
    from marl_minari.view import serve, write_page

    source = opened(source, streaming)
    compare = None if compare is None else opened(compare, streaming)
    if out is not None:
        written = write_page(source, out, compare=compare, coverage=coverage)
        typer.echo(f"wrote {written}")
        return
    server = serve(source, port=port, compare=compare, coverage=coverage)
    typer.echo(f"serving {server.source.dataset_id} at {server.url} (Ctrl-C to stop)")
    try:
        server.wait()
    except KeyboardInterrupt:  # Ctrl-C is how serving ends, as for python -m http.server
        pass
    finally:
        server.close()
