"""Plain (single-agent) Minari datasets seen as one agent, ``agent_0``.

Everything that reads a plain dataset sees one agent named :data:`SINGLE_AGENT`, always
present and always acting, whose spaces are the dataset's own; the dataset's env specs are
kept in its spec's ``extra`` (:data:`SINGLE_AGENT_KEY`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
from gymnasium import spaces

from marl_minari.errors import CorruptedDataError
from marl_minari.format import layout
from marl_minari.format.space_json import space_from_json
from marl_minari.format.spaces import build_tree, concat_trees, leaf_dtype, leaf_shape, leaf_spaces
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.datafile import episode_group, hdf5_errors, open_data_file, read_array
from marl_minari.storage.self_contained import (
    check_dataset,
    check_file,
    check_links,
    check_path,
)

SINGLE_AGENT: Final = "agent_0"
"""Name of the one agent of a plain single-agent Minari dataset (everywhere in the library)."""
SINGLE_AGENT_KEY: Final = "single_agent_source"
"""``MultiAgentSpec.extra`` key recording what a plain dataset's own metadata said."""
MOVED_KEYS: Final = ("env_spec", "eval_env_spec", "observation_space", "action_space")
"""Keys of a plain dataset's ``metadata.json`` kept under :data:`SINGLE_AGENT_KEY`."""


def single_agent_spec(observation_space: spaces.Space, action_space: spaces.Space,
                      metadata: dict[str, Any]) -> MultiAgentSpec:
    """The spec of a plain Minari dataset seen as one agent, :data:`SINGLE_AGENT`.

    The plain dataset's env specs and spaces go to ``spec.extra["single_agent_source"]``.
    """
    return MultiAgentSpec(
        api="parallel", possible_agents=(SINGLE_AGENT,),
        observation_spaces={SINGLE_AGENT: observation_space},
        action_spaces={SINGLE_AGENT: action_space},
        record_infos=True,
        extra={SINGLE_AGENT_KEY: {k: metadata[k] for k in MOVED_KEYS if k in metadata}},
    )



def joint_spaces_of(metadata: dict[str, Any]) -> tuple[spaces.Space, spaces.Space]:
    """The observation and action spaces a ``metadata.json`` stores (Minari's keys).

    Raises:
        KeyError, TypeError, ValueError: they are missing or malformed (callers name the file).
    """
    return (space_from_json(metadata["observation_space"]),
            space_from_json(metadata["action_space"]))


def spec_of(metadata: dict[str, Any], multi_agent: bool,
            joint_spaces: tuple[spaces.Space, spaces.Space] | None = None) -> MultiAgentSpec:
    """The spec of a dataset from its ``metadata.json``: the multi-agent layout's, or a plain
    dataset's as one agent :data:`SINGLE_AGENT`.

    Args:
        metadata: the dataset's ``metadata.json``.
        multi_agent: it is in the multi-agent layout.
        joint_spaces: its observation and action spaces, if parsed already.
    """
    observation_space, action_space = joint_spaces or joint_spaces_of(metadata)
    if multi_agent:
        return MultiAgentSpec.from_metadata(metadata, observation_space, action_space)
    return single_agent_spec(observation_space, action_space, metadata)


def single_agent_arrays(episode_ids: Sequence[int], lengths: np.ndarray, observations: Any,
                        actions: Any, rewards: np.ndarray, terminations: np.ndarray,
                        truncations: np.ndarray, agent_infos: Any = None) -> MultiAgentArrays:
    """Concatenated episodes of one always-present, always-acting agent as
    :class:`MultiAgentArrays` (the one place a plain dataset's arrays are assembled).

    Args:
        episode_ids: the stored episode ids.
        lengths: ``(E,)`` steps per episode.
        observations: the agent's observation tree (``S + E`` rows, or ``{}``).
        actions: its action tree (``S`` rows).
        rewards, terminations, truncations: ``(S,)``.
        agent_infos: its info tree (``S + E`` rows) or ``None``.
    """
    steps = int(np.sum(lengths))
    rewards = np.asarray(rewards, dtype=np.float64).reshape(-1)
    terminations = np.asarray(terminations, dtype=bool).reshape(-1)
    truncations = np.asarray(truncations, dtype=bool).reshape(-1)
    return MultiAgentArrays(
        possible_agents=(SINGLE_AGENT,),
        episode_ids=np.asarray(episode_ids, dtype=np.int64),
        episode_lengths=np.asarray(lengths, dtype=np.int64),
        observations={SINGLE_AGENT: observations}, actions={SINGLE_AGENT: actions},
        rewards=rewards[:, None], terminations=terminations[:, None],
        truncations=truncations[:, None],
        active=np.ones((steps + len(episode_ids), 1), dtype=bool),
        acted=np.ones((steps, 1), dtype=bool),
        team_rewards=rewards, episode_terminations=terminations,
        episode_truncations=truncations,
        agent_infos=None if agent_infos is None else {SINGLE_AGENT: agent_infos},
    )


def plain_episodes(storage: Any, spec: MultiAgentSpec, ids: list[int]) -> MultiAgentArrays:
    """Plain Minari episodes, every field, read through Minari's ``get_episodes``."""
    h5_path = Path(storage.data_path) / layout.MAIN_FILE_NAME
    if storage.FORMAT == "hdf5":  # Minari's reader would follow links out of the file
        check_path(h5_path)
    with hdf5_errors(h5_path):
        episodes = list(storage.get_episodes(ids))
    return _plain_arrays(spec, ids, episodes)


def plain_file_episodes(file: Any, name: str, spec: MultiAgentSpec, ids: list[int], *,
                        jpeg_encoding: bool, observations: bool = True) -> MultiAgentArrays:
    """Plain Minari episodes of an open HDF5 file (one read in place over byte ranges),
    decoded by Minari's own HDF5 decoder as ``get_episodes`` decodes them, so they equal what
    :func:`plain_episodes` reads from a copy. Only the episodes' own groups are touched, each
    checked to keep its data in the file (:func:`~marl_minari.storage.self_contained.
    check_links`, :func:`~marl_minari.storage.self_contained.check_dataset`): nothing walks
    the whole file. ``observations=False`` leaves observations and infos unread.

    Raises:
        CorruptedDataError: an episode or one of its columns is missing.
        ForeignStorageError: an episode refers to data outside the file.
    """
    import h5py
    from minari.dataset._storages.hdf5_storage import HDF5Storage, _decode_info

    decoder = HDF5Storage.__new__(HDF5Storage)  # only its decoder: no file path, no I/O
    decoder._jpeg_encoding = jpeg_encoding
    h5_path = Path(name)
    episodes = []
    with hdf5_errors(h5_path):
        for index in ids:
            episode_group(file, index, h5_path)  # a missing episode is named as such
            group = file[f"episode_{index}"]
            check_links(group, h5_path)
            _check_group_datasets(group, file, h5_path, observations)
            try:
                fields = {key: group[key][()] for key in ("rewards", "terminations",
                                                          "truncations")}
                fields["actions"] = decoder._decode_space(
                    group["actions"], spec.action_spaces[SINGLE_AGENT])
                fields["observations"] = decoder._decode_space(
                    group["observations"], spec.observation_spaces[SINGLE_AGENT]
                ) if observations else None
                _match_space(fields["actions"], spec.action_spaces[SINGLE_AGENT], "actions")
                if observations:
                    _match_space(fields["observations"],
                                 spec.observation_spaces[SINGLE_AGENT], "observations")
            except (KeyError, AssertionError, TypeError, ValueError) as exc:
                # Minari's decoder asserts what it expects of the groups, and looks up the
                # space of each key the file holds
                raise CorruptedDataError(
                    f"{name}: episode_{index} does not hold the columns the dataset's spaces "
                    f"describe ({type(exc).__name__}: {exc}); the published file is damaged: "
                    "tell its publisher, or download it and run marl-minari check") from exc
            infos = group.get("infos") if observations else None
            fields["infos"] = _decode_info(infos) if isinstance(infos, h5py.Group) else None
            episodes.append(fields)
    return _plain_arrays(spec, ids, episodes, observations=observations)


def _match_space(tree: Any, space: spaces.Space, path: str) -> None:
    """Raise ``ValueError`` unless a decoded tree has the keys (``Dict``) and items
    (``Tuple``) of ``space``: Minari's decoder takes whatever keys the file holds."""
    if isinstance(space, spaces.Dict):
        if not isinstance(tree, dict) or set(tree) != set(space.spaces):
            raise ValueError(f"{path} holds {sorted(tree) if isinstance(tree, dict) else tree!r}"
                             f", its space {sorted(space.spaces)}")
        for key, sub in space.spaces.items():
            _match_space(tree[key], sub, f"{path}/{key}")
    elif isinstance(space, spaces.Tuple):
        if not isinstance(tree, tuple) or len(tree) != len(space.spaces):
            raise ValueError(f"{path} holds {len(tree) if isinstance(tree, tuple) else tree!r} "
                             f"items, its space {len(space.spaces)}")
        for position, sub in enumerate(space.spaces):
            _match_space(tree[position], sub, f"{path}/_index_{position}")


def _check_group_datasets(group: Any, file: Any, h5_path: Path, observations: bool) -> None:
    """:func:`~marl_minari.storage.self_contained.check_dataset` on every dataset of an
    episode group that is about to be read."""
    import h5py

    names: list[bytes] = []
    h5py.h5o.visit(group.id, lambda name, info: names.append(name)
                   if info.type == h5py.h5o.TYPE_DATASET else None, info=True)
    for name in names:
        text = name.decode(errors="replace")
        if observations or not text.startswith(("observations", "infos")):
            check_dataset(h5py.h5d.open(group.id, name), file.id, h5_path,
                          f"{group.name}/{text}")


def _plain_arrays(spec: MultiAgentSpec, ids: list[int], episodes: list[dict[str, Any]], *,
                  observations: bool = True) -> MultiAgentArrays:
    """Episodes as Minari decodes them (``get_episodes``' dicts) as one agent's arrays."""
    obs_space = spec.observation_spaces[SINGLE_AGENT]
    act_space = spec.action_spaces[SINGLE_AGENT]
    infos = [ep["infos"] or {} for ep in episodes]
    agent_infos = concat_trees([_plain_tree(i) for i in infos]) \
        if infos and infos[0] else None
    return single_agent_arrays(
        ids, np.asarray([len(ep["rewards"]) for ep in episodes], dtype=np.int64),
        observations=_concat_field([ep["observations"] for ep in episodes], obs_space)
        if observations else {},
        actions=_concat_field([ep["actions"] for ep in episodes], act_space),
        rewards=_concat([ep["rewards"] for ep in episodes], np.float64),
        terminations=_concat([ep["terminations"] for ep in episodes], bool),
        truncations=_concat([ep["truncations"] for ep in episodes], bool),
        agent_infos=agent_infos)


def plain_columns(data_path: Path, ids: list[int],
                   action_space: spaces.Space) -> MultiAgentArrays:
    """Rewards, flags and actions of plain Minari HDF5 episodes, observations left unread.

    Minari's own ``get_episodes`` decodes every column of every episode (about 1.3 ms per
    episode); reading only these columns through h5py's low-level API is several times faster
    on datasets of many short episodes.
    """
    import h5py

    leaf_paths = [(path, ("actions/" + path if path else "actions").encode())
                  for path, _ in leaf_spaces(action_space)]
    columns: dict[str, list[np.ndarray]] = {"rewards": [], "terminations": [],
                                            "truncations": []}
    action_leaves: dict[str, list[np.ndarray]] = {path: [] for path, _ in leaf_paths}
    h5_path = data_path / layout.MAIN_FILE_NAME
    with open_data_file(h5_path) as file, hdf5_errors(h5_path):
        check_file(file, h5_path)
        for index in ids:
            try:
                group = h5py.h5g.open(file.id, f"episode_{index}".encode())
                for name, parts in columns.items():
                    parts.append(read_array(group, name.encode()).reshape(-1))
                for path, encoded in leaf_paths:
                    action_leaves[path].append(read_array(group, encoded))
            except KeyError as exc:
                raise CorruptedDataError(
                    f"{data_path}: episode_{index} lacks a column ({exc}); restore the file "
                    "from a copy or re-create the dataset") from exc
    actions = build_tree(action_space, {
        path: _concat(parts, leaf_dtype(leaf), leaf_shape(leaf))
        for (path, parts), (_, leaf) in zip(action_leaves.items(), leaf_spaces(action_space),
                                            strict=True)})
    return single_agent_arrays(
        ids, np.asarray([len(r) for r in columns["rewards"]], dtype=np.int64),
        observations={}, actions=actions,
        rewards=_concat(columns["rewards"], np.float64),
        terminations=_concat(columns["terminations"], bool),
        truncations=_concat(columns["truncations"], bool))


def _concat(parts: list[Any], dtype: Any, shape: tuple[int, ...] = ()) -> np.ndarray:
    if not parts:
        return np.zeros((0, *shape), dtype=dtype)
    return np.concatenate([np.asarray(p, dtype=dtype) for p in parts])


def _concat_field(values: list[Any], space: spaces.Space) -> Any:
    """Concatenate per-episode fields decoded by Minari (Dicts as dicts, Tuples as tuples,
    Text as lists of str) into one tree shaped like ``space``."""
    if isinstance(space, spaces.Dict):
        return {k: _concat_field([v[k] for v in values], sub) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_concat_field([v[i] for v in values], sub)
                     for i, sub in enumerate(space.spaces))
    if isinstance(space, spaces.Text):
        return np.asarray([s for v in values for s in v], dtype=object)
    shape = leaf_shape(space)
    return _concat([np.asarray(v).reshape((-1, *shape)) for v in values], leaf_dtype(space),
                   shape)


def _plain_tree(tree: Any) -> Any:
    """An episode's info tree with array leaves, byte strings decoded to ``str``."""
    if isinstance(tree, dict):
        return {k: _plain_tree(v) for k, v in tree.items()}
    values = np.asarray(tree)
    if values.dtype.kind in "SO":
        return np.asarray([v.decode("utf-8") if isinstance(v, bytes) else str(v)
                           for v in values.ravel()], dtype=object).reshape(values.shape)
    return values
