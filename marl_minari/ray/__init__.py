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

from typing import TYPE_CHECKING

from marl_minari.extras import lazy_exports

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
_HOME_OF = {name: f"{__name__}.{module}" for module, names in _HOMES.items() for name in names}

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


__getattr__ = lazy_exports(__name__, _HOME_OF, "ray")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
