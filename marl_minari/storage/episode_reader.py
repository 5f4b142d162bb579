"""Reading many episodes of one ``main_data.hdf5`` into contiguous per-agent arrays.

Contiguous datasets are copied straight out of a memory map at the offsets the writer indexed
(the index is checked against the file before use, :mod:`marl_minari.format.offset_index`);
datasets without an index entry are read through h5py. Only the reading itself is inside
:func:`~marl_minari.storage.datafile.hdf5_errors`: assembling the arrays is this library's own
code, whose errors are not the file's.
"""

from __future__ import annotations

import contextlib
import io
import mmap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from gymnasium import spaces

from marl_minari.errors import CorruptedDataError, InvalidOptionError, LayoutError
from marl_minari.format import layout, offset_index
from marl_minari.format.digests import stat_key
from marl_minari.format.spaces import (
    build_tree,
    is_image_space,
    leaf_dtype,
    leaf_shape,
    leaf_spaces,
    nest,
)
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.byte_ranges import ByteRanges, RangesFile
from marl_minari.storage.datafile import (
    MARL_GROUP,
    attribute_steps,
    episode_group,
    hdf5_errors,
    open_data_file,
)
from marl_minari.storage.self_contained import check_dataset, check_links

_AGENT_INFOS = f"{MARL_GROUP}/{layout.AGENT_INFOS}"


@dataclass(frozen=True)
class Leaf:
    path: str
    dtype: np.dtype
    row_shape: tuple[int, ...]
    per_obs: bool
    jpeg: bool = False
    text: bool = False


@dataclass
class IndexCache:
    """The last checked offset index and the identity of the files it was checked on."""

    key: tuple[Any, ...] | None = None
    index: offset_index.OffsetIndex | None = None


def _files_key(data_path: Path) -> tuple[Any, ...]:
    key: list[Any] = []
    for name in (layout.MAIN_FILE_NAME, layout.INDEX_FILE_NAME):
        try:
            key.append(stat_key((data_path / name).stat()))
        except FileNotFoundError:
            key.append(None)
    return tuple(key)


class EpisodeReader:
    """Reads leaves of many episodes out of one ``main_data.hdf5``."""

    def __init__(self, data_path: Path, spec: MultiAgentSpec, metadata: dict[str, Any],
                 cache: IndexCache | None = None, *,
                 byte_source: ByteRanges | None = None) -> None:
        self._path = data_path / layout.MAIN_FILE_NAME
        self._source = byte_source
        """Where the data file's bytes come from when it is not the local file (a remote
        file read by verified ranges): HDF5 opens it through :class:`RangesFile` and indexed
        leaves are read with ``byte_source.read_ranges``."""
        self._file = (open_data_file(self._path) if byte_source is None
                      else _open_ranges(byte_source))
        self._spec = spec
        self._jpeg = bool(metadata.get("jpeg_encoding", True))
        self._map: np.ndarray | None = None
        self._mmap: mmap.mmap | None = None
        cache = cache or IndexCache()
        key = _files_key(data_path) if byte_source is None else ("ranges", byte_source.name)
        if cache.key != key:
            try:
                with hdf5_errors(self._path):
                    cache.index = offset_index.load(
                        data_path, self._file, int(metadata["total_episodes"]),
                        int(metadata["total_steps"]),
                        file_size=None if byte_source is None else byte_source.size)
            except BaseException:
                self._file.close()
                raise
            cache.key = key
        self._index = cache.index

    def __enter__(self) -> EpisodeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()
        self._map = None
        if self._mmap is not None:
            # Every slice of the map was copied out, so nothing exports its buffer any more;
            # if something still did, the map would close when that is collected.
            with contextlib.suppress(BufferError):
                self._mmap.close()
            self._mmap = None

    def read(self, indices: np.ndarray) -> MultiAgentArrays:
        """Episodes ``indices`` (stored ids) as contiguous arrays.

        Raises:
            InvalidOptionError: no episode asked for.
            CorruptedDataError: the file is damaged.
        """
        if len(indices) == 0:
            raise InvalidOptionError("to_arrays needs at least one episode index")
        lengths = (self._index.steps[indices] if self._index is not None
                   else attribute_steps(self._file, self._path, indices))
        with hdf5_errors(self._path):
            by_path = {leaf.path: self._read_leaf(leaf, indices, lengths)
                       for leaf in self._leaves(indices)}
        return self._assemble(by_path, indices, lengths)

    def _leaves(self, indices: np.ndarray) -> list[Leaf]:
        first = int(indices[0])
        spec = self._spec
        found: list[Leaf] = []
        for field_name, by_agent, per_obs in (("observations", spec.observation_spaces, True),
                                              ("actions", spec.action_spaces, False)):
            for agent in spec.possible_agents:
                for path, space in leaf_spaces(by_agent[agent], f"{field_name}/{agent}"):
                    found.append(Leaf(path, leaf_dtype(space), leaf_shape(space), per_obs,
                                       jpeg=self._jpeg and is_image_space(space),
                                       text=leaf_dtype(space).kind == "O"))
        for name in ("rewards", "terminations", "truncations"):
            found.append(Leaf(name, np.dtype(np.float64 if name == "rewards" else bool), (),
                               False))
        episode_group(self._file, first, self._path)  # a deleted episode is named as such
        group = self._file.get(f"episode_{first}/{MARL_GROUP}")
        if not isinstance(group, h5py.Group):
            raise LayoutError(f"{self._path}: episode_{first} has no {MARL_GROUP} group")

        def visitor(prefix: str) -> Any:
            def visit(name: str, obj: Any) -> None:
                if name == layout.STATE and spec.state_encoding == "jpeg" and (
                        spec.state_space is not None):
                    found.append(Leaf(f"{prefix}/{name}", np.dtype(np.uint8),
                                       leaf_shape(spec.state_space), True, jpeg=True))
                elif isinstance(obj, h5py.Dataset):
                    text = h5py.check_string_dtype(obj.dtype) is not None
                    found.append(Leaf(f"{prefix}/{name}", np.dtype(object) if text
                                       else obj.dtype, obj.shape[1:], True, text=text))
            return visit

        check_links(group, self._path)
        group.visititems(visitor(MARL_GROUP))
        first_infos = group.get(layout.AGENT_INFOS)
        seen = set(first_infos) if isinstance(first_infos, h5py.Group) else set()
        for agent, index in self._late_info_agents(indices, seen).items():
            self._file[f"episode_{index}/{_AGENT_INFOS}/{agent}"].visititems(
                visitor(f"{_AGENT_INFOS}/{agent}"))
        return found

    def _late_info_agents(self, indices: np.ndarray, seen: set[str]) -> dict[str, int]:
        """Agents with info columns in some requested episode but not the first one.

        An agent that hands out no info in the first episodes of a recording (it joined
        later) has no info datasets there; ``{agent: an episode that has them}``.
        """
        late: dict[str, int] = {}
        if self._index is not None:
            prefix = _AGENT_INFOS + "/"
            for path, offsets in self._index.offsets.items():
                agent = path[len(prefix):].split("/")[0] if path.startswith(prefix) else None
                if agent is None or agent in seen or agent in late:
                    continue
                having = np.flatnonzero(offsets[indices] >= 0)
                if having.size:
                    late[agent] = int(indices[having[0]])
            candidates = {p[len(prefix):].split("/")[0] for p in self._index.offsets
                          if p.startswith(prefix)} - seen - set(late)
            if not candidates:  # only text leaves left to look for (not indexed)
                return late
        else:
            candidates = None
        for index in indices[1:].tolist():
            group = self._file.get(f"episode_{index}/{_AGENT_INFOS}")
            if isinstance(group, h5py.Group):
                for agent in group:
                    if agent not in seen and agent not in late and (
                            candidates is None or agent in candidates):
                        late[agent] = index
        return late

    def _read_leaf(self, leaf: Leaf, indices: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        rows = lengths + 1 if leaf.per_obs else lengths
        out = np.empty((int(rows.sum()), *leaf.row_shape), dtype=leaf.dtype)
        offsets = None if self._index is None else self._index.offsets.get(leaf.path)
        row_bytes = out.itemsize * int(np.prod(leaf.row_shape, dtype=np.int64))
        usable = np.zeros(len(indices), dtype=bool)
        if offsets is not None and not leaf.jpeg and not leaf.text and out.size:
            starts = offsets[indices]
            ends = starts + rows * row_bytes
            if self._source is not None:
                return self._read_ranges(leaf, indices, rows, starts, ends, out)
            mapped = self._mapped()
            usable = (starts >= 0) & (ends <= len(mapped))
            if usable.any():
                assert self._index is not None
                usable[usable] = offset_index.trusted(
                    self._index, self._file, leaf.path, indices[usable], leaf.dtype,
                    leaf.row_shape, rows[usable])
            if usable.all():
                np.concatenate([mapped[a:b] for a, b in zip(starts.tolist(), ends.tolist(),
                                                            strict=True)],
                               out=out.reshape(-1).view(np.uint8))
                return out
        flat = out.reshape(len(out), -1).view(np.uint8) if usable.any() else out
        start = 0
        for position, (index, count) in enumerate(zip(indices.tolist(), rows.tolist(),
                                                      strict=True)):
            if usable[position]:
                begin = int(starts[position])
                flat[start:start + count] = self._mapped()[begin:int(ends[position])].reshape(
                    count, -1)
            else:
                self._read_h5(leaf, index, out[start:start + count])
            start += count
        return out

    def _read_ranges(self, leaf: Leaf, indices: np.ndarray, rows: np.ndarray,
                     starts: np.ndarray, ends: np.ndarray, out: np.ndarray) -> np.ndarray:
        """An indexed leaf of a file read by ranges (``byte_source``): the entries' bytes in
        one ``read_ranges`` call (the supplier coalesces and verifies them), the rest through
        HDF5.

        Entries are trusted only when the supplier vouches that its bytes are those of the
        file the index was written for (``fingerprint``, the BLAKE3 a registry's manifest
        records, equals the index's): the per-entry HDF5 comparisons of a local file would
        fetch object headers scattered over the remote file.
        """
        assert self._source is not None and self._index is not None
        whole = getattr(self._source, "fingerprint", None)
        usable = (starts >= 0) & (ends <= self._source.size)
        if whole is None or whole != self._index.fingerprint:
            usable[:] = False
        wanted = np.flatnonzero(usable)
        read = self._source.read_ranges(list(zip(starts[wanted].tolist(),
                                                 (ends - starts)[wanted].tolist(), strict=True)))
        if usable.all():
            np.concatenate([np.frombuffer(piece, dtype=np.uint8) for piece in read],
                           out=out.reshape(-1).view(np.uint8))
            return out
        flat = out.reshape(len(out), -1).view(np.uint8)
        pieces = iter(read)
        start = 0
        for position, (index, count) in enumerate(zip(indices.tolist(), rows.tolist(),
                                                      strict=True)):
            if usable[position]:
                flat[start:start + count] = np.frombuffer(next(pieces), dtype=np.uint8
                                                          ).reshape(count, -1)
            else:
                self._read_h5(leaf, index, out[start:start + count])
            start += count
        return out

    def _mapped(self) -> np.ndarray:
        if self._map is None:
            # The file HDF5 has open, not whatever the path names now: the index entries were
            # checked against this one (an append replaces the path's file).
            self._mmap = mmap.mmap(self._file.id.get_vfd_handle(), 0, access=mmap.ACCESS_READ)
            self._map = np.frombuffer(self._mmap, dtype=np.uint8)
        return self._map

    def _read_h5(self, leaf: Leaf, index: int, target: np.ndarray) -> None:
        dataset = self._file.get(f"episode_{index}/{leaf.path}")
        if not isinstance(dataset, h5py.Dataset) and self._agent_had_no_infos(leaf, index):
            target[...] = "" if leaf.text else 0  # fill values, as for an absent agent
            return
        if not isinstance(dataset, h5py.Dataset):
            episode_group(self._file, index, self._path)  # the whole episode may be gone
            raise CorruptedDataError(f"{self._path}: episode_{index} lacks dataset {leaf.path}")
        check_dataset(dataset.id, self._file.id, self._path, f"episode_{index}/{leaf.path}")
        if leaf.jpeg:
            from PIL import Image

            for row, encoded in enumerate(dataset[()]):
                target[row] = np.asarray(Image.open(io.BytesIO(encoded.tobytes())))
        elif leaf.text:
            target[...] = np.asarray(dataset.asstr()[()], dtype=object)
        elif dataset.shape != target.shape:
            raise CorruptedDataError(
                f"{self._path}: episode_{index}/{leaf.path} has shape {dataset.shape}, "
                f"expected {target.shape}")
        elif target.size:
            dataset.read_direct(target)

    def _agent_had_no_infos(self, leaf: Leaf, index: int) -> bool:
        prefix = _AGENT_INFOS + "/"
        if not leaf.path.startswith(prefix):
            return False
        agent = leaf.path[len(prefix):].split("/")[0]
        return f"episode_{index}/{_AGENT_INFOS}/{agent}" not in self._file

    def _assemble(self, by_path: dict[str, np.ndarray], indices: np.ndarray,
                  lengths: np.ndarray) -> MultiAgentArrays:
        spec = self._spec
        agents = spec.possible_agents
        first_rows = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
        after_reset = np.ones(int((lengths + 1).sum()), dtype=bool)
        after_reset[first_rows] = False
        before_end = np.ones_like(after_reset)
        before_end[first_rows + lengths] = False

        def marl(name: str) -> np.ndarray:
            return by_path[f"{MARL_GROUP}/{name}"]

        def subtree(prefix: str) -> dict[str, np.ndarray]:
            return {p[len(prefix) + 1:]: v for p, v in by_path.items()
                    if p.startswith(prefix + "/")}

        infos_root = f"{MARL_GROUP}/{layout.AGENT_INFOS}"
        agent_infos = {a: nest(subtree(f"{infos_root}/{a}")) for a in agents
                       if any(p.startswith(f"{infos_root}/{a}/") for p in by_path)}
        return MultiAgentArrays(
            possible_agents=agents,
            episode_ids=indices.astype(np.int64),
            episode_lengths=lengths,
            observations={a: build_tree(spec.observation_spaces[a],
                                        subtree(f"observations/{a}")) if _is_nested(
                spec.observation_spaces[a]) else by_path[f"observations/{a}"] for a in agents},
            actions={a: build_tree(spec.action_spaces[a], subtree(f"actions/{a}")) if _is_nested(
                spec.action_spaces[a]) else by_path[f"actions/{a}"] for a in agents},
            rewards=marl(layout.AGENT_REWARDS)[after_reset],
            terminations=marl(layout.AGENT_TERMINATIONS)[after_reset],
            truncations=marl(layout.AGENT_TRUNCATIONS)[after_reset],
            active=marl(layout.ACTIVE),
            acted=marl(layout.ACTED)[before_end],
            team_rewards=by_path["rewards"],
            episode_terminations=by_path["terminations"],
            episode_truncations=by_path["truncations"],
            state=by_path.get(f"{MARL_GROUP}/{layout.STATE}"),
            agent_infos=agent_infos or None,
            extras=subtree(f"{MARL_GROUP}/{layout.EXTRAS}"),
        )


def _open_ranges(source: ByteRanges) -> h5py.File:
    """``main_data.hdf5`` opened by HDF5 over a byte supplier.

    Raises:
        CorruptedDataError: HDF5 cannot open it.
    """
    try:
        return h5py.File(RangesFile(source), "r")
    except OSError as exc:
        raise CorruptedDataError(f"{source.name} is damaged and cannot be opened ({exc})"
                                 ) from exc


def _is_nested(space: Any) -> bool:
    return isinstance(space, (spaces.Dict, spaces.Tuple))


