"""Reading many episodes of one ``main_data.hdf5`` into contiguous per-agent arrays.

Every array is allocated once at its final size. Contiguous datasets at the offsets the writer
indexed (the index is checked against the file before use, :mod:`marl_minari.format.
offset_index`) are planned as byte ranges for the whole read, all leaves together, and read in
coalesced blocks straight into those arrays (:mod:`marl_minari.storage.range_reader`): from the
local file, or from any :class:`~marl_minari.storage.byte_ranges.ByteRanges` supplier of its
bytes. Rows the arrays leave out (an agent's reward row at reset, its ``acted`` row at the end)
are left out of the ranges. Datasets without a usable index entry (JPEG, text, chunked, or a
file written since) are read through h5py. Only the reading itself is inside
:func:`~marl_minari.storage.datafile.hdf5_errors`: assembling the arrays is this library's own
code, whose errors are not the file's.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np
from gymnasium import spaces

from marl_minari.errors import CorruptedDataError, InvalidOptionError, LayoutError
from marl_minari.format import index_trust, layout, offset_index
from marl_minari.format.comparison_record import PublishedBytes
from marl_minari.format.entry_checks import first_indexed
from marl_minari.format.in_file import (
    dataset_in_file,
    group_in_file,
    open_in_file,
    refuse_link_out,
)
from marl_minari.format.index_trust import LeafEntries
from marl_minari.format.jpeg import jpeg_paths
from marl_minari.format.spaces import build_tree, cast_stored, leaf_shape, nest
from marl_minari.format.spec import MultiAgentSpec
from marl_minari.storage.arrays import MultiAgentArrays
from marl_minari.storage.byte_ranges import ByteRanges, open_hdf5
from marl_minari.storage.datafile import (
    MARL_GROUP,
    attribute_steps,
    episode_group,
    hdf5_errors,
    open_data_file,
)
from marl_minari.storage.index_entries import (
    IndexEntries,
    comparison_chunks,
    index_entries,
    plan_entries,
)
from marl_minari.storage.prefault import populate_soon
from marl_minari.storage.range_reader import (
    REMOTE_MAX_GAP,
    RangePlanner,
    read_plan_from_fd,
    read_plan_from_source,
)
from marl_minari.storage.reader_state import (
    IndexCache,
    Leaf,
    ReadScratch,
    files_key,
    rows_into,
    spec_leaves,
)
from marl_minari.storage.self_contained import check_dataset, check_links

_AGENT_INFOS = f"{MARL_GROUP}/{layout.AGENT_INFOS}"


_DROPPED: dict[str, Literal["first", "last"]] = {
    f"{MARL_GROUP}/{layout.AGENT_REWARDS}": "first",
    f"{MARL_GROUP}/{layout.AGENT_TERMINATIONS}": "first",
    f"{MARL_GROUP}/{layout.AGENT_TRUNCATIONS}": "first",
    f"{MARL_GROUP}/{layout.ACTED}": "last",
}
"""Per-agent columns stored with a row per observation whose arrays hold one per step: the
reset row of rewards and end flags, the final row of ``acted`` (``MultiAgentArrays``)."""


class EpisodeReader:
    """Reads leaves of many episodes out of one ``main_data.hdf5``.

    Args:
        data_path: the dataset's ``data/`` folder (its metadata and offset index).
        spec, metadata: the dataset's.
        cache: the checked offset index, kept between readers of the same files.
        byte_source: where the data file's bytes come from when not from the local file
            (a remote file): HDF5 opens it through
            :class:`~marl_minari.storage.byte_ranges.RangesFile` and indexed leaves are read
            with :meth:`~marl_minari.storage.byte_ranges.ByteRanges.read_ranges`, in
            coalesced blocks.
        published: what pins ``byte_source``'s bytes, when it is a published file whose every
            byte is checked against its manifest: the offset-index comparisons are then
            remembered for those bytes (:mod:`marl_minari.format.index_trust`).
    """

    def __init__(self, data_path: Path, spec: MultiAgentSpec, metadata: dict[str, Any],
                 cache: IndexCache | None = None, *,
                 byte_source: ByteRanges | None = None,
                 published: PublishedBytes | None = None) -> None:
        self._path = data_path / layout.MAIN_FILE_NAME
        self._source = byte_source
        self._published = published if byte_source is not None else None
        if byte_source is None:
            self._file = open_data_file(self._path)
            # The file HDF5 has open, not whatever the path names now: the index entries are
            # checked against this one (an append replaces the path's file).
            self._fd: int | None = self._file.id.get_vfd_handle()
            self._size = os.fstat(self._fd).st_size
        else:
            self._file = open_hdf5(byte_source)
            self._fd = None
            self._size = int(byte_source.size)
        self._spec = spec
        self._jpeg = jpeg_paths(spec, bool(metadata.get("jpeg_encoding", True)))
        cache = cache or IndexCache()
        key = files_key(data_path) if byte_source is None else ("ranges", byte_source.name)
        if cache.key != key:
            try:
                with hdf5_errors(self._path):
                    index = offset_index.load(
                        data_path, self._file, int(metadata["total_episodes"]),
                        int(metadata["total_steps"]), sample=False,
                        file_size=None if byte_source is None else byte_source.size)
                    if index is not None and not index_trust.sample_agrees(
                            index, self._file, published=self._published,
                            local=byte_source is None):
                        index = None
                    cache.index = index
            except BaseException:
                self._file.close()
                raise
            cache.key = key
            cache.leaves = {}
        self._index = cache.index
        self._visited = cache.leaves
        self._scratch: ReadScratch | None = None
        self._populating: Future[None] | None = None
        self._known_spec_leaves: list[Leaf] | None = None

    def __enter__(self) -> EpisodeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the data file."""
        self._file.close()

    @property
    def indexed(self) -> bool:
        """The data file has a usable offset index (its leaves are read as byte ranges)."""
        return self._index is not None

    def read(self, indices: np.ndarray, *, observations: bool = True,
             scratch: ReadScratch | None = None) -> MultiAgentArrays:
        """Episodes ``indices`` (stored ids) as contiguous arrays; ``observations=False``
        leaves the agents' observations unread (each tree is then ``{}``); with ``scratch``
        the arrays are views of its memory (valid until its next use), else new.

        Raises:
            InvalidOptionError: no episode asked for.
            CorruptedDataError: the file is damaged.
        """
        indices, lengths, name = self._episodes(indices, "to_arrays")
        self._scratch = scratch
        planner = RangePlanner(self._size, name)
        steps = int(lengths.sum())
        with hdf5_errors(self._path):
            leaves = [leaf for leaf in self._leaves(indices)
                      if observations or not leaf.path.startswith("observations/")]
            leaves, direct = rows_into(scratch, leaves, steps)
            by_path = self._place_leaves(leaves, indices, lengths, planner, direct)
            self._read_planned(planner, name)
        if scratch is not None:
            scratch.advance(steps, frozenset(leaves[n].path for n in direct))
        return self._assemble(by_path, indices, lengths, observations)

    def team_rewards(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The team reward column (Minari's ``rewards``) of episodes ``indices``, back to
        back, and their lengths: the one leaf a choice by returns needs, read alone (through
        the offset index where it binds, as :meth:`read` reads it).

        Raises:
            InvalidOptionError: no episode asked for.
            CorruptedDataError: the file is damaged.
        """
        indices, lengths, name = self._episodes(indices, "team_rewards")
        planner = RangePlanner(self._size, name)
        self._scratch = None  # the rewards are returned: never in a reused read's memory
        with hdf5_errors(self._path):
            episode_group(self._file, int(indices[0]), self._path)
            leaf = Leaf("rewards", np.dtype(np.float64), (), False)
            rewards = self._place_leaves([leaf], indices, lengths, planner)[leaf.path]
            # one small piece per episode: gaps are skipped, never fetched to save a request
            self._read_planned(planner, name, remote_gap=0)
        return rewards, lengths

    def _episodes(self, indices: np.ndarray, caller: str) -> tuple[np.ndarray, np.ndarray, str]:
        """``indices`` as ``int64``, their lengths, and the name errors give the file.

        Raises:
            InvalidOptionError: no episode asked for (named by ``caller``).
        """
        name = str(self._path if self._source is None else self._source.name)
        if len(indices) == 0:
            raise InvalidOptionError(
                f"{caller} was given no episodes to read from {name} (an empty list of ids, or "
                "a dataset that holds no episodes): pass the ids of stored episodes")
        indices = np.asarray(indices, dtype=np.int64)
        lengths = (self._index.steps[indices] if self._index is not None
                   else attribute_steps(self._file, self._path, indices))
        return indices, lengths, name

    def _read_planned(self, planner: RangePlanner, name: str,
                      remote_gap: int = REMOTE_MAX_GAP) -> None:
        """Read what ``planner`` holds: from the local file, or from the byte supplier, whose
        requests bridge gaps of up to ``remote_gap`` bytes between pieces."""
        if self._source is None:
            assert self._fd is not None
            read_plan_from_fd(planner.plan(), self._fd, name)
        else:
            aligned = int(getattr(self._source, "block_size", None) or 0)
            read_plan_from_source(planner.plan(remote_gap, align=aligned), self._source)
        if self._populating is not None:  # the helper's mapping of the arrays just filled
            populating, self._populating = self._populating, None
            populating.result()

    def _leaves(self, indices: np.ndarray) -> list[Leaf]:
        first = int(indices[0])
        spec = self._spec
        found = list(self._spec_leaves())
        # A deleted episode is named as such; its group found from there, not from the root.
        episode = episode_group(self._file, first, self._path)
        marl = group_in_file(episode, MARL_GROUP.encode())
        if marl is None:
            refuse_link_out(episode, MARL_GROUP.encode(), self._path, f"episode_{first}/")
            raise LayoutError(f"{self._path}: episode_{first} has no {MARL_GROUP} group")
        group = h5py.Group(marl)

        def visit(parent: h5py.Group, prefix: str) -> None:
            # The low-level API, and a group's leaves found once per reader for each set of
            # names: high-level objects for every dataset cost milliseconds per chunk read,
            # more than a small chunk's bytes.
            names: list[bytes] = []
            h5py.h5o.visit(parent.id, names.append)
            key = (prefix, tuple(names))
            known = self._visited.get(key)
            if known is None:
                known = self._visited[key] = list(group_leaves(parent, prefix, names))
            found.extend(known)

        def group_leaves(parent: h5py.Group, prefix: str, names: list[bytes]
                         ) -> Iterator[Leaf]:
            for raw in names:
                name = raw.decode()
                if f"{prefix}/{name}" in self._jpeg and name == layout.STATE and (
                        spec.state_space is not None):
                    yield Leaf(f"{prefix}/{name}", np.dtype(np.uint8),
                               leaf_shape(spec.state_space), True, jpeg=True)
                    continue
                dataset = offset_index.dataset_id(parent, name)
                if dataset is not None:
                    path = f"{prefix}/{name}"
                    dataset = self._first_indexed(path) or dataset
                    text = h5py.check_string_dtype(dataset.dtype) is not None
                    # The layout's own columns are read as the layout types them, not as the
                    # first episode read stores them (another writer's int8 mask holding a 5).
                    fixed = layout.MARL_COLUMN_DTYPES.get(path)
                    dtype = (np.dtype(fixed) if fixed is not None
                             else np.dtype(object) if text else dataset.dtype)
                    yield Leaf(path, dtype, dataset.shape[1:], True, text=text and fixed is None,
                               drop=_DROPPED.get(path))

        check_links(group, self._path)
        visit(group, MARL_GROUP)
        first_infos = group.get(layout.AGENT_INFOS)
        seen = set(first_infos) if isinstance(first_infos, h5py.Group) else set()
        for agent, index in self._late_info_agents(indices, seen).items():
            path = f"episode_{index}/{_AGENT_INFOS}/{agent}"
            late = group_in_file(self._file.id, path.encode())
            if late is None:
                refuse_link_out(self._file.id, path.encode(), self._path)
                raise CorruptedDataError(f"{self._path}: {path} is not a group")
            visit(h5py.Group(late), f"{_AGENT_INFOS}/{agent}")
        return found

    def _first_indexed(self, path: str) -> h5py.h5d.DatasetID | None:
        """The dataset of ``path``'s first index entry: every read takes a leaf the spec
        does not name as that entry is stored, whatever episode the read starts at (the
        index holds only entries stored alike: ``docs/format.md``)."""
        offsets = None if self._index is None else self._index.offsets.get(path)
        first = None if offsets is None else first_indexed(self._file, path, offsets)
        return None if first is None else first[1]

    def _spec_leaves(self) -> list[Leaf]:
        """The leaves the spec names: found once per reader, not once per chunk."""
        if self._known_spec_leaves is None:
            self._known_spec_leaves = spec_leaves(self._spec, self._jpeg)
        return self._known_spec_leaves

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
            infos = group_in_file(self._file.id, f"episode_{index}/{_AGENT_INFOS}".encode())
            if infos is not None:
                for agent in h5py.Group(infos):
                    if agent not in seen and agent not in late and (
                            candidates is None or agent in candidates):
                        late[agent] = index
        return late

    def _indexed(self, leaf: Leaf) -> np.ndarray | None:
        """The index's offsets of ``leaf``, if its entries may be read as bytes at all."""
        if self._index is None or leaf.jpeg or leaf.text:
            return None
        return self._index.offsets.get(leaf.path)

    def _trusted(self, leaves: list[Leaf], indices: np.ndarray, entries: IndexEntries) -> None:
        """Leave in ``entries.found`` only the index entries that may be read as bytes
        (``docs/format.md``): inside the file, and bound to it by
        :func:`~marl_minari.format.index_trust.trusted_leaves`, all leaves compared together,
        whatever supplies the bytes. A remote supplier verifies every byte against the
        published manifest, but the index is published beside the file by the same hand: its
        entries are compared with HDF5's own offsets like a copy's. A supplier that can
        prefetch (a remote file) is asked for the episodes' leaves before any of their entries
        is compared (not when every answer is remembered), a memory budget at a time, so that
        the comparisons' metadata reads find their blocks already fetched."""
        if not entries.found.any():
            return
        assert self._index is not None
        local = self._source is None
        if index_trust.whole_file_trusted(self._index, self._file, local=local):
            return  # every entry is the writer's own, to the byte (the module's docstring)
        usable = list(entries.found)  # views: written through
        candidates = [(row, leaves[n], entries.starts[row], entries.stored[row])
                      for row, n in enumerate(entries.positions) if usable[row].any()]
        for chunk, prefetch in comparison_chunks(self._source, candidates, usable,
                                                 len(indices)):
            asked = [(row, LeafEntries(leaf.path, indices[chunk][usable[row][chunk]],
                                       leaf.dtype, leaf.row_shape,
                                       stored[chunk][usable[row][chunk]]))
                     for row, leaf, _, stored in candidates if usable[row][chunk].any()]
            answers = index_trust.trusted_leaves(self._index, self._file,
                                                 [leaf_entries for _, leaf_entries in asked],
                                                 published=self._published, local=local,
                                                 before_comparing=prefetch, raw=self._source)
            for (row, _), agreed in zip(asked, answers, strict=True):
                part = usable[row][chunk]  # a view: written through
                part[part] = agreed

    def _place_leaves(self, leaves: list[Leaf], indices: np.ndarray, lengths: np.ndarray,
                      planner: RangePlanner, direct: dict[int, np.ndarray] | None = None
                      ) -> dict[str, np.ndarray]:
        """Every leaf's output array, by path (the caller's, ``direct`` by position, where
        given): the entries :meth:`_trusted` leaves usable planned as ranges (one planner
        call for all leaves), the others read through h5py now."""
        direct = direct or {}
        outs = [direct[n] if n in direct else self._output(leaf, lengths)
                for n, leaf in enumerate(leaves)]
        if self._source is not None:  # copied into from a supplier's memory: mapped meanwhile
            self._populating = populate_soon(outs)
        entries = index_entries(self._index, [
            leaf if self._indexed(leaf) is not None else None for leaf in leaves],
            indices, lengths, self._size)
        self._trusted(leaves, indices, entries)
        plan_entries(planner, entries, leaves, outs)
        usable = {n: entries.found[row] for row, n in enumerate(entries.positions)}
        for n, leaf in enumerate(leaves):
            read = usable.get(n)
            if read is None or not read.all():
                self._read_leaf_h5(leaf, indices, lengths, outs[n],
                                   np.ones(len(indices), dtype=bool) if read is None else ~read)
        return {leaf.path: out for leaf, out in zip(leaves, outs, strict=True)}

    def _output(self, leaf: Leaf, lengths: np.ndarray) -> np.ndarray:
        """The leaf's output array: new, or in the read's reused memory."""
        shape = (int(leaf.kept_rows(lengths).sum()), *leaf.row_shape)
        return (np.empty(shape, dtype=leaf.dtype) if self._scratch is None or leaf.text
                else self._scratch.array(leaf.path, shape, leaf.dtype))

    def _read_leaf_h5(self, leaf: Leaf, indices: np.ndarray, lengths: np.ndarray,
                      out: np.ndarray, unplanned: np.ndarray) -> None:
        """The ``unplanned`` episodes of ``leaf`` read through h5py into their rows of
        ``out``."""
        stored = lengths + 1 if leaf.per_obs else lengths
        kept = leaf.kept_rows(lengths)
        firsts = np.concatenate([[0], np.cumsum(kept)[:-1]]).astype(np.int64)
        for position in np.flatnonzero(unplanned).tolist():
            index, first, count = (int(indices[position]), int(firsts[position]),
                                   int(kept[position]))
            target = out[first:first + count]
            if leaf.drop is None:
                self._read_h5(leaf, index, target)
            else:  # read as stored, then leave the row out
                whole = np.empty((int(stored[position]), *leaf.row_shape), dtype=leaf.dtype)
                self._read_h5(leaf, index, whole)
                target[...] = whole[1:] if leaf.drop == "first" else whole[:-1]

    def _read_h5(self, leaf: Leaf, index: int, target: np.ndarray) -> None:
        path = f"episode_{index}/{leaf.path}".encode()
        found = dataset_in_file(self._file.id, path)
        if found is None:
            refuse_link_out(self._file.id, path, self._path)  # named, never opened
            if self._agent_had_no_infos(leaf, index):
                target[...] = "" if leaf.text else 0  # fill values, as for an absent agent
                return
            episode_group(self._file, index, self._path)  # the whole episode may be gone
            raise CorruptedDataError(f"{self._path}: episode_{index} lacks dataset {leaf.path}")
        check_dataset(found, self._file.id, self._path, f"episode_{index}/{leaf.path}")
        dataset = h5py.Dataset(found)
        if leaf.jpeg:
            from PIL import Image

            for row, encoded in enumerate(dataset[()]):
                try:
                    target[row] = np.asarray(Image.open(io.BytesIO(encoded.tobytes())))
                except (OSError, ValueError) as exc:  # PIL's UnidentifiedImageError is one
                    raise CorruptedDataError(
                        f"{self._path}: episode_{index}/{leaf.path}, row {row}: not a JPEG "
                        f"image of the leaf's shape ({type(exc).__name__}: {exc}); the "
                        "dataset is damaged: restore it from a copy or record it again"
                    ) from exc
        elif leaf.text:
            target[...] = np.asarray(dataset.asstr()[()], dtype=object)
        elif dataset.shape != target.shape:
            raise CorruptedDataError(
                f"{self._path}: episode_{index}/{leaf.path} has shape {dataset.shape}, "
                f"expected {target.shape}")
        elif target.size and dataset.dtype == target.dtype:
            dataset.read_direct(target)
        elif target.size:  # stored by another writer in another dtype: cast by our rule,
            # not by HDF5's conversion, which truncates 2.5 to 2 and overflows to inf silently
            target[...] = cast_stored(
                dataset[()], target.dtype, f"{self._path}: episode_{index}/{leaf.path}",
                typed_by="layout" if leaf.path in layout.MARL_COLUMN_DTYPES else "space")

    def _agent_had_no_infos(self, leaf: Leaf, index: int) -> bool:
        prefix = _AGENT_INFOS + "/"
        if not leaf.path.startswith(prefix):
            return False
        agent = leaf.path[len(prefix):].split("/")[0]
        return open_in_file(self._file.id, f"episode_{index}/{_AGENT_INFOS}/{agent}".encode()
                            ) is None

    def _assemble(self, by_path: dict[str, np.ndarray], indices: np.ndarray,
                  lengths: np.ndarray, observations: bool) -> MultiAgentArrays:
        spec = self._spec
        agents = spec.possible_agents

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
            observations={a: {} if not observations else build_tree(
                spec.observation_spaces[a], subtree(f"observations/{a}")) if _is_nested(
                spec.observation_spaces[a]) else by_path[f"observations/{a}"] for a in agents},
            actions={a: build_tree(spec.action_spaces[a], subtree(f"actions/{a}")) if _is_nested(
                spec.action_spaces[a]) else by_path[f"actions/{a}"] for a in agents},
            rewards=marl(layout.AGENT_REWARDS),
            terminations=marl(layout.AGENT_TERMINATIONS),
            truncations=marl(layout.AGENT_TRUNCATIONS),
            active=marl(layout.ACTIVE),
            acted=marl(layout.ACTED),
            team_rewards=by_path["rewards"],
            episode_terminations=by_path["terminations"],
            episode_truncations=by_path["truncations"],
            state=by_path.get(f"{MARL_GROUP}/{layout.STATE}"),
            agent_infos=agent_infos or None,
            extras=subtree(f"{MARL_GROUP}/{layout.EXTRAS}"),
        )


def _is_nested(space: Any) -> bool:
    return isinstance(space, (spaces.Dict, spaces.Tuple))
