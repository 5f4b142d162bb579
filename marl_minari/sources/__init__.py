"""One way in: anything a user can name, as a source of chunked per-agent arrays.

:func:`open_source` turns a dataset id, a dataset folder (or its ``data/`` folder or
``main_data.hdf5``), a remote dataset's URL, a ``minari.MinariDataset`` or a
:class:`~marl_minari.storage.reader.MultiAgentDataset` into a :class:`DatasetSource`: the dataset's
spec, its metadata and :meth:`DatasetSource.chunks` of whole episodes as
:class:`~marl_minari.MultiAgentArrays`. :func:`opening` does the same and also takes a
Flashbax vault folder, imported into a temporary dataset for the ``with`` block.

The rules every consumer (describe, the adapters, Ray) follows live here:

* a plain single-agent Minari dataset is one agent named :data:`SINGLE_AGENT` (``agent_0``),
  always present and acting;
* a dataset id that is not local is downloaded only when the caller asks (``download=True``)
  or names a ``remote``; otherwise :class:`~marl_minari.errors.DatasetNotFoundError` names
  the id and the local ids closest to it;
* chunks hold whole episodes, about ``chunk_steps`` steps each (:data:`DEFAULT_CHUNK_STEPS`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from gymnasium import spaces

from marl_minari.errors import (
    CorruptedDataError,
    DatasetNotFoundError,
    InvalidOptionError,
    LayoutError,
    NotADatasetError,
)
from marl_minari.format import layout
from marl_minari.format.ids import (
    dataset_dir,
    local_dataset_ids,
    not_found_locally,
    parse_dataset_id,
)
from marl_minari.format.recovered_layout import with_recovered_layout
from marl_minari.format.spaces import build_tree, concat_trees, leaf_dtype, leaf_shape, leaf_spaces
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.sources.remote import fetch_remote_source, is_remote_source, shown_url
from marl_minari.storage.reader import MultiAgentArrays, MultiAgentDataset

SINGLE_AGENT: Final = "agent_0"
"""Name of the one agent of a plain single-agent Minari dataset (everywhere in the library)."""
SINGLE_AGENT_KEY: Final = "single_agent_source"
"""``MultiAgentSpec.extra`` key recording what a plain dataset's own metadata said."""
MOVED_KEYS: Final = ("env_spec", "eval_env_spec", "observation_space", "action_space")
"""Keys of a plain dataset's ``metadata.json`` kept under :data:`SINGLE_AGENT_KEY`."""
DEFAULT_CHUNK_STEPS: Final = 65_536
"""Steps read per chunk by default; memory is proportional to it (whole episodes per chunk)."""

SourceKind = Literal["multi_agent", "single_agent"]


@dataclass(frozen=True, eq=False)
class DatasetSource:
    """A dataset resolved to its ``data/`` folder, read in chunks of whole episodes.

    Only paths and plain values are kept, so a source can be pickled (Ray sends sources to
    its workers, which reopen the files).

    Attributes:
        name: what the caller named (dataset id or path); the ``dataset`` column of Ray rows.
        data_path: absolute path of the dataset's ``data/`` folder.
        kind: ``"multi_agent"`` (the multi-agent layout) or ``"single_agent"`` (a plain
            Minari dataset, one agent :data:`SINGLE_AGENT`).
        spec: agents and spaces.
        metadata: the dataset's ``metadata.json``.
        episode_indices: the stored episodes this source reads, in order (all of them, or
            those a filtered ``MinariDataset`` holds).
        vault_path: the Flashbax vault the dataset was imported from by :func:`opening`.
        joint_spaces: the observation and action spaces of ``metadata.json``, parsed once
            (an image env's are megabytes of JSON) for the spec and for :attr:`dataset`.
    """

    name: str
    data_path: Path
    kind: SourceKind
    spec: MultiAgentSpec
    metadata: dict[str, Any]
    episode_indices: np.ndarray
    vault_path: Path | None = None
    joint_spaces: tuple[spaces.Space, spaces.Space] | None = field(default=None, repr=False)
    _handles: dict[str, Any] = field(default_factory=dict, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        # Open readers hold HDF5 handles: a copy in another process opens its own.
        state = dict(self.__dict__)
        state["_handles"] = {}
        return state

    @property
    def dataset_id(self) -> str:
        """The id the dataset's ``metadata.json`` gives (``name`` if it gives none)."""
        return str(self.metadata.get("dataset_id") or self.name)

    @property
    def multi_agent(self) -> bool:
        """The dataset is in the multi-agent layout."""
        return self.kind == "multi_agent"

    @property
    def total_episodes(self) -> int:
        """Episodes this source reads."""
        return len(self.episode_indices)

    @property
    def total_steps(self) -> int:
        """Steps of the whole dataset (``metadata.json``)."""
        return int(self.metadata.get("total_steps", 0))

    @property
    def reads_all_episodes(self) -> bool:
        """The source reads every stored episode (its step count is :attr:`total_steps`)."""
        return self.total_episodes == int(self.metadata.get("total_episodes", -1))

    @property
    def dataset(self) -> Any:
        """The :class:`MultiAgentDataset` (multi-agent) or ``MinariDataset`` (plain), opened
        once per process."""
        if "dataset" not in self._handles:
            from marl_minari.format.metadata import minari_dataset_at

            minari_dataset = minari_dataset_at(self.data_path, self.metadata,
                                               self.joint_spaces)
            self._handles["dataset"] = (MultiAgentDataset(minari_dataset) if self.multi_agent
                                        else minari_dataset)
        return self._handles["dataset"]

    @property
    def storage(self) -> Any:
        """Minari's ``MinariStorage`` of the dataset (episode attributes, raw episodes)."""
        minari_dataset = self.dataset.minari if self.multi_agent else self.dataset
        return minari_dataset.storage

    def read(self, indices: Sequence[int] | np.ndarray, *,
             observations: bool = True) -> MultiAgentArrays:
        """Stored episodes ``indices`` as arrays.

        Args:
            indices: stored episode ids.
            observations: ``False`` lets a plain HDF5 dataset skip its observations and
                infos (each agent's observation tree is then ``{}``); what needs only actions
                and rewards reads several times faster.
        """
        ids = [int(i) for i in np.asarray(indices, dtype=np.int64).reshape(-1)]
        if self.multi_agent:
            arrays: MultiAgentArrays = self.dataset.to_arrays(ids)
            return arrays
        action_space = self.spec.action_spaces[SINGLE_AGENT]
        if not observations and self.metadata.get("data_format", "hdf5") == "hdf5" and not any(
                isinstance(leaf, spaces.Text) for _, leaf in leaf_spaces(action_space)):
            return _plain_columns(self.data_path, ids, action_space)
        return _plain_episodes(self.storage, self.spec, ids)

    def batches(self, chunk_steps: int = DEFAULT_CHUNK_STEPS) -> Iterator[list[int]]:
        """Stored episode ids in runs of about ``chunk_steps`` steps (by the mean episode
        length; at least one episode each)."""
        check_chunk_steps(chunk_steps)
        total_episodes = max(int(self.metadata.get("total_episodes") or 1), 1)
        total_steps = max(int(self.metadata.get("total_steps") or 1), 1)
        count = max(1, int(chunk_steps * total_episodes // total_steps))
        indices = self.episode_indices.tolist()
        for start in range(0, len(indices), count):
            yield indices[start:start + count]

    def chunks(self, chunk_steps: int = DEFAULT_CHUNK_STEPS, *,
               observations: bool = True) -> Iterator[MultiAgentArrays]:
        """Yield the episodes' arrays, about ``chunk_steps`` steps at a time (see
        :meth:`read` for ``observations``)."""
        for batch in self.batches(chunk_steps):
            yield self.read(batch, observations=observations)


def check_chunk_steps(chunk_steps: int) -> None:
    """Raise :class:`InvalidOptionError` unless ``chunk_steps`` >= 1."""
    if chunk_steps < 1:
        raise InvalidOptionError(f"chunk_steps must be >= 1, got {chunk_steps}")


def check_source_weights(weights: Sequence[float] | None, sources: int) -> None:
    """Raise :class:`InvalidOptionError` unless ``weights`` (when given) are one finite,
    non-negative number per source with a positive sum."""
    if weights is not None and (len(weights) != sources or any(
            w < 0 or not np.isfinite(w) for w in weights) or sum(weights) <= 0):
        raise InvalidOptionError(
            f"weights must be {sources} finite non-negative numbers with a positive sum, "
            f"got {list(weights)}")


# --------------------------------------------------------------------------- opening


def open_source(source: Any, *, download: bool = False,
                remote: str | None = None) -> DatasetSource:
    """Resolve what a user named into a :class:`DatasetSource`.

    Args:
        source: a dataset id, a dataset folder, its ``data/`` folder or ``main_data.hdf5``,
            a remote dataset's URL (a registry followed by the id, downloaded once: see
            :mod:`marl_minari.sources.remote`), a ``minari.MinariDataset``, a
            :class:`MultiAgentDataset` or a :class:`DatasetSource` (returned as is).
        download: fetch an id that is not local with ``minari.load_dataset(id,
            download=True)`` (from ``$MINARI_REMOTE``).
        remote: fetch an id that is not local from this registry
            (:func:`marl_minari.registry.download`, every file checked).

    Raises:
        DatasetNotFoundError: no such dataset (the message names the closest local ids); a
            Flashbax vault folder (open it with :func:`opening`).
        InvalidDatasetIdError: a name that is neither a path nor a well-formed id.
        NotADatasetError: ``source`` is none of the above.
    """
    from minari.dataset.minari_dataset import MinariDataset

    if isinstance(source, DatasetSource):
        return source
    if isinstance(source, MultiAgentDataset):
        opened = _from_data_path(None, source.data_path,
                                 np.asarray(source.minari.episode_indices, dtype=np.int64))
        opened._handles["dataset"] = source  # its offset index is read already
        return opened
    if isinstance(source, MinariDataset):
        return _from_data_path(None, Path(source.storage.data_path),
                               np.asarray(source.episode_indices, dtype=np.int64))
    if not isinstance(source, (str, os.PathLike)):
        raise NotADatasetError(
            f"cannot read {source!r}: give a dataset id, a dataset folder, a "
            "minari.MinariDataset or a marl_minari.MultiAgentDataset")
    name = os.fspath(source)
    if isinstance(source, str) and is_remote_source(name):
        return _from_data_path(shown_url(name), fetch_remote_source(name), None)
    path = Path(name).expanduser()
    if path.exists():
        return _from_data_path(name, _data_folder(path), None)
    return _from_data_path(name, locate_dataset(name, download=download, remote=remote), None)


@contextmanager
def opening(source: Any, *, download: bool = False, remote: str | None = None,
            vault_options: dict[str, Any] | None = None,
            chunk_steps: int = DEFAULT_CHUNK_STEPS,
            progress: bool = False) -> Iterator[DatasetSource]:
    """:func:`open_source`, and a Flashbax vault folder too, for the ``with`` block.

    A vault (``rel_dir/vault_name/vault_uid``) is imported with
    :func:`marl_minari.adapters.from_vault` (``vault_options`` are its keyword arguments) into
    a temporary datasets root, removed when the block ends; the source's ``vault_path`` is
    the vault's folder and its ``name`` the vault's path.
    """
    if isinstance(source, (str, os.PathLike)) and _is_vault(Path(os.fspath(source))):
        with _vault_dataset(Path(os.fspath(source)), dict(vault_options or {}), chunk_steps,
                            progress) as opened:
            yield opened
        return
    yield open_source(source, download=download, remote=remote)


def _is_vault(path: Path) -> bool:
    if not path.is_dir():
        return False
    from marl_minari.adapters import is_vault

    return bool(is_vault(path))


_VAULT_DATASET_ID: Final = "vault/imported-v0"


@contextmanager
def _vault_dataset(path: Path, vault_options: dict[str, Any], chunk_steps: int,
                   progress: bool) -> Iterator[DatasetSource]:
    from marl_minari.adapters import from_vault, vault_path_parts
    from marl_minari.format.ids import using_datasets_root

    rel_dir, vault_name, vault_uid = vault_path_parts(path)
    with tempfile.TemporaryDirectory(prefix="marl-minari-vault-") as root:
        with using_datasets_root(Path(root)):
            dataset = from_vault(rel_dir, vault_name, vault_uid, _VAULT_DATASET_ID,
                                 chunk_steps=chunk_steps, progress=progress, **vault_options)
        opened = open_source(dataset)
        yield replace(opened, name=str(path.resolve()), vault_path=path.resolve())


def _data_folder(path: Path) -> Path:
    """The ``data/`` folder of a dataset folder, a ``data/`` folder or a file in it."""
    if _is_vault(path):
        raise DatasetNotFoundError(
            f"{path} is a Flashbax vault, not a dataset: describe it, or import it with "
            "marl_minari.adapters.from_vault first")
    candidates = [path.parent if path.is_file() else path, path / "data"]
    data_path = next((c for c in candidates if (c / layout.METADATA_FILE_NAME).is_file()),
                     None)
    if data_path is None:
        raise DatasetNotFoundError(
            f"no Minari dataset at {path}: it is neither a dataset id ((namespace/)name-vN), "
            "a dataset folder (holding data/metadata.json) nor a Flashbax vault folder")
    return data_path.resolve()


def locate_dataset(dataset_id: str, *, download: bool = False,
                   remote: str | None = None) -> Path:
    """The ``data/`` folder of the dataset ``dataset_id``: the local one, else (only when asked)
    one downloaded from ``remote`` or Minari's default remote (``download``).

    Raises:
        InvalidDatasetIdError: not a dataset id.
        DatasetNotFoundError: not local, and no download asked (see :func:`not_found_locally`).
    """
    parse_dataset_id(dataset_id)
    data_path = dataset_dir(dataset_id) / "data"
    if (data_path / layout.METADATA_FILE_NAME).is_file():
        return data_path.resolve()
    if remote is not None:
        from marl_minari.registry import download as registry_download

        return (registry_download(dataset_id, remote) / "data").resolve()
    if download:
        from marl_minari.format.metadata import open_minari_dataset

        fetched = open_minari_dataset(dataset_id, download=True)
        return Path(fetched.storage.data_path).resolve()
    raise not_found_locally(dataset_id)


def _from_data_path(name: str | None, data_path: Path,
                    indices: np.ndarray | None) -> DatasetSource:
    """The source of the dataset in ``data_path`` (``name`` defaults to its id; every stored
    episode unless ``indices`` are given)."""
    from marl_minari.format.metadata import metadata_count, read_metadata

    metadata = with_recovered_layout(read_metadata(data_path), data_path)
    total_episodes = metadata_count(metadata, "total_episodes", data_path)
    metadata_count(metadata, "total_steps", data_path)  # chunk planning divides by it
    if name is None:
        name = str(metadata.get("dataset_id"))
    if indices is None:
        indices = np.arange(total_episodes, dtype=np.int64)
    multi_agent = layout.METADATA_KEY in metadata
    try:
        joint_spaces = joint_spaces_of(metadata)
        spec = spec_from(metadata, multi_agent, *joint_spaces)
    except (KeyError, TypeError, ValueError) as exc:
        raise LayoutError(
            f"{Path(data_path) / layout.METADATA_FILE_NAME} is not a readable Minari dataset's "
            f"metadata ({type(exc).__name__}: {exc}); point at a dataset folder") from exc
    return DatasetSource(name=name, data_path=Path(data_path).resolve(),
                         kind="multi_agent" if multi_agent else "single_agent",
                         spec=spec, metadata=metadata,
                         episode_indices=indices, joint_spaces=joint_spaces)


# --------------------------------------------------------------------------- specs


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


def spec_of(metadata: dict[str, Any], multi_agent: bool) -> MultiAgentSpec:
    """The spec of a dataset from its ``metadata.json``."""
    return spec_from(metadata, multi_agent, *joint_spaces_of(metadata))


def joint_spaces_of(metadata: dict[str, Any]) -> tuple[spaces.Space, spaces.Space]:
    """The observation and action spaces a ``metadata.json`` stores (Minari's keys)."""
    from marl_minari.format.space_json import space_from_json

    return (space_from_json(metadata["observation_space"]),
            space_from_json(metadata["action_space"]))


def spec_from(metadata: dict[str, Any], multi_agent: bool, observation_space: spaces.Space,
              action_space: spaces.Space) -> MultiAgentSpec:
    """The spec of a dataset from its ``metadata.json`` and its parsed joint spaces."""
    if multi_agent:
        return MultiAgentSpec.from_metadata(metadata, observation_space, action_space)
    return single_agent_spec(observation_space, action_space, metadata)


# --------------------------------------------------------------------------- plain datasets


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


def _plain_episodes(storage: Any, spec: MultiAgentSpec, ids: list[int]) -> MultiAgentArrays:
    """Plain Minari episodes, every field, read through Minari's ``get_episodes``."""
    if storage.FORMAT == "hdf5":  # Minari's reader would follow links out of the file
        from marl_minari.storage.self_contained import check_path

        check_path(Path(storage.data_path) / layout.MAIN_FILE_NAME)
    episodes = list(storage.get_episodes(ids))
    obs_space = spec.observation_spaces[SINGLE_AGENT]
    act_space = spec.action_spaces[SINGLE_AGENT]
    infos = [ep["infos"] or {} for ep in episodes]
    agent_infos = concat_trees([_plain_tree(i) for i in infos]) \
        if infos and infos[0] else None
    return single_agent_arrays(
        ids, np.asarray([len(ep["rewards"]) for ep in episodes], dtype=np.int64),
        observations=_concat_field([ep["observations"] for ep in episodes], obs_space),
        actions=_concat_field([ep["actions"] for ep in episodes], act_space),
        rewards=_concat([ep["rewards"] for ep in episodes], np.float64),
        terminations=_concat([ep["terminations"] for ep in episodes], bool),
        truncations=_concat([ep["truncations"] for ep in episodes], bool),
        agent_infos=agent_infos)


def _plain_columns(data_path: Path, ids: list[int],
                   action_space: spaces.Space) -> MultiAgentArrays:
    """Rewards, flags and actions of plain Minari HDF5 episodes, observations left unread.

    Minari's own ``get_episodes`` decodes every column of every episode (about 1.3 ms per
    episode); reading only these columns through h5py's low-level API is several times faster
    on datasets of many short episodes.
    """
    import h5py

    from marl_minari.storage.reader import open_data_file
    from marl_minari.storage.self_contained import check_file

    leaf_paths = [(path, ("actions/" + path if path else "actions").encode())
                  for path, _ in leaf_spaces(action_space)]
    columns: dict[str, list[np.ndarray]] = {"rewards": [], "terminations": [],
                                            "truncations": []}
    action_leaves: dict[str, list[np.ndarray]] = {path: [] for path, _ in leaf_paths}
    with open_data_file(data_path / layout.MAIN_FILE_NAME) as file:
        check_file(file, data_path / layout.MAIN_FILE_NAME)
        for index in ids:
            try:
                group = h5py.h5g.open(file.id, f"episode_{index}".encode())
                for name, parts in columns.items():
                    parts.append(_read_all(group, name.encode()).reshape(-1))
                for path, encoded in leaf_paths:
                    action_leaves[path].append(_read_all(group, encoded))
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


def _read_all(group: Any, name: bytes) -> np.ndarray:
    import h5py

    dataset = h5py.h5d.open(group, name)
    array = np.empty(dataset.get_space().get_simple_extent_dims(), dtype=dataset.dtype)
    if array.size:
        dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, array)
    return array


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


__all__ = [
    "DEFAULT_CHUNK_STEPS",
    "SINGLE_AGENT",
    "DatasetSource",
    "check_chunk_steps",
    "check_source_weights",
    "local_dataset_ids",
    "locate_dataset",
    "not_found_locally",
    "open_source",
    "opening",
    "single_agent_arrays",
    "single_agent_spec",
    "spec_of",
]
