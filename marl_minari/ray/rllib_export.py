"""RLlib offline data from marl-minari datasets as Parquet.

:func:`export_rllib` reads agent-steps through :func:`marl_minari.ray.data.read_dataset` and
writes the columns RLlib's ``OfflinePreLearner`` reads, one folder per RLlib module;
:func:`load_rllib_export` reads the manifest back (episode rows for RLlib's multi-agent
training are :mod:`marl_minari.ray.episodes_export`). See ``docs/ray.md``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.errors import (
    CorruptedDataError,
    IncompatibleSourcesError,
    InvalidOptionError,
    MarlMinariError,
    UnsupportedSpaceError,
)
from marl_minari.format.spaces import leaf_spaces
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.ray.data import SourceLike, open_sources, read_dataset, to_block
from marl_minari.ray.export_files import clear_out, parquet_rows, read_manifest
from marl_minari.rows import patterns as P
from marl_minari.sources import DatasetSource
from marl_minari.version import __version__

DEFAULT_MODULE_ID = "default_policy"
"""RLlib's default module id (``ray.rllib.core.DEFAULT_MODULE_ID``): all agents pooled."""

RLLIB_MANIFEST = "marl_minari_rllib.json"
"""File written next to the module folders by :func:`export_rllib`."""

@dataclass(frozen=True)
class ModuleExport:
    """One RLlib module's offline data, as written by :func:`export_rllib`.

    Attributes:
        module_id: the module (policy) id.
        path: folder of its Parquet files: ``offline_data(input_=str(path))``.
        agents: agents mapped to it.
        observation_space: space of the ``obs`` column (flattened for Dict/Tuple spaces).
        action_space: space of the ``actions`` column.
        rows: agent-steps written.
    """

    module_id: str
    path: Path
    agents: tuple[str, ...]
    observation_space: spaces.Space
    action_space: spaces.Space
    rows: int

    def configure(self, config: Any) -> Any:
        """Set an RLlib ``AlgorithmConfig``'s spaces and offline input to this module's data.

        Returns the config (``config.environment(...).offline_data(input_=...)``).
        """
        return config.environment(observation_space=self.observation_space,
                                  action_space=self.action_space).offline_data(
            input_=str(self.path))


@dataclass(frozen=True)
class RLlibExport:
    """Result of :func:`export_rllib`: the output folder and one entry per module."""

    path: Path
    modules: dict[str, ModuleExport]


def _mapping(policy_mapping_fn: Callable[..., str] | Mapping[str, str] | None,
             agent: str, default: str | None = DEFAULT_MODULE_ID) -> str:
    if policy_mapping_fn is None:
        return agent if default is None else default
    if isinstance(policy_mapping_fn, Mapping):
        if agent not in policy_mapping_fn:
            raise InvalidOptionError(f"policy_mapping_fn maps no module for agent {agent!r}; "
                                     "add it, or pass agents=[...] to export fewer agents")
        return str(policy_mapping_fn[agent])
    return str(policy_mapping_fn(agent, None))


def plan_modules(specs: Sequence[MultiAgentSpec],
                 policy_mapping_fn: Callable[..., str] | Mapping[str, str] | None,
                 agents: Sequence[str] | None = None, *,
                 default_module: str | None = DEFAULT_MODULE_ID) -> dict[str, dict[str, Any]]:
    """``{module_id: {"agents": [...], "obs": space, "act": space}}`` for the agents of
    the datasets of ``specs`` mapped by ``policy_mapping_fn`` (a callable as RLlib calls it,
    or a dict).

    Without a mapping every agent goes to ``default_module`` (``None``: one module per agent,
    named after it).

    Raises:
        IncompatibleSourcesError: agents of one module have different spaces.
        UnsupportedSpaceError: an action space RLlib's offline path cannot take.
    """
    modules: dict[str, dict[str, Any]] = {}
    for spec in specs:
        for agent in P.select_agents(spec, agents):
            obs_space, act_space = spec.observation_spaces[agent], spec.action_spaces[agent]
            if isinstance(act_space, (spaces.Dict, spaces.Tuple, spaces.Text)):
                raise UnsupportedSpaceError(f"action space of {agent!r} is {act_space}; RLlib's "
                                            "offline columns take Box/Discrete/MultiDiscrete")
            module_id = _mapping(policy_mapping_fn, agent, default_module)
            entry = modules.setdefault(module_id, {"agents": [], "obs": obs_space,
                                                   "act": act_space})
            if (entry["obs"], entry["act"]) != (obs_space, act_space):
                raise IncompatibleSourcesError(
                    f"module {module_id!r} gets agent {agent!r} with spaces {obs_space} / "
                    f"{act_space}, but earlier agents have {entry['obs']} / {entry['act']}; "
                    "map agents of different spaces to different modules (policy_mapping_fn)")
            if agent not in entry["agents"]:
                entry["agents"].append(agent)
    return modules


def export_space(space: spaces.Space, obs_key: str | None, what: str,
                 obs_dtype: str | None = None) -> spaces.Space:
    """The space of the exported ``obs`` column (key picked, flattened, cast)."""
    exported = _exported_space(space, obs_key, what)
    if (obs_dtype is not None and isinstance(exported, spaces.Box)
            and not np.issubdtype(exported.dtype, np.floating)):
        return spaces.Box(exported.low.astype(obs_dtype), exported.high.astype(obs_dtype),
                          dtype=np.dtype(obs_dtype).type)
    return exported


def _exported_space(space: spaces.Space, obs_key: str | None, what: str) -> spaces.Space:
    if obs_key is not None:
        if not isinstance(space, spaces.Dict) or obs_key not in space.spaces:
            raise UnsupportedSpaceError(f"{what} {space} has no key {obs_key!r}")
        space = space.spaces[obs_key]
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        for _, leaf in leaf_spaces(space):
            if isinstance(leaf, spaces.Text):
                raise UnsupportedSpaceError(f"{what} {space} holds Text, which RLlib cannot "
                                            "take; pick a key with obs_key")
        return spaces.flatten_space(space)
    if isinstance(space, spaces.Text):
        raise UnsupportedSpaceError(f"{what} is Text, which RLlib cannot take")
    return space


def flatten_columns(batch: Mapping[str, np.ndarray], prefix: str,
                    space: spaces.Space) -> np.ndarray:
    """Vectorised ``gymnasium.spaces.flatten`` of the ``prefix...`` columns of ``space``.

    Row ``i`` equals ``flatten(space, sample_i)`` exactly (same values and dtype).
    """
    parts = []
    for path, leaf in leaf_spaces(space):
        value = np.asarray(batch[P.column(prefix, path.replace("/", "."))])
        rows = len(value)
        if isinstance(leaf, spaces.Discrete):
            onehot = np.zeros((rows, int(leaf.n)), dtype=leaf.dtype)
            onehot[np.arange(rows), value - int(leaf.start)] = 1
            parts.append(onehot)
        elif isinstance(leaf, spaces.MultiDiscrete):
            nvec = leaf.nvec.reshape(-1)
            offsets = np.concatenate([[0], np.cumsum(nvec)[:-1]])
            onehot = np.zeros((rows, int(nvec.sum())), dtype=leaf.dtype)
            hot = offsets[None, :] + (value.reshape(rows, -1) - leaf.start.reshape(1, -1))
            onehot[np.arange(rows)[:, None], hot] = 1
            parts.append(onehot)
        else:
            parts.append(np.asarray(value, dtype=leaf.dtype).reshape(rows, -1))
    return np.concatenate(parts, axis=1)


def observation_column(batch: Mapping[str, np.ndarray], prefix: str, obs_space: spaces.Space,
                       obs_key: str | None, obs_dtype: str | None) -> np.ndarray:
    """The ``prefix...`` observation columns of ``obs_space`` as RLlib takes them: one array
    in :func:`export_space`'s space (key picked, Dict/Tuple flattened, integer Box cast)."""
    if obs_key is not None:
        prefix = P.column(prefix, obs_key)
        if not isinstance(obs_space, spaces.Dict) or obs_key not in obs_space.spaces:
            raise UnsupportedSpaceError(f"observation space {obs_space} has no key {obs_key!r}")
        space = obs_space.spaces[obs_key]
    else:
        space = obs_space
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        value = flatten_columns(batch, prefix, space)
    else:
        value = np.asarray(batch[prefix])
    exported = export_space(obs_space, obs_key, "observation space", obs_dtype)
    if isinstance(exported, spaces.Box) and value.dtype != exported.dtype:
        value = value.astype(exported.dtype)
    return value


def _rllib_batch(batch: dict[str, np.ndarray], modules: Mapping[str, str],
                 obs_space: spaces.Space, obs_key: str | None, obs_dtype: str | None,
                 include_infos: bool) -> Any:
    """Agent-step rows -> RLlib's offline columns (``ray.rllib.offline.offline_prelearner``)."""
    rows = len(batch[P.T])
    agent_ids = np.asarray(batch[P.AGENT_ID], dtype=object)
    datasets = np.asarray(batch[P.DATASET], dtype=object)
    episodes = np.asarray(batch[P.EPISODE_ID], dtype=np.int64)
    # Labels are made once per run of rows of one trajectory (dataset, episode, agent).
    change = np.ones(rows, dtype=bool)
    if rows:
        change[1:] = ((episodes[1:] != episodes[:-1]) | (agent_ids[1:] != agent_ids[:-1])
                      | (datasets[1:] != datasets[:-1]))
    starts = np.flatnonzero(change).tolist()
    run_lengths = np.diff(np.append(starts, rows)).astype(np.int64)
    eps_id = np.repeat(np.asarray([f"{datasets[i]}:{episodes[i]}:{agent_ids[i]}"
                                   for i in starts], dtype=object), run_lengths)
    module_of = np.repeat(np.asarray([modules[agent_ids[i]] for i in starts], dtype=object),
                          run_lengths)

    terminated = np.asarray(batch[P.TERMINATED], dtype=bool)
    ends = np.asarray(batch[P.AGENT_T]) == np.asarray(batch[P.TRAJ_LEN]) - 1
    out = {
        "eps_id": eps_id,
        "agent_id": agent_ids,
        "module_id": module_of,
        "agent_index": np.asarray(batch[P.AGENT_INDEX], dtype=np.int64),
        "obs": observation_column(batch, P.OBS, obs_space, obs_key, obs_dtype),
        "new_obs": observation_column(batch, P.NEXT_OBS, obs_space, obs_key, obs_dtype),
        "actions": np.asarray(batch[P.ACTION]),
        "rewards": np.asarray(batch[P.REWARD], dtype=np.float64),
        "terminateds": terminated,
        "truncateds": np.asarray(batch[P.TRUNCATED], dtype=bool) | (ends & ~terminated),
        "t": np.asarray(batch[P.AGENT_T], dtype=np.int64),
    }
    info_columns = [k for k in batch if k.startswith(P.NEXT_INFO + ".")]
    if include_infos and info_columns:
        infos = np.empty(rows, dtype=object)
        for i in range(rows):
            infos[i] = {k[len(P.NEXT_INFO) + 1:]: batch[k][i] for k in info_columns}
        out["infos"] = infos
    return to_block(out)


def export_rllib(sources: SourceLike | Sequence[SourceLike],
                 out: str | os.PathLike[str], *,
                 policy_mapping_fn: Callable[..., str] | Mapping[str, str] | None = None,
                 agents: Sequence[str] | None = None, obs_key: str | None = None,
                 obs_dtype: str | None = "float32", include_infos: bool = False,
                 override_num_blocks: int | None = None,
                 overwrite: bool = False) -> RLlibExport:
    """Write agent-steps in RLlib's offline schema as Parquet, one folder per module.

    One row per agent-step (where the agent acted), columns as RLlib's ``OfflinePreLearner``
    reads them: ``eps_id`` (``"<dataset>:<episode>:<agent>"``: one agent's trajectory, as
    RLlib's per-agent ``SingleAgentEpisode``), ``agent_id``, ``module_id``, ``agent_index``,
    ``obs``, ``new_obs``, ``actions``, ``rewards``, ``terminateds``, ``truncateds`` (also true
    at the last row of a trajectory that was cut), ``t`` (the agent's step), and ``infos``
    (the agent's recorded infos after the step, with ``include_infos``). Written with
    ``Dataset.write_parquet(out, partition_cols=["module_id"])``: module ``m`` lives in
    ``out/module_id=m/``, a valid ``offline_data(input_=...)`` for one single-agent module.
    A manifest (:data:`RLLIB_MANIFEST`) lists modules, agents, spaces and row counts.

    Args:
        sources: as for :func:`read_dataset`.
        out: output folder (must not exist or be empty, unless ``overwrite`` and it holds a
            previous export).
        policy_mapping_fn: ``fn(agent_id, episode) -> module_id`` as RLlib calls it (episode
            is ``None`` here), or a dict; default: every agent to :data:`DEFAULT_MODULE_ID`
            (pooled training). Agents of one module must share their spaces.
        agents: agents to export (default all).
        obs_key: for Dict observations, the key to export (e.g. ``"observation"``); by default
            Dict/Tuple observations are flattened with ``gymnasium.spaces.flatten``.
        obs_dtype: dtype that integer ``Box`` observations (after flattening: boards, masks,
            one-hot encodings) are cast to, since RLlib's default encoders take float input;
            ``None`` keeps the recorded dtype. Float observations are never cast.
        include_infos: write the ``infos`` column from recorded per-agent infos.
        override_num_blocks: read tasks (see :func:`read_dataset`).
        overwrite: replace a previous export in ``out``.

    Raises:
        IncompatibleSourcesError: agents of one module have different spaces.
        UnsupportedSpaceError: a space RLlib's offline path cannot take (Text, Dict actions).
        DatasetExistsError: ``out`` is not empty (a ``FileExistsError``).
    """
    opened = open_sources(sources)
    out_path = clear_out(out, RLLIB_MANIFEST, overwrite)
    modules = plan_modules([s.spec for s in opened], policy_mapping_fn, agents)
    # Group agents by their spaces: one read (one row schema) per group.
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for entry in modules.values():
        group = groups.setdefault((repr(entry["obs"]), repr(entry["act"])),
                                  {"obs": entry["obs"], "agents": []})
        group["agents"].extend(a for a in entry["agents"] if a not in group["agents"])
    mapping = {a: m for m, e in modules.items() for a in e["agents"]}
    export_spaces = {m: export_space(e["obs"], obs_key, f"observation space of module {m!r}",
                                      obs_dtype) for m, e in modules.items()}
    for group in groups.values():
        dataset = read_dataset(opened, "agent_steps", agents=group["agents"],
                               override_num_blocks=override_num_blocks)
        # Ray's annotation of the function is its batch union type; a numpy dict is what
        # batch_format="numpy" passes, hence the ignore.
        dataset = dataset.map_batches(
            _rllib_batch, batch_size=None, batch_format="numpy",  # type: ignore[arg-type]
            fn_kwargs={"modules": mapping, "obs_space": group["obs"], "obs_key": obs_key,
                       "obs_dtype": obs_dtype, "include_infos": include_infos})
        dataset.write_parquet(str(out_path), partition_cols=["module_id"])

    exports: dict[str, ModuleExport] = {}
    for module_id, entry in modules.items():
        folder = out_path / f"module_id={module_id}"
        exports[module_id] = ModuleExport(
            module_id=module_id, path=folder, agents=tuple(entry["agents"]),
            observation_space=export_spaces[module_id],
            action_space=entry["act"], rows=parquet_rows(folder))
    _write_manifest(out_path, opened, exports)
    return RLlibExport(out_path, exports)


def _write_manifest(out_path: Path, sources: Sequence[DatasetSource],
                    exports: Mapping[str, ModuleExport]) -> None:
    from minari.serialization import serialize_space

    manifest = {
        "format": "rllib-offline-parquet",
        "library_version": __version__,
        "sources": [s.name for s in sources],
        "modules": {
            m: {"path": e.path.name, "agents": list(e.agents), "rows": e.rows,
                "observation_space": serialize_space(e.observation_space),
                "action_space": serialize_space(e.action_space)}
            for m, e in exports.items()},
    }
    out_path.mkdir(parents=True, exist_ok=True)
    (out_path / RLLIB_MANIFEST).write_text(json.dumps(manifest, indent=2))


def load_rllib_export(path: str | os.PathLike[str]) -> RLlibExport:
    """Read back what :func:`export_rllib` wrote (from its manifest).

    Every module folder the manifest names must lie inside ``path``: a manifest pointing
    elsewhere (``../other``, ``/etc``) is refused, so RLlib never reads files outside the export.

    Raises:
        DatasetNotFoundError: the folder has no :data:`RLLIB_MANIFEST`.
        CorruptedDataError: the manifest is malformed or names a folder outside ``path``.
    """
    out_path = Path(path).resolve()
    manifest = read_manifest(out_path, RLLIB_MANIFEST, "RLlib export", "export_rllib")
    where = out_path / RLLIB_MANIFEST
    if manifest.get("format") != "rllib-offline-parquet":
        raise CorruptedDataError(f"{where}: 'format' is {manifest.get('format')!r}, not "
                                 "'rllib-offline-parquet'; export again with export_rllib")
    modules = manifest.get("modules")
    if not isinstance(modules, dict):
        raise CorruptedDataError(f"{where}: 'modules' must map module ids to their entries; "
                                 "export again with export_rllib")
    return RLlibExport(out_path, {str(module_id): _module_export(out_path, where, module_id, entry)
                                  for module_id, entry in modules.items()})


def _module_export(out_path: Path, where: Path, module_id: str, entry: Any) -> ModuleExport:
    from marl_minari.format.space_json import space_from_json

    key = f"modules.{module_id}"
    if not isinstance(entry, dict):
        raise CorruptedDataError(f"{where}: {key!r} is not an object; export again")
    folder = entry.get("path")
    if not isinstance(folder, str) or not folder or Path(folder).is_absolute():
        raise CorruptedDataError(f"{where}: {key}.path must be a folder name inside the export, "
                                 f"got {folder!r}; export again")
    module_path = (out_path / folder).resolve()
    if module_path == out_path or not module_path.is_relative_to(out_path):
        raise CorruptedDataError(f"{where}: {key}.path {folder!r} leaves the export folder "
                                 f"{out_path}; refusing to read it (export again)")
    agents, rows = entry.get("agents"), entry.get("rows")
    if not isinstance(agents, list) or not all(isinstance(a, str) for a in agents):
        raise CorruptedDataError(f"{where}: {key}.agents must be a list of agent names, got "
                                 f"{agents!r}; export again")
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise CorruptedDataError(f"{where}: {key}.rows must be a count, got {rows!r}; "
                                 "export again")
    found_spaces = []
    for name in ("observation_space", "action_space"):
        try:
            found_spaces.append(space_from_json(entry[name]))
        except (MarlMinariError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptedDataError(f"{where}: {key}.{name} is missing or not a space "
                                     f"({type(exc).__name__}: {exc}); export again") from exc
    return ModuleExport(module_id=str(module_id), path=module_path, agents=tuple(agents),
                        observation_space=found_spaces[0], action_space=found_spaces[1],
                        rows=rows)
