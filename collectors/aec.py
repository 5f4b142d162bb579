"""``AECDataCollector``: record a turn-based PettingZoo ``AECEnv`` into a Minari dataset.

One dataset step is one ``env.step(action)`` call, dead-agent ``None`` steps included. The
layout of turns (``api: "aec"``) is in ``docs/format.md`` (*Turn-based episodes*); in short:

* observation row ``k`` holds ``env.observe(agent)`` of every agent in ``env.agents`` after
  step ``k - 1`` (after reset for ``k = 0``), and ``extras/agent_selection`` the index into
  ``possible_agents`` of the agent whose turn it is at that row (``-1``: none); with
  ``observe_every_agent=False`` only that agent is observed and the others repeat their latest
  observation (``extras/observed`` marks the observed ones);
* action row ``t`` holds the acting agent's action; the other agents' entries hold the fill
  value and ``acted`` is ``False`` for them (also for the acting agent on a dead step, whose
  action is ``None``);
* per-agent rewards of step ``t`` are ``env.rewards`` right after that step, credited to every
  agent, so each reward sits at the step where it was earned and an agent's rewards between
  two of its turns add up to what ``last()`` hands it at the later turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from marl_minari.collectors.builder import detached
from pettingzoo.utils.env import AECEnv
from pettingzoo.utils.wrappers import BaseWrapper, OrderEnforcingWrapper

from marl_minari.format import layout
from marl_minari.format.env_descriptor import EnvDescriptor
from marl_minari.storage.durable import Durability
from marl_minari.storage.journal_writer import DEFAULT_CAPACITY
from marl_minari.user_warnings import warn

from ._base import (
    DatasetRecorderMixin,
    EpisodeMetadataCallback,
    RecorderCore,
    check_data_format,
    reset_seed,
    state_space_of,
)
from .step_data import episode_callback, step_callback

NO_AGENT = -1
"""``extras/agent_selection`` value of rows where no agent is selected (episode over)."""

_STEP_ATTRIBUTES = ("agents", "agent_selection", "rewards", "terminations", "truncations",
                    "infos", "_cumulative_rewards")
_FORWARDING = (BaseWrapper.__getattr__, OrderEnforcingWrapper.__getattr__)


class AECDataCollector(DatasetRecorderMixin, BaseWrapper):
    """Wraps a PettingZoo ``AECEnv`` and records every episode it plays.

    The wrapper is itself an ``AECEnv`` and behaves like the wrapped env (it passes
    ``pettingzoo.test.api_test``), with one difference: ``observe(agent)`` (and so
    ``last()``) returns the observation object recorded for the current turn instead of
    computing a new one, so what a policy sees is exactly what is stored.

    Each finished episode (the step that removes the last agent) is appended to a durable
    journal before ``step`` returns (with ``background_writing``, by a writer thread while
    the env steps on); an episode cut short by ``reset`` or ``close`` is saved before those
    return, marked truncated unless every remaining agent was already terminated
    or truncated. ``create_dataset`` and ``add_to_dataset`` write the finished episodes only:
    an episode in progress goes on and is written whole, from its reset, by a later call.
    :meth:`create_dataset` turns the journal into a Minari dataset in the layout of
    ``docs/format.md`` (*Turn-based episodes*).

    Args:
        env: the turn-based environment to record.
        step_data_callback: edits what is recorded at each reset and step: a
            ``minari.StepDataCallback`` subclass (Minari's contract, each value a dict by
            agent) or a function of the step's dict (``observations`` of every live agent,
            ``actions`` (``{acting agent: action}``), ``rewards``, ``terminations``,
            ``truncations``, ``infos``; at reset only ``observations`` and ``infos``)
            returning the dict to record (:mod:`marl_minari.collectors.step_data`).
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
        observe_every_agent: observe every live agent at every row (default). ``False``
            observes only the agent whose turn it is (and every agent at reset); the other
            agents' columns repeat their latest observation and ``extras/observed`` says which
            rows were observed. Cheaper for envs whose ``observe`` is costly or that have many
            agents (``N`` observations per step otherwise).
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
        env: AECEnv,
        step_data_callback: Any = None,
        episode_metadata_callback: EpisodeMetadataCallback | None = None,
        record_infos: bool = False,
        jpeg_encoding: bool = True,
        reward_aggregation: str = "sum",
        env_descriptor: EnvDescriptor | None = None,
        recording_path: str | Path | None = None,
        record_state: bool = True,
        observe_every_agent: bool = True,
        durability: Durability = "episode",
        state_encoding: str | None = None,
        background_writing: bool = False,
        writer_queue: int = DEFAULT_CAPACITY,
        data_format: str | None = None,
    ) -> None:
        check_data_format(data_format)
        super().__init__(env)
        self._core = RecorderCore(
            env, "aec", record_infos=record_infos, jpeg_encoding=jpeg_encoding,
            reward_aggregation=reward_aggregation, env_descriptor=env_descriptor,
            recording_path=recording_path,
            state_space=state_space_of(env) if record_state else None,
            durability=durability, state_encoding=state_encoding,
            background_writing=background_writing, writer_queue=writer_queue,
        )
        self._has_state = self._core.spec.state_space is not None
        self._observe_every_agent = observe_every_agent
        self._step_callback = step_callback(step_data_callback, env)
        self._episode_callback = episode_callback(episode_metadata_callback)
        agents = self._core.spec.possible_agents
        self._index: dict[Any, int] = {agent: i for i, agent in enumerate(agents)}
        # What observe() hands out for the current row (the objects the env returned).
        self._current: dict[Any, Any] = {}
        # Recorded copy of every agent's latest observation (repeated when not observed).
        self._latest: dict[Any, Any] = {}
        self._observed: np.ndarray = np.zeros(len(agents), dtype=bool)
        # Agents of the current row and their latest termination/truncation flags.
        self._flags: dict[Any, tuple[bool, bool]] = {}
        # Rewards accumulated per agent since its last turn, as last() will report them.
        self._pending: dict[Any, Any] = {}
        self._warned_rewards = False
        # Wrapper in the env's chain that holds each per-step attribute (read directly: going
        # through every wrapper's __getattr__ costs more than the recording itself).
        self._owners: dict[str, Any] = {}

    # The AEC attributes, read from the wrapper that holds them (see _owner).
    @property
    def agents(self) -> list[Any]:
        return self._attribute("agents")

    @property
    def agent_selection(self) -> Any:
        return self._attribute("agent_selection")

    @property
    def rewards(self) -> dict[Any, float]:
        return self._attribute("rewards")

    @property
    def terminations(self) -> dict[Any, bool]:
        return self._attribute("terminations")

    @property
    def truncations(self) -> dict[Any, bool]:
        return self._attribute("truncations")

    @property
    def infos(self) -> dict[Any, dict[str, Any]]:
        return self._attribute("infos")

    @property
    def _cumulative_rewards(self) -> dict[Any, float]:
        return self._attribute("_cumulative_rewards")

    def _attribute(self, name: str) -> Any:
        owner = self._owners.get(name)
        return getattr(self.env if owner is None else owner, name)



    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Reset the env; an unfinished episode in progress is saved first.

        Without a ``seed`` the env is reset with a new random one (stored with the episode),
        as Minari's ``DataCollector`` does, unless ``options`` hold ``minari_autoseed: False``.
        """
        self._save_unfinished()
        seed = reset_seed(seed, options, autoseed=self._core.autoseed)
        self.env.reset(seed=seed, options=options)
        self._owners = {name: _owner(self.env, name) for name in _STEP_ATTRIBUTES}
        self._latest = {}
        observations, infos = self._observe_row(every_agent=True)
        if self._step_callback is not None:
            data = self._step_callback({"observations": observations, "infos": infos})
            observations, infos = data["observations"], data["infos"]
        self._pending = dict(self._handed_rewards())
        self._core.builder.start(observations, infos, state=self._state(),
                                 extras=self._extras(), seed=seed, options=options)

    def observe(self, agent: Any) -> Any:
        """The agent's observation: the recorded one for live agents of the current row."""
        if agent in self._current:
            return self._current[agent]
        return self.env.observe(agent)

    def step(self, action: Any) -> None:
        """Step the env and record the step; a finished episode is saved before returning."""
        if not self._core.builder.started or not self.agents:
            self.env.step(action)
            return
        agent = self.agent_selection
        before = self._flags
        # last() handed the acting agent its accumulated rewards: they are spent.
        self._pending[agent] = 0
        self._current = {}
        self.env.step(action)

        rewards: dict[Any, float] = {}
        for name, value in self.rewards.items():
            self._pending[name] = self._pending.get(name, 0) + value
            rewards[name] = float(value)
        self._check_pending(rewards)
        observations, infos = self._observe_row(every_agent=self._observe_every_agent)
        terminations = {a: flags[0] for a, flags in self._flags.items()}
        truncations = {a: flags[1] for a, flags in self._flags.items()}
        for gone in before.keys() - self._flags.keys():
            # An agent removed by this step keeps the flags it left with.
            terminations[gone], truncations[gone] = before[gone]
            self._pending.pop(gone, None)
        actions = {agent: action}
        if self._step_callback is not None:
            data = self._step_callback({"observations": observations, "actions": actions,
                                        "rewards": rewards, "terminations": terminations,
                                        "truncations": truncations, "infos": infos})
            actions, observations, rewards = (data["actions"], data["observations"],
                                              data["rewards"])
            terminations, truncations = data["terminations"], data["truncations"]
            infos = data["infos"]
        self._core.builder.add(actions, observations, rewards, terminations, truncations,
                               infos, state=self._state(), extras=self._extras())
        if not self.agents:
            self._core.commit(cut=False, metadata_callback=self._episode_callback)

    def _handed_rewards(self) -> Mapping[Any, Any]:
        """The env's ``_cumulative_rewards``: what ``last()`` hands each agent now."""
        try:
            return self._cumulative_rewards or {}
        except AttributeError:
            return {}

    def _observe_row(self, every_agent: bool) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """Observe live agents; remember the objects for ``observe``, return copies.

        With ``every_agent`` off only the selected agent (and agents never observed yet) is
        observed; the others keep their latest recorded observation.
        """
        env = self.env
        agents = self.agents
        self._current = {}
        observations = {}
        observed = self._observed = np.zeros(len(self._index), dtype=bool)
        selected = self.agent_selection if agents else None
        for agent in agents:
            if every_agent or agent == selected or agent not in self._latest:
                observation = env.observe(agent)
                if observation is None:
                    self._latest.pop(agent, None)
                    continue
                self._current[agent] = observation
                self._latest[agent] = detached(observation)  # kept across turns
                if agent in self._index:
                    observed[self._index[agent]] = True
            observations[agent] = self._latest[agent]
        terminations, truncations, all_infos = self.terminations, self.truncations, self.infos
        self._flags = {a: (bool(terminations[a]), bool(truncations[a])) for a in agents}
        infos = {a: all_infos[a] for a in agents}
        return observations, infos

    def _extras(self) -> dict[str, Any]:
        selected = self.agent_selection if self.agents else None
        extras: dict[str, Any] = {layout.AGENT_SELECTION: self._index.get(selected, NO_AGENT)}
        if not self._observe_every_agent:
            extras[layout.OBSERVED] = self._observed
        return extras

    def _check_pending(self, rewards: dict[Any, float]) -> None:
        """Make the next agent's recorded rewards add up to what ``last()`` will hand it.

        For envs that follow the AEC contract (what ``api_test`` checks) the rewards dict
        accumulates to ``_cumulative_rewards`` and nothing changes here. Otherwise the
        difference is credited to the agent at this step, with a warning.
        """
        env = self.env
        if not self.agents:
            return
        agent = self.agent_selection
        cumulative = self._handed_rewards()
        if agent not in cumulative:
            return
        handed = cumulative[agent]
        expected = self._pending.get(agent, 0)
        if handed == expected:
            return
        rewards[agent] = rewards.get(agent, 0.0) + float(handed) - float(expected)
        self._pending[agent] = handed
        if not self._warned_rewards:
            self._warned_rewards = True
            warn(f"{type(env.unwrapped).__name__}: the rewards dict does not add up to what "
                 f"last() hands {agent!r} ({handed!r} vs {expected!r}); recorded rewards follow "
                 "last(), the difference is credited at the step before the agent's turn.")

    def _state(self) -> Any:
        if not self._has_state:
            return None
        return self.env.state()

    def _save_unfinished(self) -> None:
        if self._core.builder.steps == 0:
            return
        ended = bool(self._flags) and all(t or tr for t, tr in self._flags.values())
        self._core.commit(cut=not ended, metadata_callback=self._episode_callback)


def _owner(env: Any, name: str) -> Any:
    """The object of ``env``'s wrapper chain that holds attribute ``name``.

    Wrappers that only forward attribute access (PettingZoo's ``BaseWrapper`` and
    ``OrderEnforcingWrapper``) are skipped; one that sets or defines the attribute itself, or
    forwards it its own way, is where the chain stops.
    """
    while isinstance(env, BaseWrapper):
        cls = type(env)
        if (name in vars(env) or cls.__getattr__ not in _FORWARDING
                or any(name in vars(klass) for klass in cls.__mro__)):
            return env
        env = env.env
    return env
