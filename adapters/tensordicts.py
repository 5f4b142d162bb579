"""Datasets as TorchRL TensorDicts and replay buffers, in TorchRL's multi-agent conventions.

:func:`to_tensordict` turns anything :func:`marl_minari.sources.open_source` opens (a dataset
or a Flashbax vault) into a memory-mapped
``TensorDict`` of transitions with exactly the keys TorchRL's own ``PettingZooWrapper``
(``use_mask=True``) produces for the same environment; :func:`make_torchrl_buffer` lays
several sources into one ``TensorDictReplayBuffer`` over a ``LazyMemmapStorage`` and samples
whole-episode slices with TorchRL's ``SliceSampler``.

Both stream chunk by chunk (:data:`~marl_minari.sources.DEFAULT_CHUNK_STEPS` steps at a time):
peak memory is proportional to the chunk, whatever the dataset's size (``docs/torch.md``).
Needs the ``torch`` extra (``pip install "marl-minari[torch]"``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from marl_minari.errors import (
    DatasetExistsError,
    IncompatibleSourcesError,
    InvalidOptionError,
    MissingExtraError,
)
from marl_minari.extras import require
from marl_minari.format import layout
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.sources import (
    DatasetSource,
    check_chunk_steps,
    check_source_weights,
    open_source,
)
from marl_minari.storage.arrays import MultiAgentArrays, recorded_mask

TRAJ_KEY: Final = ("collector", "traj_ids")
"""Key of each transition's trajectory id (the dataset's episode id in :func:`to_tensordict`,
an id unique across sources in :func:`make_torchrl_buffer`)."""
EPISODE_KEY: Final = ("collector", "episode_id")
"""Key of each transition's episode id in its own dataset."""
SOURCE_KEY: Final = "source"
"""Key of each transition's source index in :func:`make_torchrl_buffer`'s buffer."""
DONE_KEYS: Final = ("done", "terminated", "truncated")


def _require_torch() -> None:
    for module in ("torch", "tensordict", "torchrl"):
        require(module, "torch", "the TorchRL bridge")


# --------------------------------------------------------------------------- grouping


def default_group_map(spec: MultiAgentSpec) -> dict[str, list[str]]:
    """TorchRL ``PettingZooWrapper``'s default grouping: one group per agent for turn-based
    (AEC) datasets; otherwise agents named ``<name>_<int>`` share the group ``<name>`` and
    every other agent is a group of its own."""
    agents = list(spec.possible_agents)
    if spec.api == "aec":
        return {agent: [agent] for agent in agents}
    groups: dict[str, list[str]] = {}
    for agent in agents:
        head, _, tail = agent.rpartition("_")
        groups.setdefault(head if head and tail.isdigit() else agent, []).append(agent)
    return groups


def _check_group_map(spec: MultiAgentSpec, group_map: Mapping[str, Sequence[str]]) -> None:
    named = [a for agents in group_map.values() for a in agents]
    if sorted(named) != sorted(spec.possible_agents):
        raise InvalidOptionError(
            f"group_map must name every agent once: it names {named}, the dataset has "
            f"{list(spec.possible_agents)}")
    for group, agents in group_map.items():
        for agent in agents[1:]:
            for kind, table in (("observation", spec.observation_spaces),
                                ("action", spec.action_spaces)):
                if table[agent] != table[agents[0]]:
                    raise InvalidOptionError(
                        f"group {group!r} mixes {kind} spaces: {agent!r} has {table[agent]}, "
                        f"{agents[0]!r} has {table[agents[0]]}; put them in separate groups")


# --------------------------------------------------------------------------- transitions


@dataclass(frozen=True)
class _Plan:
    """How a chunk of episodes becomes a TensorDict of transitions."""

    agents: tuple[str, ...]
    group_map: dict[str, list[str]]
    turn_based: bool


def _stack(values: list[Any]) -> Any:
    """Stack per-agent trees (dicts of arrays, or arrays) along a new axis 1."""
    if isinstance(values[0], Mapping):
        return {key: _stack([v[key] for v in values]) for key in values[0]}
    return np.stack([np.asarray(v) for v in values], axis=1)


def _rows(tree: Any, rows: np.ndarray) -> Any:
    if isinstance(tree, Mapping):
        return {k: _rows(v, rows) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return {str(i): _rows(v, rows) for i, v in enumerate(tree)}
    return np.asarray(tree)[rows]


def _observation(tree: Any) -> Any:
    """An agent's observation tree without its legal-action mask (which TorchRL keeps apart,
    under ``action_mask``)."""
    if isinstance(tree, Mapping):
        return {k: v for k, v in tree.items() if k != layout.ACTION_MASK_KEY}
    return tree


def _previous(values: np.ndarray, first: np.ndarray) -> np.ndarray:
    """``values`` shifted one step later, ``False`` at each episode's first step."""
    shifted = np.zeros_like(values)
    shifted[1:] = values[:-1]
    shifted[first] = False
    return shifted


def _chunk_dict(plan: _Plan, arrays: MultiAgentArrays) -> dict[Any, Any]:
    """One chunk's transitions as a nested dict of arrays, every leaf ``(S, ...)``."""
    obs_rows, next_rows = arrays.obs_rows, arrays.next_obs_rows
    steps = len(obs_rows)
    first = np.zeros(steps, dtype=bool)
    first[arrays.step_starts] = True
    index = {a: i for i, a in enumerate(arrays.possible_agents)}
    if plan.turn_based and layout.AGENT_SELECTION in arrays.extras:
        selection = np.asarray(arrays.extras[layout.AGENT_SELECTION])
        present = selection[:, None] == np.arange(len(arrays.possible_agents))[None, :]
    else:
        present = np.asarray(arrays.active, dtype=bool)
    root: dict[Any, Any] = {}
    nxt: dict[Any, Any] = {}
    for group, agents in plan.group_map.items():
        columns = [index[a] for a in agents]
        observations = _stack([_observation(arrays.observations[a]) for a in agents])
        masks = [recorded_mask(arrays, a) for a in agents]
        terminated = arrays.terminations[:, columns, None].astype(bool)
        truncated = arrays.truncations[:, columns, None].astype(bool)
        flags = {"terminated": terminated, "truncated": truncated,
                 "done": terminated | truncated}
        here: dict[str, Any] = {
            "observation": _rows(observations, obs_rows),
            "action": _rows(_stack([arrays.actions[a] for a in agents]), np.arange(steps)),
            "mask": present[obs_rows][:, columns],
            **{k: _previous(v, first) for k, v in flags.items()},
        }
        after: dict[str, Any] = {
            "observation": _rows(observations, next_rows),
            "mask": present[next_rows][:, columns],
            "reward": arrays.rewards[:, columns, None].astype(np.float32),
            **flags,
        }
        if all(m is not None for m in masks):
            stacked = np.stack([np.asarray(m) for m in masks], axis=1).astype(bool)
            here["action_mask"] = stacked[obs_rows]
            after["action_mask"] = stacked[next_rows]
        root[group] = here
        nxt[group] = after
    terminated = np.asarray(arrays.episode_terminations, dtype=bool)[:, None]
    truncated = np.asarray(arrays.episode_truncations, dtype=bool)[:, None]
    flags = {"terminated": terminated, "truncated": truncated, "done": terminated | truncated}
    root.update({k: _previous(v, first) for k, v in flags.items()})
    nxt.update(flags)
    if arrays.state is not None:
        root["state"] = np.asarray(arrays.state)[obs_rows]
        nxt["state"] = np.asarray(arrays.state)[next_rows]
    episodes = np.asarray(arrays.episode_ids, dtype=np.int64)[arrays.step_episode]
    root["collector"] = {"traj_ids": episodes, "episode_id": episodes.copy()}
    root["next"] = nxt
    return root


def _to_td(tree: dict[Any, Any], steps: int) -> Any:
    """A nested dict of arrays as a TensorDict; agent groups get batch ``(S, n_agents)``,
    as TorchRL's wrapper gives them."""
    import torch
    from tensordict import TensorDict

    def convert(node: Any, batch: tuple[int, ...]) -> Any:
        if isinstance(node, Mapping):
            return TensorDict({k: convert(v, batch) for k, v in node.items()},
                              batch_size=batch)
        return torch.from_numpy(np.ascontiguousarray(node))

    out = TensorDict({}, batch_size=(steps,))
    for key, value in tree.items():
        if key == "next":
            out["next"] = _to_td(value, steps)
        elif isinstance(value, Mapping) and "mask" in value:
            out[key] = convert(value, (steps, value["mask"].shape[1]))
        else:
            out[key] = convert(value, (steps,))
    return out


def transition_chunks(source: DatasetSource, *, group_map: Mapping[str, Sequence[str]] | None
                      = None, chunk_steps: int | None = None) -> Iterator[Any]:
    """Yield the source's transitions as TensorDicts of whole episodes, about
    ``chunk_steps`` steps each."""
    _require_torch()
    check_chunk_steps(chunk_steps)
    groups = {g: list(a) for g, a in (group_map or default_group_map(source.spec)).items()}
    _check_group_map(source.spec, groups)
    plan = _Plan(source.spec.possible_agents, groups, source.spec.api == "aec")
    for arrays in source.chunks(chunk_steps):
        steps = int(arrays.episode_lengths.sum())
        if steps:
            yield _to_td(_chunk_dict(plan, arrays), steps)


def to_tensordict(source: Any, *, path: str | os.PathLike[str] | None = None,
                  group_map: Mapping[str, Sequence[str]] | None = None,
                  chunk_steps: int | None = None, download: bool = False) -> Any:
    """A dataset's transitions as one memory-mapped TensorDict of batch ``(T,)``.

    Args:
        source: anything :func:`marl_minari.sources.open_source` opens (a dataset id,
            folder or URL, a ``MinariDataset``, a ``MultiAgentDataset``, a vault folder).
        path: folder for the memory-mapped tensors (a new temporary folder by default; it is
            not removed, the TensorDict lives in it).
        group_map: ``{group: [agents]}``; TorchRL's default grouping by default
            (:func:`default_group_map`).
        chunk_steps: steps read and converted at a time.
        download: fetch a dataset id that is not local.

    Returns:
        A TensorDict with, per group, ``(group, "observation")`` ``(T, n, ...)`` (a nested
        TensorDict for ``Dict`` observations), ``(group, "action")``, ``(group, "mask")``
        ``(T, n)``, ``(group, "action_mask")`` where masks are recorded, ``(group, "done" |
        "terminated" | "truncated")`` ``(T, n, 1)``; ``("next", group, ...)`` the same after
        the step plus ``"reward"`` ``(T, n, 1)``; root ``done``/``terminated``/``truncated``
        ``(T, 1)`` (the episode's end), ``state`` where recorded, and
        ``("collector", "traj_ids" | "episode_id")`` the dataset's episode ids.
    """
    _require_torch()
    check_chunk_steps(chunk_steps)
    if path is not None:
        _check_new_folder(Path(path))
    folder = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="marl-minari-td-"))
    with open_source(source, download=download) as opened:
        total = opened.total_steps
        out = None
        cursor = 0
        for chunk in transition_chunks(opened, group_map=group_map, chunk_steps=chunk_steps):
            if out is None:
                out = chunk[:1].expand(total).memmap_like(folder)
            out[cursor:cursor + chunk.shape[0]] = chunk
            cursor += chunk.shape[0]
    if out is None:
        raise InvalidOptionError(f"{source!r} has no steps to convert; record some first")
    return out


def _check_new_folder(folder: Path) -> None:
    """Refuse a ``path`` that holds anything: the memory-mapped files of another TensorDict,
    still in use, would be written over.

    Raises:
        DatasetExistsError: a file, or a folder that is not empty.
    """
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        what = "is a file" if not folder.is_dir() else "holds files (another TensorDict's?)"
        raise DatasetExistsError(
            f"to_tensordict path {folder} {what}: a TensorDict's memory-mapped files are "
            "never written over; give a new or empty folder")


# --------------------------------------------------------------------------- buffers


def _signature(chunk: Any) -> dict[Any, tuple[tuple[int, ...], str]]:
    return {key: (tuple(value.shape[1:]), str(value.dtype))
            for key, value in chunk.items(include_nested=True, leaves_only=True)
            if key not in (TRAJ_KEY, EPISODE_KEY)}


def _check_same(index: int, name: str, first_name: str, base: dict[Any, Any],
                other: dict[Any, Any]) -> None:
    where = f"source {index} ({name!r}) and source 0 ({first_name!r})"
    only = sorted(str(k) for k in set(base) ^ set(other))
    if only:
        raise IncompatibleSourcesError(
            f"{where} have different keys: {only[0]} is in only one of them; combine sources "
            "of the same environment and agents")
    for key, (shape, dtype) in base.items():
        if other[key] != (shape, dtype):
            raise IncompatibleSourcesError(
                f"{where} differ in {key}: per-step shape {other[key][0]} {other[key][1]} vs "
                f"{shape} {dtype}")


def make_torchrl_buffer(sources: Sequence[Any], batch_size: int, *, slice_len: int | None = None,
                        weights: Sequence[float] | None = None,
                        group_map: Mapping[str, Sequence[str]] | None = None,
                        chunk_steps: int | None = None,
                        scratch_dir: str | os.PathLike[str] | None = None,
                        download: bool = False) -> Any:
    """Several datasets in one TorchRL ``TensorDictReplayBuffer`` over a
    ``LazyMemmapStorage``.

    Args:
        sources: datasets (anything :func:`to_tensordict` takes) with the same agents, keys,
            shapes and dtypes.
        batch_size: transitions per ``sample()`` (TorchRL's convention: with ``slice_len``,
            ``batch_size // slice_len`` slices of ``slice_len`` steps, flattened).
        slice_len: sample slices of this many consecutive steps of one episode
            (``SliceSampler`` on ``("collector", "traj_ids")``; slices never cross episodes
            and episodes shorter than ``slice_len`` are never drawn); ``None`` samples single
            transitions.
        weights: relative probability of drawing from each source (by default every
            transition is equally likely); a source is drawn by weight for every slice, then
            a slice uniformly among the source's slices that stay inside one episode.
        group_map: as :func:`to_tensordict`.
        chunk_steps: steps read and converted at a time.
        scratch_dir: folder of the memory-mapped storage (a temporary one by default).
        download: fetch dataset ids that are not local.

    Returns:
        The buffer; each sample holds :func:`to_tensordict`'s keys, ``source`` (the index of
        the transition's source in ``sources``) and ``("collector", "traj_ids")`` unique
        across sources (``("collector", "episode_id")`` keeps each dataset's own id).

    Raises:
        IncompatibleSourcesError: two sources differ; the message names the first mismatch.
        InvalidOptionError: bad sizes or weights.
    """
    _require_torch()
    from torchrl.data import LazyMemmapStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import RandomSampler, SliceSampler

    check_chunk_steps(chunk_steps)
    if not sources:
        raise InvalidOptionError("make_torchrl_buffer needs at least one source")
    if batch_size < 1 or (slice_len is not None and (slice_len < 1 or batch_size % slice_len)):
        raise InvalidOptionError(
            f"batch_size must be >= 1 and a multiple of slice_len (got batch_size={batch_size}, "
            f"slice_len={slice_len})")
    check_source_weights(weights, len(sources))
    with ExitStack() as stack:
        opened = [stack.enter_context(open_source(s, download=download)) for s in sources]
        total = sum(s.total_steps for s in opened)
        storage = LazyMemmapStorage(max(total, 1), scratch_dir=scratch_dir)
        episode_lengths = _fill(storage, opened, group_map, chunk_steps)
    if not sum(int(np.sum(lengths)) for lengths in episode_lengths):
        raise InvalidOptionError("the sources hold no steps")
    sampler: Any
    if weights is not None:
        from ._weighted import WeightedSliceSampler

        sampler = WeightedSliceSampler(episode_lengths, weights, slice_len or 1,
                                       [s.name for s in opened])
    elif slice_len is None:
        sampler = RandomSampler()
    else:
        # The storage never changes: trajectory bounds are computed once, not per sample.
        sampler = SliceSampler(slice_len=slice_len, traj_key=TRAJ_KEY, strict_length=True,
                               cache_values=True)
    return TensorDictReplayBuffer(storage=storage, sampler=sampler, batch_size=batch_size)


def _fill(storage: Any, opened: list[DatasetSource], group_map: Mapping[str, Sequence[str]] |
          None, chunk_steps: int | None) -> list[np.ndarray]:
    """Stream every source into the storage, end to end; return each source's episode
    lengths."""
    import torch

    base: dict[Any, Any] | None = None
    traj_offset = 0
    cursor = 0
    lengths: list[np.ndarray] = []
    for index, source in enumerate(opened):
        top = -1
        found: list[np.ndarray] = []
        for chunk in transition_chunks(source, group_map=group_map, chunk_steps=chunk_steps):
            signature = _signature(chunk)
            base = signature if base is None else base
            _check_same(index, source.name, opened[0].name, base, signature)
            episodes = chunk.get(EPISODE_KEY)
            found.append(torch.unique_consecutive(episodes, return_counts=True)[1].numpy())
            chunk.set(TRAJ_KEY, episodes + traj_offset)
            chunk.set(SOURCE_KEY, torch.full((chunk.shape[0],), index, dtype=torch.int64))
            top = max(top, int(episodes.max()))
            storage.set(torch.arange(cursor, cursor + chunk.shape[0]), chunk)
            cursor += chunk.shape[0]
        lengths.append(np.concatenate(found) if found else np.zeros(0, dtype=np.int64))
        traj_offset += top + 1
    return lengths


__all__ = ["EPISODE_KEY", "SOURCE_KEY", "TRAJ_KEY", "MissingExtraError", "default_group_map",
           "make_torchrl_buffer", "to_tensordict", "transition_chunks"]
