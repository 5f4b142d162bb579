"""The ``marl-minari`` command line: one module per group of commands, one error policy
(:mod:`marl_minari.cli.errors`); every command is one call of the public Python API."""

from marl_minari.cli.app import app, main

__all__ = ["app", "main"]
