"""Ray Data and RLlib: datasets as Ray datasets, RLlib offline exports and training.

Install with ``pip install "marl-minari[ray]"``. This package is the public surface; its names
are loaded on first use, so ``import marl_minari.ray`` imports neither Ray nor RLlib:

* :mod:`marl_minari.ray.data`: :func:`read_dataset`, :func:`make_datasource`,
  :func:`map_pattern`, :func:`local_rows` (Ray Data reading, streaming over whole episodes).
* :mod:`marl_minari.ray.rllib_export`: :func:`export_rllib` and :func:`load_rllib_export`
  (RLlib's offline schema as Parquet, with a manifest); :mod:`marl_minari.ray.episodes_export`:
  :func:`export_episodes` and :func:`load_episodes_export` (one row per episode, with specs).
* :mod:`marl_minari.ray.rllib_offline`: :func:`multi_agent_offline` and
  :class:`MultiAgentPreLearner` (train an RLlib ``MultiRLModule`` from multi-agent episodes).

See ``docs/ray.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from marl_minari.extras import require

if TYPE_CHECKING:
    from marl_minari.ray.data import (
        episode_steps,
        local_rows,
        make_datasource,
        map_pattern,
        read_dataset,
    )
    from marl_minari.ray.episodes_export import (
        EPISODES_MANIFEST,
        EpisodesExport,
        export_episodes,
        load_episodes_export,
    )
    from marl_minari.ray.rllib_export import (
        DEFAULT_MODULE_ID,
        RLLIB_MANIFEST,
        ModuleExport,
        RLlibExport,
        export_rllib,
        flatten_columns,
        load_rllib_export,
    )
    from marl_minari.ray.rllib_offline import (
        MultiAgentOfflineData,
        MultiAgentPreLearner,
        multi_agent_offline,
        per_agent_module,
    )

_HOMES = {
    "data": ("episode_steps", "local_rows", "make_datasource", "map_pattern", "read_dataset"),
    "rllib_export": ("DEFAULT_MODULE_ID", "RLLIB_MANIFEST", "ModuleExport", "RLlibExport",
                     "export_rllib", "flatten_columns", "load_rllib_export"),
    "episodes_export": ("EPISODES_MANIFEST", "EpisodesExport", "export_episodes",
                        "load_episodes_export"),
    "rllib_offline": ("MultiAgentOfflineData", "MultiAgentPreLearner", "multi_agent_offline",
                      "per_agent_module"),
}
_RAY_EXTRA = frozenset({"ray", "pyarrow", "pandas", "torch"})
"""Top-level packages of the ``ray`` extra that these modules import."""
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}

__all__ = [
    "DEFAULT_MODULE_ID",
    "EPISODES_MANIFEST",
    "EpisodesExport",
    "ModuleExport",
    "MultiAgentOfflineData",
    "MultiAgentPreLearner",
    "RLLIB_MANIFEST",
    "RLlibExport",
    "episode_steps",
    "export_episodes",
    "export_rllib",
    "flatten_columns",
    "load_episodes_export",
    "load_rllib_export",
    "local_rows",
    "make_datasource",
    "map_pattern",
    "multi_agent_offline",
    "per_agent_module",
    "read_dataset",
]


def __getattr__(name: str) -> Any:
    # Loaded on first use: rllib_offline imports RLlib at module level.
    module = _HOME_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'marl_minari.ray' has no attribute {name!r}")
    try:
        home = importlib.import_module(f"marl_minari.ray.{module}")
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in _RAY_EXTRA:
            raise
        require(exc.name or "ray", "ray", f"marl_minari.ray.{name}")
        raise  # require raised unless the package appeared meanwhile
    return getattr(home, name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
