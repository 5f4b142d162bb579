"""Short text forms of numbers and environment names (reports and cards)."""

from __future__ import annotations

from typing import Any


def env_name(metadata: dict[str, Any]) -> str:
    """The environment a described dataset names, with its API (``unknown`` without one)."""
    env = metadata.get("env")
    if isinstance(env, dict):
        name = env.get("env_id") or env.get("entry_point") or "unknown"
        api = env.get("api") or metadata.get("api")
        return f"{name} ({api})" if api else str(name)
    return "unknown"


def num(value: float | None) -> str:
    """A statistic with three decimals (``-`` when there is none)."""
    return "-" if value is None else f"{value:.3f}"
