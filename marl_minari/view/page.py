"""The page: one HTML document with every script, style and datum inlined (no network)."""

from __future__ import annotations

import html
import json
from importlib import resources
from typing import Any, Final, Literal

from marl_minari.describe.results import json_document

STATIC_FILES: Final = ("uPlot.min.css", "viewer.css", "uPlot.iife.min.js", "viewer.js")
"""What the page inlines, in order: uPlot (MIT, vendored; see ``static/uPlot.LICENSE``) and
the page's own style and script."""

PageMode = Literal["server", "file"]
"""``server``: episodes are asked from the local server when opened; ``file``: the page
holds a bounded sample of episodes and says so."""


def render_page(summary: dict[str, Any], *, mode: PageMode,
                sample: dict[int, dict[str, Any]] | None = None, sample_note: str = "",
                comparison: dict[str, Any] | None = None) -> str:
    """The page's HTML.

    Args:
        summary: the dataset at a glance (:func:`~marl_minari.view.summary.dataset_summary`).
        mode: where episodes come from (:data:`PageMode`).
        sample: in a file, the episodes it holds (id -> payload).
        sample_note: in a file, what the sample is (shown on the page).
        comparison: the second dataset's comparison, if any.
    """
    data = {"mode": mode, "summary": summary, "sample": {str(k): v for k, v in
                                                          (sample or {}).items()},
            "sample_note": sample_note, "comparison": comparison}
    styles = "\n".join(_static(name) for name in STATIC_FILES if name.endswith(".css"))
    scripts = "\n".join(f"<script>{_static(name)}</script>"
                        for name in STATIC_FILES if name.endswith(".js"))
    title = html.escape(f"{summary['name']} - marl-minari view")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        "<link rel=\"icon\" href=\"data:,\">"
        f"<title>{title}</title><style>{styles}</style></head><body>"
        "<main id=\"app\"><p class=\"loading\">Loading...</p></main>"
        f"<script id=\"mm-data\" type=\"application/json\">{script_json(data)}</script>"
        f"{scripts}</body></html>\n")


def to_json(value: Any) -> str:
    """``value`` as strict, compact JSON (NaN and infinities become ``null``: the describe
    reports' one rule, :func:`~marl_minari.describe.results.json_document`)."""
    try:
        return json.dumps(value, allow_nan=False, separators=(",", ":"))
    except ValueError:
        return json_document(value, separators=(",", ":"))


def script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</`` closes it early)."""
    return to_json(value).replace("</", "<\\/").replace("<!--", "\\u003c!--")


def _static(name: str) -> str:
    return (resources.files("marl_minari.view") / "static" / name).read_text(encoding="utf-8")
