"""Names and alignment rules of the multi-agent layout (``docs/format.md``).

This is the only module that spells the HDF5 names and metadata keys of the layout; the writer
and the reader both import them from here.

Row alignment inside one episode of ``T`` steps (``N`` agents in ``possible_agents`` order):

* ``observations/<agent>/...``: ``T + 1`` rows; row ``k`` is what reset (``k = 0``) or step
  ``k - 1`` handed out.
* ``actions/<agent>/...``: ``T`` rows; row ``t`` is the action taken from observation ``t``.
* ``rewards``, ``terminations``, ``truncations``: ``T`` rows, episode level (team reward
  aggregate, "the episode ended here").
* ``infos/marl/*``: ``T + 1`` rows aligned with observations; per-agent columns in
  ``possible_agents`` order. Row ``k`` holds what came back together with observation ``k``.
"""

from __future__ import annotations

from typing import Final

LAYOUT_VERSION: Final = 1
"""Bumped whenever a reader of the previous version could misread new data."""

METADATA_KEY: Final = "marl_minari"
"""Top-level key of ``metadata.json`` holding the multi-agent metadata dict."""

INFOS_GROUP: Final = "marl"
"""Group under ``infos/`` holding the exact per-agent data."""

# Per-agent columns under infos/marl, shape (T + 1, N).
AGENT_REWARDS: Final = "rewards"
AGENT_TERMINATIONS: Final = "terminations"
AGENT_TRUNCATIONS: Final = "truncations"
ACTIVE: Final = "active"
ACTED: Final = "acted"

STATE: Final = "state"
"""Global state (``env.state()``), T + 1 rows, when the environment provides one."""

STATE_PATH: Final = f"infos/{INFOS_GROUP}/{STATE}"
"""Where an episode's global state is stored, inside its group."""

AGENT_INFOS: Final = "agent_infos"
"""``infos/marl/agent_infos/<agent>/...``: the env's own per-agent info dicts, T + 1 rows."""

ACTION_MASK_KEY: Final = "action_mask"
"""Info/observation key that PettingZoo envs use for legal-action masks."""

EXTRAS: Final = "extras"
"""``infos/marl/extras/...``: api-specific columns (T + 1 rows), documented per api."""

AGENT_SELECTION: Final = "agent_selection"
"""AEC only, under extras: index into possible_agents of the agent to act at row k (-1: none)."""
AGENT_SELECTION_PATH: Final = f"infos/{INFOS_GROUP}/{EXTRAS}/{AGENT_SELECTION}"
"""How an episode shows its API on disk: turn-based (AEC) episodes, and only they, have it."""

OBSERVED: Final = "observed"
"""AEC only, under extras, only when recorded with ``observe_every_agent=False``: ``(T + 1, N)``
bool, the agent was observed at row k (False: its latest observation is repeated)."""

MARL_COLUMN_DTYPES: Final = {
    f"infos/{INFOS_GROUP}/{AGENT_REWARDS}": "float64",
    f"infos/{INFOS_GROUP}/{AGENT_TERMINATIONS}": "bool",
    f"infos/{INFOS_GROUP}/{AGENT_TRUNCATIONS}": "bool",
    f"infos/{INFOS_GROUP}/{ACTIVE}": "bool",
    f"infos/{INFOS_GROUP}/{ACTED}": "bool",
    f"infos/{INFOS_GROUP}/{EXTRAS}/{AGENT_SELECTION}": "int64",
    f"infos/{INFOS_GROUP}/{EXTRAS}/{OBSERVED}": "bool",
}
"""The dtype the layout gives each of its own columns under ``infos/marl``: what readers
return whatever dtype another writer stored (by the writers' casting rule)."""

# Keys of the multi-agent metadata dict (metadata.json -> "marl_minari").
META_LAYOUT_VERSION: Final = "layout_version"
META_API: Final = "api"
META_POSSIBLE_AGENTS: Final = "possible_agents"
META_ENV: Final = "env"
META_REWARD_AGGREGATION: Final = "reward_aggregation"
META_STATE_SPACE: Final = "state_space"
META_RECORD_INFOS: Final = "record_infos"
META_STATE_ENCODING: Final = "state_encoding"
META_LIBRARY_VERSION: Final = "library_version"

AGENTS_ATTRIBUTE: Final = "marl_minari_possible_agents"
"""Root attribute of ``main_data.hdf5``: JSON list of ``possible_agents`` (the column order)."""

INDEX_FILE_NAME: Final = "marl_minari_index.npz"
"""Optional sidecar in ``data/``: byte offsets of contiguous datasets, for bulk reads."""

MAIN_FILE_NAME: Final = "main_data.hdf5"
METADATA_FILE_NAME: Final = "metadata.json"

DIGESTS_FILE_NAME: Final = ".marl_minari_digests.json"
"""Optional hidden sidecar in the dataset folder: digests of its files, keyed by file identity
(see :mod:`marl_minari.format.digests`). Never published; safe to delete."""

REWARD_AGGREGATIONS: Final = ("sum", "mean", "max", "min")

GENERATION_KEY: Final = "marl_minari_generation"
"""Root attribute of ``main_data.hdf5`` and top-level ``metadata.json`` key written by an append:
while they differ, groups past ``total_episodes`` are an uncommitted append's leftovers."""

STATE_ENCODINGS: Final = ("raw", "jpeg", "gzip", "lzf")
"""How ``infos/marl/state`` is stored: as is, JPEG frames (lossy, image-like state spaces only),
or with HDF5's built-in gzip/lzf filter (lossless; every h5py reads them without plugins)."""

JOURNALS_KEY: Final = "marl_minari_journals"
"""Top-level ``metadata.json`` key: ``{journal id: records committed}`` for every recording
journal whose episodes the dataset holds, so recovery never stores them twice."""
