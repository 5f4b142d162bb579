"""RLlib multi-agent offline training from marl-minari datasets (RLlib's new API stack).

RLlib's offline API reads rows with Ray Data and turns each batch into training data in
``OfflinePreLearner.__call__`` (inside ``Dataset.map_batches``); its multi-agent path raises
``NotImplementedError``. Here:

* :class:`MultiAgentPreLearner` turns batches of episode rows
  (``read_dataset(..., rows="episodes")``) into RLlib ``MultiAgentEpisode``\\ s, one per
  recorded episode, and runs the learner connector pipeline on them as the base class does.
* :class:`MultiAgentOfflineData` makes ``OfflineData`` read our datasets instead of files.
* :func:`multi_agent_offline` fills an ``AlgorithmConfig`` (``BCConfig()``, ``MARWILConfig()``)
  from the datasets' spec: ``multi_agent_offline(BCConfig(), "ns/name-v0").build_algo()``;
  given the folder of :func:`marl_minari.ray.rllib_export.export_episodes`, RLlib reads its
  Parquet files itself and the specs come from its manifest.

Each agent's ``SingleAgentEpisode`` holds exactly its transitions of
:func:`marl_minari.rows.patterns.agent_step_rows` (turn-based datasets included: an agent's step
goes from its turn to its next turn); the episode is replayed step by step with
``MultiAgentEpisode.add_env_step`` as RLlib's env runners build it online. Importing this
module imports ray; :mod:`marl_minari.ray.data` re-exports its names lazily. See
``docs/ray.md`` (*Multi-agent offline training*).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.offline.offline_data import OfflineData
from ray.rllib.offline.offline_prelearner import OfflinePreLearner
from ray.rllib.utils import flatten_dict

from marl_minari.errors import InvalidOptionError, RLlibOfflineError
from marl_minari.format import layout
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.ray.data import SourceLike, make_datasource, open_sources
from marl_minari.ray.episodes_export import EPISODES_MANIFEST, EpisodesExport, load_episodes_export
from marl_minari.ray.rllib_export import (
    RLLIB_MANIFEST,
    export_space,
    observation_column,
    plan_modules,
)
from marl_minari.rows import patterns as P
from marl_minari.sources import DatasetSource, FolderSource, open_source

OPTIONS_KEY = "marl_minari"
"""Key of ``config.input_config`` holding this module's options (``obs_key``, ``obs_dtype``,
``specs``: ``{dataset name: MultiAgentSpec JSON}`` of Parquet episode exports); RLlib's new
API stack does not read ``input_config``."""

SUPPORTED_ALGORITHMS = ("BC", "MARWIL")
"""RLlib algorithms whose losses honour ``loss_mask``, which padded module batches need."""


# --------------------------------------------------------------------------- agent -> module


def per_agent_module(agent_id: str, episode: Any = None, **kwargs: Any) -> str:
    """Default ``policy_mapping_fn``: one module per agent, named after it."""
    return agent_id


class ModuleMapping:
    """A dict ``{agent: module}`` as a picklable ``policy_mapping_fn``."""

    def __init__(self, mapping: Mapping[str, str]) -> None:
        self.mapping = dict(mapping)

    def __call__(self, agent_id: str, episode: Any = None, **kwargs: Any) -> str:
        return self.mapping[agent_id]


# --------------------------------------------------------------------------- episodes


@functools.lru_cache(maxsize=64)
def _spec_of(data_path: str) -> MultiAgentSpec:
    return open_source(data_path).spec


def _episode_steps(agent_rows: P.Batch, aec: bool, selection: np.ndarray | None,
                   position: int, length: int, agent: str) -> tuple[np.ndarray, int]:
    """Env steps at which one agent's transitions of one episode end, and the last one.

    Parallel: the step after the action. Turn-based: the agent's next turn (its dead turn
    ends its last transition; the episode's end if it has none).
    """
    t = np.asarray(agent_rows[P.T])
    if not aec:
        ends = t + 1
        gaps = np.flatnonzero(ends[:-1] != t[1:])
        if gaps.size:
            raise RLlibOfflineError(
                f"agent {agent!r} was present at step {int(ends[gaps[0]])} of episode "
                f"{int(agent_rows[P.EPISODE_ID][0])} but did not act, and acted later: an "
                "RLlib agent acts at every observation it gets. Train from these data with "
                "export_rllib (per-agent rows) instead of multi_agent_offline.")
        return ends, int(ends[-1])
    assert selection is not None
    later = np.flatnonzero(selection[t[-1] + 1:length] == position)
    last = int(t[-1] + 1 + later[0]) if later.size else length
    return np.append(t[1:], last), last


def episodes_from_rows(rows: Mapping[str, np.ndarray], spec: MultiAgentSpec, *,
                       mapping_fn: Callable[..., str], obs_key: str | None = None,
                       obs_dtype: str | None = "float32") -> list[MultiAgentEpisode]:
    """RLlib ``MultiAgentEpisode``\\ s of the episode rows of one dataset.

    Every agent that acted gets a ``SingleAgentEpisode`` (module from ``mapping_fn``) with its
    observations (Dict/Tuple ones flattened, as :func:`marl_minari.ray.rllib_export.export_space`
    gives them), actions, rewards and done flags of
    :func:`marl_minari.rows.patterns.agent_step_rows`, and ``{"action_mask": ...}`` infos where
    the dataset has legal-action masks. Agents that never act get no episode; an agent that
    dies has no step after its death.

    Raises:
        RLlibOfflineError: an agent observed a step without acting and acted later (a
            parallel dataset), which a ``MultiAgentEpisode`` cannot hold.
    """
    arrays = P.episode_arrays(rows, spec)
    selection = arrays.extras.get(layout.AGENT_SELECTION)
    aec = selection is not None
    names = rows[P.DATASET]
    per_agent = []
    for agent in spec.possible_agents:
        agent_rows = P.agent_step_rows(arrays, spec, agents=[agent])
        if not len(agent_rows[P.T]):
            continue
        space = spec.observation_spaces[agent]
        per_agent.append((agent, agent_rows,
                          observation_column(agent_rows, P.OBS, space, obs_key, obs_dtype),
                          observation_column(agent_rows, P.NEXT_OBS, space, obs_key,
                                             obs_dtype)))
    episodes = []
    for position, (episode_id, length) in enumerate(zip(
            arrays.episode_ids.tolist(), arrays.episode_lengths.tolist(), strict=True)):
        episode_selection = None
        if aec:
            start = int(arrays.obs_starts[position])
            episode_selection = np.asarray(selection).reshape(-1)[start:start + length + 1]
        # RLlib's MultiAgentDicts are keyed by Hashable agent ids.
        events: list[dict[str, dict[Any, Any]]] = [
            {"obs": {}, "act": {}, "rew": {}, "info": {}, "term": {}, "trunc": {}}
            for _ in range(length + 1)]
        flags: dict[str, tuple[bool, bool]] = {}
        for agent, agent_rows, obs, next_obs in per_agent:
            keep = np.flatnonzero(agent_rows[P.EPISODE_ID] == episode_id)
            if not keep.size:
                continue
            mine = {k: v[keep] for k, v in agent_rows.items()}
            ends, last = _episode_steps(mine, aec, episode_selection,
                                        spec.possible_agents.index(agent), length, agent)
            masks = mine.get(P.LEGAL_MASK)
            first = int(mine[P.T][0])
            events[first]["obs"][agent] = obs[keep[0]]
            if masks is not None:
                events[first]["info"][agent] = {"action_mask": masks[0]}
            for j, (t, end) in enumerate(zip(mine[P.T].tolist(), ends.tolist(), strict=True)):
                events[t + 1]["act"][agent] = mine[P.ACTION][j]
                events[end]["obs"][agent] = next_obs[keep[j]]
                events[end]["rew"][agent] = float(mine[P.REWARD][j])
                if masks is not None:
                    events[end]["info"][agent] = {"action_mask": mine[P.NEXT_LEGAL_MASK][j]}
            flags[agent] = (bool(mine[P.TERMINATED][-1]), bool(mine[P.TRUNCATED][-1]))
            events[last]["term"][agent], events[last]["trunc"][agent] = flags[agent]
        episode = MultiAgentEpisode(id_=f"{names[position]}:{episode_id}",
                                    agent_to_module_mapping_fn=mapping_fn)
        episode.add_env_reset(observations=events[0]["obs"], infos=events[0]["info"])
        for event in events[1:]:
            if episode.is_done:  # every agent is done: later steps hold no data
                break
            episode.add_env_step(event["obs"], event["act"], event["rew"], event["info"],
                                 terminateds=event["term"], truncateds=event["trunc"])
        # add_env_step marks every agent terminated once all are done, truncated ones too:
        # each keeps the flags it was recorded with (GAE bootstraps truncated trajectories).
        for agent, (terminated, truncated) in flags.items():
            single = episode.agent_episodes[agent]
            single.is_terminated, single.is_truncated = terminated, truncated
        end = int(arrays.step_starts[position]) + length - 1
        episode.is_terminated = bool(arrays.episode_terminations[end])
        episode.is_truncated = bool(arrays.episode_truncations[end])
        episodes.append(episode)
    return episodes


def pad_modules(batch: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Give every module's columns the same row count, padded rows masked out of the loss.

    ``OfflineData`` hands the pre-learner's output to Ray Data as one table (flattened
    ``module/column`` names), whose columns must be equally long, while modules get
    different numbers of agent-steps (agents that die, turns). Each module is padded with
    copies of its first row, and ``loss_mask`` (``Columns.LOSS_MASK``, added where missing)
    is false on them, so a loss that honours it (BC, MARWIL) trains on real rows only.
    """
    import torch
    import tree

    def rows_of(module_batch: Mapping[str, Any]) -> int:
        return len(tree.flatten(module_batch)[0])

    target = max((rows_of(b) for b in batch.values()), default=0)
    out: dict[str, dict[str, Any]] = {}
    for module_id, module_batch in batch.items():
        count = rows_of(module_batch)
        mask = module_batch.get(Columns.LOSS_MASK)
        mask = (torch.ones(count, dtype=torch.bool) if mask is None
                else torch.as_tensor(mask, dtype=torch.bool))
        padded = dict(module_batch)
        padded[Columns.LOSS_MASK] = mask
        if count < target:
            index = np.concatenate([np.arange(count), np.zeros(target - count, dtype=np.int64)])

            def take(value: Any, index: np.ndarray = index) -> Any:
                if isinstance(value, torch.Tensor):
                    return value[torch.as_tensor(index)]
                return np.asarray(value)[index]

            padded = tree.map_structure(take, padded)
            padded[Columns.LOSS_MASK][count:] = False
        out[module_id] = padded
    return out


class MultiAgentPreLearner(OfflinePreLearner):
    """``OfflinePreLearner`` for multi-agent episode rows of marl-minari datasets.

    Input: batches of ``read_dataset(..., rows="episodes")`` or of the Parquet files of
    :func:`marl_minari.ray.rllib_export.export_episodes` (one row per recorded episode, the
    ``dataset`` column naming the source; its spec comes from the options' ``specs``, else
    from the dataset itself). Output, as the base class: the learner
    connector pipeline's ``MultiAgentBatch`` columns, flattened (``module/column``), with
    every module padded to one row count (:func:`pad_modules`). Set up by
    :func:`multi_agent_offline`; options come from ``config.input_config["marl_minari"]``.
    """

    def __init__(self, *, config: Any, spaces: Any = None,
                 module_state: dict[str, Any] | None = None, **kwargs: Any) -> None:
        super().__init__(config=config, spaces=spaces, module_state=module_state, **kwargs)
        options = (config.input_config or {}).get(OPTIONS_KEY, {})
        self._obs_key: str | None = options.get("obs_key")
        self._obs_dtype: str | None = options.get("obs_dtype", "float32")
        self._specs = {name: MultiAgentSpec.from_json(text)
                       for name, text in options.get("specs", {}).items()}

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        episodes = self._map_to_episodes(batch)["episodes"]
        out = self._learner_connector(rl_module=self._module, batch={}, episodes=episodes,
                                      shared_data={}, metrics=None)
        # As the base class: only modules that are trained travel on.
        out = {m: b for m, b in out.items() if self._should_module_be_updated(m, out)}
        return flatten_dict(pad_modules(out))

    def _map_to_episodes(self, batch: dict[str, Any], to_numpy: bool = False,
                         **kwargs: Any) -> dict[str, list[Any]]:
        names = np.asarray(batch[P.DATASET]).astype(str)
        episodes: list[Any] = []
        for name in dict.fromkeys(names.tolist()):
            where = np.flatnonzero(names == name)
            rows = {k: np.asarray(v)[where] for k, v in batch.items()}
            spec = self._specs[name] if name in self._specs else _spec_of(name)
            episodes.extend(episodes_from_rows(
                rows, spec, mapping_fn=self.config.policy_mapping_fn,
                obs_key=self._obs_key, obs_dtype=self._obs_dtype))
        if to_numpy:
            for episode in episodes:
                episode.to_numpy()
        return {"episodes": episodes}


class MultiAgentOfflineData(OfflineData):
    """``OfflineData`` that reads marl-minari datasets (``config.input_``: their ``data/``
    folders) as episode rows through :func:`marl_minari.ray.data.make_datasource`."""

    # OfflineData.__init__ reads `getattr(ray.data, config.input_read_method)(self.path, ...)`
    # right after setting `self.path = config.input_`; with "read_datasource" the path must
    # be the datasource, so it is made here from the folders.
    @property  # type: ignore[override]
    def path(self) -> Any:
        return self._datasource

    @path.setter
    def path(self, value: Any) -> None:
        folders = value if isinstance(value, list) else [value]
        self._datasource = make_datasource([str(f) for f in folders], "episodes")


def _is_export(source: Any) -> bool:
    if not isinstance(source, (str, os.PathLike)) or not Path(source).is_dir():
        return False
    folder = Path(source)
    return (any((folder / m).exists() for m in (EPISODES_MANIFEST, RLLIB_MANIFEST))
            or any(folder.glob("*.parquet")))


def episode_exports(sources: Any) -> list[EpisodesExport] | None:
    """The :func:`~marl_minari.ray.rllib_export.export_episodes` folders ``sources`` names, or
    ``None`` when it names datasets.

    A folder counts as an export when it holds Parquet files or a manifest (an export_rllib
    one too), so that a folder without a valid episode manifest is refused with the reason
    rather than looked up as a dataset.

    Raises:
        InvalidOptionError: export folders mixed with datasets.
        DatasetNotFoundError: an export folder has no episode manifest.
        CorruptedDataError: a manifest of another format version.
    """
    items = (list(sources) if isinstance(sources, Sequence)
             and not isinstance(sources, (str, os.PathLike)) else [sources])
    exported = [_is_export(s) for s in items]
    if not any(exported):
        return None
    if not all(exported):
        raise InvalidOptionError(
            f"sources mix Parquet episode exports and datasets ({items!r}); give either "
            "export_episodes folders or datasets (export the datasets too)")
    return [load_episodes_export(s) for s in items]


def _check_algorithm(config: Any) -> None:
    name = getattr(config.algo_class, "__name__", str(config.algo_class))
    if name not in SUPPORTED_ALGORITHMS:
        raise RLlibOfflineError(
            f"multi_agent_offline supports {SUPPORTED_ALGORITHMS}, not {name}: RLlib's "
            "OfflineData needs every module's batch to have one row count, so modules are "
            "padded and the padding masked with loss_mask, which only BC's and MARWIL's "
            f"losses read ({name}'s would train on the padding). Use BCConfig() or "
            "MARWILConfig(), or export_rllib(...) for one single-agent module at a time.")


def multi_agent_offline(config: Any, sources: SourceLike | Sequence[SourceLike], *,
                        policy_mapping_fn: Callable[..., str] | Mapping[str, str] | None = None,
                        obs_key: str | None = None, obs_dtype: str | None = "float32",
                        override_num_blocks: int | None = None) -> Any:
    """Fill an RLlib ``AlgorithmConfig`` to train a ``MultiRLModule`` from datasets.

    ``multi_agent_offline(BCConfig(), "mpe2/speaker_listener/random-v0").build_algo()
    .train()`` trains one module per agent. Sets ``environment(observation_space=...,
    action_space=...)`` (``Dict``\\ s by agent), ``multi_agent(policies=...,
    policy_mapping_fn=...)`` with each module's spaces from the dataset's spec, and
    ``offline_data(input_=<data folders>, offline_data_class=MultiAgentOfflineData,
    prelearner_class=MultiAgentPreLearner, ...)``. Other settings (network sizes,
    ``train_batch_size_per_learner``: agent-steps per module per update, learners) stay the
    caller's. Each pre-learner call gets ``train_batch_size_per_learner`` episodes.

    Args:
        config: a ``BCConfig`` or ``MARWILConfig`` (returned, changed in place).
        sources: what :func:`marl_minari.ray.data.read_dataset` reads (whole datasets; a
            filtered ``MinariDataset`` is read whole), or folders of
            :func:`marl_minari.ray.rllib_export.export_episodes`: RLlib then reads them with
            ``input_read_method="read_parquet"`` and the specs come from their manifests.
        policy_mapping_fn: ``fn(agent_id, episode, **kwargs) -> module_id`` or a dict
            ``{agent: module}``; default one module per agent, module id = agent id. Agents
            of one module must share their spaces.
        obs_key: for Dict observations, the key the modules see (default: the whole Dict,
            flattened with ``gymnasium.spaces.flatten``; action masks stay in the infos).
        obs_dtype: dtype integer ``Box`` observations are cast to (``None`` keeps them).
        override_num_blocks: read tasks (see :func:`marl_minari.ray.data.read_dataset`).

    Raises:
        RLlibOfflineError: an algorithm other than BC or MARWIL.
        InvalidOptionError: every agent mapped to RLlib's single-agent module id.
        IncompatibleSourcesError: agents of one module have different spaces.
        UnsupportedSpaceError: a space RLlib cannot take (Text, composite actions).
        DatasetNotFoundError, CorruptedDataError: an export folder without a valid manifest.
    """
    from ray.rllib.policy.policy import PolicySpec

    _check_algorithm(config)
    exports = episode_exports(sources)
    options: dict[str, Any] = {"obs_key": obs_key, "obs_dtype": obs_dtype}
    data_class: type[OfflineData]
    if exports is None:
        opened: list[DatasetSource] = open_sources(sources)
        specs = [s.spec for s in opened]
        # Each read task reopens its dataset through the door from this reference.
        inputs = [str(s.data_path) if isinstance(s, FolderSource) else s.name for s in opened]
        read_method, data_class = "read_datasource", MultiAgentOfflineData
    else:
        named = {name: spec for e in exports for name, spec in e.specs.items()}
        specs = list(named.values())
        inputs = [str(e.path) for e in exports]
        # RLlib's own OfflineData reads the files; the pre-learners get the specs here.
        read_method, data_class = "read_parquet", OfflineData
        options["specs"] = {name: spec.to_json() for name, spec in named.items()}
    mapping: Callable[..., str]
    if policy_mapping_fn is None:
        mapping = per_agent_module
    elif isinstance(policy_mapping_fn, Mapping):
        mapping = ModuleMapping(policy_mapping_fn)
    else:
        mapping = policy_mapping_fn
    modules = plan_modules(specs, policy_mapping_fn, default_module=None)
    if list(modules) == [DEFAULT_MODULE_ID]:
        raise InvalidOptionError(
            f"policy_mapping_fn maps every agent to {DEFAULT_MODULE_ID!r}, which RLlib takes "
            "for single-agent training; name the shared module otherwise (e.g. "
            "{agent: 'shared'}), or use export_rllib for pooled single-agent rows")
    obs_spaces, act_spaces = {}, {}
    policies = {}
    for module_id, entry in modules.items():
        obs = export_space(entry["obs"], obs_key, f"observation space of module {module_id!r}",
                           obs_dtype)
        policies[module_id] = PolicySpec(observation_space=obs, action_space=entry["act"])
        for agent in entry["agents"]:
            obs_spaces[agent], act_spaces[agent] = obs, entry["act"]
    input_config = dict(config.input_config or {})
    input_config[OPTIONS_KEY] = options
    # MARWIL's validation wants it set for a local learner; one pass per training step.
    iters = config.dataset_num_iters_per_learner or 1
    # RLlib's default pre-learner actors (max(2, num_learners), 1 CPU each) take both CPUs
    # of a 2-CPU machine and the read tasks never start; half a CPU each leaves room.
    map_kwargs = dict(config.map_batches_kwargs or {}) or {
        "concurrency": max(2, config.num_learners), "num_cpus": 0.5}
    read_kwargs = dict(config.input_read_method_kwargs or {})
    if override_num_blocks is not None:
        read_kwargs["override_num_blocks"] = override_num_blocks
    return (config
            .environment(observation_space=spaces.Dict(obs_spaces),
                         action_space=spaces.Dict(act_spaces))
            .multi_agent(policies=policies, policy_mapping_fn=mapping)
            .offline_data(input_=inputs,
                          input_read_method=read_method,
                          input_read_method_kwargs=read_kwargs,
                          input_config=input_config,
                          dataset_num_iters_per_learner=iters,
                          map_batches_kwargs=map_kwargs,
                          offline_data_class=data_class,
                          prelearner_class=MultiAgentPreLearner))


__all__ = [
    "MultiAgentOfflineData",
    "MultiAgentPreLearner",
    "ModuleMapping",
    "episode_exports",
    "episodes_from_rows",
    "multi_agent_offline",
    "pad_modules",
    "per_agent_module",
]
