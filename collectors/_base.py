"""What the parallel and AEC recorders share: the recording, dataset creation, closing."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from marl_minari.collectors.builder import EpisodeBuilder
from marl_minari.collectors.in_place import dataset_id_of, refreshed, stored_episode_count
from marl_minari.collectors.reference_scores import JointPolicy, reference_scores
from marl_minari.collectors.space_checks import SpaceChecks

from marl_minari.envs.make import describe_env
from marl_minari.errors import EnvApiError, InvalidOptionError
from marl_minari.format.env_descriptor import Api, EnvDescriptor
from marl_minari.format.spec import MultiAgentSpec, resolve_state_encoding
from marl_minari.storage.dataset import open_written
from marl_minari.storage.durable import Durability
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.journal_writer import DEFAULT_CAPACITY, JournalWriter
from marl_minari.storage.recording import Recording
from marl_minari.user_warnings import warn

EpisodeMetadataCallback = Callable[[MultiAgentEpisode], dict[str, Any]]


AUTOSEED_KEY = "minari_autoseed"
"""The reset option that turns automatic seeds off (``{"minari_autoseed": False}``), as in
Minari's ``DataCollector``."""


def reset_seed(seed: int | None, options: dict[str, Any] | None, *, autoseed: bool = True
               ) -> int | None:
    """The seed a recorder resets the env with: ``seed``, or, when it is ``None``, a new
    random 64-bit one, so that every recorded episode can be replayed from its stored seed,
    as Minari's ``DataCollector`` does, unless ``options`` say ``minari_autoseed: False`` (or
    ``autoseed`` is false: reference episodes are played as Minari plays them, on an env
    that is not recording)."""
    if seed is not None or not autoseed or (options and not options.get(AUTOSEED_KEY, True)):
        return seed
    return secrets.randbits(64)


def check_data_format(data_format: str | None) -> None:
    """Refuse a Minari ``data_format`` other than HDF5 (the only one this library writes).

    Raises:
        InvalidOptionError: ``data_format`` is neither ``None`` nor ``"hdf5"``.
    """
    if data_format not in (None, "hdf5"):
        raise InvalidOptionError(
            f"data_format={data_format!r}: marl-minari writes HDF5 datasets only (Minari's "
            "arrow format writes are quadratic in episodes); pass data_format='hdf5' or leave "
            "it out")


def state_space_of(env: Any) -> Any:
    """The env's global ``state_space`` if it implements ``state()``, else ``None``."""
    space = getattr(env, "state_space", None)
    if space is None:
        return None
    try:
        env.state()
    except NotImplementedError:
        return None
    except Exception:  # noqa: BLE001 - many envs need a reset before state() works
        return space
    return space


def require_api(env: Any, api: Api) -> None:
    """Refuse an env of the other PettingZoo API than the collector records.

    Raises:
        EnvApiError: naming the collector (and the conversion) that fits ``env``.
    """
    is_aec = callable(getattr(env, "agent_iter", None)) and callable(getattr(env, "last", None))
    if api == "parallel" and is_aec:
        raise EnvApiError(
            f"{type(env).__name__} is an AEC (turn-based) env: record it with "
            "AECDataCollector, or convert it with pettingzoo.utils.aec_to_parallel first")
    if api == "aec" and not is_aec:
        raise EnvApiError(
            f"{type(env).__name__} is not an AEC env (no agent_iter()/last()): record a "
            "parallel env with ParallelDataCollector, or convert it with "
            "pettingzoo.utils.parallel_to_aec first")


class RecorderCore:
    """Episode building and durable storage for one wrapped environment.

    Args:
        env: the PettingZoo env (parallel or AEC).
        api: which API it is recorded through.
        record_infos: keep whole per-agent info dicts (action masks are always kept).
        jpeg_encoding: JPEG-encode image observations in the dataset (as Minari does).
        reward_aggregation: how Minari's scalar ``rewards`` column is made from agents' rewards.
        env_descriptor: how to re-create the env; found from :func:`marl_minari.make_env` or
            inferred by default.
        recording_path: folder for the episode journal (a new hidden one by default).
        durability: when the journal and datasets are flushed to stable storage (see
            :class:`~marl_minari.storage.recording.Recording`).
        state_encoding: how the global state is stored (see
            :func:`~marl_minari.format.spec.resolve_state_encoding`).
        background_writing: write finished episodes to the journal on a background thread
            (see :mod:`marl_minari.storage.journal_writer`).
        writer_queue: finished episodes the background writer may hold, not yet durable.
    """

    def __init__(self, env: Any, api: Api, *, record_infos: bool, jpeg_encoding: bool,
                 reward_aggregation: str, env_descriptor: EnvDescriptor | None,
                 recording_path: str | Path | None, state_space: Any,
                 durability: Durability = "episode", state_encoding: str | None = None,
                 background_writing: bool = False,
                 writer_queue: int = DEFAULT_CAPACITY) -> None:
        agents = tuple(env.possible_agents)
        require_api(env, api)
        self.spec = MultiAgentSpec(
            api=api,
            possible_agents=agents,
            observation_spaces={a: env.observation_space(a) for a in agents},
            action_spaces={a: env.action_space(a) for a in agents},
            state_space=state_space,
            env=env_descriptor or describe_env(env, api),
            reward_aggregation=reward_aggregation,
            record_infos=record_infos,
            state_encoding=resolve_state_encoding(state_encoding, state_space, jpeg_encoding),
        )
        self.builder = EpisodeBuilder(self.spec, record_infos=record_infos,
                                      has_state=state_space is not None)
        self.jpeg_encoding = jpeg_encoding
        self._recording_path = None if recording_path is None else Path(recording_path)
        self._recording: Recording | None = None
        self._durability = durability
        self.writer = JournalWriter(self._append, background=background_writing,
                                    capacity=writer_queue)
        self._space_checks = SpaceChecks(self.spec)
        self._finished = 0
        self.autoseed = True
        """Reset without a seed with a new random one (:func:`reset_seed`)."""

    @property
    def recording(self) -> Recording:
        """The recording folder (created on first use)."""
        if self._recording is None:
            self._recording = Recording(self.spec, jpeg_encoding=self.jpeg_encoding,
                                        path=self._recording_path, durability=self._durability)
        return self._recording

    def commit(self, *, cut: bool,
               metadata_callback: EpisodeMetadataCallback | None = None) -> MultiAgentEpisode:
        """Finish the episode in progress and append it, with its episode metadata, to the journal.

        An episode that cannot be stored (e.g. its infos changed structure) is dropped when
        the error is raised, so that the next ``reset`` records normally. An episode whose
        metadata callback raises is kept without metadata, and the error is raised.
        """
        # Image rows the journal stores as JPEG go to the writer unstacked, to be encoded row
        # by row on its thread; a metadata callback is handed the episode stacked.
        unstacked = self.recording.jpeg_paths if metadata_callback is None else frozenset()
        try:
            episode = self.builder.finish(cut=cut, unstacked=unstacked)
        finally:
            self.builder.clear()
        note = None
        try:
            if metadata_callback is not None:
                note = metadata_callback(episode)
        finally:
            self.writer.submit(episode, note)
        self._space_checks.check(episode, self._finished)  # once it is stored
        self._finished += 1
        return episode

    def _append(self, episode: MultiAgentEpisode, note: dict[str, Any] | None) -> None:
        self.recording.append(episode, note)

    def create_dataset(self, dataset_id: str, metadata: dict[str, Any]) -> Path:
        """Write every recorded episode into a new dataset (see the collectors' docs)."""
        self.writer.flush()
        return self.recording.write_dataset(dataset_id, **metadata)

    def add_to_dataset(self, dataset_id: str) -> Path:
        """Append every recorded episode (and their episode metadata) to an existing dataset."""
        self.writer.flush()
        return self.recording.add_to_dataset(dataset_id)

    def close(self) -> None:
        """Close the journal; keep it (with a warning) if it holds unsaved episodes.

        Raises:
            Exception: the first failure of the background writer not raised yet (the
                journal is closed first, with every episode that could be written).
        """
        try:
            self.writer.close()
        finally:
            self._close_recording()

    def _close_recording(self) -> None:
        if self._recording is None:
            return
        close_recording(self._recording)
        self._recording = None


def close_recording(recording: Recording) -> None:
    """Close a collector's journal; keep it, with a warning saying how to recover, if it
    holds episodes in no dataset yet."""
    unsaved = recording.episodes
    recording.close(keep=unsaved > 0)
    if unsaved:
        warn(f"{unsaved} recorded episode(s) are in no dataset yet; they are kept in "
             f"{recording.path}. Recover them with: marl-minari recover "
             f"{recording.path} NEW_DATASET_ID (NEW_DATASET_ID: an id no dataset has yet)")


class DatasetRecorderMixin:
    """``create_dataset``/``add_to_dataset``/``close`` and the recording properties.

    Shared by both collectors; they provide ``env``, ``_core`` (a :class:`RecorderCore`),
    ``_episode_callback`` and ``_save_unfinished()``.
    """

    env: Any
    _core: RecorderCore

    def _save_unfinished(self) -> None:
        raise NotImplementedError

    @property
    def spec(self) -> Any:
        """The :class:`~marl_minari.MultiAgentSpec` of the data being recorded."""
        return self._core.spec

    @property
    def recording_path(self) -> Path:
        """Folder of the durable episode journal."""
        return self._core.recording.path

    @property
    def durable_episodes(self) -> int:
        """Finished episodes (since the collector was made) that are durable: their journal
        record is written and flushed per ``durability``. A killed process keeps these."""
        return self._core.writer.durable_episodes

    @property
    def pending_episodes(self) -> int:
        """Finished episodes handed to the background writer and not durable yet."""
        return self._core.writer.pending_episodes

    def flush(self) -> None:
        """Wait until every finished episode is durable (see :attr:`durable_episodes`).

        Raises:
            Exception: a failure of the background writer, as the original exception (the
                episode it failed on is not stored; the ones after it are written).
        """
        self._core.writer.flush()

    def create_dataset(
        self,
        dataset_id: str,
        eval_env: Any = None,
        algorithm_name: str | None = None,
        author: str | Iterable[str] | None = None,
        author_email: str | Iterable[str] | None = None,
        code_permalink: str | None = None,
        ref_min_score: float | None = None,
        ref_max_score: float | None = None,
        expert_policy: JointPolicy | None = None,
        num_episodes_average_score: int = 100,
        description: str | None = None,
        requirements: list[str] | None = None,
        *,
        extra_metadata: dict[str, Any] | None = None,
    ) -> Any:
        """Create a Minari dataset from every episode finished so far.

        The arguments are Minari's ``DataCollector.create_dataset``'s, in its order, with
        its meaning for many agents; ours follow, keyword-only.

        Args:
            dataset_id: ``(namespace/)name-vN``.
            eval_env: the env to evaluate on (a PettingZoo env, an id
                :func:`marl_minari.make_env` accepts, or an ``EnvDescriptor``); recorded as
                ``eval_env_spec``, so ``recover_environment(eval_env=True)`` makes it. By
                default the recorded env.
            algorithm_name, author, author_email, code_permalink, description,
                requirements: provenance, as Minari's.
            ref_min_score, ref_max_score: reference scores for
                ``minari.get_normalized_score`` (team returns).
            expert_policy: ``policy(observations_by_agent) -> actions_by_agent``; its mean
                team return over ``num_episodes_average_score`` episodes of the evaluation
                env becomes ``ref_max_score``, and, unless ``ref_min_score`` is given, a
                random policy's (legal actions) becomes ``ref_min_score``, as Minari does.
            num_episodes_average_score: episodes averaged per reference score.
            extra_metadata: more top-level ``metadata.json`` keys.

        An episode in progress is not cut: recording goes on, and the next ``create_dataset``
        or ``add_to_dataset`` writes it whole, from its reset. To end it here, call ``reset``
        first (it is then saved as truncated at its last step).

        Returns:
            The new :class:`~marl_minari.MultiAgentDataset` (``.minari`` is the plain
            ``MinariDataset``).

        Raises:
            InvalidDatasetIdError: malformed id.
            DatasetExistsError: the id is taken (datasets are immutable; bump ``-vN``).
            InvalidOptionError: both ``expert_policy`` and ``ref_max_score``.
            EnvDescriptorError: ``eval_env`` is not an env, id or descriptor, or the scoring
                env cannot be made.
        """
        self._warn_in_progress(dataset_id)
        scores = reference_scores(
            self._core.spec, type(self), dataset_id=dataset_id, eval_env=eval_env,
            ref_min_score=ref_min_score, ref_max_score=ref_max_score, expert_policy=expert_policy,
            num_episodes_average_score=num_episodes_average_score).metadata
        folder = self._core.create_dataset(dataset_id, minari_metadata(
            algorithm_name, author, author_email, code_permalink, description, requirements,
            scores.pop("ref_min_score", None), scores.pop("ref_max_score", None),
            {**scores, **(extra_metadata or {})}))
        return open_written(folder / "data", self._core.spec,
                            jpeg_encoding=self._core.jpeg_encoding)

    def add_to_dataset(self, dataset: Any) -> Any:
        """Append every episode finished so far to an existing dataset.

        Args:
            dataset: the dataset, as Minari's ``add_to_dataset`` takes it (a
                ``MultiAgentDataset`` or ``MinariDataset``, updated in place: its episode
                count and ``episode_indices`` include the new episodes), or its id.

        As for :meth:`create_dataset`, an episode in progress is not cut.

        Returns:
            The dataset: the object given, updated, or the dataset opened from the id.
        """
        dataset_id = dataset_id_of(dataset)
        self._warn_in_progress(dataset_id)
        before = stored_episode_count(dataset)
        self._core.add_to_dataset(dataset_id)
        return refreshed(dataset, before)

    def _warn_in_progress(self, dataset_id: str) -> None:
        steps = self._core.builder.steps
        if steps:
            warn(f"an episode in progress ({steps} steps so far) is not written to "
                 f"{dataset_id!r}: it goes whole into the next create_dataset/add_to_dataset "
                 "once it ends; call reset() first to save it here as truncated.")

    def close(self) -> None:
        """Close the env; episodes in no dataset yet stay recoverable (with a warning)."""
        self._save_unfinished()
        self._core.close()
        self.env.close()


def minari_metadata(
    algorithm_name: str | None,
    author: str | Iterable[str] | None,
    author_email: str | Iterable[str] | None,
    code_permalink: str | None,
    description: str | None,
    requirements: list[str] | None,
    ref_min_score: float | None,
    ref_max_score: float | None,
    extra: dict[str, Any] | None,
) -> dict[str, Any]:
    """Keyword arguments for the writer, warning like Minari about missing provenance."""
    missing = [name for name, value in (
        ("algorithm_name", algorithm_name), ("author", author), ("author_email", author_email),
        ("code_permalink", code_permalink), ("description", description)) if value is None]
    if missing:
        warn(f"{', '.join(missing)} not set: they help others reuse and cite the dataset.")
    return {
        "algorithm_name": algorithm_name, "author": author, "author_email": author_email,
        "code_permalink": code_permalink, "description": description,
        "requirements": requirements, "ref_min_score": ref_min_score,
        "ref_max_score": ref_max_score, "extra": extra,
    }
