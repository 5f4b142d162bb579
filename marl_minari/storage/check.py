"""The conformance check: does a dataset on disk follow ``docs/format.md``?

:func:`check_dataset` reads every episode once, in a streaming pass (one episode's datasets'
shapes and dtypes at a time, never the data of more than one dataset), and checks it against
the layout: row counts, dtypes and shapes against the spaces, per-agent column widths, the
metadata's counts, the offset index entry by entry, and that no data lives outside the file. It
works on plain Minari HDF5 datasets too (the single-agent part of the rules). Like dm_env's
contract test, it is meant for anyone who writes the layout: a dataset that passes reads the
same through every reader of this library. ``marl-minari check ID`` runs it, and publishing
runs it before uploading anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
from gymnasium import spaces

from marl_minari.errors import CorruptedDataError, LayoutError
from marl_minari.format import layout, offset_index
from marl_minari.format.digests import forget_digests
from marl_minari.format.entry_checks import ReadAs
from marl_minari.format.jpeg import image_leaf_paths, jpeg_paths
from marl_minari.format.metadata import metadata_count, metadata_space, read_metadata
from marl_minari.format.returns import team_rewards
from marl_minari.format.spaces import leaf_dtype, leaf_shape, leaf_spaces
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.datafile import (
    cross_check,
    episode_seed,
    hdf5_errors,
    open_data_file,
)
from marl_minari.storage.reader_state import spec_read_as
from marl_minari.storage.self_contained import check_file

_MARL = f"infos/{layout.INFOS_GROUP}"

_AGENT_COLUMNS = {name: np.dtype(layout.MARL_COLUMN_DTYPES[f"{_MARL}/{name}"])
                  for name in (layout.AGENT_REWARDS, layout.AGENT_TERMINATIONS,
                               layout.AGENT_TRUNCATIONS, layout.ACTIVE, layout.ACTED)}
_EPISODE_COLUMNS = {"rewards": "f", "terminations": "b", "truncations": "b"}


@dataclass(frozen=True)
class CheckReport:
    """What a passing check looked at.

    Attributes:
        path: the dataset's ``data/`` folder.
        kind: ``"marl"`` (multi-agent layout) or ``"plain"`` (plain Minari).
        total_episodes: episodes checked.
        total_steps: steps over all episodes.
        index_checked: whether an offset index was compared with the file entry by entry.
        index_remembered: whether, every entry having agreed, the file is now remembered as
            checked (the digests sidecar), so that readers trust its whole index at once
            while it stays unchanged; ``False`` where the folder cannot be written or the
            index has no file digest (written by an append).
    """

    path: Path
    kind: str
    total_episodes: int
    total_steps: int
    index_checked: bool
    index_remembered: bool = False


def check_data_folder(data_path: Path) -> CheckReport:
    """Check every episode of the dataset whose ``data/`` folder is ``data_path`` (the door,
    :func:`marl_minari.check_dataset`, takes anything a user can name).

    Raises:
        DatasetNotFoundError: no dataset there.
        LayoutError: the dataset does not follow the layout; the message names the episode and
            the HDF5 path.
        CorruptedDataError: the file or metadata is damaged, or data lives outside the file.
    """
    data_path = Path(data_path)
    metadata = read_metadata(data_path)
    if metadata.get("data_format", "hdf5") != "hdf5":
        raise LayoutError(f"{data_path}: only HDF5 datasets can be checked, this one is "
                          f"{metadata.get('data_format')!r}")
    total_episodes = metadata_count(metadata, "total_episodes", data_path)
    total_steps = metadata_count(metadata, "total_steps", data_path)
    observation_space = metadata_space(metadata, "observation_space", data_path)
    action_space = metadata_space(metadata, "action_space", data_path)
    spec = (MultiAgentSpec.from_metadata(metadata, observation_space, action_space)
            if layout.METADATA_KEY in metadata else None)
    h5_path = data_path / layout.MAIN_FILE_NAME
    jpeg_encoding = bool(metadata.get("jpeg_encoding", True))
    jpeg = (jpeg_paths(spec, jpeg_encoding) if spec is not None
            else image_leaf_paths(observation_space, action_space, jpeg_encoding))
    try:
        with open_data_file(h5_path) as file, hdf5_errors(h5_path):
            state = offset_index.file_state(file)
            check_file(file, h5_path)
            _check_groups(file, total_episodes, h5_path)
            cross_check(file, metadata, spec, h5_path)
            steps = np.asarray([
                _check_episode(file, i, spec, observation_space, action_space, jpeg, h5_path)
                for i in range(total_episodes)], dtype=np.int64)
            if int(steps.sum()) != total_steps:
                raise CorruptedDataError(
                    f"{data_path}: the episodes hold {int(steps.sum())} steps, metadata.json's "
                    f"total_steps says {total_steps}")
            index = (_check_index(data_path, file, spec_read_as(spec, jpeg))
                     if spec is not None else None)
    except (CorruptedDataError, LayoutError):
        # A file the check refuses is not trusted whole, whoever remembered it before (a
        # writer or a download of an older release, which compared offsets alone): readers
        # compare each entry they read with HDF5 again.
        forget_digests(data_path.parent, f"data/{layout.MAIN_FILE_NAME}")
        raise
    # Every episode and every index entry agreed with the file in this state: remember it,
    # as its writer would have, so that readers of a copy need not compare entries again.
    remembered = index is not None and offset_index.vouch(data_path, index, state)
    return CheckReport(data_path, "plain" if spec is None else "marl", total_episodes,
                       total_steps, index is not None, remembered)


def _check_groups(file: h5py.File, total_episodes: int, h5_path: Path) -> None:
    expected = {f"episode_{i}" for i in range(total_episodes)}
    found = set(file)
    if found != expected:
        extra = sorted(found - expected)[:3]
        missing = sorted(expected - found)[:3]
        raise CorruptedDataError(
            f"{h5_path}: metadata.json counts {total_episodes} episodes but the file holds "
            f"{len(found)} groups (missing {missing}, unexpected {extra})")


def _check_episode(file: h5py.File, index: int, spec: MultiAgentSpec | None,
                   observation_space: spaces.Space, action_space: spaces.Space,
                   jpeg: frozenset[str], h5_path: Path) -> int:
    where = f"{h5_path}: episode_{index}"
    group = file[f"episode_{index}"]
    if not isinstance(group, h5py.Group):
        raise CorruptedDataError(f"{where} is not a group")
    steps = group.attrs.get("total_steps")
    if not isinstance(steps, (int, np.integer)) or steps < 0:
        raise CorruptedDataError(f"{where}: attribute total_steps is {steps!r}, not a count")
    steps = int(steps)
    episode_seed(group.id, where)
    expect = _Expect(group, where, steps)
    for name, kind in _EPISODE_COLUMNS.items():
        expect.column(name, steps, (), kinds=kind)
    for field_name, space, rows in (("observations", observation_space, steps + 1),
                                    ("actions", action_space, steps)):
        for path, leaf in leaf_spaces(space, field_name):
            expect.leaf(path, leaf, rows, jpeg=path in jpeg)
    if spec is not None:
        _check_marl(expect, spec, steps, jpeg)
        _check_values(expect, spec)
    return steps


def _check_values(expect: _Expect, spec: MultiAgentSpec) -> None:
    """The layout's rules on the values of its small columns (the episode flags, whose
    turn each row is, the team reward): a few numbers per step, read whole."""
    group, where, steps = expect.group, expect.where, expect.steps
    if steps == 0:
        return
    ends = np.stack([group["terminations"][()], group["truncations"][()]]).astype(bool)
    early = np.flatnonzero(ends[:, :-1].any(axis=0))
    if early.size:
        raise LayoutError(f"{where}: terminations or truncations is true at step {early[0]}, "
                          f"before the last ({steps - 1}); the layout marks only the step "
                          "the episode ended at")
    if int(ends[:, -1].sum()) != 1:
        said = "both" if ends[:, -1].all() else "neither of"
        raise LayoutError(f"{where}: at the last step {said} terminations and truncations "
                          "is true; exactly one is (docs/format.md, *Team reward and episode "
                          "flags*)")
    if spec.api == "aec":
        selection = group[layout.AGENT_SELECTION_PATH][()]
        bad = np.flatnonzero((selection < -1) | (selection >= spec.num_agents))
        if bad.size:
            raise LayoutError(
                f"{where}/{layout.AGENT_SELECTION_PATH}, row {bad[0]}: "
                f"{selection[bad[0]].item()} is no index into the {spec.num_agents} "
                "possible_agents (nor -1, nobody)")
    if spec.reward_aggregation == "sum":  # the other aggregations need who was rewarded
        per_agent = group[f"{_MARL}/{layout.AGENT_REWARDS}"][1:]
        expected = team_rewards(per_agent, np.ones(per_agent.shape, dtype=bool), "sum")
        team = group["rewards"][()]
        expected = expected.astype(team.dtype)  # a float32 column is another check's finding
        off = np.flatnonzero((team != expected) & ~(np.isnan(team) & np.isnan(expected)))
        if off.size:
            raise LayoutError(
                f"{where}: rewards[{off[0]}] is {team[off[0]].item()!r}, but the agents' rewards "
                f"of that step ({_MARL}/{layout.AGENT_REWARDS} row {off[0] + 1}) sum to "
                f"{expected[off[0]].item()!r}; the team reward is their sum (reward_aggregation "
                "'sum')")


def _check_marl(expect: _Expect, spec: MultiAgentSpec, steps: int,
                jpeg: frozenset[str]) -> None:
    width = (spec.num_agents,)
    for name, dtype in _AGENT_COLUMNS.items():
        expect.column(f"{_MARL}/{name}", steps + 1, width, dtype=dtype)
    if spec.state_space is not None:
        expect.leaf(layout.STATE_PATH, spec.state_space, steps + 1,
                    jpeg=layout.STATE_PATH in jpeg)
    elif offset_index.dataset_id(expect.group, layout.STATE_PATH) is not None:
        raise LayoutError(f"{expect.where}/{layout.STATE_PATH} is present but the metadata's "
                          "state_space is null: the layout stores a state in every episode "
                          "exactly when state_space names its space")
    for name, dataset in _datasets(expect.group, f"{_MARL}/{layout.AGENT_INFOS}"):
        agent = name.split("/")[3]
        if agent not in spec.possible_agents:
            raise LayoutError(f"{expect.where}/{name}: {agent!r} is not one of possible_agents "
                              f"{list(spec.possible_agents)}")
        expect.rows(name, dataset, steps + 1)
    for name, dataset in _datasets(expect.group, f"{_MARL}/{layout.EXTRAS}"):
        expect.rows(name, dataset, steps + 1)
    _check_api(expect, spec)


def _check_api(expect: _Expect, spec: MultiAgentSpec) -> None:
    """An episode shows its API on disk: turn-based episodes, and only they, have
    ``extras/agent_selection`` (whose turn each row is); one recorded through the other API
    than the metadata's makes a dataset that no reader reads right."""
    selection = layout.AGENT_SELECTION_PATH
    turn_based = offset_index.dataset_id(expect.group, selection) is not None
    if turn_based == (spec.api == "aec"):
        if turn_based:
            expect.column(selection, expect.steps + 1, (), kinds="i")
        return
    recorded = "aec" if turn_based else "parallel"
    raise LayoutError(
        f"{expect.where} was recorded through the {recorded!r} API "
        f"({selection} is {'present' if turn_based else 'missing'}) but the dataset's api is "
        f"{spec.api!r}: the dataset mixes turn-based and simultaneous episodes (readers take "
        f"every episode as {spec.api!r}). Make the dataset again from episodes recorded "
        f"through one API: record the others with api={spec.api!r}, or keep them in a "
        f"dataset of their own with api={recorded!r}")


def _datasets(group: h5py.Group, prefix: str) -> Iterator[tuple[str, h5py.Dataset]]:
    sub = group.get(prefix)
    if not isinstance(sub, h5py.Group):
        return
    found: list[tuple[str, h5py.Dataset]] = []
    sub.visititems(lambda name, obj: found.append((f"{prefix}/{name}", obj))
                   if isinstance(obj, h5py.Dataset) else None)
    yield from found


@dataclass(frozen=True)
class _Expect:
    """Checks on the datasets of one episode group; messages start with ``where``."""

    group: h5py.Group
    where: str
    steps: int

    def dataset(self, path: str) -> h5py.h5d.DatasetID:
        found = offset_index.dataset_id(self.group, path)
        if found is None:
            raise LayoutError(f"{self.where}/{path} is missing (the layout requires it)")
        return found

    def rows(self, path: str, dataset: h5py.Dataset | h5py.h5d.DatasetID, rows: int) -> None:
        if not dataset.shape or dataset.shape[0] != rows:
            raise LayoutError(f"{self.where}/{path} has shape {dataset.shape}: the layout "
                              f"needs {rows} rows for {self.steps} steps")

    def column(self, path: str, rows: int, row_shape: tuple[int, ...], *,
               dtype: np.dtype | None = None, kinds: str | None = None) -> None:
        dataset = self.dataset(path)
        self.rows(path, dataset, rows)
        if dataset.shape[1:] != row_shape:
            raise LayoutError(f"{self.where}/{path} has rows of shape {dataset.shape[1:]}, "
                              f"expected {row_shape} (one column per possible agent)")
        if (dtype is not None and dataset.dtype != dtype) or (
                kinds is not None and dataset.dtype.kind not in kinds):
            raise LayoutError(f"{self.where}/{path} has dtype {dataset.dtype}, expected "
                              f"{dtype or kinds}")

    def leaf(self, path: str, space: spaces.Space, rows: int, *, jpeg: bool) -> None:
        dataset = self.dataset(path)
        self.rows(path, dataset, rows)
        if jpeg:  # per-row JPEG bytes: fixed (rows, L) uint8 or variable-length uint8
            if dataset.dtype.kind not in "uO" or len(dataset.shape) > 2:
                raise LayoutError(f"{self.where}/{path} should hold JPEG bytes per row, has "
                                  f"{dataset.dtype} {dataset.shape}")
            return
        expected = leaf_dtype(space)
        if expected.kind == "O":
            if h5py.check_string_dtype(dataset.dtype) is None:
                raise LayoutError(f"{self.where}/{path} should hold strings, has "
                                  f"{dataset.dtype}")
            return
        if dataset.shape[1:] != leaf_shape(space) or dataset.dtype != expected:
            raise LayoutError(
                f"{self.where}/{path} is {dataset.dtype} with rows of shape "
                f"{dataset.shape[1:]}; its space {space} stores {expected} rows of shape "
                f"{leaf_shape(space)}")


def _check_index(data_path: Path, file: h5py.File, read_as: dict[str, ReadAs | None]
                 ) -> offset_index.OffsetIndex | None:
    """The offset index, if it is current and every entry agrees with the file as readers
    read it (``read_as``: the spec's leaves); ``None`` if there is none or readers ignore it
    (edited, or the file was written since)."""
    index = offset_index.read(data_path)
    if index is None:
        return None
    h5_path = data_path / layout.MAIN_FILE_NAME
    if file.attrs.get(offset_index.SEAL_ATTRIBUTE) != index.content:
        return None  # edited after the file was written: readers ignore it
    if index.fingerprint is not None and offset_index.fingerprint(h5_path) != index.fingerprint:
        # The file was written since it was indexed: readers compare each entry with HDF5
        # before using it, so a stale entry misleads no one.
        return None
    problems = offset_index.whole_file_mismatches(index, file, read_as)
    if problems:
        raise CorruptedDataError(
            f"{data_path / layout.INDEX_FILE_NAME} disagrees with the HDF5 file: "
            f"{'; '.join(problems[:3])}. Delete it (readers then use HDF5).")
    return index
