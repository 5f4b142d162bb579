"""The JSON-safe provenance of a described dataset (env descriptor, spaces, author...)."""

from __future__ import annotations

import json
import math
from typing import Any, Final

import numpy as np
from gymnasium import spaces

from marl_minari.format import layout

_PROVENANCE_KEYS: Final = ("dataset_id", "author", "author_email", "algorithm_name",
                           "code_permalink", "description", "minari_version", "dataset_size",
                           "requirements", "ref_min_score", "ref_max_score", "total_episodes",
                           "total_steps", "data_format")


def _dataset_metadata(raw: dict[str, Any], spec: Any) -> dict[str, Any]:
    """The JSON-safe provenance of a dataset (multi-agent: ``spec`` given)."""
    out: dict[str, Any] = {k: _json_safe(raw[k]) for k in _PROVENANCE_KEYS if k in raw}
    marl = raw.get(layout.METADATA_KEY)
    if spec is not None and isinstance(marl, dict):
        out.update(
            layout_version=marl.get(layout.META_LAYOUT_VERSION),
            library_version=marl.get(layout.META_LIBRARY_VERSION),
            api=spec.api, possible_agents=list(spec.possible_agents),
            env=None if spec.env is None else _json_safe(spec.env.to_dict()),
            reward_aggregation=spec.reward_aggregation,
            observation_spaces={a: _space_text(spec.observation_spaces[a])
                                for a in spec.possible_agents},
            action_spaces={a: _space_text(spec.action_spaces[a]) for a in spec.possible_agents},
            state_space=None if spec.state_space is None else _space_text(spec.state_space),
        )
    else:
        env_spec = raw.get("env_spec")
        if isinstance(env_spec, str):
            try:
                parsed = json.loads(env_spec)
                out["env"] = {"env_id": parsed.get("id"),
                              "entry_point": parsed.get("entry_point"),
                              "kwargs": _json_safe(parsed.get("kwargs") or {})}
            except ValueError:
                out["env"] = None
        else:
            out["env"] = None
    return out


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats, arrays and other objects made JSON-serialisable."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _space_text(space: spaces.Space) -> str:
    return " ".join(repr(space).split())
