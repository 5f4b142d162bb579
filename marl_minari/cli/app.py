"""The ``marl-minari`` application: every command, registered once, under one error policy."""

from __future__ import annotations

import numpy as np
import typer
from tqdm.auto import tqdm

from marl_minari.cli import datasets, describe, export, registry, tools, vaults, view
from marl_minari.cli.errors import CommandGroup, install_warning_format

FIRST_EXAMPLE = ("  marl-minari collect --episodes 5 --dataset-id mpe2/spread/first-v0\n"
                 "  marl-minari info mpe2/spread/first-v0")
"""The commands ``marl-minari --help`` offers to run first (a test runs them)."""

app = typer.Typer(
    name="marl-minari",
    help="Record, inspect, convert and publish multi-agent Minari datasets.",
    no_args_is_help=True,
    add_completion=False,
    cls=CommandGroup,
    # Help texts are plain text: URLs such as s3://bucket[/prefix] are not rich markup.
    rich_markup_mode=None,
    # "\b" keeps click from re-wrapping the example's lines.
    epilog="First try (records 5 episodes of MPE simple_spread, then describes them):\n\n"
           f"\b\n{FIRST_EXAMPLE}\n\n"
           "Exit codes: 0 success, 1 the work failed, 2 the command line is wrong, "
           "130 interrupted, 141 output pipe closed early. See docs/cli.md.",
)
for commands in (datasets, vaults, registry, describe, tools, export, view):
    commands.register(app)


def main() -> None:
    """Entry point of the ``marl-minari`` command."""
    np.set_printoptions(precision=3, suppress=True)
    tqdm.monitor_interval = 0
    install_warning_format()
    app(prog_name="marl-minari")
