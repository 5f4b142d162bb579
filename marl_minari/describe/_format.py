"""Short text forms of numbers, summaries and action statistics (reports and cards)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from marl_minari.describe.results import ActionSummary, Summary


def _env_name(metadata: dict[str, Any]) -> str:
    env = metadata.get("env")
    if isinstance(env, dict):
        name = env.get("env_id") or env.get("entry_point") or "unknown"
        api = env.get("api") or metadata.get("api")
        return f"{name} ({api})" if api else str(name)
    return "unknown"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _brief(summary: Summary) -> str:
    if summary.count == 0:
        return "no episodes"
    return (f"mean {_num(summary.mean)}, std {_num(summary.std)}, min {_num(summary.min)}, "
            f"median {_num(summary.median)}, max {_num(summary.max)}")


def _action_text(action: ActionSummary, top: int = 8) -> str:
    if action.kind == "continuous":
        if not action.mean:
            return "no actions"
        return "; ".join(f"{label} [{lo:.3g}, {hi:.3g}] mean {m:.3g} std {s:.3g}"
                         for label, lo, hi, m, s in zip(action.labels, action.minimum,
                                                        action.maximum, action.mean,
                                                        action.std, strict=True))
    if action.kind == "text":
        return f"{action.samples} text actions"
    freq = action.frequencies
    order = np.argsort(-freq, kind="stable")[:top]
    shown = ", ".join(f"{action.labels[i]}: {freq[i]:.1%}" for i in order)
    more = len(freq) - len(order)
    return shown + (f" (+{more} more)" if more > 0 else "")

