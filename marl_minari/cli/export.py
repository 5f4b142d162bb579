"""``marl-minari export rllib``: write a dataset in RLlib's offline Parquet schema.

The command needs the ``ray`` extra (``pip install "marl-minari[ray]"``); ray is imported only
when it runs, so registering the command costs nothing and works without ray.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer

from marl_minari.cli import checks
from marl_minari.cli.errors import FullHelpGroup
from marl_minari.extras import require


def export_rllib_command(
    dataset: Annotated[str, typer.Argument(
        metavar="DATASET", callback=checks.source,
        help="Dataset id, dataset folder, or a plain Minari dataset's folder.")],
    out: Annotated[str, typer.Argument(
        metavar="OUT_DIR", callback=checks.named,
        help="Output folder (one sub-folder per module).")],
    modules: Annotated[str, typer.Option(
        help="'pooled': every agent into module default_policy; 'per-agent': one module per "
             "agent; or a JSON object {agent: module}.")] = "pooled",
    obs_key: Annotated[str | None, typer.Option(
        help="For Dict observations: export this key only (e.g. 'observation'); by default "
             "Dict observations are flattened.")] = None,
    keep_obs_dtype: Annotated[bool, typer.Option(
        help="Keep integer observations as recorded (default: cast to float32 for RLlib's "
             "default encoders).")] = False,
    include_infos: Annotated[bool, typer.Option(
        help="Write the agents' recorded infos to the 'infos' column.")] = False,
    read_tasks: Annotated[int | None, typer.Option(
        help="Parallel read tasks (default: Ray's choice).", min=1)] = None,
    num_cpus: Annotated[int | None, typer.Option(
        help="CPUs for the local Ray instance (default: all).", min=1)] = None,
    address: Annotated[str | None, typer.Option(
        help="Ray cluster to connect to (default: start a local instance).")] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace a previous export in OUT.")] = False,
) -> None:
    """Export agent-steps as Parquet for RLlib's offline API (AlgorithmConfig.offline_data)."""
    require("ray", "ray", "export rllib")
    import ray

    from marl_minari.ray import episode_steps, export_rllib
    from marl_minari.sources import open_source

    sources = [open_source(dataset)]
    mapping: dict[str, str] | None
    if modules == "pooled":
        mapping = None
    elif modules == "per-agent":
        mapping = {a: a for s in sources for a in s.spec.possible_agents}
    else:
        try:
            mapping = {str(k): str(v) for k, v in json.loads(modules).items()}
        except (json.JSONDecodeError, AttributeError) as exc:
            raise typer.BadParameter(f"not 'pooled', 'per-agent' or a JSON object: {exc}",
                                     param_hint="--modules") from None
    steps = sum(int(episode_steps(s).sum()) for s in sources)
    episodes = sum(s.total_episodes for s in sources)
    typer.echo(f"exporting {episodes} episodes, {steps} steps from "
               f"{', '.join(s.name for s in sources)}")
    if not ray.is_initialized():
        # "local": a new instance of our own, never a cluster an address file left behind
        # names (ray.init(address=None) joins it, a dead one included).
        ray.init(address=address or "local", num_cpus=num_cpus, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    from ray.data import DataContext

    DataContext.get_current().enable_progress_bars = True
    result = export_rllib(sources, out, policy_mapping_fn=mapping, obs_key=obs_key,
                          obs_dtype=None if keep_obs_dtype else "float32",
                          include_infos=include_infos, override_num_blocks=read_tasks,
                          overwrite=overwrite)
    for module in result.modules.values():
        typer.echo(f"module {module.module_id}: {module.rows} agent-steps of "
                   f"{', '.join(module.agents)} in {module.path}")
        typer.echo(f"  observation {module.observation_space}, action {module.action_space}")
    typer.echo("train with: config.environment(observation_space=..., action_space=...)"
               ".offline_data(input_=<module folder>)  (see docs/ray.md)")


def register(app: typer.Typer) -> None:
    """Add the ``export`` group with ``export rllib`` to a typer app."""
    export_app = typer.Typer(name="export", help="Export datasets for other frameworks.",
                             no_args_is_help=True, cls=FullHelpGroup)
    export_app.command("rllib")(export_rllib_command)
    app.add_typer(export_app, name="export")
