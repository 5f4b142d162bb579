"""The ``marl-minari subset`` and ``marl-minari compare`` commands (registered by
:func:`register`): dataset tools over :func:`marl_minari.subsample` and
:func:`marl_minari.describe.compare`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import typer

from marl_minari.cli import checks
from marl_minari.cli.reading import Streaming, opened
from marl_minari.errors import EmptyDatasetError, InvalidOptionError


def register(app: typer.Typer) -> None:
    """Add the ``subset`` and ``compare`` commands to ``app``."""
    app.command("subset")(subset_command)
    app.command("compare")(compare_command)


def subset_command(
    source: Annotated[str, typer.Argument(
        metavar="DATASET", callback=checks.source,
        help="Dataset id, dataset folder, dataset URL or vault folder.")],
    new_dataset_id: Annotated[str, typer.Argument(
        metavar="NEW_DATASET_ID", callback=checks.dataset_id,
        help="Id of the subset to write.")],
    max_steps: Annotated[int | None, typer.Option(
        "--max-steps", metavar="N", min=1,
        help="Whole episodes at random up to N steps (never over); with --bin-edges or "
             "--like, a cap.")] = None,
    bin_edges: Annotated[str | None, typer.Option(
        "--bin-edges", metavar="E0,E1,...",
        help="Return histogram bins (increasing); with --weights, the subset's returns "
             "follow that histogram.")] = None,
    weights: Annotated[str | None, typer.Option(
        "--weights", metavar="W0,W1,...", help="Relative weight of each bin.")] = None,
    like: Annotated[str | None, typer.Option(
        "--like", metavar="OTHER", callback=checks.source,
        help="Episodes whose returns match OTHER's, one to one within --tolerance.")] = None,
    like_id: Annotated[str | None, typer.Option(
        "--like-id", metavar="ID", callback=checks.dataset_id,
        help="With --like: write OTHER's matched episodes too, as the dataset ID (two subsets "
             "of as many episodes, returns matched pair by pair).")] = None,
    tolerance: Annotated[float, typer.Option(
        "--tolerance", metavar="T", min=0.0,
        help="For --like: largest return difference.")] = 0.01,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Seed of the random choices.")
                    ] = 0,
    description: Annotated[str | None, typer.Option(
        "--description", help="The subset's description (Minari metadata).")] = None,
    author: Annotated[str | None, typer.Option(
        "--author", help="The subset's author (Minari metadata).")] = None,
    streaming: Streaming = False,
) -> None:
    """Write a subset of whole episodes as a new dataset, its choice recorded.

    Episodes are chosen uniformly, by return profile, or to match another dataset's returns
    (with --like-id, the matched episodes of the other dataset are written too); the new
    dataset's metadata records how they were chosen."""
    from marl_minari.derive.subsets import subsample
    from marl_minari.sources import open_source

    if (bin_edges is None) != (weights is None):
        raise InvalidOptionError("--bin-edges and --weights go together: give both")
    profile = None
    if bin_edges is not None and weights is not None:
        profile = (_numbers(bin_edges, "--bin-edges"), _numbers(weights, "--weights"))
    metadata: dict[str, Any] = {k: v for k, v in (("description", description),
                                                  ("author", author)) if v is not None}
    if like_id is not None and like is None:
        raise InvalidOptionError("--like-id names the subset of the --like dataset: give "
                                 "--like too")
    # The rules are checked before any dataset is opened, so that a wrong command line is
    # reported as one (exit 2) whatever the data holds.
    if max_steps is None and profile is None and like is None:
        raise InvalidOptionError("give a rule: --max-steps N, --bin-edges with --weights, or "
                                 "--like OTHER")
    if profile is not None and like is not None:
        raise InvalidOptionError("--bin-edges/--weights and --like are two rules: give one")
    with contextlib.ExitStack() as stack:
        chosen_from = stack.enter_context(open_source(source, streaming=streaming))
        other = None if like is None else stack.enter_context(
            open_source(like, streaming=streaming))
        options: dict[str, Any] = dict(
            max_steps=max_steps, profile=profile, seed=seed, tolerance=tolerance,
            progress=True, like=other, **metadata)
        # No rule chooses anything from an empty dataset: say that, not "loosen the rule".
        _require_episodes(chosen_from, other)
        if like_id is None:
            written = [subsample(chosen_from, new_dataset_id, **options)]
        else:
            written = list(subsample(chosen_from, new_dataset_id, like_dataset_id=like_id,
                                     **options))
    for subset in written:
        record = subset.metadata["subset"]
        typer.echo(f"{subset.metadata['dataset_id']}: {subset.total_episodes:,} episodes, "
                   f"{subset.total_steps:,} steps ({record['rule']}, seed {seed}) from "
                   f"{record['source']}")


def compare_command(
    sources: Annotated[list[str], typer.Argument(
        metavar="DATASET", callback=checks.source,
        help="Two or more dataset ids, folders, URLs or vault folders; the first is the "
             "reference.")],
    plot: Annotated[Path | None, typer.Option(
        "--plot", metavar="FILE", help="Write a PNG of the comparison.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")
                       ] = False,
    coverage: Annotated[bool, typer.Option(
        "--coverage/--no-coverage", help="Measure SACo and OACo (reads the observations).")
                        ] = True,
    chunk_steps: Annotated[int | None, typer.Option(
        help="Steps read at a time (default: as many as fit 32 MiB, at most 65,536).",
        min=1)] = None,
    streaming: Streaming = False,
) -> None:
    """Compare datasets with the first: returns, episode lengths, coverage and spaces.

    Team returns are compared with a two-sample Kolmogorov-Smirnov test and a QQ plot; for
    zero-sum games (team return always 0), each agent's returns instead."""
    import warnings

    from marl_minari.cli.describe import check_output_file
    from marl_minari.describe import compare, plot_comparison
    from marl_minari.describe.results import json_document

    check_output_file(plot, "--plot")
    options: dict[str, Any] = {} if chunk_steps is None else {"chunk_steps": chunk_steps}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        result = compare([opened(item, streaming) for item in sources], coverage=coverage,
                         **options)
    if as_json:
        typer.echo(json_document(result.to_dict(), indent=2))
    else:
        typer.echo(result.to_text())
    if plot is not None:
        typer.echo(f"plot written to {plot_comparison(result, plot)}", err=as_json)


def _require_episodes(source: Any, like: Any) -> None:
    """Raise :class:`EmptyDatasetError` if ``source`` or the ``--like`` dataset holds no
    episodes."""
    if not source.total_episodes:
        raise EmptyDatasetError(
            f"dataset {_shown(source)} holds no episodes, so there are none to choose a "
            "subset from: record episodes into it first (marl-minari collect ENV_ID "
            "--dataset-id ID --append), or take the subset of a dataset that holds some")
    if like is not None and not like.total_episodes:
        raise EmptyDatasetError(
            f"the --like dataset {_shown(like)} holds no episodes whose returns could be "
            "matched: give --like a dataset that holds episodes")


def _shown(source: Any) -> str:
    """The dataset's id, and where it was read when that is not the id."""
    where = "" if source.name == source.dataset_id else f" ({source.name})"
    return f"{source.dataset_id!r}{where}"


def _numbers(text: str, option: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InvalidOptionError(
            f"{option} takes numbers separated by commas, got {text!r}") from None
