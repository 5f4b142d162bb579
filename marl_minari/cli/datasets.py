"""The dataset commands: ``collect``, ``info``, ``check``, ``recover``, ``combine``."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from marl_minari.cli import checks
from marl_minari.cli.errors import DEBUG_ENV_VAR
from marl_minari.format.ids import dataset_dir, parse_dataset_id

DEFAULT_ENV = "mpe2/simple_spread_v3"


class ApiChoice(StrEnum):
    """PettingZoo APIs an env can be recorded through."""

    parallel = "parallel"
    aec = "aec"


class StateEncodingChoice(StrEnum):
    """How the global state is stored (``layout.STATE_ENCODINGS``)."""

    raw = "raw"
    jpeg = "jpeg"
    gzip = "gzip"
    lzf = "lzf"


def root(
    debug: Annotated[bool, typer.Option(
        "--debug", envvar=DEBUG_ENV_VAR,
        help="Show the full traceback of a failure instead of one 'error:' line "
             f"(or set {DEBUG_ENV_VAR}=1).")] = False,
) -> None:
    """Options of every command."""
    del debug  # read by CommandGroup when a command fails


def collect(
    env_id: Annotated[str, typer.Argument(
        metavar="ENV_ID",
        help="PettingZoo registry id (classic/chess-v6), family id (mpe2/simple_spread_v3) "
             "or module:attr.")] = DEFAULT_ENV,
    episodes: Annotated[int, typer.Option(help="Episodes to record.", min=1)] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the first episode (then +1 each).")] = 0,
    dataset_id: Annotated[str | None, typer.Option(
        callback=checks.dataset_id,
        help="Dataset id, (namespace/)name-vN; default <env>/random-vN with the next free "
             "N. Must not exist yet, unless --append.")] = None,
    append: Annotated[bool, typer.Option(
        "--append", help="Add the episodes to the existing dataset --dataset-id (same env and "
             "spaces) instead of creating a new one.")] = False,
    api: Annotated[ApiChoice | None, typer.Option(
        help="PettingZoo API to record through; default: parallel where the env supports "
             "it, else aec.")] = None,
    env_kwargs: Annotated[dict[str, Any] | None, typer.Option(
        parser=checks.json_object, metavar="JSON",
        help="""Keyword arguments for the env, as a JSON object: '{"max_cycles": 50}'.""")
    ] = None,
    jpeg_encoding: Annotated[bool, typer.Option(
        help="JPEG-encode image observations, as Minari does (lossy).")] = True,
    record_infos: Annotated[bool, typer.Option(
        help="Record the agents' info dicts (action masks are always kept).")] = False,
    record_state: Annotated[bool, typer.Option(
        help="Record the env's global state() at every step when it has one.")] = True,
    state_encoding: Annotated[StateEncodingChoice | None, typer.Option(
        help="How to store the state: jpeg (lossy, image-like states), gzip or lzf "
             "(lossless HDF5 filters), raw. Default: jpeg for image-like states with "
             "--jpeg-encoding, else raw.")] = None,
    background_writing: Annotated[bool, typer.Option(
        help="Write finished episodes to the journal on a background thread while the env "
             "steps (pays for light envs; heavy-Python envs such as pistonball record "
             "faster without). Default: each is written before the next step.")] = False,
    author: Annotated[str | None, typer.Option(
        help="Author of the dataset (Minari metadata), for others to cite it.")] = None,
    author_email: Annotated[str | None, typer.Option(
        help="Contact email of the author (Minari metadata).")] = None,
    code_permalink: Annotated[str | None, typer.Option(
        help="Link to the code that made the dataset (Minari metadata).")] = None,
    description: Annotated[str | None, typer.Option(
        help="What the dataset holds; default '<N> episodes of <env> (<api> api)'.")] = None,
    license: Annotated[str | None, typer.Option(  # noqa: A002 - the metadata key's name
        help="License of the data (an SPDX id such as CC-BY-4.0), stored in the metadata "
             "and shown on dataset cards.")] = None,
) -> None:
    """Record episodes of a PettingZoo env with a random (legal-action) policy."""
    from marl_minari.collectors.collect import collect as run_collect

    metadata: dict[str, Any] = {"author": author, "author_email": author_email,
                                "code_permalink": code_permalink, "description": description}
    if license is not None:
        metadata["extra_metadata"] = {"license": license}
    dataset = run_collect(
        env_id, episodes=episodes, seed=seed, dataset_id=dataset_id,
        api=None if api is None else api.value, jpeg_encoding=jpeg_encoding,
        record_infos=record_infos, record_state=record_state, env_kwargs=env_kwargs or {},
        state_encoding=None if state_encoding is None else state_encoding.value,
        append=append, progress=True, background_writing=background_writing,
        **({} if append else {k: v for k, v in metadata.items() if v is not None}),
    )
    dataset_id = dataset.minari.spec.dataset_id
    verb = "appended to" if append else "recorded into"
    typer.echo(f"{verb} {dataset_id}: now {dataset.total_episodes} episodes, "
               f"{dataset.total_steps} steps")
    typer.echo(f"wrote {dataset_dir(dataset_id)}")
    typer.echo(f"load it with: minari.load_dataset({dataset_id!r})")


def info(dataset: Annotated[str, typer.Argument(
        metavar="DATASET", callback=checks.source,
        help="Dataset id, dataset folder, registry URL or Flashbax vault folder.")]) -> None:
    """Agents, spaces, counts and per-agent return statistics of a dataset."""
    import numpy as np

    from marl_minari.sources import open_source

    with open_source(dataset) as source:
        spec = source.spec
        returns = [chunk.returns() for chunk in source.chunks(observations=False)]
        lengths = source.episode_lengths()
    typer.echo(f"dataset        {source.dataset_id}")
    typer.echo(f"environment    {spec.env.name if spec.env else 'unknown'} ({spec.api})")
    typer.echo(f"episodes       {source.total_episodes}")
    if not len(lengths):
        typer.echo("steps          0  (no episodes)")
    else:
        typer.echo(f"steps          {source.total_steps}  (length mean {lengths.mean():.1f}, "
                   f"min {lengths.min()}, max {lengths.max()})")
    typer.echo(f"state          {spec.state_space}")
    typer.echo("agent            return mean      std      min      max   observation / action")
    per_agent = np.concatenate(returns) if returns else np.zeros((0, spec.num_agents))
    for i, agent in enumerate(spec.possible_agents):
        column = per_agent[:, i]
        spaces_text = (f"{_short(spec.observation_spaces[agent])} / "
                       f"{_short(spec.action_spaces[agent])}")
        figures = (f"{column.mean():>12.3f} {column.std():>8.3f} {column.min():>8.3f} "
                   f"{column.max():>8.3f}" if len(column) else f"{'-':>12} {'-':>8} {'-':>8} "
                   f"{'-':>8}")
        typer.echo(f"{agent:<15} {figures}   {spaces_text}")


def check(dataset: Annotated[str, typer.Argument(
        metavar="DATASET", callback=checks.source,
        help="Dataset id, dataset folder (or a file in it), registry URL or vault folder.")]
          ) -> None:
    """Check every episode of a dataset against docs/format.md (plain Minari datasets too)."""
    from marl_minari.sources import check_dataset

    report = check_dataset(dataset)
    index = ""
    if report.index_remembered:
        index = ", offset index verified and remembered (reads trust it whole)"
    elif report.index_checked:
        index = (", offset index verified, not remembered (the folder cannot be written or "
                 "the index has no file digest: reads compare its entries one by one)")
    typer.echo(f"ok: {report.total_episodes} episodes, {report.total_steps} steps follow the "
               f"{report.kind} layout{index} ({report.path})")


def recover(
    recording: Annotated[str | None, typer.Argument(
        metavar="RECORDING", callback=checks.named,
        help="Recording folder; omit to list recordings holding unsaved episodes.")] = None,
    dataset_id: Annotated[str | None, typer.Argument(
        metavar="DATASET_ID", help="Id of the dataset to create (with --append: to add to).")
    ] = None,
    discard: Annotated[bool, typer.Option(
        "--discard", help="Delete the RECORDING folder and its unsaved episodes.")] = False,
    append: Annotated[bool, typer.Option(
        "--append", help="Add the episodes to the existing DATASET_ID (finishes an "
                         "interrupted add_to_dataset).")] = False,
) -> None:
    """Turn the finished episodes of an interrupted recording into a dataset, or add them to
    one (or discard them)."""
    from marl_minari.storage.recording import discard_recording, list_recordings, recover_recording

    if discard:
        if recording is None:
            raise typer.BadParameter("give the recording folder to discard",
                                     param_hint="RECORDING")
        count = discard_recording(recording)
        typer.echo(f"discarded {recording} ({count} unsaved episodes)")
        return
    if recording is None:
        found = list_recordings()
        if not found:
            typer.echo("no recordings hold unsaved episodes")
        for item in found:
            live = "  (in use by a live process)" if item.in_use else ""
            typer.echo(f"{item.path}  {item.episodes} episodes, {item.steps} steps, "
                       f"{item.env}{live}")
        return
    if dataset_id is None:
        raise typer.BadParameter("give the id of the dataset to create", param_hint="DATASET_ID")
    parse_dataset_id(dataset_id)  # a malformed id fails before the recording is read
    target = recover_recording(recording, dataset_id, append=append)
    typer.echo(f"recovered into {dataset_id} ({target})")


def combine(
    dataset_ids: Annotated[list[str], typer.Argument(
        metavar="DATASET", callback=checks.source,
        help="Multi-agent datasets to combine, in order: ids, dataset folders or "
        "registry URLs followed by an id (http://host/registry/mpe2/spread/random-v0).")],
    dataset_id: Annotated[str, typer.Option(
        callback=checks.dataset_id, help="Id of the combined dataset to create.")],
) -> None:
    """Combine multi-agent datasets of one environment into a new dataset."""
    from marl_minari.derive.combine import combine_datasets

    combined = combine_datasets(dataset_ids, dataset_id, progress=True)
    typer.echo(f"combined {len(dataset_ids)} datasets, {combined.total_episodes} episodes, "
               f"{combined.total_steps} steps into {dataset_id}")


def _short(space: Any) -> str:
    return " ".join(repr(space).split())


def register(app: typer.Typer) -> None:
    """Add the dataset commands (and the options every command takes) to ``app``."""
    app.callback()(root)
    for command in (collect, info, check, recover, combine):
        app.command()(command)
