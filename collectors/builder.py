"""Turns per-step dicts handed out by a PettingZoo env into a :class:`MultiAgentEpisode`.

Recorders append copies of the arrays during the episode (:func:`detached`: an env may write
into buffers it handed out before) and stack them once at its end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from marl_minari.errors import InfoStructureError, StepDataError
from marl_minari.format import layout
from marl_minari.format.jpeg import FrameRows
from marl_minari.format.returns import team_rewards
from marl_minari.format.spaces import (
    check_row_shapes,
    leaf_dtype,
    leaf_shape,
    leaves,
    lossless_cast,
    nest,
    stack,
)
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.episode import MultiAgentEpisode
from marl_minari.storage.episode_writer import check_options

_ATOMS = frozenset({int, float, bool, str, bytes, type(None), np.int64, np.int32, np.float64,
                    np.float32, np.bool_})
"""Leaf types that cannot change after they were handed out (kept as they are)."""


def detached(value: Any) -> Any:
    """``value`` with every array in it copied, so that an env (or policy) writing into a
    buffer it handed out earlier cannot change what was recorded.

    Copies keep their memory layout (``order="K"``): a transposed image view is copied at
    memory speed, not pixel by pixel, and its encoder reads it as before. Dicts, tuples and
    lists are rebuilt around the copies; other leaves are kept as they are.
    """
    kind = type(value)  # exact types first: this runs for every value of every step
    if kind is np.ndarray:
        return value.copy(order="K")
    if kind in _ATOMS:
        return value
    if kind is dict:
        return detached_mapping(value)
    if isinstance(value, np.ndarray):
        return np.array(value, order="K", copy=True)
    if isinstance(value, dict):
        return detached_mapping(value)
    if isinstance(value, (tuple, list)):
        return type(value)(detached(item) for item in value)
    return value


def detached_mapping(value: Mapping[Any, Any]) -> dict[Any, Any]:
    """A plain dict of :func:`detached` copies of ``value``'s items (one dict built, not two)."""
    return {key: detached(item) for key, item in value.items()}


class EpisodeBuilder:
    """Collects one episode's per-step dicts.

    Args:
        spec: agents and spaces.
        record_infos: keep the env's whole per-agent info dicts (else only ``action_mask``).
        has_state: a global state is passed with every row.
    """

    def __init__(self, spec: MultiAgentSpec, *, record_infos: bool, has_state: bool) -> None:
        self.spec = spec
        self.record_infos = record_infos
        self.has_state = has_state
        self._agents = spec.possible_agents
        self._info_keys: dict[str, Any] = {}
        self._info_leaves: dict[str, dict[str, tuple[np.dtype, tuple[int, ...]]]] = {}
        self.clear()

    def clear(self) -> None:
        """Forget the episode in progress."""
        self._obs: list[Mapping[str, Any]] = []
        self._infos: list[Mapping[str, Any]] = []
        self._states: list[Any] = []
        self._actions: list[Mapping[str, Any]] = []
        self._rewards: list[Mapping[str, float]] = []
        self._terms: list[Mapping[str, bool]] = []
        self._truncs: list[Mapping[str, bool]] = []
        self._extras: list[Mapping[str, Any]] = []
        self.seed: int | None = None
        self.options: dict[str, Any] | None = None

    @property
    def started(self) -> bool:
        """A reset observation has been recorded."""
        return bool(self._obs)

    @property
    def steps(self) -> int:
        """Steps recorded so far in this episode."""
        return len(self._actions)

    def last_row(self) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """Observations and infos of the latest row (to continue after a cut)."""
        return self._obs[-1], self._infos[-1]

    def start(self, observations: Mapping[str, Any], infos: Mapping[str, Any], *,
              state: Any = None, extras: Mapping[str, Any] | None = None,
              seed: int | None = None, options: dict[str, Any] | None = None) -> None:
        """Begin an episode with what ``reset`` returned.

        Raises:
            StepDataError: ``options`` cannot be stored in a Minari dataset.
        """
        self.clear()
        check_options(options)
        self.seed, self.options = seed, options
        self._row(observations, infos, state, extras)

    def add(self, actions: Mapping[str, Any], observations: Mapping[str, Any],
            rewards: Mapping[str, float], terminations: Mapping[str, bool],
            truncations: Mapping[str, bool], infos: Mapping[str, Any], *, state: Any = None,
            extras: Mapping[str, Any] | None = None) -> None:
        """Record one step: the actions taken and what came back."""
        self._actions.append(detached_mapping(actions))
        self._rewards.append(dict(rewards))
        self._terms.append(dict(terminations))
        self._truncs.append(dict(truncations))
        self._row(observations, infos, state, extras)

    def _row(self, observations: Mapping[str, Any], infos: Mapping[str, Any], state: Any,
             extras: Mapping[str, Any] | None) -> None:
        self._check_infos(infos)
        self._obs.append(detached_mapping(observations))
        self._infos.append(detached_mapping(infos))
        if self.has_state:
            self._states.append(detached(state))
        if extras is not None:
            self._extras.append(detached_mapping(extras))

    def _check_infos(self, infos: Mapping[str, Any]) -> None:
        if not self.record_infos:
            return  # only action masks are kept; the rest of the info dicts may vary freely
        for agent, info in infos.items():
            keys = info.keys() if isinstance(info, Mapping) else None
            known = self._info_keys.setdefault(agent, keys)
            if keys != known:
                raise InfoStructureError(
                    f"info of agent {agent!r} at step {self.steps} has keys "
                    f"{sorted(keys or [])}, earlier {sorted(known or [])}: info dicts must keep "
                    "the same structure through a dataset (Minari stores them as fixed columns)."
                )

    def finish(self, *, cut: bool, unstacked: frozenset[str] = frozenset()) -> MultiAgentEpisode:
        """Stack the episode; ``cut`` marks it as truncated at its last step (reset early).

        Agents' observations and the state whose HDF5 paths (``observations/<agent>``,
        :data:`~marl_minari.format.layout.STATE_PATH`) are in ``unstacked`` and whose spaces are
        single leaves come back as :class:`~marl_minari.format.jpeg.FrameRows` (shapes checked, rows
        not copied): the journal writer encodes them row by row.
        """
        agents = self._agents
        steps = self.steps
        if steps == 0:
            raise StepDataError("an episode needs at least one step to be recorded")
        rewards = np.array([[r.get(a, 0.0) for a in agents] for r in self._rewards],
                           dtype=np.float64)
        rewarded = np.array([[a in r for a in agents] for r in self._rewards], dtype=bool)
        terms = np.array([[bool(d.get(a, False)) for a in agents] for d in self._terms],
                         dtype=bool)
        truncs = np.array([[bool(d.get(a, False)) for a in agents] for d in self._truncs],
                          dtype=bool)
        ends_t = np.zeros(steps, dtype=bool)
        ends_tr = np.zeros(steps, dtype=bool)
        if cut or truncs[-1].any():
            ends_tr[-1] = True
        else:
            ends_t[-1] = True
        return MultiAgentEpisode(
            possible_agents=agents,
            observations={a: _stack(self.spec.observation_spaces[a],
                                    [o.get(a) for o in self._obs], f"observation of {a!r}",
                                    f"observations/{a}" in unstacked)
                          for a in agents},
            actions={a: stack(self.spec.action_spaces[a],
                              [act.get(a) for act in self._actions], f"action of {a!r}")
                     for a in agents},
            rewards=rewards,
            terminations=terms,
            truncations=truncs,
            active=np.array([[a in o for a in agents] for o in self._obs], dtype=bool),
            acted=np.array([[act.get(a) is not None for a in agents] for act in self._actions],
                           dtype=bool),
            team_rewards=team_rewards(rewards, rewarded, self.spec.reward_aggregation),
            episode_terminations=ends_t,
            episode_truncations=ends_tr,
            state=self._stack_state(layout.STATE_PATH in unstacked),
            agent_infos=self._stack_infos(),
            extras={k: np.asarray([e[k] for e in self._extras]) for k in
                    (self._extras[0] if self._extras else {})},
            seed=self.seed,
            options=self.options,
        )

    def _stack_state(self, unstacked: bool) -> np.ndarray | FrameRows | None:
        if not self.has_state:
            return None
        space = self.spec.state_space
        assert space is not None
        result = _stack(space, self._states, "state", unstacked)
        assert isinstance(result, (np.ndarray, FrameRows))
        return result

    def _stack_infos(self) -> dict[str, Any] | None:
        out = {}
        for agent in self._agents:
            rows = [info.get(agent) for info in self._infos]
            if not self.record_infos:
                rows = [None if r is None or layout.ACTION_MASK_KEY not in r
                        else {layout.ACTION_MASK_KEY: r[layout.ACTION_MASK_KEY]} for r in rows]
            template = next((r for r in rows if r), None)
            known = self._info_leaves.get(agent)
            if template:
                out[agent] = stack_info(template, rows, f"info of {agent!r}")
                found = {path: (array.dtype, array.shape[1:])
                         for path, array in leaves(out[agent])}
                if known is None:
                    self._info_leaves[agent] = found
                elif found != known:
                    raise InfoStructureError(
                        f"info of agent {agent!r} has leaves {_describe(found)} in this episode, "
                        f"{_describe(known)} in earlier ones: info dicts must keep the same "
                        "keys, dtypes and shapes through a dataset."
                    )
            elif known is not None:
                # The agent handed out no info this episode: fill its known columns.
                out[agent] = nest({path: (np.full(len(rows), "", dtype=object)
                                             if dtype.kind == "O" else
                                             np.zeros((len(rows), *shape), dtype=dtype))
                                      for path, (dtype, shape) in known.items()})
        return out or None


def _stack(space: Any, rows: list[Any], where: str, unstacked: bool) -> Any:
    """:func:`~marl_minari.format.spaces.stack`, or the checked rows of a leaf left unstacked."""
    if not unstacked or isinstance(space, (spaces.Dict, spaces.Tuple, spaces.Text)):
        return stack(space, rows, where)
    shape = leaf_shape(space)
    check_row_shapes(rows, shape, where)
    return FrameRows(leaf_dtype(space), (len(rows), *shape), rows)


def _describe(found: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> str:
    return ", ".join(f"{path or '.'}: {dtype}{list(shape)}" for path, (dtype, shape) in
                     sorted(found.items()))


_ABSENT: Any = object()
"""An info row with no value: its agent handed out no info at that step (filled)."""


def stack_info(template: Any, rows: list[Any], where: str) -> Any:
    """Stack info values shaped like ``template``; rows that are ``None`` (the agent handed
    out no info there) get fill values: zeros of the leaf's dtype, or ``""``.

    Every value given is kept exactly or refused: a ``None`` value, a value whose dtype or
    shape differs from the first one's, a number its column's dtype cannot hold (by the
    writers' :func:`~marl_minari.format.spaces.lossless_cast` rule, as for spaces' leaves)
    and a non-string in a column of strings raise :class:`InfoStructureError` naming the key
    and row.
    """
    return _stack_info(template, [_ABSENT if r is None else r for r in rows], where)


def _stack_info(template: Any, rows: list[Any], where: str) -> Any:
    _refuse_none(rows, where)
    if isinstance(template, Mapping):
        for key in template:
            if str(key) in ("", ".", "..") or "/" in str(key):
                raise InfoStructureError(
                    f"{where}: key {key!r} cannot name an HDF5 dataset; info keys must be "
                    "non-empty and without '/' to be recorded (record_infos=True)."
                )
        for index, row in enumerate(rows):
            if isinstance(row, Mapping) and row.keys() != template.keys():
                raise InfoStructureError(
                    f"{where}, row {index}: keys {sorted(map(str, row))} differ from "
                    f"{sorted(map(str, template))} of earlier rows; info dicts must keep the "
                    "same keys through a dataset."
                )
        return {
            str(key): _stack_info(value, [_ABSENT if r is _ABSENT else _get(r, key, where, i)
                                          for i, r in enumerate(rows)], f"{where}[{key!r}]")
            for key, value in template.items()
        }
    present = [(index, row) for index, row in enumerate(rows) if row is not _ABSENT]
    first = _info_array(template, where, present[0][0])
    if first.dtype.kind == "U":
        for index, value in present:
            if not isinstance(value, str):
                raise InfoStructureError(
                    f"{where}, row {index}: {type(value).__name__} value {value!r} in a column "
                    "of strings; info values must keep their type through a dataset (one "
                    "string per row).")
        return np.array(["" if r is _ABSENT else r for r in rows], dtype=object)
    if first.dtype.kind not in "biufcS":
        raise InfoStructureError(
            f"{where}, row {present[0][0]}: {template!r} has no array form of numbers or "
            f"strings (numpy makes it {first.dtype}); info values must be numbers, strings or "
            "rectangular arrays of numbers to be recorded (record_infos=True).")
    fill = np.zeros_like(first)
    values = []
    for index, row in enumerate(rows):
        value = fill if row is _ABSENT else _info_array(row, where, index)
        if value.shape != first.shape or not np.can_cast(value.dtype, first.dtype, "same_kind"):
            raise InfoStructureError(
                f"{where}, row {index}: {value.dtype}{list(value.shape)} value does not fit "
                f"the {first.dtype}{list(first.shape)} of earlier rows; info values must keep "
                "their dtype and shape through a dataset."
            )
        values.append(value)
    stacked = np.asarray(values)
    out, lost = lossless_cast(stacked, first.dtype)
    if lost is not None:
        raise InfoStructureError(
            f"{where}, row {lost[0]}: {stacked.dtype} value {stacked[lost].item()!r} does not "
            f"fit the {first.dtype} of earlier rows (it would be stored as "
            f"{out[lost].item()!r}); info values must keep their dtype through a dataset.")
    return out


def _refuse_none(rows: list[Any], where: str) -> None:
    for index, row in enumerate(rows):
        if row is None:
            raise InfoStructureError(
                f"{where}, row {index}: None cannot be stored (Minari stores infos as columns "
                "of one dtype); give a value of the column's type instead, e.g. NaN, -1 or "
                "\"\" for 'none'.")


def _info_array(value: Any, where: str, row: int) -> np.ndarray:
    """``value`` as an array, or :class:`InfoStructureError` naming the info key and row (a
    ragged list has no array form)."""
    try:
        return np.asarray(value)
    except ValueError as exc:
        raise InfoStructureError(
            f"{where}, row {row}: {value!r} cannot be stored as an array ({exc}); info values "
            "must be numbers, strings or rectangular arrays to be recorded (record_infos=True)."
        ) from exc


def _get(row: Any, key: Any, where: str, index: int) -> Any:
    try:
        return row[key]
    except (KeyError, TypeError) as exc:
        raise InfoStructureError(f"{where}, row {index}: key {key!r} is missing") from exc
