"""How the reading commands (``describe``, ``subset``, ``compare``, ``view``) open what they
are named: the one ``--streaming`` option, its help, and what it does."""

from __future__ import annotations

from typing import Annotated, Any, Final

import typer

STREAMING_HELP: Final = (
    "Read a registry URL (an http(s)://, s3:// or file:// registry followed by the dataset "
    "id) in place: only the manifest, metadata.json, the offset index and the byte ranges "
    "read are fetched, each verified against the manifest. Without it a URL is downloaded "
    "once into the datasets root. Local datasets are read in place either way.")

Streaming = Annotated[bool, typer.Option("--streaming", help=STREAMING_HELP)]
"""The ``--streaming`` option, as every reading command declares it (default ``False``)."""


def opened(reference: str, streaming: bool) -> Any:
    """What a command hands the library for ``reference``: the name itself, or with
    ``--streaming`` the source :func:`marl_minari.open_source` opens in place (a registry URL
    read by verified ranges; anything local opened as usual)."""
    if not streaming:
        return reference
    from marl_minari.sources import open_source

    return open_source(reference, streaming=True)
