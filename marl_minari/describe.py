"""Describe a dataset: statistics, comparison plots and a dataset card.

:func:`describe` streams over a source in chunks of whole episodes and returns a
:class:`DatasetDescription`: episode counts and lengths, per-agent and team returns, per-agent
action frequencies (discrete) or ranges (continuous), the share of inactive agent-steps and how
episodes ended. Sources: a dataset id, a ``minari.MinariDataset``, a
:class:`~marl_minari.reader.MultiAgentDataset` (multi-agent layout or plain single-agent Minari
datasets, the latter seen as one agent ``agent_0``) or a Flashbax vault folder (read through
:mod:`marl_minari.adapters`).

:func:`plot_descriptions` draws several descriptions side by side on shared axes (compare
expert, medium and random data before combining them); :func:`dataset_card` writes a Hugging
Face style ``README.md`` with the metadata, the statistics and the plot. A ``README.md`` in a
dataset's folder (``marl_minari.ids.dataset_dir(id) / "README.md"``) is published with it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from gymnasium import spaces

from marl_minari import layout
from marl_minari.errors import DatasetNotFoundError, LayoutError
from marl_minari.reader import MultiAgentArrays, MultiAgentDataset
from marl_minari.spaces import leaf_spaces, leaves

DEFAULT_CHUNK_STEPS: Final = 262_144
"""Steps read per chunk by default; memory is proportional to it (whole episodes per chunk)."""
SINGLE_AGENT: Final = "agent_0"
"""Name of the one agent of a plain single-agent Minari dataset."""
PANEL_SIZE: Final = (400, 300)
"""Pixel width and height of one panel of :func:`plot_descriptions` (at ``dpi=100``)."""
PLOT_COLUMNS: Final = 4
"""Panels per row of :func:`plot_descriptions` (fewer when there are fewer panels)."""
MANY_ACTIONS: Final = 64
"""Above this many discrete actions, action frequencies are drawn as lines, not bars."""

SourceKind = Literal["multi_agent", "single_agent", "vault"]
ActionKind = Literal["discrete", "multi_discrete", "binary", "continuous", "text"]


# ---------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Summary:
    """Order statistics of a sample (``None`` everywhere when it is empty).

    Quartiles use linear interpolation (``numpy.percentile``'s default); ``std`` is the
    population standard deviation (``ddof=0``).
    """

    count: int
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    q25: float | None = None
    median: float | None = None
    q75: float | None = None
    max: float | None = None

    @classmethod
    def of(cls, values: np.ndarray) -> Summary:
        """The summary of a 1-D sample."""
        values = np.asarray(values, dtype=np.float64).reshape(-1)
        if values.size == 0:
            return cls(count=0)
        q25, median, q75 = (float(q) for q in np.percentile(values, [25, 50, 75]))
        return cls(count=int(values.size), mean=float(values.mean()), std=float(values.std()),
                   min=float(values.min()), q25=q25, median=median, q75=q75,
                   max=float(values.max()))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"count": self.count, "mean": self.mean, "std": self.std, "min": self.min,
                "q25": self.q25, "median": self.median, "q75": self.q75, "max": self.max}


@dataclass(frozen=True)
class ActionSummary:
    """What one agent did with one leaf of its action space, over the steps it acted.

    Attributes:
        path: the leaf's path inside a ``Dict``/``Tuple`` action space (``""`` for a plain one).
        kind: ``discrete`` (``Discrete``), ``multi_discrete`` (``MultiDiscrete``, components
            flattened), ``binary`` (``MultiBinary``), ``continuous`` (``Box``) or ``text``.
        space: the leaf space, as text.
        samples: actions counted (steps at which the agent acted).
        labels: what ``counts`` (discrete kinds) or the ranges (continuous) refer to: action
            values (``"3"``), ``"c<i>=<v>"`` (component ``i`` took value ``v``), ``"b<i>"``
            (bit ``i`` set) or ``"d<i>"`` (dimension ``i`` of the flattened Box).
        counts: discrete kinds: how often each label occurred.
        minimum, maximum, mean, std: continuous: per-dimension range, mean and population
            standard deviation.
        out_of_space: actions outside the space (a discrete value out of range, a Box value
            outside its bounds); they are not in ``counts``.
    """

    path: str
    kind: ActionKind
    space: str
    samples: int
    labels: tuple[str, ...] = ()
    counts: tuple[int, ...] = ()
    minimum: tuple[float, ...] = ()
    maximum: tuple[float, ...] = ()
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    out_of_space: int = 0

    @property
    def frequencies(self) -> np.ndarray:
        """``counts`` as shares of ``samples`` (per component for ``multi_discrete``)."""
        return np.asarray(self.counts, dtype=np.float64) / max(self.samples, 1)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        out: dict[str, Any] = {"path": self.path, "kind": self.kind, "space": self.space,
                               "samples": self.samples, "out_of_space": self.out_of_space,
                               "labels": list(self.labels)}
        if self.kind == "continuous":
            out.update(minimum=list(self.minimum), maximum=list(self.maximum),
                       mean=list(self.mean), std=list(self.std))
        else:
            out["counts"] = list(self.counts)
        return out


@dataclass(frozen=True)
class AgentDescription:
    """Statistics of one agent.

    Attributes:
        name: the agent.
        returns: its undiscounted return per episode.
        active_steps: steps at which it was present (its observation row was active).
        acted_steps: steps at which it took an action.
        inactive_share: ``1 - active_steps / total_steps``.
        terminations, truncations: how many times its own flag was set.
        actions: one summary per leaf of its action space.
    """

    name: str
    returns: Summary
    active_steps: int
    acted_steps: int
    inactive_share: float
    terminations: int
    truncations: int
    actions: tuple[ActionSummary, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return {"name": self.name, "returns": self.returns.to_dict(),
                "active_steps": self.active_steps, "acted_steps": self.acted_steps,
                "inactive_share": self.inactive_share, "terminations": self.terminations,
                "truncations": self.truncations,
                "actions": [a.to_dict() for a in self.actions]}


@dataclass(frozen=True, eq=False)
class DatasetDescription:
    """Everything :func:`describe` found out about a dataset or vault.

    Attributes:
        name: the dataset id, or the vault folder.
        kind: ``multi_agent``, ``single_agent`` (a plain Minari dataset, one agent
            ``agent_0``) or ``vault``.
        possible_agents: agent names in the environment's order.
        total_episodes, total_steps: counts over what was described.
        episode_lengths: summary of the steps per episode.
        team_returns: summary of the team return per episode (the sum of the team reward,
            Minari's ``rewards`` column, aggregated over agents as ``reward_aggregation`` says).
        agents: per-agent statistics, in ``possible_agents`` order.
        terminated_episodes, truncated_episodes: episodes whose last step terminated / was
            truncated; ``unfinished_episodes``: neither (a vault's last, cut-off episodes).
        inactive_share: share of agent-steps (steps x agents) at which the agent was absent.
        metadata: provenance (env descriptor, spaces, author, algorithm, code permalink,
            layout version...), JSON-serialisable.
        episode_returns: ``(E, N)`` per-agent return of every episode (for plots).
        episode_team_returns: ``(E,)`` team return of every episode.
        episode_length_values: ``(E,)`` steps of every episode.
    """

    name: str
    kind: SourceKind
    possible_agents: tuple[str, ...]
    total_episodes: int
    total_steps: int
    episode_lengths: Summary
    team_returns: Summary
    agents: tuple[AgentDescription, ...]
    terminated_episodes: int
    truncated_episodes: int
    unfinished_episodes: int
    inactive_share: float
    metadata: dict[str, Any] = field(default_factory=dict)
    episode_returns: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    episode_team_returns: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    episode_length_values: np.ndarray = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)

    def agent(self, name: str) -> AgentDescription:
        """The statistics of agent ``name``."""
        for agent in self.agents:
            if agent.name == name:
                return agent
        raise KeyError(f"no agent {name!r} in {self.name} (agents: {self.possible_agents})")

    def to_dict(self, *, include_episodes: bool = False) -> dict[str, Any]:
        """A JSON-serialisable dict (``include_episodes`` adds the per-episode arrays)."""
        out: dict[str, Any] = {
            "name": self.name, "kind": self.kind, "possible_agents": list(self.possible_agents),
            "total_episodes": self.total_episodes, "total_steps": self.total_steps,
            "episode_lengths": self.episode_lengths.to_dict(),
            "team_returns": self.team_returns.to_dict(),
            "terminated_episodes": self.terminated_episodes,
            "truncated_episodes": self.truncated_episodes,
            "unfinished_episodes": self.unfinished_episodes,
            "inactive_share": self.inactive_share,
            "agents": [a.to_dict() for a in self.agents],
            "metadata": self.metadata,
        }
        if include_episodes:
            out["episodes"] = {
                "lengths": self.episode_length_values.tolist(),
                "team_returns": self.episode_team_returns.tolist(),
                "returns": self.episode_returns.tolist(),
            }
        return out

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON (keyword arguments go to ``json.dumps``)."""
        return json.dumps(self.to_dict(), **kwargs)

    def to_text(self) -> str:
        """A short plain-text report (what ``marl-minari describe`` prints)."""
        lines = [
            f"{'dataset' if self.kind != 'vault' else 'vault'}        {self.name} ({self.kind})",
            f"environment    {_env_name(self.metadata)}",
            f"agents         {', '.join(self.possible_agents)}",
            f"episodes       {self.total_episodes}  (terminated {self.terminated_episodes}, "
            f"truncated {self.truncated_episodes}, unfinished {self.unfinished_episodes})",
            f"steps          {self.total_steps}  (length {_brief(self.episode_lengths)})",
            f"team return    {_brief(self.team_returns)}",
            f"inactive       {self.inactive_share:.2%} of agent-steps",
            "agent            return mean       std       min    median       max  inactive",
        ]
        for agent in self.agents:
            r = agent.returns
            lines.append(f"{agent.name:<15} {_num(r.mean):>12} {_num(r.std):>9} "
                         f"{_num(r.min):>9} {_num(r.median):>9} {_num(r.max):>9} "
                         f"{agent.inactive_share:>8.1%}")
        for agent in self.agents:
            for action in agent.actions:
                lines.append(f"actions {agent.name}{'/' + action.path if action.path else ''}: "
                             f"{_action_text(action)}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------- sources
@dataclass(frozen=True)
class _Source:
    name: str
    kind: SourceKind
    possible_agents: tuple[str, ...]
    action_spaces: dict[str, spaces.Space]
    metadata: dict[str, Any]
    chunks: Callable[[], Iterator[MultiAgentArrays]]


def describe(source: Any, *, chunk_steps: int = DEFAULT_CHUNK_STEPS, progress: bool = False,
             vault_options: dict[str, Any] | None = None) -> DatasetDescription:
    """Describe a dataset or vault, reading it in chunks of whole episodes.

    Args:
        source: a dataset id (multi-agent layout or plain single-agent Minari), a
            ``minari.MinariDataset``, a :class:`~marl_minari.reader.MultiAgentDataset`, or the
            folder of a Flashbax vault (``rel_dir/vault_name/vault_uid``, OG-MARL conventions).
        chunk_steps: about how many steps are read at a time (at least one episode); memory
            is proportional to it, plus a few numbers per episode.
        progress: show a progress bar.
        vault_options: keyword arguments for :func:`marl_minari.adapters.from_vault` (agent
            names, spaces, ``cut_on``, ``infer_dead``, ``reward_aggregation``...), which
            imports a vault into a temporary dataset that is described and then removed.

    Returns:
        The :class:`DatasetDescription`.

    Raises:
        DatasetNotFoundError: no such dataset or vault.
        LayoutError: the source cannot be read as a dataset.
        ValueError: ``chunk_steps`` < 1.
    """
    if chunk_steps < 1:
        raise ValueError(f"chunk_steps must be >= 1, got {chunk_steps}")
    with _open_source(source, chunk_steps, progress, dict(vault_options or {})) as resolved:
        stats = _Accumulator(resolved.possible_agents, resolved.action_spaces)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=resolved.metadata.get("total_steps"), unit="step",
                       desc=f"describe {resolved.name}")
        for arrays in resolved.chunks():
            stats.add(arrays)
            if bar is not None:
                bar.update(int(arrays.episode_lengths.sum()))
        if bar is not None:
            bar.close()
        return stats.result(resolved.name, resolved.kind, _provenance(resolved))


@contextmanager
def _open_source(source: Any, chunk_steps: int, progress: bool,
                 vault_options: dict[str, Any]) -> Iterator[_Source]:
    from minari.dataset.minari_dataset import MinariDataset

    if isinstance(source, MultiAgentDataset):
        yield _multi_agent_source(source, np.asarray(source.minari.episode_indices),
                                  chunk_steps)
        return
    if isinstance(source, MinariDataset):
        yield _minari_source(source, chunk_steps)
        return
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"cannot describe {source!r}: give a dataset id, a MinariDataset, a "
                        "MultiAgentDataset or a vault folder")
    text = os.fspath(source)
    if _is_vault(Path(text)):
        with _vault_source(Path(text), chunk_steps, progress, vault_options) as vault:
            yield vault
        return
    if not _is_dataset_id(text):
        raise DatasetNotFoundError(
            f"{text!r} is neither a dataset id ((namespace/)name-vN) nor a Flashbax vault "
            "folder (rel_dir/vault_name/vault_uid holding metadata.json)")
    from marl_minari.ids import dataset_dir

    if not (dataset_dir(text) / "data" / layout.METADATA_FILE_NAME).exists():
        raise DatasetNotFoundError(
            f"no local dataset {text!r} (looked in {dataset_dir(text)}); record or download it "
            "first")
    from marl_minari.metadata import open_minari_dataset

    yield _minari_source(open_minari_dataset(text), chunk_steps)


def _is_dataset_id(text: str) -> bool:
    from marl_minari.ids import parse_dataset_id

    try:
        parse_dataset_id(text)
    except ValueError:
        return False
    return True


def _is_vault(path: Path) -> bool:
    from marl_minari.adapters import is_vault

    return path.is_dir() and bool(is_vault(path))


def _minari_source(dataset: Any, chunk_steps: int) -> _Source:
    from minari.dataset.minari_storage import MinariStorage

    raw = MinariStorage.read_raw_metadata(dataset.storage.data_path)
    indices = np.asarray(dataset.episode_indices, dtype=np.int64)
    if layout.METADATA_KEY in raw:
        return _multi_agent_source(MultiAgentDataset(dataset), indices, chunk_steps)
    return _single_agent_source(dataset, raw, indices, chunk_steps)


def _episodes_per_chunk(metadata: dict[str, Any], chunk_steps: int) -> int:
    episodes = max(int(metadata.get("total_episodes") or 1), 1)
    steps = max(int(metadata.get("total_steps") or 1), 1)
    return max(1, int(chunk_steps * episodes // steps))


def _multi_agent_source(dataset: MultiAgentDataset, indices: np.ndarray,
                        chunk_steps: int) -> _Source:
    metadata = dataset.metadata
    per_chunk = _episodes_per_chunk(metadata, chunk_steps)

    def chunks() -> Iterator[MultiAgentArrays]:
        for start in range(0, len(indices), per_chunk):
            yield dataset.to_arrays(indices[start:start + per_chunk].tolist())

    spec = dataset.spec
    return _Source(name=str(metadata.get("dataset_id")), kind="multi_agent",
                   possible_agents=spec.possible_agents, action_spaces=dict(spec.action_spaces),
                   metadata=_dataset_metadata(metadata, spec), chunks=chunks)


def _single_agent_source(dataset: Any, raw: dict[str, Any], indices: np.ndarray,
                         chunk_steps: int) -> _Source:
    per_chunk = _episodes_per_chunk(raw, chunk_steps)
    storage = dataset.storage
    action_space = dataset.action_space
    agents = (SINGLE_AGENT,)
    direct = raw.get("data_format", "hdf5") == "hdf5" and not any(
        isinstance(leaf, spaces.Text) for _, leaf in leaf_spaces(action_space))

    def chunks() -> Iterator[MultiAgentArrays]:
        for start in range(0, len(indices), per_chunk):
            chunk = indices[start:start + per_chunk].tolist()
            if direct:
                episodes = _read_plain_columns(Path(storage.data_path), chunk, action_space)
            else:
                episodes = list(storage.get_episodes(chunk))
            yield _single_agent_arrays(episodes, chunk, action_space)

    metadata = _dataset_metadata(raw, None)
    metadata.update(possible_agents=list(agents),
                    observation_spaces={SINGLE_AGENT: _space_text(dataset.observation_space)},
                    action_spaces={SINGLE_AGENT: _space_text(action_space)})
    return _Source(name=str(raw.get("dataset_id")), kind="single_agent", possible_agents=agents,
                   action_spaces={SINGLE_AGENT: action_space}, metadata=metadata, chunks=chunks)


def _read_plain_columns(data_path: Path, indices: list[int], action_space: spaces.Space
                        ) -> list[dict[str, Any]]:
    """Rewards, flags and actions of plain Minari HDF5 episodes, observations left unread.

    Minari's own ``get_episodes`` decodes every column of every episode (about 1.3 ms per
    episode); reading only these columns through h5py's low-level API is several times faster
    on datasets of many short episodes.
    """
    import h5py

    from marl_minari.errors import CorruptedDataError
    from marl_minari.reader import open_data_file
    from marl_minari.self_contained import check_file

    leaf_paths = [("actions/" + path if path else "actions").encode()
                  for path, _ in leaf_spaces(action_space)]
    out: list[dict[str, Any]] = []
    with open_data_file(data_path / layout.MAIN_FILE_NAME) as file:
        check_file(file, data_path / layout.MAIN_FILE_NAME)
        root = file.id
        for index in indices:
            try:
                group = h5py.h5g.open(root, f"episode_{index}".encode())
                columns = {name: _read_all(group, name.encode())
                           for name in ("rewards", "terminations", "truncations")}
                action_leaves = [_read_all(group, path) for path in leaf_paths]
            except KeyError as exc:
                raise CorruptedDataError(
                    f"{data_path}: episode_{index} lacks a column ({exc})") from exc
            columns["actions"] = _rebuild(action_space, iter(action_leaves))
            out.append(columns)
    return out


def _read_all(group: Any, name: bytes) -> np.ndarray:
    import h5py

    dataset = h5py.h5d.open(group, name)
    array = np.empty(dataset.get_space().get_simple_extent_dims(), dtype=dataset.dtype)
    if array.size:
        dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, array)
    return array


def _rebuild(space: spaces.Space, values: Iterator[np.ndarray]) -> Any:
    """A tree shaped like ``space`` from its leaves in :func:`leaf_spaces` order."""
    if isinstance(space, spaces.Dict):
        return {k: _rebuild(sub, values) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_rebuild(sub, values) for sub in space.spaces)
    return next(values)


def _single_agent_arrays(episodes: list[dict[str, Any]], indices: list[int],
                         action_space: spaces.Space) -> MultiAgentArrays:
    """Plain Minari episodes as one always-present agent (only what describe needs)."""
    lengths = np.asarray([len(ep["rewards"]) for ep in episodes], dtype=np.int64)
    steps = int(lengths.sum())
    rewards = np.concatenate([np.asarray(ep["rewards"], dtype=np.float64).reshape(-1)
                              for ep in episodes]) if episodes else np.zeros(0)
    terms = np.concatenate([np.asarray(ep["terminations"], dtype=bool).reshape(-1)
                            for ep in episodes])
    truncs = np.concatenate([np.asarray(ep["truncations"], dtype=bool).reshape(-1)
                             for ep in episodes])
    actions = _concat_actions([ep["actions"] for ep in episodes], action_space)
    empty: dict[str, Any] = {}
    return MultiAgentArrays(
        possible_agents=(SINGLE_AGENT,), episode_ids=np.asarray(indices, dtype=np.int64),
        episode_lengths=lengths, observations={SINGLE_AGENT: empty},
        actions={SINGLE_AGENT: actions}, rewards=rewards[:, None],
        terminations=terms[:, None], truncations=truncs[:, None],
        active=np.ones((steps + len(indices), 1), dtype=bool),
        acted=np.ones((steps, 1), dtype=bool), team_rewards=rewards,
        episode_terminations=terms, episode_truncations=truncs)


def _concat_actions(values: list[Any], space: spaces.Space) -> Any:
    """Concatenate per-episode actions decoded by Minari (dicts, tuples, text lists)."""
    if isinstance(space, spaces.Dict):
        return {k: _concat_actions([v[k] for v in values], sub) for k, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(_concat_actions([v[i] for v in values], sub)
                     for i, sub in enumerate(space.spaces))
    if isinstance(space, spaces.Text):
        return np.asarray([s for v in values for s in v], dtype=object)
    return np.concatenate([np.asarray(v) for v in values])


@contextmanager
def _vault_source(path: Path, chunk_steps: int, progress: bool,
                  vault_options: dict[str, Any]) -> Iterator[_Source]:
    """A vault, imported with :func:`marl_minari.adapters.from_vault` into a temporary
    datasets root that is removed when the block ends."""
    from marl_minari.adapters import from_vault, vault_path_parts
    from marl_minari.ids import using_datasets_root

    rel_dir, vault_name, vault_uid = vault_path_parts(path)
    with tempfile.TemporaryDirectory(prefix="marl-minari-describe-") as root:
        with using_datasets_root(Path(root)):
            dataset = from_vault(rel_dir, vault_name, vault_uid, _VAULT_DATASET_ID,
                                 chunk_steps=chunk_steps, progress=progress, **vault_options)
        source = _multi_agent_source(dataset, np.arange(dataset.total_episodes), chunk_steps)
        metadata = dict(source.metadata)
        for key in ("dataset_id", "dataset_size", "data_format", "minari_version",
                    "total_episodes", "total_steps", "layout_version", "library_version"):
            metadata.pop(key, None)
        record = dataset.metadata.get(layout.METADATA_KEY, {}).get("vault") or {}
        metadata.update(vault_path=str(path.resolve()), vault_name=vault_name,
                        vault_uid=vault_uid, vault_version=record.get("version"),
                        vault_streams=record.get("streams"), vault_length=record.get("length"),
                        vault_trailing_steps=record.get("trailing_steps"),
                        vault_metadata=_json_safe(record.get("user_metadata") or {}))
        yield replace(source, name=str(path.resolve()), kind="vault", metadata=metadata)


_VAULT_DATASET_ID: Final = "vault/describe-v0"


# ---------------------------------------------------------------------------- statistics
class _ActionStats:
    """Running statistics of one action leaf of one agent."""

    def __init__(self, path: str, space: spaces.Space) -> None:
        self.path = path
        self.space = space
        self.samples = 0
        self.out_of_space = 0
        self.kind: ActionKind
        if isinstance(space, spaces.Discrete):
            self.kind = "discrete"
            self.counts = np.zeros(int(space.n), dtype=np.int64)
        elif isinstance(space, spaces.MultiDiscrete):
            self.kind = "multi_discrete"
            self.nvec = np.asarray(space.nvec, dtype=np.int64).reshape(-1)
            self.offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]]).astype(np.int64)
            self.counts = np.zeros(int(self.nvec.sum()), dtype=np.int64)
        elif isinstance(space, spaces.MultiBinary):
            self.kind = "binary"
            self.counts = np.zeros(int(np.prod(space.shape)), dtype=np.int64)
        elif isinstance(space, spaces.Box):
            self.kind = "continuous"
            dims = int(np.prod(space.shape))
            self.minimum = np.full(dims, np.inf)
            self.maximum = np.full(dims, -np.inf)
            self.mean = np.zeros(dims)
            self.m2 = np.zeros(dims)
            self.low = np.asarray(space.low, dtype=np.float64).reshape(-1)
            self.high = np.asarray(space.high, dtype=np.float64).reshape(-1)
        else:
            self.kind = "text"

    def add(self, values: np.ndarray) -> None:
        """Count the actions ``values`` (rows: the steps at which the agent acted)."""
        n = len(values)
        if n == 0:
            return
        self.samples += n
        if self.kind == "discrete":
            assert isinstance(self.space, spaces.Discrete)
            shifted = np.asarray(values, dtype=np.int64).reshape(-1) - int(self.space.start)
            size = len(self.counts)
            valid = (shifted >= 0) & (shifted < size)
            self.out_of_space += int(n - valid.sum())
            self.counts += np.bincount(shifted[valid], minlength=size)
        elif self.kind == "multi_discrete":
            assert isinstance(self.space, spaces.MultiDiscrete)
            start = np.asarray(getattr(self.space, "start", 0), dtype=np.int64).reshape(-1)
            shifted = np.asarray(values, dtype=np.int64).reshape(n, -1) - start
            valid = (shifted >= 0) & (shifted < self.nvec)
            self.out_of_space += int((~valid.all(axis=1)).sum())
            flat = (shifted + self.offsets)[valid]
            self.counts += np.bincount(flat, minlength=len(self.counts))
        elif self.kind == "binary":
            bits = np.asarray(values).reshape(n, -1)
            self.out_of_space += int((~np.isin(bits, (0, 1)).all(axis=1)).sum())
            self.counts += (bits == 1).sum(axis=0).astype(np.int64)
        elif self.kind == "continuous":
            rows = np.asarray(values, dtype=np.float64).reshape(n, -1)
            self.out_of_space += int(((rows < self.low) | (rows > self.high)).any(axis=1).sum())
            self.minimum = np.minimum(self.minimum, rows.min(axis=0))
            self.maximum = np.maximum(self.maximum, rows.max(axis=0))
            mean = rows.mean(axis=0)
            m2 = ((rows - mean) ** 2).sum(axis=0)
            before = self.samples - n
            delta = mean - self.mean
            self.mean = self.mean + delta * (n / self.samples)
            self.m2 = self.m2 + m2 + delta ** 2 * (before * n / self.samples)

    def result(self) -> ActionSummary:
        """The summary so far."""
        path, kind, space = self.path, self.kind, _space_text(self.space)
        samples, outside = self.samples, self.out_of_space
        labels: tuple[str, ...] = ()
        if kind == "discrete":
            assert isinstance(self.space, spaces.Discrete)
            first = int(self.space.start)
            labels = tuple(str(first + i) for i in range(len(self.counts)))
        elif kind == "multi_discrete":
            starts = np.broadcast_to(np.asarray(getattr(self.space, "start", 0),
                                                dtype=np.int64).reshape(-1), self.nvec.shape)
            labels = tuple(f"c{c}={int(starts[c]) + v}" for c, n in enumerate(self.nvec)
                           for v in range(int(n)))
        elif kind == "binary":
            labels = tuple(f"b{i}" for i in range(len(self.counts)))
        if kind in ("discrete", "multi_discrete", "binary"):
            return ActionSummary(path, kind, space, samples, labels, _ints(self.counts),
                                 out_of_space=outside)
        if kind == "continuous":
            labels = tuple(f"d{i}" for i in range(len(self.mean)))
            if samples == 0:
                return ActionSummary(path, kind, space, samples, labels)
            return ActionSummary(
                path, kind, space, samples, labels, minimum=_floats(self.minimum),
                maximum=_floats(self.maximum), mean=_floats(self.mean),
                std=_floats(np.sqrt(self.m2 / samples)), out_of_space=outside)
        return ActionSummary(path, kind, space, samples)


class _Accumulator:
    """Combines the statistics of chunks of episodes."""

    def __init__(self, agents: tuple[str, ...], action_spaces: dict[str, spaces.Space]) -> None:
        self.agents = agents
        self.returns: list[np.ndarray] = []
        self.team_returns: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.ends = np.zeros(3, dtype=np.int64)  # terminated, truncated, unfinished
        n = len(agents)
        self.active = np.zeros(n, dtype=np.int64)
        self.acted = np.zeros(n, dtype=np.int64)
        self.terminations = np.zeros(n, dtype=np.int64)
        self.truncations = np.zeros(n, dtype=np.int64)
        self.actions = {a: [_ActionStats(path, space) for path, space in
                            leaf_spaces(action_spaces[a])] for a in agents}

    def add(self, arrays: MultiAgentArrays) -> None:
        """Add the statistics of a chunk of whole episodes."""
        lengths = np.asarray(arrays.episode_lengths, dtype=np.int64)
        if len(lengths) == 0:
            return
        if tuple(arrays.possible_agents) != self.agents:
            raise LayoutError(f"chunk agents {arrays.possible_agents} differ from {self.agents}")
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        ends = starts + lengths - 1
        self.lengths.append(lengths)
        self.returns.append(_segment_sums(arrays.rewards, starts, lengths))
        self.team_returns.append(_segment_sums(arrays.team_rewards, starts, lengths))
        nonempty = lengths > 0
        last = ends[nonempty]
        terminated = np.asarray(arrays.episode_terminations, dtype=bool)[last]
        truncated = np.asarray(arrays.episode_truncations, dtype=bool)[last] & ~terminated
        self.ends += [int(terminated.sum()), int(truncated.sum()),
                      int(len(lengths) - terminated.sum() - truncated.sum())]
        steps = int(lengths.sum())
        obs_rows = np.arange(steps, dtype=np.int64) + np.repeat(
            np.arange(len(lengths), dtype=np.int64), lengths)
        self.active += np.asarray(arrays.active, dtype=bool)[obs_rows].sum(axis=0)
        acted = np.asarray(arrays.acted, dtype=bool)
        self.acted += acted.sum(axis=0)
        self.terminations += np.asarray(arrays.terminations, dtype=bool).sum(axis=0)
        self.truncations += np.asarray(arrays.truncations, dtype=bool).sum(axis=0)
        for column, agent in enumerate(self.agents):
            rows = np.flatnonzero(acted[:, column])
            for stats, (_, values) in zip(self.actions[agent], leaves(arrays.actions[agent]),
                                          strict=True):
                stats.add(values[rows] if len(rows) < len(values) else values)

    def result(self, name: str, kind: SourceKind, metadata: dict[str, Any]
               ) -> DatasetDescription:
        """The description of everything added."""
        n = len(self.agents)
        lengths = np.concatenate(self.lengths) if self.lengths else np.zeros(0, dtype=np.int64)
        returns = np.concatenate(self.returns) if self.returns else np.zeros((0, n))
        team = np.concatenate(self.team_returns) if self.team_returns else np.zeros(0)
        steps = int(lengths.sum())
        agents = tuple(
            AgentDescription(
                name=agent, returns=Summary.of(returns[:, i]),
                active_steps=int(self.active[i]), acted_steps=int(self.acted[i]),
                inactive_share=_share(steps - int(self.active[i]), steps),
                terminations=int(self.terminations[i]), truncations=int(self.truncations[i]),
                actions=tuple(s.result() for s in self.actions[agent]))
            for i, agent in enumerate(self.agents))
        return DatasetDescription(
            name=name, kind=kind, possible_agents=self.agents, total_episodes=len(lengths),
            total_steps=steps, episode_lengths=Summary.of(lengths),
            team_returns=Summary.of(team), agents=agents,
            terminated_episodes=int(self.ends[0]), truncated_episodes=int(self.ends[1]),
            unfinished_episodes=int(self.ends[2]),
            inactive_share=_share(steps * n - int(self.active.sum()), steps * n),
            metadata=metadata, episode_returns=returns, episode_team_returns=team,
            episode_length_values=lengths)


def _segment_sums(values: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Per-episode sums of step rows (zero for empty episodes), in float64."""
    values = np.asarray(values, dtype=np.float64)
    out = np.zeros((len(lengths), *values.shape[1:]))
    nonempty = lengths > 0
    if nonempty.any():
        out[nonempty] = np.add.reduceat(values, starts[nonempty], axis=0)
    return out


def _share(part: int, whole: int) -> float:
    return float(part / whole) if whole else 0.0


def _ints(values: np.ndarray) -> tuple[int, ...]:
    return tuple(int(v) for v in values)


def _floats(values: np.ndarray) -> tuple[float, ...]:
    return tuple(float(v) for v in values)


# ---------------------------------------------------------------------------- metadata
_PROVENANCE_KEYS: Final = ("dataset_id", "author", "author_email", "algorithm_name",
                           "code_permalink", "description", "minari_version", "dataset_size",
                           "requirements", "ref_min_score", "ref_max_score", "total_episodes",
                           "total_steps", "data_format")


def _dataset_metadata(raw: dict[str, Any], spec: Any) -> dict[str, Any]:
    """The JSON-safe provenance of a dataset (multi-agent: ``spec`` given)."""
    out: dict[str, Any] = {k: _json_safe(raw[k]) for k in _PROVENANCE_KEYS if k in raw}
    marl = raw.get(layout.METADATA_KEY)
    if spec is not None and isinstance(marl, dict):
        out.update(
            layout_version=marl.get(layout.META_LAYOUT_VERSION),
            library_version=marl.get(layout.META_LIBRARY_VERSION),
            api=spec.api, possible_agents=list(spec.possible_agents),
            env=None if spec.env is None else _json_safe(spec.env.to_dict()),
            reward_aggregation=spec.reward_aggregation,
            observation_spaces={a: _space_text(spec.observation_spaces[a])
                                for a in spec.possible_agents},
            action_spaces={a: _space_text(spec.action_spaces[a]) for a in spec.possible_agents},
            state_space=None if spec.state_space is None else _space_text(spec.state_space),
        )
    else:
        env_spec = raw.get("env_spec")
        if isinstance(env_spec, str):
            try:
                parsed = json.loads(env_spec)
                out["env"] = {"env_id": parsed.get("id"),
                              "entry_point": parsed.get("entry_point"),
                              "kwargs": _json_safe(parsed.get("kwargs") or {})}
            except ValueError:
                out["env"] = None
        else:
            out["env"] = None
    return out


def _provenance(source: _Source) -> dict[str, Any]:
    return {**source.metadata, "source_kind": source.kind}


def _json_safe(value: Any) -> Any:
    """``value`` with non-finite floats, arrays and other objects made JSON-serialisable."""
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _space_text(space: spaces.Space) -> str:
    return " ".join(repr(space).split())


def _env_name(metadata: dict[str, Any]) -> str:
    env = metadata.get("env")
    if isinstance(env, dict):
        name = env.get("env_id") or env.get("entry_point") or "unknown"
        api = env.get("api") or metadata.get("api")
        return f"{name} ({api})" if api else str(name)
    return "unknown"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _brief(summary: Summary) -> str:
    if summary.count == 0:
        return "no episodes"
    return (f"mean {_num(summary.mean)}, std {_num(summary.std)}, min {_num(summary.min)}, "
            f"median {_num(summary.median)}, max {_num(summary.max)}")


def _action_text(action: ActionSummary, top: int = 8) -> str:
    if action.kind == "continuous":
        if not action.mean:
            return "no actions"
        return "; ".join(f"{label} [{lo:.3g}, {hi:.3g}] mean {m:.3g} std {s:.3g}"
                         for label, lo, hi, m, s in zip(action.labels, action.minimum,
                                                        action.maximum, action.mean,
                                                        action.std, strict=True))
    if action.kind == "text":
        return f"{action.samples} text actions"
    freq = action.frequencies
    order = np.argsort(-freq, kind="stable")[:top]
    shown = ", ".join(f"{action.labels[i]}: {freq[i]:.1%}" for i in order)
    more = len(freq) - len(order)
    return shown + (f" (+{more} more)" if more > 0 else "")


# ---------------------------------------------------------------------------- plots
def plot_layout(descriptions: Sequence[DatasetDescription]) -> tuple[int, int]:
    """``(rows, columns)`` of the panel grid :func:`plot_descriptions` draws.

    Panels: episode lengths, team returns, then one return histogram per agent and one action
    panel per agent (agents of all descriptions, first-seen order).
    """
    panels = 2 + 2 * len(_union_agents(descriptions))
    columns = min(PLOT_COLUMNS, panels)
    return math.ceil(panels / columns), columns


def plot_descriptions(descriptions: Sequence[DatasetDescription], path: str | os.PathLike[str],
                      *, labels: Sequence[str] | None = None, bins: int = 30,
                      dpi: int = 100) -> Path:
    """Draw several descriptions side by side on shared axes and save a PNG.

    Every panel overlays all descriptions (one colour each): histograms of episode lengths,
    team returns and per-agent returns (shared bins, as shares of episodes so datasets of
    different sizes compare), and per-agent action frequencies (discrete: grouped bars) or
    ranges (continuous: mean +- std with min..max whiskers per dimension). The image is
    ``columns * PANEL_SIZE[0]`` x ``rows * PANEL_SIZE[1]`` pixels at ``dpi=100`` (see
    :func:`plot_layout`), scaled by ``dpi / 100``.

    Args:
        descriptions: what :func:`describe` returned, one per dataset.
        path: the PNG file to write (parent folders are created).
        labels: legend names (default: the descriptions' names).
        bins: histogram bins.
        dpi: resolution.

    Returns:
        ``path``.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    if not descriptions:
        raise ValueError("plot_descriptions needs at least one description")
    names = list(labels) if labels is not None else [d.name for d in descriptions]
    if len(names) != len(descriptions):
        raise ValueError(f"{len(names)} labels for {len(descriptions)} descriptions")
    rows, columns = plot_layout(descriptions)
    width, height = PANEL_SIZE
    figure = plt.figure(figsize=(columns * width / 100, rows * height / 100), dpi=dpi)
    try:
        axes = figure.subplots(rows, columns, squeeze=False).reshape(-1)
        colors = [f"C{i % 10}" for i in range(len(descriptions))]
        agents = _union_agents(descriptions)
        _histogram(axes[0], [d.episode_length_values for d in descriptions], names, colors,
                   bins, "episode length", "steps")
        _histogram(axes[1], [d.episode_team_returns for d in descriptions], names, colors,
                   bins, "team return", "return")
        for i, agent in enumerate(agents):
            values = [d.episode_returns[:, d.possible_agents.index(agent)]
                      if agent in d.possible_agents and d.episode_returns.size else None
                      for d in descriptions]
            _histogram(axes[2 + i], values, names, colors, bins, f"return of {agent}", "return")
            actions = [d.agent(agent).actions if agent in d.possible_agents else ()
                       for d in descriptions]
            _action_panel(axes[2 + len(agents) + i], agent, actions, names, colors)
        for ax in axes[2 + 2 * len(agents):]:
            ax.set_axis_off()
        figure.tight_layout()
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(target, format="png", dpi=dpi)
    finally:
        plt.close(figure)
    return target


def _union_agents(descriptions: Sequence[DatasetDescription]) -> list[str]:
    seen: dict[str, None] = {}
    for description in descriptions:
        for agent in description.possible_agents:
            seen.setdefault(agent, None)
    return list(seen)


def _histogram(ax: Any, samples: Sequence[np.ndarray | None], names: Sequence[str],
               colors: Sequence[str], bins: int, title: str, xlabel: str) -> None:
    present = [np.asarray(s, dtype=np.float64) for s in samples if s is not None and len(s)]
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel("share of episodes", fontsize=8)
    ax.tick_params(labelsize=7)
    if not present:
        ax.text(0.5, 0.5, "no episodes", ha="center", va="center", transform=ax.transAxes)
        return
    everything = np.concatenate(present)
    low, high = float(everything.min()), float(everything.max())
    if low == high:
        low, high = low - 0.5, high + 0.5
    edges = np.linspace(low, high, bins + 1)
    for sample, name, color in zip(samples, names, colors, strict=True):
        if sample is None or not len(sample):
            continue
        values = np.asarray(sample, dtype=np.float64)
        ax.hist(values, bins=edges, weights=np.full(len(values), 1 / len(values)),
                histtype="stepfilled", alpha=0.35, color=color, edgecolor=color, label=name)
    if len(samples) > 1:
        ax.legend(fontsize=7)


def _action_panel(ax: Any, agent: str, per_dataset: Sequence[tuple[ActionSummary, ...]],
                  names: Sequence[str], colors: Sequence[str]) -> None:
    ax.tick_params(labelsize=7)
    first = next((actions[0] for actions in per_dataset if actions), None)
    leaf_note = ""
    if first is not None and first.path:
        leaf_note = f" [{first.path}]"
    ax.set_title(f"actions of {agent}{leaf_note}", fontsize=9)
    if first is None or first.kind == "text":
        ax.text(0.5, 0.5, "no action summary", ha="center", va="center", transform=ax.transAxes)
        return
    chosen = [next((a for a in actions if a.path == first.path and a.kind == first.kind), None)
              for actions in per_dataset]
    width = 0.8 / len(chosen)
    if first.kind == "continuous":
        ax.set_ylabel("action value", fontsize=8)
        for k, (summary, name, color) in enumerate(zip(chosen, names, colors, strict=True)):
            if summary is None or not summary.mean:
                continue
            x = np.arange(len(summary.mean)) - 0.4 + width * (k + 0.5)
            ax.vlines(x, summary.minimum, summary.maximum, color=color, linewidth=1)
            ax.errorbar(x, summary.mean, yerr=summary.std, fmt="o", color=color, markersize=3,
                        capsize=2, label=name)
        ax.set_xticks(range(len(first.labels)), first.labels, fontsize=7)
    else:
        ax.set_ylabel("share of actions" if first.kind != "binary" else "share set",
                      fontsize=8)
        many = len(first.labels) > MANY_ACTIONS
        for k, (summary, name, color) in enumerate(zip(chosen, names, colors, strict=True)):
            if summary is None:
                continue
            freq = summary.frequencies
            if many:
                ax.plot(np.arange(len(freq)), freq, color=color, linewidth=0.8, label=name)
            else:
                x = np.arange(len(freq)) - 0.4 + width * (k + 0.5)
                ax.bar(x, freq, width=width, color=color, alpha=0.8, label=name)
        if not many:
            step = max(1, math.ceil(len(first.labels) / 16))
            ticks = list(range(0, len(first.labels), step))
            ax.set_xticks(ticks, [first.labels[i] for i in ticks], fontsize=7,
                          rotation=90 if first.kind == "multi_discrete" else 0)
        else:
            ax.set_xlabel("action", fontsize=8)
    if len(chosen) > 1:
        ax.legend(fontsize=7)


# ---------------------------------------------------------------------------- card
_SIZE_CATEGORIES: Final = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                           (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"),
                           (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
                           (10_000_000_000, "1B<n<10B"))


def size_category(steps: int) -> str:
    """The Hugging Face ``size_categories`` value for ``steps`` examples (steps)."""
    for bound, name in _SIZE_CATEGORIES:
        if steps < bound:
            return name
    return "n>10B"


def dataset_card(description: DatasetDescription, path: str | os.PathLike[str], *,
                 plot: bool | str | os.PathLike[str] = True, license: str | None = None,
                 tags: Sequence[str] = ()) -> Path:
    """Write a Hugging Face style dataset card (Markdown with YAML front matter).

    The card holds the metadata (env descriptor, agents, spaces, author, algorithm, code
    permalink, layout version), the statistics and, with ``plot``, the plot of
    :func:`plot_descriptions` linked by a relative path. Written as ``README.md`` into the
    dataset's folder (``marl_minari.ids.dataset_dir(id) / "README.md"``), it is published with
    the dataset (the plot too, when it lies in that folder).

    Args:
        description: what :func:`describe` returned.
        path: the Markdown file to write.
        plot: ``True`` writes ``statistics.png`` next to the card; a path writes the plot
            there; ``False`` writes no plot.
        license: the ``license`` front-matter value (default: the dataset metadata's
            ``license``, else ``unknown``).
        tags: extra tags.

    Returns:
        ``path``.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    image: Path | None = None
    if plot is True:
        image = target.parent / "statistics.png"
    elif plot is not False:
        image = Path(plot)  # type: ignore[arg-type]
    if image is not None:
        plot_descriptions([description], image)
    link = None if image is None else Path(
        os.path.relpath(image.resolve(), target.parent.resolve())).as_posix()
    target.write_text(_card_text(description, link, license, tags), encoding="utf-8")
    return target


def _card_text(d: DatasetDescription, image: str | None, license: str | None,
               extra_tags: Sequence[str]) -> str:
    meta = d.metadata
    env = meta.get("env") if isinstance(meta.get("env"), dict) else None
    tag_list = ["reinforcement-learning", "offline-reinforcement-learning", "minari"]
    if d.kind != "single_agent":
        tag_list += ["multi-agent-reinforcement-learning", "marl-minari"]
    if env is not None and env.get("env_id"):
        tag_list.append(str(env["env_id"]).replace("/", "-"))
    if d.kind == "vault":
        tag_list.append("flashbax")
    tag_list += [str(t) for t in extra_tags]
    tag_list = list(dict.fromkeys(tag_list))
    front = [
        "---",
        f"license: {_yaml(license or meta.get('license') or 'unknown')}",
        f"pretty_name: {_yaml(d.name)}",
        "task_categories:",
        "- reinforcement-learning",
        "tags:",
        *[f"- {_yaml(t)}" for t in tag_list],
        "size_categories:",
        f"- {_yaml(size_category(d.total_steps))}",
        "---",
    ]
    body = [f"# {d.name}", ""]
    if meta.get("description"):
        body += [str(meta["description"]), ""]
    body += ["## Dataset summary", "", "| | |", "|---|---|"]
    rows = [
        ("Dataset id" if d.kind != "vault" else "Vault", f"`{d.name}`"),
        ("Kind", {"multi_agent": "multi-agent (marl-minari layout)",
                  "single_agent": "single-agent Minari dataset",
                  "vault": "Flashbax vault"}[d.kind]),
        ("Environment", _env_name(meta)),
        ("Agents", ", ".join(f"`{a}`" for a in d.possible_agents)),
        ("Episodes", f"{d.total_episodes:,}"),
        ("Steps", f"{d.total_steps:,}"),
        ("Algorithm", meta.get("algorithm_name")),
        ("Author", _join(meta.get("author"))),
        ("Author email", _join(meta.get("author_email"))),
        ("Code permalink", meta.get("code_permalink")),
        ("Layout version", meta.get("layout_version")),
        ("marl-minari version", meta.get("library_version")),
        ("Minari version", meta.get("minari_version")),
        ("Reward aggregation", meta.get("reward_aggregation")),
        ("Size (MB)", meta.get("dataset_size")),
    ]
    body += [f"| {k} | {_cell(v)} |" for k, v in rows if v not in (None, "", [])]
    body += ["", "## Usage", "", "```python"]
    if d.kind == "multi_agent":
        body += ["import marl_minari", "", f"dataset = marl_minari.load_dataset({d.name!r})",
                 "arrays = dataset.to_arrays()   # per-agent rewards, actions, masks",
                 "", "import minari", "", f"plain = minari.load_dataset({d.name!r})"]
    elif d.kind == "single_agent":
        body += ["import minari", "", f"dataset = minari.load_dataset({d.name!r})"]
    else:
        body += ["from flashbax.vault import Vault", "",
                 f"# the vault folder: {d.name}", "vault = Vault(vault_name=..., "
                 "rel_dir=..., vault_uid=...)", "experience = vault.read().experience"]
    body += ["```", "", "## Agents and spaces", "",
             "| agent | observation space | action space |", "|---|---|---|"]
    obs_spaces = meta.get("observation_spaces") or {}
    act_spaces = meta.get("action_spaces") or {}
    for name in d.possible_agents:
        body.append(f"| `{name}` | {_cell(obs_spaces.get(name, '-'), code=True)} | "
                    f"{_cell(act_spaces.get(name, '-'), code=True)} |")
    if meta.get("state_space"):
        body += ["", f"Global state: {_cell(meta['state_space'], code=True)}"]
    if env is not None:
        body += ["", "## Environment", "", "```json", json.dumps(env, indent=2, sort_keys=True),
                 "```"]
        if d.kind == "multi_agent":
            body += ["", "`marl_minari.load_dataset(id).recover_environment()` re-creates it."]
    body += ["", "## Statistics", "", "### Episodes", "",
             "| | count | mean | std | min | 25% | median | 75% | max |",
             "|---|---|---|---|---|---|---|---|---|",
             _summary_row("length (steps)", d.episode_lengths),
             "", f"Terminated: {d.terminated_episodes:,}; truncated: {d.truncated_episodes:,}; "
             f"unfinished: {d.unfinished_episodes:,}.", "",
             "### Returns", "",
             "Undiscounted return per episode (team: the sum of the team reward column).", "",
             "| | count | mean | std | min | 25% | median | 75% | max |",
             "|---|---|---|---|---|---|---|---|---|",
             _summary_row("team", d.team_returns)]
    body += [_summary_row(f"`{a.name}`", a.returns) for a in d.agents]
    body += ["", "### Agents", "",
             f"Inactive agent-steps (agent absent): {d.inactive_share:.2%} overall.", "",
             "| agent | active steps | acted steps | inactive | terminations | truncations |",
             "|---|---|---|---|---|---|"]
    body += [f"| `{a.name}` | {a.active_steps:,} | {a.acted_steps:,} | "
             f"{a.inactive_share:.2%} | {a.terminations:,} | {a.truncations:,} |"
             for a in d.agents]
    body += ["", "### Actions", ""]
    for agent in d.agents:
        for action in agent.actions:
            where = f"`{agent.name}`" + (f" `{action.path}`" if action.path else "")
            body.append(f"- {where} ({action.kind}, {action.samples:,} actions"
                        + (f", {action.out_of_space:,} outside the space"
                           if action.out_of_space else "")
                        + f"): {_action_text(action, top=12)}")
    if image is not None:
        body += ["", "## Plots", "", f"![Statistics of {d.name}]({image})"]
    body.append("")
    return "\n".join(front) + "\n\n" + "\n".join(body)


def _summary_row(label: str, s: Summary) -> str:
    cells = [s.mean, s.std, s.min, s.q25, s.median, s.q75, s.max]
    return f"| {label} | {s.count:,} | " + " | ".join(_num(c) for c in cells) + " |"


def _yaml(value: str) -> str:
    """A YAML scalar: JSON's double-quoted strings are valid YAML."""
    return json.dumps(str(value), ensure_ascii=False)


def _join(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        parts = [str(v) for v in value if v]
        return ", ".join(parts) or None
    return str(value)


def _cell(value: Any, *, code: bool = False) -> str:
    text = str(value).replace("|", "\\|").replace("\n", " ")
    return f"`{text}`" if code else text
