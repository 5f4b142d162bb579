"""The command reference of ``docs/cli.md``, generated from the typer app so it cannot drift.

``python -m marl_minari.cli.reference [FILE]`` rewrites everything after :data:`MARKER` in
``FILE`` (default ``docs/cli.md``) with the help of every command and option; the text above
the marker is written by hand. A test checks that the file is current.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

import typer
from typer.cli import get_docs_for_click

MARKER: Final = ("<!-- Generated from the command's help by `python -m marl_minari.cli.reference`:"
                 " edit the help texts in the code, not the text below. -->")


def reference() -> str:
    """Markdown of every command, argument and option of ``marl-minari``."""
    from marl_minari.cli import app

    command = typer.main.get_command(app)
    context = typer.Context(command, info_name="marl-minari")
    text = get_docs_for_click(obj=command, ctx=context, name="marl-minari", indent=1,
                              title="Command reference")
    return text.rstrip() + "\n"


def updated(document: str) -> str:
    """``document`` with the part after :data:`MARKER` replaced by :func:`reference`."""
    head, found, _ = document.partition(MARKER)
    if not found:
        head = document.rstrip() + "\n\n"
    return f"{head}{MARKER}\n\n{reference()}"


def main(argv: list[str] | None = None) -> None:
    """Rewrite the reference part of a Markdown file (``docs/cli.md`` by default)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "docs/cli.md")
    path.write_text(updated(path.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
