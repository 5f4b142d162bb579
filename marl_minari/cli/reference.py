"""The command reference of ``docs/cli.md``, generated from the typer app so it cannot drift.

``python -m marl_minari.cli.reference [FILE]`` rewrites everything after :data:`MARKER` in
``FILE`` (default ``docs/cli.md``) with the help of every command and option; the text above
the marker is written by hand and kept as it is. A file without the marker is refused rather
than rewritten, so a wrong path or an emptied file never loses the hand-written part, and the
command prints only to stderr, so redirecting its output cannot end up in the file. A test
checks that the file is current.
"""

from __future__ import annotations

import os
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


def hand_written_part(document: str) -> str:
    """The text above :data:`MARKER`; ``ValueError`` when the marker is missing or repeated
    (the generated part would otherwise be appended again, or replace the wrong text)."""
    if document.count(MARKER) != 1:
        raise ValueError(f"expected the marker line once, found it {document.count(MARKER)} "
                         f"times; restore the file (git checkout docs/cli.md) and rerun")
    return document.partition(MARKER)[0]


def updated(document: str) -> str:
    """``document`` with the part after :data:`MARKER` replaced by :func:`reference`."""
    return f"{hand_written_part(document)}{MARKER}\n\n{reference()}"


def main(argv: list[str] | None = None) -> None:
    """Rewrite the reference part of a Markdown file (``docs/cli.md`` by default)."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0] if args else "docs/cli.md")
    try:
        text = updated(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        sys.exit(f"error: {path}: {error}")
    staged = path.with_name(f".{path.name}.tmp")
    staged.write_text(text, encoding="utf-8")
    os.replace(staged, path)
    print(f"rewrote the reference in {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
