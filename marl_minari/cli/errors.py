"""The command line's one error policy: what a failing command prints and its exit code.

Every ``marl-minari`` command fails the same way: one ``error: ...`` line on stderr saying
what is wrong and how to fix it, and an exit code that tells scripts whether the command line
itself was wrong (:data:`EXIT_USAGE`) or the work failed (:data:`EXIT_FAILURE`). ``--debug``
(or ``MARL_MINARI_DEBUG=1``) lets the original exception and its traceback through instead.
Commands raise ordinary exceptions; only this module turns them into messages.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any, Final, NoReturn

import typer
from typer.core import TyperGroup

from marl_minari.errors import InvalidDatasetIdError, InvalidOptionError, MarlMinariError
from marl_minari.extras import EXTRA_OF_PACKAGE

EXIT_OK: Final = 0
EXIT_FAILURE: Final = 1
"""The work failed: missing or damaged data, a refused write, a missing optional package."""
EXIT_USAGE: Final = 2
"""The command line is wrong: unknown option, bad value, malformed id or JSON."""
EXIT_INTERRUPTED: Final = 130
"""Stopped with Ctrl-C (``128 + SIGINT``, as shells report it)."""
EXIT_PIPE_CLOSED: Final = 141
"""The reader of stdout went away (``| head``): ``128 + SIGPIPE``, what a shell reports for a
Unix tool stopped that way; no ``error:`` line, as those tools print none."""
DEBUG_ENV_VAR: Final = "MARL_MINARI_DEBUG"

USAGE_ERRORS: Final = (InvalidDatasetIdError, InvalidOptionError)
"""Library errors that mean the user typed something malformed (exit :data:`EXIT_USAGE`)."""

MINARI_EXTRAS: Final = {"huggingface_hub": "minari[hf]", "google": "minari[gcs]"}
"""Packages of Minari's own extras that its remotes need."""

# Recent typer releases run on their own copy of click: take the exceptions from whichever
# click typer raises, not from the click package.
click: Any = sys.modules[typer.BadParameter.__module__]
_NO_ARGS_IS_HELP: Any = getattr(click, "NoArgsIsHelpError", ())  # click >= 8.2


class CommandFailed(click.ClickException):
    """A failure of the work a command does, reported as one line (exit :data:`EXIT_FAILURE`)."""

    exit_code = EXIT_FAILURE


class FullHelpGroup(TyperGroup):
    """A group whose ``--help`` lists each command with its whole one-line description
    (click cuts it to what fits the terminal, mid-sentence; the formatter wraps it instead)."""

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = [(name, command.get_short_help_str(limit=1_000))
                for name in self.list_commands(ctx)
                if (command := self.get_command(ctx, name)) is not None and not command.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class CommandGroup(FullHelpGroup):
    """The ``marl-minari`` group: every command's exceptions go through :func:`explain`."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except BaseException as exc:
            finish_progress_bars()
            if isinstance(exc, BrokenPipeError):
                raise typer.Exit(EXIT_PIPE_CLOSED) from None
            if (isinstance(exc, (click.ClickException, typer.Exit, typer.Abort))
                    or not isinstance(exc, Exception) or ctx.params.get("debug")):
                raise
            raise explain(exc) from exc

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        options = {"windows_expand_args": windows_expand_args, **extra}
        _shown_warnings.clear()
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **options)
        try:
            try:
                code = super().main(args, prog_name, complete_var, standalone_mode=False,
                                    **options)
            except _NO_ARGS_IS_HELP as exc:
                typer.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
                code = EXIT_USAGE
            except click.ClickException as exc:
                fail(exc)
            except typer.Abort:
                fail(CommandFailed("aborted"))
            if code == EXIT_INTERRUPTED:
                typer.echo("error: interrupted", err=True)
        except BrokenPipeError:  # the help, or the error line, went to a closed pipe
            code = EXIT_PIPE_CLOSED
        sys.exit(code if isinstance(code, int) else EXIT_OK)

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        # `marl-minari --help | head -1`: the help is written while the command line is
        # parsed, before any command runs.
        try:
            return super().make_context(*args, **kwargs)
        except BrokenPipeError:
            raise typer.Exit(EXIT_PIPE_CLOSED) from None


def finish_progress_bars() -> None:
    """Close the progress bars a failed command left open, each ending its line, so that
    the ``error:`` line starts one of its own and no bar is redrawn after it (stderr being
    a file or a CI log as much as a terminal)."""
    from tqdm.std import tqdm

    for bar in list(tqdm._instances):
        bar.close()


def fail(exc: Any) -> NoReturn:
    """Print ``exc`` as one ``error:`` line and exit with its code."""
    message = one_line(exc.format_message())
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        message += f" (see: {exc.ctx.command_path} --help)"
    typer.echo(f"error: {message}", err=True)
    sys.exit(exc.exit_code)


def explain(exc: Exception) -> Any:
    """The one-line report of an exception a command raised, with its exit code."""
    if isinstance(exc, USAGE_ERRORS):
        return click.UsageError(one_line(_with_notes(exc)))
    if isinstance(exc, MarlMinariError):
        return CommandFailed(one_line(_with_notes(exc)))
    if isinstance(exc, ImportError):
        return CommandFailed(_missing_package(exc))
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return CommandFailed(f"{exc.strerror}{where}" if exc.strerror else one_line(str(exc)))
    return CommandFailed(
        f"unexpected {type(exc).__name__}: {one_line(str(exc))} (rerun with --debug or "
        f"{DEBUG_ENV_VAR}=1 to see the traceback, and please report it)")


def _with_notes(exc: Exception) -> str:
    """The message and the notes added to it on the way up (what a failure left behind)."""
    return " ".join([str(exc), *getattr(exc, "__notes__", ())])


def one_line(text: str) -> str:
    """``text`` with its whitespace and line breaks collapsed."""
    return " ".join(text.split())


_shown_warnings: set[str] = set()
"""The ``warning:`` lines this command has printed (:func:`show_warning` prints each once)."""


def show_warning(message: Warning | str, category: type[Warning], filename: str,
                 lineno: int, file: Any = None, line: str | None = None) -> None:
    """Print warnings as ``warning: ...`` lines (a drop-in ``warnings.showwarning``), each
    text once per command: reaching the same data twice (``check`` opens a dataset, then
    reads it) must not repeat what is wrong with it."""
    del category, filename, lineno, file, line
    text = f"warning: {one_line(str(message))}"
    if text in _shown_warnings:
        return
    _shown_warnings.add(text)
    typer.echo(text, err=True)


def install_warning_format() -> None:
    """Show this process's warnings as one ``warning:`` line each (the command line's format)."""
    warnings.showwarning = show_warning


def _missing_package(exc: ImportError) -> str:
    name = (exc.name or "").split(".")[0]
    if not name:
        return f"an optional package is missing: {one_line(str(exc))}"
    extra = EXTRA_OF_PACKAGE.get(name)
    install = f"marl-minari[{extra}]" if extra else MINARI_EXTRAS.get(name, name)
    return f"this needs the package {name!r}, which is not installed: pip install '{install}'"
