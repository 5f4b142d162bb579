"""``FlashbaxDataCollector``: a drop-in for Mava's ``Vault`` that writes a Minari dataset.

A JAX training loop adds experience to a Flashbax flat buffer and hands the buffer state to
``vault.write(buffer_state)`` after every update. Handing it to :meth:`write` instead takes the
timesteps added since the last write, cuts every stream into episodes on its done flags (the
cutting of :mod:`marl_minari.vaults.episodes`, the one ``from_vault`` uses), and appends every
finished episode to the recording journal, durable when ``write`` returns, as the PettingZoo
recorders do: a killed process loses only unfinished episodes, and ``marl-minari recover``
turns the journal into a dataset. The dataset holds what ``Vault.write`` + ``from_vault`` of
the same buffer states hold, episode for episode.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces
from marl_minari.collectors._base import close_recording, minari_metadata
from marl_minari.collectors.in_place import dataset_id_of, refreshed, stored_episode_count
from marl_minari.collectors.parallel import ParallelDataCollector
from marl_minari.collectors.reference_scores import JointPolicy, reference_scores
from marl_minari.collectors.space_checks import SpaceChecks

from marl_minari.errors import (
    BufferOverrunError,
    InvalidOptionError,
    LayoutError,
    StepDataError,
)
from marl_minari.storage.dataset import MultiAgentDataset, open_written
from marl_minari.storage.durable import Durability
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.recording import Recording
from marl_minari.vaults.episodes import (
    Episodes,
    StreamCutter,
    check_flags,
    done_steps,
    stream_rows,
)
from marl_minari.vaults.keys import leaf_text, resolve_keys
from marl_minari.vaults.layout import CutOn, FinalObservation, import_layout, import_options
from marl_minari.vaults.rows import arrays_from_rows
from marl_minari.vaults.structure import LeafInfo

Path_ = tuple[str, ...]


def structure_leaves(tree: Any, prefix: Path_ = ()) -> list[tuple[Path_, Any]]:
    """``(path, leaf)`` of a buffer's experience tree (nested dicts, as Flashbax's vaults
    need), in key order."""
    if isinstance(tree, Mapping):
        out = []
        for key in tree:
            out += structure_leaves(tree[key], (*prefix, str(key)))
        return out
    return [(prefix, tree)]


def experience_leaves(experience: Any, where: str) -> list[LeafInfo]:
    """The leaves of a flat buffer's ``experience``, checked: a dict (nested dicts allowed) of
    numeric or bool arrays that share one batch axis and one time axis, ``(B, T, ...)``.

    Raises:
        LayoutError: not a dict, no leaf, or a leaf (named) of another kind or shape.
    """
    if not isinstance(experience, Mapping):
        raise LayoutError(f"{where} must be a dict of arrays shaped (B, T, ...), as Flashbax's "
                          f"flat buffer holds it, not a {type(experience).__name__}")
    leaves: list[LeafInfo] = []
    for path, leaf in structure_leaves(experience):
        name = leaf_text(path) if path else "experience"
        dtype = getattr(leaf, "dtype", None)
        try:
            kind = np.dtype(dtype).kind if dtype is not None else None
        except TypeError:
            kind = None
        if kind is None or kind not in "biuf":
            raise LayoutError(f"{where}: {name!r} has dtype {dtype}; every leaf must be an "
                              "array of numbers or bools (not complex, object or strings)")
        shape = tuple(int(size) for size in np.shape(leaf))
        if len(shape) < 2:
            raise LayoutError(f"{where}: {name!r} is shaped {shape}; every leaf is shaped "
                              "(B, T, ...) in a flat buffer")
        if leaves and shape[:2] != leaves[0].shape[:2]:
            raise LayoutError(
                f"{where}: {name!r} is shaped {shape} but {leaf_text(leaves[0].path)!r} "
                f"{leaves[0].shape}: every leaf shares one batch axis and one time axis "
                "(B, T, ...)")
        leaves.append(LeafInfo(path, shape, np.dtype(dtype).name))
    if not leaves:
        raise LayoutError(f"{where} holds no array")
    return leaves


def buffer_index(value: Any, time_axis: int) -> int:
    """A buffer state's ``current_index`` as an int in ``[0, time_axis)``.

    Raises:
        StepDataError: not one integer, or outside the time axis.
    """
    found = np.asarray(value) if not isinstance(value, (str, bytes)) else None
    if found is None or found.ndim != 0 or found.dtype.kind not in "iu":
        raise StepDataError(f"buffer_state.current_index must be one integer, not {value!r}: "
                            "pass the state Flashbax's buffer.add returned")
    index = int(found)
    if not 0 <= index < time_axis:
        raise StepDataError(
            f"buffer_state.current_index is {index}, outside the buffer's time axis "
            f"[0, {time_axis}): the state is damaged or was not made by Flashbax's buffer.add; "
            "nothing was written")
    return index


class FlashbaxDataCollector:
    """Records a Flashbax flat buffer's experience as a multi-agent Minari dataset.

    Args:
        experience_structure: ``buffer_state.experience`` (what Mava passes to ``Vault``):
            leaves ``(B, T, ...)``; OG-MARL's or Mava's key names, or ``keys``.
        keys: ``{role: key}`` for another naming (see
            :func:`marl_minari.adapters.from_vault`).
        agents: agent names, ``agent_0..N-1`` by default.
        observation_spaces: ``{agent: space}`` instead of ``Box`` spaces from the structure.
        action_spaces: ``{agent: space}``; needed for integer actions without legal masks
            (with masks, ``Discrete(A)`` from their width).
        cut_on: an episode ends where ``"any"`` agent's done flag is set (Mava and OG-MARL
            copy the team's done to every agent) or ``"all"`` are.
        final_observation: the final observation row of each episode (the buffer has none):
            ``"zeros"`` or ``"repeat"``.
        infer_dead: with legal masks, an all-zero observation whose only legal action is 0
            marks the agent inactive (OG-MARL's dead agents).
        reward_aggregation: how Minari's scalar ``rewards`` is made from the agents' rewards.
        jpeg_encoding: JPEG-encode image observations in the dataset.
        recording_path: folder of the episode journal (a new hidden one by default).
        durability: ``"episode"`` flushes every write's episodes to stable storage.

    Raises:
        LayoutError: the structure is not a dict of numeric or bool arrays sharing one batch
            and one time axis, or its keys or shapes do not fit (named).
        InvalidOptionError: an invalid option, or integer actions with neither legal masks
            nor ``action_spaces``.
    """

    def __init__(self, experience_structure: Any, *, keys: Mapping[str, str] | None = None,
                 agents: Sequence[str] | None = None,
                 observation_spaces: Mapping[str, spaces.Space] | None = None,
                 action_spaces: Mapping[str, spaces.Space] | None = None,
                 cut_on: CutOn = "any", final_observation: FinalObservation = "zeros",
                 infer_dead: bool = True, reward_aggregation: str = "mean",
                 jpeg_encoding: bool = False, recording_path: str | Path | None = None,
                 durability: Durability = "episode") -> None:
        self._options = import_options("truncate", final_observation, cut_on, infer_dead,
                                       reward_aggregation)
        leaves = experience_leaves(experience_structure, "experience_structure")
        self._where = "the buffer's experience"
        self._shapes = {leaf.path: leaf.shape for leaf in leaves}
        key_layout = resolve_keys((leaf.path for leaf in leaves), keys, self._where)
        self.layout = import_layout(leaves, key_layout, 0, self._where, agents=agents,
                                    observation_spaces=observation_spaces,
                                    action_spaces=action_spaces,
                                    max_action=self._no_max_action)
        self.spec = replace(self.layout.spec, reward_aggregation=reward_aggregation)
        self.streams = self.layout.streams
        self.time_axis = leaves[0].shape[1]
        self._paths = [leaf.path for leaf in leaves]
        self._flags = [key_layout.paths[role] for role in key_layout.flag_roles]
        self._cutter = StreamCutter(self.streams)
        self._carry: dict[Path_, np.ndarray] | None = None  # rows from _carry_start on
        self._carry_start = 0
        self._index: int | None = None  # buffer index of the next timestep to take
        self._last_rows: dict[Path_, np.ndarray] | None = None
        self._next_id = 0
        self._closed = False
        self._unstored: deque[MultiAgentEpisode] = deque()
        """Episodes taken by a write whose journal append failed: stored first next time."""
        self.jpeg_encoding = jpeg_encoding
        self._recording = Recording(self.spec, jpeg_encoding=jpeg_encoding,
                                    path=None if recording_path is None else Path(recording_path),
                                    durability=durability)
        self.timesteps = 0
        """Timesteps per stream consumed so far."""
        self._space_checks = SpaceChecks(self.spec)

    @staticmethod
    def _no_max_action() -> int:
        raise InvalidOptionError(
            "the buffer holds integer actions and no legal action mask: pass action_spaces="
            "{agent: gymnasium.spaces.Discrete(n)} (the number of actions cannot be read from "
            "a buffer that is still empty)")

    # ------------------------------------------------------------------ recording

    @property
    def recording_path(self) -> Path:
        """Folder of the durable episode journal."""
        return self._recording.path

    @property
    def durable_episodes(self) -> int:
        """Finished episodes in the journal, not yet in a dataset."""
        return self._recording.episodes

    def write(self, buffer_state: Any) -> int:
        """Take the timesteps added to the buffer since the last write.

        Every episode they finish is in the journal (durable) when this returns; steps after
        a stream's last done wait for the next write.

        Args:
            buffer_state: the Flashbax buffer state (``experience``, ``current_index``,
                ``is_full``), as ``Vault.write`` takes it.

        Returns:
            The number of new timesteps (per stream) consumed; 0 when nothing is new.

        Raises:
            BufferOverrunError: the buffer wrapped past timesteps not written yet (they are
                lost): write at least every ``T - 1`` timesteps (``T`` the buffer's time axis).
            StepDataError: ``current_index`` is not one integer in ``[0, T)``.
            LayoutError: the experience's leaves or shapes are not those of
                ``experience_structure`` (named).
            InvalidOptionError: ``buffer_state`` is not a buffer state (its experience
                alone, say), or the collector is closed.
        """
        if self._closed:
            raise InvalidOptionError("write after close(): this collector's journal is "
                                     "closed; make a new FlashbaxDataCollector to go on")
        if not all(hasattr(buffer_state, name)
                   for name in ("experience", "current_index", "is_full")):
            raise InvalidOptionError(
                f"write takes the buffer state (what buffer.add returns: experience, "
                f"current_index, is_full), not a {type(buffer_state).__name__}; pass the "
                "whole state, as to Vault.write")
        leaves = self._checked_experience(buffer_state.experience)
        current = buffer_index(buffer_state.current_index, self.time_axis)
        full = bool(buffer_state.is_full)
        if self._index is None:
            if full:
                raise self._overrun("it is already full at the first write")
            start, count = 0, current
        else:
            start = self._index
            count = (current - start) % self.time_axis
            self._check_not_overrun(leaves, start)
        if count == 0:
            return 0
        positions = (start + np.arange(count)) % self.time_axis
        if positions[0] + count <= self.time_axis:
            block = {p: np.asarray(leaves[p][:, start:start + count]) for p in self._paths}
        else:
            block = {p: np.asarray(leaves[p][:, positions]) for p in self._paths}
        taken = (self._index, self._last_rows, self._carry, self._carry_start, self.timesteps,
                 self._cutter.position, self._cutter.open_starts.copy())
        next_id = self._next_id
        self._last_rows = {p: v[:, -1].copy() for p, v in block.items()}
        self._index = current
        try:
            self._consume(block)
        except BaseException:
            # A write refused before it took its episodes (values their spaces cannot hold)
            # takes nothing: the next write meets the same timesteps, and the same error,
            # instead of going on without the episodes this one finished. Episodes taken and
            # not journalled (a failed append) are journalled first by the next write.
            if self._next_id == next_id:
                (self._index, self._last_rows, self._carry, self._carry_start, self.timesteps,
                 self._cutter.position, self._cutter.open_starts) = taken
            raise
        return count

    def _checked_experience(self, experience: Any) -> dict[Path_, Any]:
        """``{path: leaf}`` of a buffer state's experience, which must hold the leaves and
        shapes of ``experience_structure``."""
        where = "buffer_state.experience"
        found = {leaf.path: leaf.shape for leaf in experience_leaves(experience, where)}
        for path, shape in self._shapes.items():
            if found.get(path) != shape:
                raise LayoutError(
                    f"{where}: {leaf_text(path)!r} is shaped {found.get(path)}, but "
                    f"{shape} in experience_structure: write the states of the buffer the "
                    "collector was made for")
        return dict(structure_leaves(experience))

    def _check_not_overrun(self, leaves: dict[Path_, Any], start: int) -> None:
        """The timestep taken last is still where it was: the buffer did not wrap past
        unwritten timesteps (which would have overwritten it first)."""
        assert self._last_rows is not None
        last = (start - 1) % self.time_axis
        for path in self._paths:
            if not np.array_equal(np.asarray(leaves[path][:, last]), self._last_rows[path]):
                raise self._overrun(
                    f"{leaf_text(path)!r} at buffer index {last} (taken at the last write) was "
                    "overwritten")

    def _overrun(self, what: str) -> BufferOverrunError:
        return BufferOverrunError(
            f"the buffer wrapped past timesteps not written yet ({what}): they are lost. Its "
            f"time axis holds {self.time_axis} timesteps: call write(buffer_state) at least "
            f"every {self.time_axis - 1} timesteps added (e.g. after every update), or make "
            "the buffer larger")

    def _consume(self, block: dict[Path_, np.ndarray]) -> None:
        for path in self._flags:
            check_flags(block[path], leaf_text(path), self.timesteps, self._where)
        legals = self.layout.keys.path("legals")
        if legals is not None:
            check_flags(block[legals], leaf_text(legals), self.timesteps, self._where)
        if self._carry is None:
            self._carry = block
        else:
            self._carry = {p: np.concatenate([self._carry[p], block[p]], axis=1)
                           for p in self._paths}
        self.timesteps += next(iter(block.values())).shape[1]
        ended = self._cutter.push(done_steps([block[p] for p in self._flags],
                                             self._options.cut_on))
        self._store(ended)
        keep_from = int(self._cutter.open_starts.min())
        self._carry = {p: v[:, keep_from - self._carry_start:] for p, v in self._carry.items()}
        self._carry_start = keep_from

    def _store(self, episodes: Episodes) -> None:
        """Journal ``episodes`` (after any a failed append left out)."""
        if not len(episodes):
            self._store_unstored()
            return
        assert self._carry is not None
        rows = stream_rows(self._carry, episodes, self._carry_start)
        arrays = arrays_from_rows(self.layout, self._options, self.spec, rows,
                                  episodes.lengths.copy(), self._next_id, self._where)
        first, self._next_id = self._next_id, self._next_id + len(episodes)  # taken
        self._unstored.extend(arrays.episode(position) for position in range(len(episodes)))
        self._store_unstored()
        self._space_checks.check_arrays(arrays, first)  # once they are stored

    def _store_unstored(self) -> None:
        """Journal the episodes taken and not stored yet, in order, each once (a failed
        append leaves it and those after it for the next try)."""
        while self._unstored:
            self._recording.append(self._unstored[0])
            self._unstored.popleft()

    def _end_unfinished(self) -> None:
        """Store each stream's steps after its last done as a truncated episode."""
        rest = self._cutter.unfinished()
        self._store(rest)
        self._cutter.open_starts[:] = self._cutter.position
        if self._carry is not None:
            self._carry = {p: v[:, v.shape[1]:] for p, v in self._carry.items()}
            self._carry_start = self._cutter.position

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
    ) -> MultiAgentDataset:
        """Create a Minari dataset from every episode so far (Minari's arguments, in its
        order, as the PettingZoo collectors' ``create_dataset``).

        Each stream's steps after its last done end here as a truncated episode, as Minari's
        ``DataCollector`` saves an unfinished episode; later writes start new episodes. A JAX
        env is not re-created from the dataset: ``eval_env`` (a PettingZoo env or id of the
        same game) is what ``recover_environment`` can make, and the env the reference
        scores of ``expert_policy`` are played in.

        Raises:
            InvalidDatasetIdError: malformed id.
            DatasetExistsError: the id is taken.
            InvalidOptionError: both ``expert_policy`` and ``ref_max_score``.
            EnvDescriptorError: reference scores asked for without an ``eval_env``.
        """
        scores = reference_scores(
            self.spec, ParallelDataCollector, dataset_id=dataset_id, eval_env=eval_env,
            ref_min_score=ref_min_score, ref_max_score=ref_max_score, expert_policy=expert_policy,
            num_episodes_average_score=num_episodes_average_score).metadata
        self._end_unfinished()
        folder = self._recording.write_dataset(dataset_id, **minari_metadata(
            algorithm_name, author, author_email, code_permalink, description, requirements,
            scores.pop("ref_min_score", None), scores.pop("ref_max_score", None),
            {**scores, **(extra_metadata or {})}))
        return open_written(folder / "data", self.spec, jpeg_encoding=self.jpeg_encoding)

    def add_to_dataset(self, dataset: Any) -> MultiAgentDataset:
        """Append every episode so far (unfinished ones end truncated) to a dataset: the
        dataset object (updated in place, as Minari's) or its id."""
        dataset_id = dataset_id_of(dataset)
        before = stored_episode_count(dataset)
        self._end_unfinished()
        self._recording.add_to_dataset(dataset_id)
        return refreshed(dataset, before)  # type: ignore[no-any-return]

    def close(self) -> None:
        """Close the journal; episodes in no dataset yet stay recoverable (with a warning).
        Steps of unfinished episodes are not kept; finished episodes a failed journal append
        left out are journalled first."""
        if self._closed:
            return
        try:
            self._store_unstored()
        finally:
            self._closed = True
            close_recording(self._recording)

    def __enter__(self) -> FlashbaxDataCollector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
