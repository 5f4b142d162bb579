"""``ParallelDataCollector``: record a PettingZoo ``ParallelEnv`` into a Minari dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pettingzoo.utils.env import ParallelEnv
from pettingzoo.utils.wrappers import BaseParallelWrapper

from marl_minari.format.env_descriptor import EnvDescriptor
from marl_minari.storage.durable import Durability
from marl_minari.storage.journal_writer import DEFAULT_CAPACITY

from ._base import (
    DatasetRecorderMixin,
    EpisodeMetadataCallback,
    RecorderCore,
    check_data_format,
    reset_seed,
    state_space_of,
)
from .step_data import episode_callback, step_callback


class ParallelDataCollector(DatasetRecorderMixin, BaseParallelWrapper):
    """Wraps a PettingZoo ``ParallelEnv`` and records every episode it plays.

    The wrapper behaves exactly like the wrapped env. Each finished episode is appended to a
    durable journal before ``step`` returns (or, for an episode cut short, before ``reset``
    returns; with ``background_writing`` a writer thread does it while the env steps on);
    :meth:`create_dataset` turns the journal into a Minari dataset in the
    multi-agent layout of ``docs/format.md``. If the process dies, ``marl-minari recover``
    turns the journal's finished episodes into a dataset.

    Args:
        env: the parallel environment to record.
        step_data_callback: edits what is recorded at each reset and step. A
            ``minari.StepDataCallback`` subclass gets Minari's contract (one instance, called
            with ``env``, ``obs``, ``info``, ``action``, ``rew``, ``terminated``,
            ``truncated``, each value a dict by agent; it returns Minari's step-data dict);
            a function is called with the step's dict (``observations``, ``actions``,
            ``rewards``, ``terminations``, ``truncations``, ``infos``; at reset only
            ``observations`` and ``infos``) and returns the dict to record
            (:mod:`marl_minari.collectors.step_data`).
        episode_metadata_callback: called with each finished :class:`MultiAgentEpisode`; the
            dicts it returns are stored under ``episode_metadata`` in the dataset's metadata.
        record_infos: record the env's per-agent info dicts (action masks are always kept).
        jpeg_encoding: JPEG-encode image-like observations, as Minari does (lossy); pass
            ``False`` for exact pixels.
        reward_aggregation: how the scalar ``rewards`` column is made from the agents'
            rewards: ``"sum"`` (default), ``"mean"``, ``"max"`` or ``"min"``.
        env_descriptor: how to re-create the env; by default the one
            :func:`marl_minari.make_env` attached, else inferred.
        recording_path: folder for the episode journal (hidden one under the datasets root
            by default).
        record_state: record ``env.state()`` at every row when the env provides it.
        durability: ``"episode"`` (default) flushes the journal to stable storage after each
            finished episode and datasets before they are reported written; ``"none"``
            leaves flushing to the OS (see ``docs/recording.md``, "Guarantees").
        state_encoding: how the global state is stored: ``"jpeg"`` (lossy, image-like
            states only), ``"gzip"`` or ``"lzf"`` (lossless HDF5 filters) or ``"raw"``. By
            default ``"jpeg"`` for an image-like state when ``jpeg_encoding`` is on, else
            ``"raw"`` (see ``docs/recording.md``).
        background_writing: hand finished episodes to a background thread that JPEG-encodes,
            checksums, writes and flushes them while the env steps; ``step`` then returns
            before the episode is durable: :attr:`durable_episodes` counts the durable ones
            and :meth:`flush` waits for all. Off by default: each finished episode is written
            before ``step`` (or ``reset``) returns. It pays for light envs; for envs whose
            step is heavy Python (pistonball) the thread's contention for the GIL costs
            more than it saves (``docs/benchmarks.md``).
        writer_queue: finished episodes the background writer may hold before ``step``
            waits for it (default 2): the memory bound, and what a killed process can lose
            beyond the episode in progress.
        data_format: Minari's storage format: ``None`` or ``"hdf5"``, the only one written
            here (Minari's ``"arrow"`` is refused).

    Raises:
        UnsupportedSpaceError: an agent's space cannot be stored by Minari (named in the
            message).
        InvalidOptionError: ``episode_metadata_callback`` is not a function of the episode
            (a Minari ``EpisodeMetadataCallback`` class among them), or ``data_format`` is
            not HDF5.
    """

    def __init__(
        self,
        env: ParallelEnv,
        step_data_callback: Any = None,
        episode_metadata_callback: EpisodeMetadataCallback | None = None,
        record_infos: bool = False,
        jpeg_encoding: bool = True,
        reward_aggregation: str = "sum",
        env_descriptor: EnvDescriptor | None = None,
        recording_path: str | Path | None = None,
        record_state: bool = True,
        durability: Durability = "episode",
        state_encoding: str | None = None,
        background_writing: bool = False,
        writer_queue: int = DEFAULT_CAPACITY,
        data_format: str | None = None,
    ) -> None:
        check_data_format(data_format)
        super().__init__(env)
        self._core = RecorderCore(
            env, "parallel", record_infos=record_infos, jpeg_encoding=jpeg_encoding,
            reward_aggregation=reward_aggregation, env_descriptor=env_descriptor,
            recording_path=recording_path,
            state_space=state_space_of(env) if record_state else None,
            durability=durability, state_encoding=state_encoding,
            background_writing=background_writing, writer_queue=writer_queue,
        )
        self._has_state = self._core.spec.state_space is not None
        self._step_callback = step_callback(step_data_callback, env)
        self._episode_callback = episode_callback(episode_metadata_callback)

    # Attributes the ParallelEnv base class defines at class level are forwarded explicitly.
    @property
    def agents(self) -> list[Any]:
        return self.env.agents

    @property
    def possible_agents(self) -> list[Any]:
        return self.env.possible_agents

    @property
    def metadata(self) -> dict[str, Any]:
        return self.env.metadata

    @property
    def render_mode(self) -> Any:
        return getattr(self.env, "render_mode", None)

    def reset(self, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        """Reset the env; an unfinished episode in progress is saved as truncated first.

        Without a ``seed`` the env is reset with a new random one (stored with the episode),
        as Minari's ``DataCollector`` does, unless ``options`` hold ``minari_autoseed: False``.
        """
        self._save_unfinished()
        seed = reset_seed(seed, options, autoseed=self._core.autoseed)
        observations, infos = self.env.reset(seed=seed, options=options)
        observations, infos = self._apply_reset_callback(observations, infos)
        self._core.builder.start(observations, infos, state=self._state(), seed=seed,
                                 options=options)
        return observations, infos

    def step(self, actions: dict[Any, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """Step the env and record the step; a finished episode is saved before returning."""
        builder = self._core.builder
        if not builder.started:
            return self.env.step(actions)
        # Only agents that are live and observed at this row can act (training loops often
        # pass an action for every possible agent, dead ones included).
        can_act = set(self.env.agents).intersection(builder.last_row()[0])
        result = self.env.step(actions)
        obs, rewards, terms, truncs, infos = result
        taken = {agent: action for agent, action in actions.items() if agent in can_act}
        if self._step_callback is not None:
            data = self._step_callback({"observations": obs, "actions": taken,
                                        "rewards": rewards, "terminations": terms,
                                        "truncations": truncs, "infos": infos})
            taken = {agent: action for agent, action in data["actions"].items()
                     if agent in can_act}
            recorded = (taken, data["observations"], data["rewards"],
                        data["terminations"], data["truncations"], data["infos"])
        else:
            recorded = (taken, obs, rewards, terms, truncs, infos)
        builder.add(*recorded, state=self._state())
        if not self.env.agents:
            self._core.commit(cut=False, metadata_callback=self._episode_callback)
        return result

    def _state(self) -> Any:
        return self.env.state() if self._has_state else None

    def _apply_reset_callback(self, observations: dict, infos: dict) -> tuple[dict, dict]:
        if self._step_callback is None:
            return observations, infos
        data = self._step_callback({"observations": observations, "infos": infos})
        return data["observations"], data["infos"]

    def _save_unfinished(self) -> None:
        if self._core.builder.steps == 0:
            return
        self._core.commit(cut=True, metadata_callback=self._episode_callback)
