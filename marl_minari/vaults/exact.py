"""Restoration arrays: what a vault needs besides its OG-MARL view to rebuild a dataset exactly.

The view (``observations``, ``actions``, ...) is lossy: no final observations, float32 rewards,
team dones, no per-agent presence flags, no infos. Every field of the dataset that the view
does not hold exactly is stored in a *restoration array* named ``marl_minari.<i>.`` in the
vault's store (not listed in ``structure_shape``, so ``Vault`` and OG-MARL never see it).

Rows of restoration arrays follow the dataset, not the vault's time axis:

* ``obs``: one row per observation row (``T + 1`` per episode, episodes back to back);
* ``step``: one row per step (``T`` per episode; ``idle/observations/...`` holds the recorded
  observation of an agent at the steps it did not act, which the view zeroes, else zeros);
* ``episode``: one row per episode;
* ``bytes``: UTF-8 bytes of text fields (text fields store per-row byte lengths in their
  ``obs``/``step``/``episode`` array, the bytes in a second array).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
from gymnasium import spaces

from marl_minari.format.spaces import build_tree, leaf_dtype, leaf_shape, leaves
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.arrays import MultiAgentArrays

from .store import (
    RESTORATION_COMPRESSION,
    TIME_AXIS_LENGTH,
    Appender,
    VaultReader,
    VaultWriter,
    time_chunk,
)
from .view_plan import ACTIONS, OBSERVATIONS, STATE, ViewPlan

RowKind = Literal["obs", "step", "episode"]
PREFIX: Final = "marl_minari"
BYTES_CHUNK: Final = 1 << 20

# Per-step and per-row columns of MultiAgentArrays, always stored exactly.
_STEP_COLUMNS: Final = ("rewards", "terminations", "truncations", "acted", "team_rewards",
                        "episode_terminations", "episode_truncations")


def _join(prefix: str, path: str) -> str:
    return f"{prefix}/{path}" if path else prefix


@dataclass(frozen=True)
class ExactField:
    """One restoration array.

    Attributes:
        field: what it holds (``"observations/<agent>/<path>"``, ``"final/observations/..."``,
            ``"rewards"``, ``"agent_infos/<agent>/<path>"``, ``"episode/seed"``, ...).
        rows: ``"obs"``, ``"step"`` or ``"episode"``.
        dtype: stored dtype (``int64`` byte lengths for text fields).
        row_shape: per-row shape.
        name: store name (``marl_minari.<i>.``).
        text: the field is text: ``name`` holds byte lengths, ``bytes_name`` the bytes.
        bytes_name: store name of the UTF-8 bytes of a text field.
    """

    field: str
    rows: RowKind
    dtype: str
    row_shape: tuple[int, ...]
    name: str
    text: bool = False
    bytes_name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form for the vault's metadata."""
        return {"field": self.field, "rows": self.rows, "dtype": self.dtype,
                "row_shape": list(self.row_shape), "name": self.name, "text": self.text,
                "bytes_name": self.bytes_name}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExactField:
        """Inverse of :meth:`to_dict`."""
        return cls(data["field"], data["rows"], data["dtype"], tuple(data["row_shape"]),
                   data["name"], bool(data["text"]), data.get("bytes_name"))


@dataclass(frozen=True)
class EpisodeInfo:
    """Per-episode values that are not arrays of the episode: seed, options, stream."""

    seeds: list[int | None]
    options: list[dict[str, Any] | None]
    streams: np.ndarray


def columns(plan: ViewPlan, arrays: MultiAgentArrays, info: EpisodeInfo
            ) -> dict[str, tuple[RowKind, np.ndarray]]:
    """Every restoration field of a chunk, with its row kind and rows.

    Which fields exist depends only on the dataset's structure, so every chunk gives the same
    keys.
    """
    out: dict[str, tuple[RowKind, np.ndarray]] = {}
    final_rows = arrays.obs_starts + arrays.episode_lengths
    for i, agent in enumerate(plan.agents):
        in_view = {leaf.path: leaf.exact for leaf in plan.observations[i].leaves}
        idle = ~arrays.acted[:, i]
        for path, values in leaves(arrays.observations[agent]):
            if in_view.get(path, False):
                out[_join(f"final/observations/{agent}", path)] = ("episode", values[final_rows])
                if plan.zero_idle_observations:
                    out[_join(f"idle/observations/{agent}", path)] = (
                        "step", _where_rows(idle, values[arrays.obs_rows]))
            else:
                out[_join(f"observations/{agent}", path)] = ("obs", values)
        exact_actions = ({leaf.path: leaf.exact for leaf in plan.actions[i].leaves}
                         if plan.actions is not None else {"": True})
        for path, values in leaves(arrays.actions[agent]):
            if not exact_actions.get(path, False):
                out[_join(f"actions/{agent}", path)] = ("step", values)
    for name in _STEP_COLUMNS:
        out[name] = ("step", getattr(arrays, name))
    out["active"] = ("obs", arrays.active)
    if arrays.state is not None:
        if state_in_view(plan, arrays.state.dtype):
            out["final/state"] = ("episode", arrays.state[final_rows])
        else:
            out["state"] = ("obs", arrays.state)
    for agent, tree in (arrays.agent_infos or {}).items():
        for path, values in leaves(tree):
            out[_join(f"agent_infos/{agent}", path)] = ("obs", values)
    for name, values in arrays.extras.items():
        out[f"extras/{name}"] = ("obs", values)
    seeds = np.asarray([0 if s is None else int(s) % 2**64 for s in info.seeds], dtype=np.uint64)
    out["episode/length"] = ("episode", arrays.episode_lengths.astype(np.int64))
    out["episode/seed"] = ("episode", seeds)
    out["episode/has_seed"] = ("episode", np.asarray([s is not None for s in info.seeds],
                                                     dtype=bool))
    out["episode/stream"] = ("episode", np.asarray(info.streams, dtype=np.int32))
    out["episode/options"] = ("episode", np.asarray(
        ["" if o is None else encode_json(o) for o in info.options], dtype=object))
    return out


def _where_rows(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` in the rows ``rows`` marks, zeros elsewhere (mostly zeros: cheap stored)."""
    out = np.zeros_like(values)
    out[rows] = values[rows]
    return out


def state_in_view(plan: ViewPlan, dtype: np.dtype) -> bool:
    """Whether the view's ``infos.state`` holds the recorded state exactly."""
    return plan.state == "env" and bool(np.can_cast(dtype, np.dtype(plan.state_dtype), "safe"))


# ----------------------------------------------------------------------------- JSON values


def encode_json(value: Any) -> str:
    """JSON with numpy arrays and scalars tagged, so that :func:`decode_json` restores them."""
    return json.dumps(_tag(value), sort_keys=True)


def decode_json(text: str) -> Any:
    """Inverse of :func:`encode_json`."""
    return _untag(json.loads(text))


def _tag(value: Any) -> Any:
    if isinstance(value, dict):
        return {"__dict__": [[str(k), _tag(v)] for k, v in value.items()]}
    if isinstance(value, np.ndarray):
        return {"__ndarray__": value.tolist(), "dtype": value.dtype.str,
                "shape": list(value.shape)}
    if isinstance(value, np.generic):
        return {"__scalar__": value.item(), "dtype": value.dtype.str}
    if isinstance(value, (list, tuple)):
        return {"__list__": [_tag(v) for v in value], "tuple": isinstance(value, tuple)}
    if isinstance(value, bytes):
        return {"__bytes__": value.hex()}
    return value


def _untag(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    if "__dict__" in value:
        return {k: _untag(v) for k, v in value["__dict__"]}
    if "__ndarray__" in value:
        return np.asarray(value["__ndarray__"], dtype=np.dtype(value["dtype"])).reshape(
            value["shape"])
    if "__scalar__" in value:
        return np.dtype(value["dtype"]).type(value["__scalar__"])
    if "__list__" in value:
        items = [_untag(v) for v in value["__list__"]]
        return tuple(items) if value["tuple"] else items
    if "__bytes__" in value:
        return bytes.fromhex(value["__bytes__"])
    return value


# ----------------------------------------------------------------------------- writing


def _encode_text(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    encoded = [str(v).encode("utf-8") for v in values.ravel()]
    lengths = np.asarray([len(e) for e in encoded], dtype=np.int64).reshape(values.shape)
    data = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return lengths, data


class ExactSink:
    """Creates the restoration arrays and appends every chunk's rows.

    Arrays are created on the first chunk. A field that first shows up in a later chunk (the
    info columns of an agent that had no info in earlier episodes) is created then, starting
    at the current row: the rows before it read back as zeros, which is what the reader gives
    for such an agent. A field missing from a later chunk gets zero rows.

    Args:
        writer: the vault being written.
        chunk: rows per zarr chunk of the restoration arrays.
    """

    def __init__(self, writer: VaultWriter, chunk: int) -> None:
        self._writer = writer
        self._chunk = chunk
        self.fields: list[ExactField] = []
        self._appenders: dict[str, Appender] = {}
        self._rows: dict[str, int] = {"obs": 0, "step": 0, "episode": 0}

    def append(self, cols: dict[str, tuple[RowKind, np.ndarray]]) -> list[Any]:
        """Append one chunk's rows; return the write futures started."""
        known = {spec.field for spec in self.fields}
        for field, (kind, values) in cols.items():
            if field not in known:
                self._create(field, kind, values)
        counts = {kind: len(values) for kind, values in cols.values()}
        futures: list[Any] = []
        for spec in self.fields:
            values = cols[spec.field][1] if spec.field in cols else _zero_rows(spec,
                                                                              counts[spec.rows])
            if spec.text:
                lengths, data = _encode_text(values)
                futures += self._appenders[spec.name].append(lengths)
                assert spec.bytes_name is not None
                futures += self._appenders[spec.bytes_name].append(data)
            else:
                futures += self._appenders[spec.name].append(
                    np.ascontiguousarray(values, dtype=spec.dtype))
        for kind, count in counts.items():
            self._rows[kind] += count
        return futures

    def close(self) -> list[Any]:
        """Write the last partial chunks."""
        futures: list[Any] = []
        for appender in self._appenders.values():
            futures += appender.close()
        return futures

    def _create(self, field: str, kind: RowKind, values: np.ndarray) -> None:
        index = len(self.fields)
        name = f"{PREFIX}.{index}."
        text = values.dtype == object
        row_shape = tuple(values.shape[1:])
        dtype = "int64" if text else values.dtype.name
        bytes_name = f"{PREFIX}.{index}.bytes." if text else None
        spec = ExactField(field, kind, dtype, row_shape, name, text, bytes_name)
        self.fields.append(spec)
        row_bytes = int(np.prod(row_shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        chunk = max(self._chunk, time_chunk(row_bytes, 1 << 16))
        store = self._writer.create(name, (TIME_AXIS_LENGTH, *row_shape), dtype,
                                    (chunk, *row_shape), RESTORATION_COMPRESSION)
        self._appenders[name] = Appender(store, chunk, streams=False, start=self._rows[kind])
        if bytes_name is not None:
            data_store = self._writer.create(bytes_name, (TIME_AXIS_LENGTH,), "uint8",
                                             (BYTES_CHUNK,), RESTORATION_COMPRESSION)
            self._appenders[bytes_name] = Appender(data_store, BYTES_CHUNK, streams=False)


def _zero_rows(spec: ExactField, count: int) -> np.ndarray:
    if spec.text:
        return np.full((count, *spec.row_shape), "", dtype=object)
    return np.zeros((count, *spec.row_shape), dtype=spec.dtype)


# ----------------------------------------------------------------------------- reading


class ExactSource:
    """Reads restoration arrays back, chunk of episodes after chunk of episodes (in order).

    Args:
        reader: the vault.
        fields: the restoration arrays listed in its metadata.
    """

    def __init__(self, reader: VaultReader, fields: list[ExactField]) -> None:
        self._reader = reader
        self.fields = fields
        # Where the last read of each text field ended: (row, byte); reading on from there
        # needs no pass over the byte lengths before it.
        self._byte_cursor: dict[str, tuple[int, int]] = {f.field: (0, 0) for f in fields
                                                         if f.text}

    def read_fields(self, names: list[str], kind: RowKind, rows: tuple[int, int]
                    ) -> dict[str, np.ndarray]:
        """The fields ``names`` (all of row kind ``kind``) for rows ``[rows[0], rows[1])``.

        Text fields are fastest read in row order (their byte offsets are tracked).
        """
        wanted = set(names)
        return self._read([f for f in self.fields if f.field in wanted], {kind: rows})

    def read_rows(self, steps: tuple[int, int], obs: tuple[int, int]) -> dict[str, np.ndarray]:
        """Step and observation-row fields of step rows ``steps`` and obs rows ``obs``."""
        return self._read([f for f in self.fields if f.rows != "episode"],
                          {"step": steps, "obs": obs})

    def _read(self, fields: list[ExactField], ranges: dict[str, tuple[int, int]]
              ) -> dict[str, np.ndarray]:
        futures = {f.field: self._reader.read_async(f.name, (slice(*ranges[f.rows]),))
                   for f in fields}
        out: dict[str, np.ndarray] = {}
        for spec in fields:
            values = np.asarray(futures[spec.field].result())
            if spec.text:
                out[spec.field] = self._decode_text(spec, values, ranges[spec.rows][0])
            else:
                out[spec.field] = values
        return out

    def _decode_text(self, spec: ExactField, lengths: np.ndarray, row: int) -> np.ndarray:
        cursor_row, start = self._byte_cursor[spec.field]
        if cursor_row != row:  # not where the last read ended: count the bytes before it
            start = int(np.asarray(self._reader.read_async(spec.name, (slice(0, row),))
                                   .result(), dtype=np.int64).sum())
        total = int(lengths.sum())
        assert spec.bytes_name is not None
        data = np.asarray(self._reader.read_async(
            spec.bytes_name, (slice(start, start + total),)).result()).tobytes()
        self._byte_cursor[spec.field] = (row + len(lengths), start + total)
        ends = np.cumsum(lengths.ravel())
        starts = ends - lengths.ravel()
        texts = [data[s:e].decode("utf-8") for s, e in zip(starts.tolist(), ends.tolist(),
                                                           strict=True)]
        return np.asarray(texts, dtype=object).reshape(lengths.shape)


# ----------------------------------------------------------------------------- restoring


def restore_arrays(plan: ViewPlan, spec: MultiAgentSpec, view: dict[tuple[str, ...], np.ndarray],
                   fields: dict[str, np.ndarray], lengths: np.ndarray,
                   episode_ids: np.ndarray) -> MultiAgentArrays:
    """Rebuild the :class:`MultiAgentArrays` of a chunk from its view rows and restoration
    fields (inverse of :func:`marl_minari.adapters._view.view_rows` + :func:`columns`)."""
    steps = int(lengths.sum())
    count = len(lengths)
    step_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
    obs_rows = np.arange(steps, dtype=np.int64) + np.repeat(np.arange(count), lengths)
    final_rows = step_starts + np.arange(count) + lengths

    def with_final(step_values: np.ndarray, finals: np.ndarray) -> np.ndarray:
        out = np.empty((steps + count, *step_values.shape[1:]), dtype=finals.dtype)
        out[obs_rows] = step_values
        out[final_rows] = finals
        return out

    n = plan.num_agents
    obs_view = view[OBSERVATIONS].reshape(steps, n, -1)
    observations = {}
    for i, agent in enumerate(plan.agents):
        by_path: dict[str, np.ndarray] = {}
        flat = {leaf.path: leaf for leaf in plan.observations[i].leaves}
        for path, _ in _leaf_items(spec.observation_spaces[agent]):
            exact_key = _join(f"observations/{agent}", path)
            if exact_key in fields:
                by_path[path] = fields[exact_key]
                continue
            leaf = flat[path]
            step_values = obs_view[:, i, leaf.offset:leaf.offset + leaf.size].reshape(
                steps, *leaf.shape).astype(leaf.dtype)
            idle_key = _join(f"idle/observations/{agent}", path)
            if idle_key in fields:  # the view zeroed the rows of steps the agent sat out
                idle = ~fields["acted"][:, i]
                step_values[idle] = fields[idle_key][idle]
            by_path[path] = with_final(step_values,
                                       fields[_join(f"final/observations/{agent}", path)])
        observations[agent] = _tree(spec.observation_spaces[agent], by_path)
    actions = {}
    for i, agent in enumerate(plan.agents):
        space = spec.action_spaces[agent]
        if plan.actions is None:
            actions[agent] = view[ACTIONS].reshape(steps, n)[:, i].astype(leaf_dtype(space))
            continue
        flat = {leaf.path: leaf for leaf in plan.actions[i].leaves}
        act_view = view[ACTIONS].reshape(steps, n, -1)
        by_path = {}
        for path, _ in _leaf_items(space):
            exact_key = _join(f"actions/{agent}", path)
            if exact_key in fields:
                by_path[path] = fields[exact_key]
            else:
                leaf = flat[path]
                by_path[path] = act_view[:, i, leaf.offset:leaf.offset + leaf.size].reshape(
                    steps, *leaf.shape).astype(leaf.dtype)
        actions[agent] = _tree(space, by_path)
    state = None
    if "state" in fields:
        state = fields["state"]
    elif "final/state" in fields:
        assert spec.state_space is not None
        shape, dtype = leaf_shape(spec.state_space), leaf_dtype(spec.state_space)
        state = with_final(view[STATE].reshape(steps, *shape).astype(dtype), fields["final/state"])
    agent_infos = _subtrees(fields, "agent_infos/")
    extras = {k[len("extras/"):]: v for k, v in fields.items() if k.startswith("extras/")}
    return MultiAgentArrays(
        possible_agents=plan.agents, episode_ids=episode_ids, episode_lengths=lengths,
        observations=observations, actions=actions,
        rewards=fields["rewards"], terminations=fields["terminations"],
        truncations=fields["truncations"], active=fields["active"], acted=fields["acted"],
        team_rewards=fields["team_rewards"],
        episode_terminations=fields["episode_terminations"],
        episode_truncations=fields["episode_truncations"],
        state=state, agent_infos=agent_infos or None, extras=extras,
    )


def _leaf_items(space: spaces.Space) -> list[tuple[str, spaces.Space]]:
    from marl_minari.format.spaces import leaf_spaces

    return list(leaf_spaces(space))


def _tree(space: spaces.Space, by_path: dict[str, np.ndarray]) -> Any:
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        return build_tree(space, by_path)
    return by_path[""]


def _subtrees(fields: dict[str, np.ndarray], prefix: str) -> dict[str, Any]:
    """``{"agent_infos/a/x/y": v}`` -> ``{"a": {"x": {"y": v}}}``."""
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if not key.startswith(prefix):
            continue
        agent, _, path = key[len(prefix):].partition("/")
        if not path:
            out[agent] = value
            continue
        node = out.setdefault(agent, {})
        *parents, last = path.split("/")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out
