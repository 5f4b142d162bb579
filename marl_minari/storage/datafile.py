"""A dataset's ``main_data.hdf5``: opening it, typed HDF5 errors, and what every reader reads
first (episode attributes, step counts, the cross-checks of every load).

What h5py and the operating system raise on a damaged file becomes
:class:`~marl_minari.errors.CorruptedDataError` naming the file (:func:`hdf5_errors`); an error
raised by this library's own code passes through as it is, so a bug is never reported as a
damaged file.
"""

from __future__ import annotations

import contextlib
import json
import stat
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, Final

import h5py
import numpy as np

from marl_minari.errors import CorruptedDataError, DatasetNotFoundError, MarlMinariError
from marl_minari.format import entry_checks, layout, offset_index
from marl_minari.format.in_file import dataset_in_file, refuse_link_out
from marl_minari.format.regular_files import not_regular
from marl_minari.format.spaces import nest
from marl_minari.format.spec import MultiAgentSpec

MARL_GROUP = f"infos/{layout.INFOS_GROUP}"
"""The group of an episode that holds the exact per-agent data."""

FIRST_AGENT_REWARDS: Final = f"episode_0/{MARL_GROUP}/{layout.AGENT_REWARDS}"
"""The per-agent rewards column whose width :func:`cross_check` compares with the agents."""


def open_data_file(path: Path) -> h5py.File:
    """Open a dataset's ``main_data.hdf5`` for reading.

    Raises:
        DatasetNotFoundError: the file does not exist.
        CorruptedDataError: HDF5 cannot open it (truncated or overwritten).
    """
    if not path.exists():
        raise DatasetNotFoundError(f"no dataset file at {path}")
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        raise not_regular(path, mode)
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise CorruptedDataError(
            f"{path} is damaged and cannot be opened ({exc}); restore it from a copy or "
            "re-create the dataset (a recording's journal can be recovered with "
            "marl-minari recover)."
        ) from exc


@contextlib.contextmanager
def hdf5_errors(h5_path: Path) -> Iterator[None]:
    """Turn what h5py (or the OS) raises on a damaged file into :class:`CorruptedDataError`.

    Only an ``OSError``, or an exception whose innermost frame is h5py's, is converted: h5py
    reports a missing object as ``KeyError`` and a bad read as ``ValueError`` or
    ``RuntimeError``, but the same types raised by this library's code are bugs, and pass.
    """
    try:
        yield
    except MarlMinariError:
        raise
    except Exception as exc:
        if not _raised_by_hdf5(exc):
            raise
        raise CorruptedDataError(
            f"{h5_path} is damaged ({type(exc).__name__}: {exc}); run marl-minari check on "
            "the dataset for details, and restore it from a copy.") from exc


def _raised_by_hdf5(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return True
    frame = exc.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    # h5py's compiled modules record frames of their own (``h5py.h5g``...) in tracebacks.
    return frame is not None and str(frame.tb_frame.f_globals.get("__name__", "")).startswith(
        "h5py")


def read_array(group: Any, name: bytes) -> np.ndarray:
    """The whole dataset ``name`` of a low-level group id, read with h5py's low-level API."""
    dataset = dataset_in_file(group, name)
    if dataset is None:
        raise KeyError(f"no dataset {name.decode(errors='replace')!r} in the file itself")
    array = np.empty(dataset.get_space().get_simple_extent_dims(), dtype=dataset.dtype)
    if array.size:
        dataset.read(h5py.h5s.ALL, h5py.h5s.ALL, array)
    return array


def episode_attributes(h5_path: Path, episode_ids: Iterable[int]
                       ) -> list[tuple[int | None, dict[str, Any] | None]]:
    """``(seed, options)`` of each episode, read as Minari stores them.

    Uses HDF5's low-level attribute calls (about 10x faster than Minari's
    ``get_episode_metadata``): only episodes carrying more than ``id``, ``total_steps`` and
    ``seed`` are read attribute by attribute for their ``options/...``.
    """
    with open_data_file(Path(h5_path)) as file:
        return file_episode_attributes(file, Path(h5_path), episode_ids)


def episode_seed(group: h5py.h5g.GroupID, where: str) -> int | None:
    """The ``seed`` attribute of an episode group (``None`` when reset had none).

    Raises:
        CorruptedDataError: it is not one integer (a string, a float, an array); ``where``
            names the episode.
    """
    if not h5py.h5a.exists(group, b"seed"):
        return None
    attribute = h5py.h5a.open(group, b"seed")
    if attribute.dtype.kind not in "iu" or attribute.shape != ():
        value = h5py.Group(group).attrs["seed"]
        value = value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value
        raise CorruptedDataError(
            f"{where}: attribute seed is {value!r} ({attribute.dtype}, shape "
            f"{attribute.shape}), not one integer as Minari stores a reset's seed; the "
            "dataset is damaged: restore it from a copy, or delete the attribute")
    value = np.empty((), dtype=attribute.dtype)
    attribute.read(value)
    return int(value)


def file_episode_attributes(file: h5py.File, h5_path: Path | str, episode_ids: Iterable[int]
                            ) -> list[tuple[int | None, dict[str, Any] | None]]:
    """:func:`episode_attributes` of an open file (``h5_path``: how errors name it)."""
    out: list[tuple[int | None, dict[str, Any] | None]] = []
    with hdf5_errors(Path(h5_path)):
        for episode_id in episode_ids:
            group = episode_group(file, episode_id, Path(h5_path))
            seed = episode_seed(group, f"{h5_path}: episode_{episode_id}")
            options = None
            if h5py.h5a.get_num_attrs(group) > 2 + (seed is not None):
                flat = {k[len("options/"):]: v for k, v in h5py.Group(group).attrs.items()
                        if k.startswith("options/")}
                options = nest(flat) if flat else None
            out.append((seed, options))
    return out


def episode_group(file: h5py.File, episode_id: int, h5_path: Path) -> h5py.h5g.GroupID:
    """The group ``episode_<episode_id>`` of ``file``.

    Raises:
        ForeignStorageError: it is a link to another file (never opened).
        CorruptedDataError: there is no such group.
    """
    group = entry_checks.episode_group(file, episode_id)
    if group is None:
        refuse_link_out(file.id, b"episode_%d" % episode_id, h5_path)
        raise CorruptedDataError(f"{h5_path}: episode_{episode_id} is missing; restore the "
                                 "dataset from a copy")
    return group


def episode_steps(data_path: Path, metadata: dict[str, Any],
                  episode_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """``(E,)`` steps of each of ``episode_ids``: the one place step counts are read.

    A valid offset index holds them all; otherwise each episode's ``total_steps`` attribute
    is read with h5py's low-level API.

    Raises:
        CorruptedDataError: an episode is missing or has no ``total_steps``.
    """
    h5_path = Path(data_path) / layout.MAIN_FILE_NAME
    ids = np.asarray(episode_ids, dtype=np.int64)
    with open_data_file(h5_path) as file, hdf5_errors(h5_path):
        if layout.METADATA_KEY in metadata:
            index = offset_index.load(Path(data_path), file, int(metadata["total_episodes"]),
                                      int(metadata["total_steps"]))
            if index is not None:
                return index.steps[ids]
        return attribute_steps(file, h5_path, ids)


def attribute_steps(file: h5py.File, h5_path: Path,
                    episode_ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """``(E,)`` the ``total_steps`` attribute of each of ``episode_ids`` in an open file.

    Raises:
        CorruptedDataError: an episode is missing or has no ``total_steps``.
    """
    steps = np.empty(len(episode_ids), dtype=np.int64)
    value = np.empty((), dtype=np.int64)
    with hdf5_errors(h5_path):
        for position, episode_id in enumerate(np.asarray(episode_ids).tolist()):
            group = episode_group(file, episode_id, h5_path)
            if not h5py.h5a.exists(group, b"total_steps"):
                raise CorruptedDataError(f"{h5_path}: episode_{episode_id} has no total_steps "
                                         "attribute; restore the dataset from a copy")
            h5py.h5a.open(group, b"total_steps").read(value)
            steps[position] = int(value)
    return steps


def cross_check(file: h5py.File, metadata: dict[str, Any], spec: MultiAgentSpec | None,
                h5_path: Path) -> None:
    """What every load checks, in a few HDF5 calls, whatever the number of episodes: the
    file's episodes end where ``metadata.json``'s count says (``episode_<total - 1>`` is there,
    ``episode_<total>`` is not), and the agent order and column widths agree with the file.

    Raises:
        CorruptedDataError: they disagree (e.g. ``total_episodes`` edited, ``possible_agents``
            permuted, which would silently relabel every per-agent column).
    """
    total = metadata.get("total_episodes")
    if not isinstance(total, int) or isinstance(total, bool) or total < 0:
        raise CorruptedDataError(f"{h5_path.parent / layout.METADATA_FILE_NAME}: "
                                 f"total_episodes must be a non-negative integer, got {total!r}")
    # Probed by name, not counted: counting the root group's links walks all of them, a cost
    # that grew with the dataset on every open. An episode missing in the middle is reported
    # where it is read, and by `marl-minari check`.
    past_end = f"episode_{total}" in file
    if past_end and uncommitted_append(file, metadata, total):
        pass  # groups past total_episodes: an append killed before its metadata commit
    elif past_end or (total and f"episode_{total - 1}" not in file):
        raise CorruptedDataError(
            f"{h5_path}: metadata.json counts {total} episodes but the file holds {len(file)} "
            "groups; the metadata or the file was changed after writing. Restore the dataset "
            "from a copy (or run marl-minari check for details).")
    if spec is None:
        return
    agents = list(spec.possible_agents)
    copies = [("main_data.hdf5", _json_or_none(file.attrs.get(layout.AGENTS_ATTRIBUTE)))]
    env_spec = _json_or_none(metadata.get("env_spec"))
    with contextlib.suppress(KeyError, TypeError):
        copies.append(("env_spec", env_spec["kwargs"]["possible_agents"]))
    for where, copy in copies:
        if copy is not None and copy != agents:
            raise CorruptedDataError(
                f"{h5_path.parent / layout.METADATA_FILE_NAME}: possible_agents {agents} "
                f"disagrees with the order {copy} recorded in {where}; per-agent columns would "
                "be read under the wrong names. Restore the metadata from a copy.")
    if total:
        rewards = first_agent_rewards(file)
        if rewards is not None and rewards.shape[1:] != (len(agents),):
            raise CorruptedDataError(
                f"{h5_path}: {FIRST_AGENT_REWARDS} has shape {rewards.shape}, but "
                f"metadata.json names {len(agents)} possible agents")


def first_agent_rewards(file: h5py.File) -> h5py.h5d.DatasetID | None:
    """The dataset :data:`FIRST_AGENT_REWARDS` of ``file`` (``None``: not one in the file)."""
    return dataset_in_file(file.id, FIRST_AGENT_REWARDS.encode())


def uncommitted_append(file: h5py.File, metadata: dict[str, Any], total: int) -> bool:
    """The file was swapped in by an append whose ``metadata.json`` never replaced the old one:
    its generation differs from the metadata's and every extra group is numbered past it."""
    generation = file.attrs.get(layout.GENERATION_KEY)
    if generation is None or generation == metadata.get(layout.GENERATION_KEY):
        return False
    names = set(file)
    return (all(f"episode_{i}" in names for i in range(total))
            and all(name.startswith("episode_") and name[8:].isdigit() and int(name[8:]) >= total
                    for name in names.difference(f"episode_{i}" for i in range(total))))


def _json_or_none(text: Any) -> Any:
    """``text`` parsed as JSON; ``None`` for anything else (a missing or damaged copy of a
    value is not evidence against the value)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
