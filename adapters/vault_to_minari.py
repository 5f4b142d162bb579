"""Flashbax vault -> Minari dataset, streaming in time windows.

Two paths:

* **restore**: the vault was written by :func:`to_vault` (it has the ``marl_minari`` metadata
  and restoration arrays): the original dataset is rebuilt exactly, metadata included.
* **import**: any vault in OG-MARL's conventions: episodes are cut where an agent's
  ``terminals`` or ``truncations`` flag is set, spaces are inferred from shapes and dtypes
  (or given), agents are named ``agent_0..N-1`` (or given).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.errors import (
    DatasetExistsError,
    InvalidOptionError,
    LayoutError,
    StepDataError,
)
from marl_minari.format import layout
from marl_minari.format.ids import dataset_dir
from marl_minari.format.returns import REWARD_AGGREGATIONS, team_rewards
from marl_minari.format.spaces import (
    build_tree,
    is_image_space,
    leaf_spaces,
    map_tree,
    rows_outside,
)
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.sources import DEFAULT_CHUNK_STEPS, check_chunk_steps, load_dataset, spec_of
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.dataset import MultiAgentDataset
from marl_minari.storage.episode_writer import LeafEpisode
from marl_minari.storage.writer import write_dataset

from ._exact import ExactField, ExactSource, decode_json, restore_arrays
from ._import_layout import (
    CutOn,
    FinalObservation,
    ImportLayout,
    ImportOptions,
    Trailing,
    import_layout,
)
from ._leaves import leaf_episodes
from ._store import VaultReader, flatten_structure, leaf_name, vault_dir
from ._view import (
    ACTIONS,
    LEGALS,
    OBSERVATIONS,
    REWARDS,
    STATE,
    TERMINALS,
    TRUNCATIONS,
    VAULT_SOURCE_KEY,
    AgentFlat,
    ViewPlan,
)
from .minari_to_vault import VAULT_METADATA_KEY
from .sources import writer_metadata


def from_vault(
    rel_dir: str | os.PathLike[str],
    vault_name: str,
    vault_uid: str,
    dataset_id: str,
    *,
    agents: Sequence[str] | None = None,
    observation_spaces: Mapping[str, spaces.Space] | None = None,
    action_spaces: Mapping[str, spaces.Space] | None = None,
    trailing: Trailing = "truncate",
    final_observation: FinalObservation = "zeros",
    cut_on: CutOn = "any",
    infer_dead: bool = True,
    reward_aggregation: str = "mean",
    restore: bool | None = None,
    jpeg_encoding: bool | None = None,
    chunk_steps: int = DEFAULT_CHUNK_STEPS,
    progress: bool = False,
    **metadata: Any,
) -> MultiAgentDataset:
    """Convert a Flashbax vault into a multi-agent Minari dataset.

    Args:
        rel_dir: base folder of vaults (relative to the working directory, as Flashbax).
        vault_name: the vault's name.
        vault_uid: the vault's uid (``Good``, ``Medium``, a timestamp...).
        dataset_id: id of the new dataset (``namespace/name-vN``).
        agents: agent names, ``agent_0..N-1`` by default (import only).
        observation_spaces: ``{agent: space}`` to use instead of inferred ``Box`` spaces; each
            must flatten to the agent's observation row (import only).
        action_spaces: ``{agent: space}`` instead of inferred ones (``Discrete(A)`` with ``A``
            the legal mask width, or the largest action + 1, for integer actions shaped
            ``(B, T, N)`` or ``(B, T, N, 1)``; ``Box`` otherwise).
        trailing: what to do with steps after a stream's last done flag: ``"truncate"`` ends
            them as a truncated episode (as Minari's ``DataCollector`` saves an unfinished
            episode), ``"drop"`` leaves them out, ``"error"`` raises before writing.
        final_observation: row ``T`` of each episode (vaults have no final observation):
            ``"zeros"`` (fill values, every agent inactive in that row) or ``"repeat"`` (row
            ``T - 1`` again, with its presence flags).
        cut_on: an episode ends at a step where ``"any"`` agent (OG-MARL copies the team's
            done to every agent) or ``"all"`` agents are terminated or truncated.
        infer_dead: with legal masks, an agent whose observation is all zeros and whose only
            legal action is 0 (how OG-MARL stores dead agents) is marked inactive.
        reward_aggregation: how the scalar ``rewards`` column is made from the agents'
            rewards (``"mean"``: OG-MARL copies the team reward to every agent).
        restore: rebuild the original dataset from a vault written by :func:`to_vault`
            (default: whenever its metadata is there); ``False`` imports it like any vault.
        jpeg_encoding: JPEG-encode image observations in the new dataset; by default off when
            the data has image leaves (re-encoding is lossy), else the original's setting.
        chunk_steps: time steps read at a time (memory is proportional to it, plus the
            longest episode).
        progress: show a progress bar.
        **metadata: Minari metadata for the new dataset (``algorithm_name``, ``author``,
            ``author_email``, ``code_permalink``, ``description``, ``extra``...); on restore
            they override the original's.

    Returns:
        The new dataset (``.minari`` is the plain ``MinariDataset``).

    Raises:
        DatasetNotFoundError: no vault at ``rel_dir/vault_name/vault_uid``.
        LayoutError: the vault does not follow OG-MARL's conventions (the message names the
            array and its shape), or ends mid-episode with ``trailing="error"``.
        DatasetExistsError: ``dataset_id`` exists.
    """
    if trailing not in ("drop", "truncate", "error"):
        raise InvalidOptionError(
            f"trailing must be 'drop', 'truncate' or 'error', got {trailing!r}")
    if final_observation not in ("zeros", "repeat"):
        raise InvalidOptionError(f"final_observation must be 'zeros' or 'repeat', got "
                                 f"{final_observation!r}")
    if cut_on not in ("any", "all"):
        raise InvalidOptionError(f"cut_on must be 'any' or 'all', got {cut_on!r}")
    if reward_aggregation not in REWARD_AGGREGATIONS:
        raise InvalidOptionError(f"reward_aggregation must be one of "
                                 f"{list(REWARD_AGGREGATIONS)}, got {reward_aggregation!r}")
    check_chunk_steps(chunk_steps)
    target = dataset_dir(dataset_id)
    if target.exists():
        raise DatasetExistsError(f"dataset {dataset_id!r} already exists at {target}; pick a "
                                 "new version (-vN+1)")
    reader = VaultReader(vault_dir(rel_dir, vault_name, vault_uid))
    ours = reader.metadata.get(VAULT_METADATA_KEY)
    if restore is None:
        restore = isinstance(ours, dict) and "exact" in ours
    if restore:
        if not isinstance(ours, dict) or "exact" not in ours:
            raise LayoutError(f"vault {reader.path} was not written by marl-minari's to_vault: "
                              "nothing to restore (use restore=False)")
        _restore(reader, ours, dataset_id, jpeg_encoding=jpeg_encoding,
                 chunk_steps=chunk_steps, progress=progress, metadata=metadata)
    else:
        options = ImportOptions(trailing=trailing, final_observation=final_observation,
                                cut_on=cut_on, infer_dead=infer_dead,
                                reward_aggregation=reward_aggregation)
        layout_ = import_layout(reader, agents, observation_spaces, action_spaces)
        _import(reader, layout_, options, dataset_id, vault_name=vault_name,
                vault_uid=vault_uid, jpeg_encoding=bool(jpeg_encoding),
                chunk_steps=chunk_steps, progress=progress, metadata=metadata)
    return load_dataset(dataset_id)


# =============================================================================== restore


def _restore(reader: VaultReader, ours: dict[str, Any], dataset_id: str, *,
             jpeg_encoding: bool | None, chunk_steps: int, progress: bool,
             metadata: dict[str, Any]) -> None:
    plan = ViewPlan.from_dict(ours["view"])
    spec = spec_of(ours["minari_metadata"], bool(ours["multi_agent"]))
    source = ExactSource(reader, [ExactField.from_dict(d) for d in ours["exact"]])
    total = int(ours["episodes"])
    head = source.read_fields(["episode/length", "episode/stream"], "episode", (0, total))
    lengths = head["episode/length"].astype(np.int64)
    streams = head["episode/stream"].astype(np.int64)
    original = dict(ours["minari_metadata"])
    if jpeg_encoding is None:
        jpeg_encoding = False if _has_images(spec) else bool(original.get("jpeg_encoding", True))
    if not jpeg_encoding and spec.state_encoding == "jpeg":
        # The vault holds decoded pixels: keep them exact, and compact.
        spec = replace(spec, state_encoding="lzf")
    kwargs = writer_metadata(original, spec.extra)
    kwargs["extra"] = {**kwargs["extra"], **(metadata.pop("extra", None) or {})}
    kwargs.update(metadata)
    episodes = _restored_episodes(reader, plan, spec, source, lengths, streams, chunk_steps)
    write_dataset(dataset_id, episodes, spec, jpeg_encoding=jpeg_encoding,
                  progress=f"{reader.path.name} -> {dataset_id}" if progress else False,
                  total=total, **kwargs)


def _has_images(spec: MultiAgentSpec) -> bool:
    return any(is_image_space(leaf) for agent in spec.possible_agents
               for field in (spec.observation_spaces, spec.action_spaces)
               for _, leaf in leaf_spaces(field[agent]))


def _restored_episodes(reader: VaultReader, plan: ViewPlan, spec: MultiAgentSpec,
                       source: ExactSource, lengths: np.ndarray, streams: np.ndarray,
                       chunk_steps: int) -> Iterator[LeafEpisode]:
    starts_in_stream = _stream_starts(lengths, streams)
    step_starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    planned = plan.keys()
    view_keys = [leaf.path for leaf in reader.leaves if leaf.path in planned]
    e0 = 0
    while e0 < len(lengths):
        e1 = int(np.searchsorted(step_starts, step_starts[e0] + chunk_steps, side="left"))
        e1 = min(max(e1, e0 + 1), len(lengths))
        s0, s1 = int(step_starts[e0]), int(step_starts[e1])
        episode_fields = source.read_fields(
            [f.field for f in source.fields if f.rows == "episode"], "episode", (e0, e1))
        row_fields = source.read_rows((s0, s1), (s0 + e0, s1 + e1))
        view = _read_view(reader, view_keys, streams[e0:e1], starts_in_stream[e0:e1],
                          lengths[e0:e1])
        arrays = restore_arrays(plan, spec, view, {**episode_fields, **row_fields},
                                lengths[e0:e1], np.arange(e0, e1, dtype=np.int64))
        _check_actions(spec, arrays.actions, arrays.acted, e0, lengths[e0:e1],
                       f"vault {reader.path}")
        seeds = [int(seed) if has else None for seed, has in zip(
            episode_fields["episode/seed"].tolist(), episode_fields["episode/has_seed"].tolist(),
            strict=True)]
        options = [decode_json(text) if text else None
                   for text in episode_fields["episode/options"].tolist()]
        yield from leaf_episodes(arrays, seeds, options)
        e0 = e1


def _stream_starts(lengths: np.ndarray, streams: np.ndarray) -> np.ndarray:
    """Each episode's first row in its stream (episodes of a stream are in order)."""
    starts = np.zeros(len(lengths), dtype=np.int64)
    for stream in np.unique(streams).tolist():
        mask = streams == stream
        stream_lengths = lengths[mask]
        starts[mask] = np.concatenate([[0], np.cumsum(stream_lengths)[:-1]])
    return starts


def _read_view(reader: VaultReader, keys: list[tuple[str, ...]], streams: np.ndarray,
               starts: np.ndarray, lengths: np.ndarray) -> dict[tuple[str, ...], np.ndarray]:
    """The view rows of consecutive episodes, in episode order."""
    ranges = {}
    for stream in np.unique(streams).tolist():
        mask = streams == stream
        ranges[stream] = (int(starts[mask].min()), int((starts[mask] + lengths[mask]).max()))
    futures = {(key, stream): reader.read_async(leaf_name(key), (stream, slice(lo, hi)))
               for key in keys for stream, (lo, hi) in ranges.items()}
    out = {}
    single = len(ranges) == 1
    for key in keys:
        blocks = {stream: np.asarray(futures[key, stream].result()) for stream in ranges}
        if single:
            out[key] = next(iter(blocks.values()))
            continue
        parts = []
        for stream, start, length in zip(streams.tolist(), starts.tolist(), lengths.tolist(),
                                         strict=True):
            lo = ranges[stream][0]
            parts.append(blocks[stream][start - lo:start - lo + length])
        out[key] = np.concatenate(parts)
    return out


# =============================================================================== import


@dataclass(frozen=True)
class _Scan:
    """Where episodes end, found in a first pass over the done flags."""

    runs: list[list[int]]
    episodes: int
    steps: int
    trailing: list[int]


def _done_rows(rows: dict[tuple[str, ...], np.ndarray], cut_on: CutOn) -> np.ndarray:
    done = rows[TERMINALS] != 0
    if TRUNCATIONS in rows:
        done = done | (rows[TRUNCATIONS] != 0)
    return done.any(axis=-1) if cut_on == "any" else done.all(axis=-1)


def _check_binary(values: np.ndarray, path: tuple[str, ...], offset: int, where: str) -> None:
    bad = (values != 0) & (values != 1)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise LayoutError(f"{where}: '{leaf_name(path)[:-1]}' holds {values[index]} at "
                          f"(stream {index[0]}, step {offset + index[1]}); OG-MARL flags are 0 "
                          "or 1")


def _scan(reader: VaultReader, layout_: ImportLayout, options: ImportOptions,
          window: int) -> _Scan:
    keys = [TERMINALS] + ([TRUNCATIONS] if layout_.has_truncations else [])
    runs: list[list[int]] = []
    episodes = 0
    last_end = [-1] * layout_.streams
    where = f"vault {reader.path}"
    for t0 in range(0, layout_.length, window):
        t1 = min(layout_.length, t0 + window)
        futures = {k: reader.read_async(leaf_name(k), (slice(None), slice(t0, t1)))
                   for k in keys}
        rows = {k: np.asarray(f.result()) for k, f in futures.items()}
        for key, values in rows.items():
            _check_binary(values, key, t0, where)
        done = _done_rows(rows, options.cut_on)
        for stream in range(layout_.streams):
            ends = np.flatnonzero(done[stream])
            if len(ends):
                last_end[stream] = t0 + int(ends[-1])
                _add_run(runs, stream, len(ends))
                episodes += len(ends)
    trailing = [layout_.length - 1 - end for end in last_end]
    steps = sum(end + 1 for end in last_end)
    if options.trailing == "truncate":
        for stream, rest in enumerate(trailing):
            if rest:
                _add_run(runs, stream, 1)
                episodes += 1
                steps += rest
    elif options.trailing == "error" and any(trailing):
        stream = next(i for i, rest in enumerate(trailing) if rest)
        raise LayoutError(
            f"{where}: stream {stream} ends with an unfinished episode of {trailing[stream]} "
            f"steps (no done flag after step {last_end[stream]}); pass trailing='truncate' to "
            "keep it as a truncated episode or trailing='drop' to leave it out")
    return _Scan(runs, episodes, steps, trailing)


def _add_run(runs: list[list[int]], stream: int, count: int) -> None:
    if runs and runs[-1][0] == stream:
        runs[-1][1] += count
    else:
        runs.append([stream, count])


def _import(reader: VaultReader, layout_: ImportLayout, options: ImportOptions,
            dataset_id: str, *, vault_name: str, vault_uid: str, jpeg_encoding: bool,
            chunk_steps: int, progress: bool, metadata: dict[str, Any]) -> None:
    window = max(1, chunk_steps // max(1, layout_.streams))
    scan = _scan(reader, layout_, options, window)
    if scan.episodes == 0:
        raise LayoutError(f"vault {reader.path} holds no complete episode (no done flag in "
                          f"{layout_.length} steps) and trailing={options.trailing!r}")
    record = _record(reader, layout_, options, scan, vault_name, vault_uid)
    spec = replace(layout_.spec, reward_aggregation=options.reward_aggregation,
                   extra={VAULT_SOURCE_KEY: record})
    episodes = _imported_episodes(reader, layout_, options, spec, window)
    write_dataset(dataset_id, episodes, spec, jpeg_encoding=jpeg_encoding,
                  progress=f"{reader.path.name} -> {dataset_id}" if progress else False,
                  total=scan.episodes, **metadata)


def _record(reader: VaultReader, layout_: ImportLayout, options: ImportOptions, scan: _Scan,
            vault_name: str, vault_uid: str) -> dict[str, Any]:
    """What the dataset keeps of its source vault (``metadata.json["marl_minari"]["vault"]``),
    enough for :func:`to_vault` to write the same arrays back."""
    user = {k: v for k, v in reader.metadata.items()
            if k not in ("version", "structure_shape", "structure_dtype", VAULT_METADATA_KEY)}
    return {
        "format_version": 1,
        "vault_name": vault_name,
        "vault_uid": vault_uid,
        "version": reader.metadata.get("version"),
        "shapes": {".".join(p): v for p, v in flatten_structure(
            reader.metadata["structure_shape"])},
        "dtypes": {".".join(p): v for p, v in flatten_structure(
            reader.metadata["structure_dtype"])},
        "user_metadata": user,
        "streams": layout_.streams,
        "length": layout_.length,
        "episode_streams": scan.runs,
        "trailing": options.trailing,
        "trailing_steps": scan.trailing,
        "final_observation": options.final_observation,
        "cut_on": options.cut_on,
        "infer_dead": options.infer_dead,
        "extras": [{"path": list(p), "name": name} for p, name in layout_.extras],
    }


def _imported_episodes(reader: VaultReader, layout_: ImportLayout, options: ImportOptions,
                       spec: MultiAgentSpec, window: int) -> Iterator[LeafEpisode]:
    keys = [leaf.path for leaf in reader.leaves]
    carry: list[dict[tuple[str, ...], np.ndarray] | None] = [None] * layout_.streams
    where = f"vault {reader.path}"
    next_id = 0

    def start(t0: int) -> dict[tuple[str, ...], Any]:
        t1 = min(layout_.length, t0 + window)
        return {k: reader.read_async(leaf_name(k), (slice(None), slice(t0, t1))) for k in keys}

    pending = start(0) if layout_.length else None
    for t0 in range(0, layout_.length, window):
        assert pending is not None
        block = {k: np.asarray(f.result()) for k, f in pending.items()}
        pending = start(t0 + window) if t0 + window < layout_.length else None
        if LEGALS in block:
            _check_binary(block[LEGALS], LEGALS, t0, where)
        for stream in range(layout_.streams):
            rows = {k: v[stream] for k, v in block.items()}
            previous = carry[stream]
            if previous is not None:
                rows = {k: np.concatenate([previous[k], rows[k]]) for k in keys}
            ends = np.flatnonzero(_done_rows(rows, options.cut_on))
            if len(ends) == 0:
                carry[stream] = rows
                continue
            stop = int(ends[-1]) + 1
            lengths = np.diff(np.concatenate([[0], ends + 1])).astype(np.int64)
            done = {k: v[:stop] for k, v in rows.items()}
            carry[stream] = {k: v[stop:] for k, v in rows.items()} if stop < len(
                rows[TERMINALS]) else None
            arrays = _arrays_from_rows(layout_, options, spec, done, lengths, next_id, where)
            yield from leaf_episodes(arrays, [None] * len(lengths), [None] * len(lengths))
            next_id += len(lengths)
    if options.trailing != "truncate":
        return
    for stream in range(layout_.streams):
        rest = carry[stream]
        if rest is None or len(rest[TERMINALS]) == 0:
            continue
        lengths = np.asarray([len(rest[TERMINALS])], dtype=np.int64)
        arrays = _arrays_from_rows(layout_, options, spec, rest, lengths, next_id, where)
        yield from leaf_episodes(arrays, [None], [None])
        next_id += 1


def _arrays_from_rows(layout_: ImportLayout, options: ImportOptions, spec: MultiAgentSpec,
                      rows: dict[tuple[str, ...], np.ndarray], lengths: np.ndarray,
                      first_id: int, where: str) -> MultiAgentArrays:
    """Whole episodes of one stream (``S`` step rows) as the arrays of the layout.

    An episode whose last step has no done flag (a trailing episode kept with
    ``trailing="truncate"``) ends truncated.
    """
    steps, count = int(lengths.sum()), len(lengths)
    step_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    obs_rows = np.arange(steps, dtype=np.int64) + np.repeat(np.arange(count), lengths)
    final_rows = step_starts + np.arange(count) + lengths
    last_steps = step_starts + lengths - 1

    def with_final(values: np.ndarray) -> np.ndarray:
        out = np.zeros((steps + count, *values.shape[1:]), dtype=values.dtype)
        out[obs_rows] = values
        if options.final_observation == "repeat":
            out[final_rows] = values[last_steps]
        return out

    n = len(layout_.agents)
    obs = rows[OBSERVATIONS]
    dead = np.zeros((steps, n), dtype=bool)
    masks = None
    if layout_.has_legals:
        legals = rows[LEGALS]
        masks = legals.astype(np.int8)
        if options.infer_dead:
            noop = np.zeros(legals.shape[-1], dtype=legals.dtype)
            noop[0] = 1
            dead = (legals == noop).all(axis=-1) & (obs.reshape(steps, n, -1) == 0).all(axis=-1)
            masks[dead] = 0
    observations = {}
    flat_obs = obs.reshape(steps, n, -1)
    for i, agent in enumerate(layout_.agents):
        observations[agent] = _unflatten(spec.observation_spaces[agent], layout_.obs_flat[i],
                                         flat_obs[:, i], with_final)
    actions = {}
    for i, agent in enumerate(layout_.agents):
        if layout_.act_flat is None:
            actions[agent] = rows[ACTIONS][:, i].astype(np.int64)
        else:
            actions[agent] = _unflatten(spec.action_spaces[agent], layout_.act_flat[i],
                                        rows[ACTIONS].reshape(steps, n, -1)[:, i], None)
    _check_actions(spec, actions, np.ones((steps, n), dtype=bool), first_id, lengths,
                   where)
    rewards = rows[REWARDS].astype(np.float64)
    terms = rows[TERMINALS] != 0
    truncs = rows[TRUNCATIONS] != 0 if layout_.has_truncations else np.zeros_like(terms)
    episode_terms = np.zeros(steps, dtype=bool)
    episode_truncs = np.zeros(steps, dtype=bool)
    # OG-MARL sets terminals at every episode end and truncations beside it at a time limit:
    # an end with a truncation flag is a truncation (as docs/format.md ranks the two).
    ended_terminated = terms[last_steps].any(axis=1) & ~truncs[last_steps].any(axis=1)
    episode_terms[last_steps] = ended_terminated
    episode_truncs[last_steps] = ~ended_terminated
    active = with_final(~dead)
    agent_infos = None
    if masks is not None:
        agent_infos = {agent: {layout.ACTION_MASK_KEY: with_final(masks[:, i])}
                       for i, agent in enumerate(layout_.agents)}
    return MultiAgentArrays(
        possible_agents=layout_.agents,
        episode_ids=np.arange(first_id, first_id + count, dtype=np.int64),
        episode_lengths=lengths,
        observations=observations,
        actions=actions,
        rewards=rewards, terminations=terms, truncations=truncs,
        active=active, acted=np.ones((steps, n), dtype=bool),
        team_rewards=team_rewards(rewards, np.ones(rewards.shape, dtype=bool),
                                  options.reward_aggregation),
        episode_terminations=episode_terms, episode_truncations=episode_truncs,
        state=with_final(rows[STATE]) if layout_.has_state else None,
        agent_infos=agent_infos,
        extras={name: with_final(rows[path]) for path, name in layout_.extras},
    )


def _check_actions(spec: MultiAgentSpec, actions: dict[str, Any], acted: np.ndarray,
                   first_id: int, lengths: np.ndarray, where: str) -> None:
    """Refuse actions outside their agent's action space (a vault holds bare numbers)."""
    for i, agent in enumerate(spec.possible_agents):
        bad = np.flatnonzero(rows_outside(spec.action_spaces[agent], actions[agent])
                             & acted[:, i])
        if bad.size:
            row = int(bad[0])
            episode = int(np.searchsorted(np.cumsum(lengths), row, side="right"))
            step = row - int(np.concatenate([[0], np.cumsum(lengths)])[episode])
            value = map_tree(lambda a, r=row: np.asarray(a[r]).tolist(), actions[agent])
            raise StepDataError(
                f"{where}: the action of {agent!r} at step {step} of episode "
                f"{first_id + episode} is {value!r}, outside its action space "
                f"{spec.action_spaces[agent]}; pass the right action_spaces= or fix the vault.")


def _unflatten(space: spaces.Space, flat: AgentFlat, values: np.ndarray,
               with_final: Callable[[np.ndarray], np.ndarray] | None) -> Any:
    """An agent's tree from its flattened rows (observations get their final rows added)."""
    by_path = {}
    for leaf in flat.leaves:
        part = values[:, leaf.offset:leaf.offset + leaf.size].reshape(
            len(values), *leaf.shape).astype(leaf.dtype)
        by_path[leaf.path] = part if with_final is None else with_final(part)
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return build_tree(space, by_path)
    return by_path[""]
