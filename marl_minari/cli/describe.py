"""The ``marl-minari describe`` command (registered by :func:`register`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from marl_minari.cli.reading import Streaming, opened


def check_output_file(path: Path | None, option: str, example: str = "figure.png") -> None:
    """Refuse, before any work, an output option naming a folder or a file in a folder that
    does not exist (the report would be printed, then the write would fail; a mistyped
    folder is not created), as ``view --out`` does.

    Args:
        path: the option's value (``None``: not given).
        option: the option, as the error names it.
        example: the file name the error suggests inside a folder that was given.

    Raises:
        InvalidOptionError: ``path`` is a folder, its folder does not exist, or it lies
            below a file.
    """
    from marl_minari.describe.checks import output_file

    if path is not None:
        output_file(path, option, example, existing_folder=True)


def register(app: typer.Typer) -> None:
    """Add the ``describe`` command to ``app``."""
    app.command("describe")(describe_command)


def describe_command(
    source: Annotated[str, typer.Argument(
        metavar="DATASET",
        help="Dataset id (multi-agent or plain Minari), dataset folder, registry URL or "
             "Flashbax vault folder (rel_dir/vault_name/vault_uid).")],
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE",
        help="Write a PNG of the statistics (all datasets side by side with --compare).")] = None,
    card: Annotated[Path | None, typer.Option(
        "--card", metavar="FILE",
        help="Write a dataset card (Markdown) with a statistics.png next to it (or linking "
             "the --plot file when it shows only this dataset); <dataset folder>/README.md is "
             "published with the dataset.")] = None,
    compare: Annotated[list[str] | None, typer.Option(
        "--compare", metavar="OTHER",
        help="Another dataset or vault to describe and plot alongside (repeatable).")] = None,
    license: Annotated[str | None, typer.Option(
        "--license", metavar="LICENSE",
        help="License of the dataset card's front matter (e.g. cc-by-4.0; default: the "
             "dataset metadata's license, else unknown).")] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the statistics as JSON (a list with --compare).")] = False,
    coverage: Annotated[bool, typer.Option(
        "--coverage", help="Also measure SACo and OACo, OG-MARL's coverage (reads the "
                           "observations too).")] = False,
    coverage_plot: Annotated[Path | None, typer.Option(
        "--coverage-plot", metavar="FILE",
        help="Write a PNG of how often the distinct (state, action) and (observation, action) "
             "pairs occur (count frequencies, log axes; implies --coverage; all datasets with "
             "--compare).")] = None,
    chunk_steps: Annotated[int | None, typer.Option(
        help="Steps read at a time (memory is proportional to it; default: as many as fit "
             "32 MiB, at most 65,536).", min=1)] = None,
    statistics: Annotated[bool, typer.Option(
        "--statistics/--no-statistics",
        help="--no-statistics: only what the metadata and the offset index say (agents, "
             "spaces, environment, size, episode and step counts, episode lengths); no "
             "episode is read, so with --streaming only a few small files move. Not with "
             "--plot, --coverage or --coverage-plot.")] = True,
    streaming: Streaming = False,
) -> None:
    """Statistics of a dataset or vault: episodes, returns, actions, coverage.

    Episodes, returns, actions and inactive agents; with --coverage its state-action
    coverage (--coverage-plot: how often pairs repeat); with --no-statistics only what the
    metadata says, without reading any episode."""
    import warnings

    from marl_minari.describe import (
        card_plot_path,
        dataset_card,
        describe,
        plot_coverage,
        plot_descriptions,
    )
    from marl_minari.describe.results import json_document
    from marl_minari.errors import InvalidOptionError

    for path, option, example in ((plot, "--plot", "figure.png"), (card, "--card", "README.md"),
                                  (coverage_plot, "--coverage-plot", "pairs.png")):
        check_output_file(path, option, example)
    if not statistics:
        needing = [option for option, given in (("--plot", plot is not None),
                                                ("--coverage", coverage),
                                                ("--coverage-plot", coverage_plot is not None))
                   if given]
        if needing:
            verb = "needs" if len(needing) == 1 else "need"
            raise InvalidOptionError(f"{', '.join(needing)} {verb} the episodes read: drop "
                                     f"--no-statistics, or drop {', '.join(needing)}")
    sources = [opened(item, streaming) for item in (source, *(compare or []))]
    coverage = coverage or coverage_plot is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        # The library's one default applies unless the option is given.
        options: dict[str, Any] = {} if chunk_steps is None else {"chunk_steps": chunk_steps}
        descriptions = [describe(item, statistics=statistics, coverage=coverage,
                                 progress=not as_json, **options) for item in sources]
    if as_json:
        payload = [d.to_dict() for d in descriptions]
        typer.echo(json_document(payload[0] if len(payload) == 1 else payload, indent=2))
    else:
        typer.echo("\n\n".join(d.to_text() for d in descriptions))
    written: list[tuple[str, Path]] = []
    # the card's plot shows its one dataset: when --plot draws exactly that, the card links
    # the --plot file instead of drawing the same figure again
    # a figure where matplotlib is installed; none for a metadata-only card (nothing to plot)
    card_plot: bool | Path | None = None if statistics else False
    if plot is not None:
        if card is not None and len(descriptions) == 1:
            card_plot = plot
        else:
            written.append(("plot", plot_descriptions(descriptions, plot)))
    if card is not None:
        image = card_plot_path(card, card_plot)
        written.append(("dataset card", dataset_card(descriptions[0], card,
                                                     plot=image or False, license=license)))
        if image is not None:
            written.append(("plot", image))
    if coverage_plot is not None:
        written.append(("coverage plot", plot_coverage(descriptions, coverage_plot)))
    for what, path in written:
        # with --json, stdout stays one JSON document
        typer.echo(f"{what} written to {path}", err=as_json)
