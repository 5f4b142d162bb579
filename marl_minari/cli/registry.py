"""Command-line functions of the registry: ``publish``, ``remote list`` and ``download``.

Plain functions with typer-annotated parameters; :func:`register` adds them to the
``marl-minari`` app (``marl-minari publish``, ``marl-minari remote list``,
``marl-minari download``). Transfers show tqdm progress bars on a terminal. Failures are
reported by the command line's error policy (:mod:`marl_minari.cli.errors`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from marl_minari.cli.errors import FullHelpGroup

RemoteOption = Annotated[str | None, typer.Option(
    "--remote", "-r",
    help="Registry: file:///dir, a directory path, s3://bucket[/prefix], "
         "http://host/path or https://host/path (read-only). "
         "Default: $MARL_MINARI_REGISTRY or ~/.minari/registry.")]


def publish(
    dataset_id: Annotated[str, typer.Argument(
        metavar="DATASET_ID", help="Local dataset id, (namespace/)name-vN.")],
    remote: RemoteOption = None,
    allow_single_agent: Annotated[bool, typer.Option(
        "--allow-single-agent", help="Also publish plain single-agent Minari datasets.")] = False,
) -> None:
    """Validate a local dataset and publish it (with its combined datasets) to a registry."""
    from marl_minari.registry import publish as run_publish

    result = run_publish(dataset_id, remote, allow_single_agent=allow_single_agent,
                         progress=True)
    for current, outcome in result.outcomes.items():
        note = "  (already published with the same files)" if outcome == "unchanged" else ""
        typer.echo(f"{outcome:<10} {current}{note}")
    typer.echo(f"{dataset_id}: {len(result.manifest.files)} files, "
               f"{result.manifest.total_size} bytes on {result.remote}")


def remote_list(
    remote: RemoteOption = None,
    prefix: Annotated[str | None, typer.Option(help="Only ids starting with this.")] = None,
) -> None:
    """List the datasets published on a registry."""
    from marl_minari.registry import list_datasets, resolve_remote
    from marl_minari.registry.credentials import scrub

    found = list_datasets(remote, prefix=prefix)
    if not found:
        typer.echo(f"no datasets on {scrub(resolve_remote(remote))}")
        return
    typer.echo(f"{'dataset':<48} {'episodes':>9} {'steps':>10} {'size':>10}  published")
    for item in found:
        size = "" if item.total_size is None else _human(item.total_size)
        typer.echo(f"{item.dataset_id:<48} {item.metadata.get('total_episodes', ''):>9} "
                   f"{item.metadata.get('total_steps', ''):>10} {size:>10}  "
                   f"{item.published or ''}")


def download(
    dataset_id: Annotated[str, typer.Argument(
        metavar="DATASET_ID",
        help="Published dataset id, or the dataset's URL (its registry followed by the id, "
             "as open_source takes it; then no --remote).")],
    remote: RemoteOption = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing local dataset with the published copy.")] = False,
    strict: Annotated[bool, typer.Option(
        "--strict", help="Refuse a dataset naming environment code outside the trusted "
                         "packages (default: warn).")] = False,
) -> None:
    """Download a dataset, verify every file against its manifest, install it atomically."""
    from marl_minari.registry import download as run_download

    if remote is None and "://" in dataset_id:  # a dataset's URL: which registry, which id
        from marl_minari.sources.remote import split_remote_source

        remote, dataset_id = split_remote_source(dataset_id)
    path = run_download(dataset_id, remote, force=force, progress=True, strict=strict)
    typer.echo(f"downloaded {dataset_id} to {path}")
    typer.echo(f"load it with: minari.load_dataset({dataset_id!r})")


def register(app: typer.Typer) -> None:
    """Add ``publish``, ``download`` and the ``remote list`` group to a typer app."""
    app.command("publish")(publish)
    app.command("download")(download)
    remote_app = typer.Typer(name="remote", help="Dataset registries (remotes).",
                             no_args_is_help=True, cls=FullHelpGroup)
    remote_app.command("list")(remote_list)
    app.add_typer(remote_app, name="remote")


def _human(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"
