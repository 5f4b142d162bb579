"""The ``marl-minari`` command line: a thin layer over the public Python functions."""

from __future__ import annotations

import json
from typing import Annotated, Any

import numpy as np
import typer
from tqdm.auto import tqdm

app = typer.Typer(
    name="marl-minari",
    help="Record, inspect, convert and publish multi-agent Minari datasets.",
    no_args_is_help=True,
    add_completion=False,
)

DEFAULT_ENV = "mpe2/simple_spread_v3"


@app.command()
def collect(
    env_id: Annotated[str, typer.Argument(
        help="PettingZoo registry id (classic/chess-v6), family id (mpe2/simple_spread_v3) "
             "or module:attr.")] = DEFAULT_ENV,
    episodes: Annotated[int, typer.Option(help="Episodes to record.", min=1)] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the first episode (then +1 each).")] = 0,
    dataset_id: Annotated[str | None, typer.Option(
        help="Dataset id; default <env>/random-vN with the next free N.")] = None,
    api: Annotated[str | None, typer.Option(
        help="parallel or aec; default: parallel where the env supports it.")] = None,
    jpeg_encoding: Annotated[bool, typer.Option(help="JPEG-encode image observations.")] = True,
    record_infos: Annotated[bool, typer.Option(help="Record per-agent info dicts.")] = False,
    env_kwargs: Annotated[str, typer.Option(help="JSON keyword arguments for the env.")] = "{}",
    author: Annotated[str | None, typer.Option()] = None,
    author_email: Annotated[str | None, typer.Option()] = None,
    code_permalink: Annotated[str | None, typer.Option()] = None,
    description: Annotated[str | None, typer.Option()] = None,
) -> None:
    """Record episodes of a PettingZoo env with a random (legal-action) policy."""
    import warnings

    from marl_minari.collect import collect as run_collect

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`\w+` is not set")
        dataset = run_collect(
            env_id, episodes=episodes, seed=seed, dataset_id=dataset_id, api=api,
            jpeg_encoding=jpeg_encoding, record_infos=record_infos,
            env_kwargs=json.loads(env_kwargs), author=author, author_email=author_email,
            code_permalink=code_permalink, description=description, progress=True,
        )
    typer.echo(f"recorded {dataset.total_episodes} episodes, {dataset.total_steps} steps "
               f"into {dataset.minari.spec.dataset_id}")
    typer.echo(f"load it with: minari.load_dataset({dataset.minari.spec.dataset_id!r})")


@app.command()
def info(dataset_id: Annotated[str, typer.Argument(help="Dataset id.")]) -> None:
    """Agents, spaces, counts and per-agent return statistics of a dataset."""
    from marl_minari.reader import load_dataset

    dataset = load_dataset(dataset_id)
    spec = dataset.spec
    arrays = dataset.to_arrays()
    returns = arrays.returns()
    lengths = arrays.episode_lengths
    typer.echo(f"dataset        {dataset_id}")
    typer.echo(f"environment    {spec.env.name if spec.env else 'unknown'} ({spec.api})")
    typer.echo(f"episodes       {dataset.total_episodes}")
    typer.echo(f"steps          {dataset.total_steps}  (length mean {lengths.mean():.1f}, "
               f"min {lengths.min()}, max {lengths.max()})")
    typer.echo(f"state          {spec.state_space}")
    typer.echo("agent            return mean      std      min      max   observation / action")
    for i, agent in enumerate(spec.possible_agents):
        column = returns[:, i]
        spaces_text = (f"{_short(spec.observation_spaces[agent])} / "
                       f"{_short(spec.action_spaces[agent])}")
        typer.echo(f"{agent:<15} {column.mean():>12.3f} {column.std():>8.3f} "
                   f"{column.min():>8.3f} {column.max():>8.3f}   {spaces_text}")


@app.command()
def recover(
    recording: Annotated[str | None, typer.Argument(
        help="Recording folder; omit to list recordings holding unsaved episodes.")] = None,
    dataset_id: Annotated[str | None, typer.Argument(help="Id of the dataset to create.")] = None,
) -> None:
    """Turn the finished episodes of an interrupted recording into a dataset."""
    from marl_minari.recording import list_recordings, recover_recording

    if recording is None:
        found = list_recordings()
        if not found:
            typer.echo("no recordings hold unsaved episodes")
        for item in found:
            typer.echo(f"{item.path}  {item.episodes} episodes, {item.steps} steps, {item.env}")
        return
    if dataset_id is None:
        raise typer.BadParameter("give the id of the dataset to create", param_hint="DATASET_ID")
    target = recover_recording(recording, dataset_id)
    typer.echo(f"recovered into {dataset_id} ({target})")


@app.command()
def combine(
    dataset_ids: Annotated[list[str], typer.Argument(
        help="Multi-agent datasets to combine (ids or dataset folders), in order.")],
    dataset_id: Annotated[str, typer.Option(help="Id of the combined dataset to create.")],
) -> None:
    """Combine multi-agent datasets of one environment into a new dataset."""
    from marl_minari.combine import combine_datasets
    from marl_minari.errors import MarlMinariError

    try:
        combined = combine_datasets(dataset_ids, dataset_id, progress=True)
    except MarlMinariError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"combined {len(dataset_ids)} datasets, {combined.total_episodes} episodes, "
               f"{combined.total_steps} steps into {dataset_id}")


def _short(space: Any) -> str:
    return " ".join(repr(space).split())


def _register_optional_commands() -> None:
    """Commands of the subpackages, registered when their modules are present."""
    import importlib

    for module_name in ("marl_minari.adapters.cli", "marl_minari.registry.cli",
                        "marl_minari.describe_cli", "marl_minari.ray_cli"):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


def main() -> None:
    """Entry point of the ``marl-minari`` command."""
    _register_optional_commands()
    np.set_printoptions(precision=3, suppress=True)
    tqdm.monitor_interval = 0
    app()
