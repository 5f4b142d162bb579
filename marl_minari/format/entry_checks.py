"""Comparing offset-index entries with HDF5, many at once, one episode group at a time: the
entries a read uses (:func:`compare_entries`), and every entry of a file before it is trusted
whole (:func:`layout_mismatches`).

An entry may be read as bytes only after HDF5 itself says that ``episode_<e>/<path>`` is
stored contiguously at the indexed offset with the leaf's type and shape (``docs/format.md``,
"marl_minari_index.npz"). Opening each dataset by its full path from the root walks the
root's B-tree to the episode group again for every leaf; here each episode group is opened
once and its datasets are opened relative to it. Opening a dataset is most of what a
comparison costs, so most are not opened at all: HDF5 opens one per path, and the others'
object headers are compared with its bytes (:mod:`.header_template`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Final, NamedTuple, Protocol

import h5py
import numpy as np

from marl_minari.format import group_templates, header_template, symbol_tables
from marl_minari.format.in_file import dataset_in_file, group_in_file, hard_link_address


class EntryCheck(NamedTuple):
    """One entry to compare: what the reader would read as ``rows`` rows of bytes."""

    episode_id: int
    path: bytes
    """The dataset's path under ``episode_<episode_id>``."""
    offset: int
    expected_type: h5py.h5t.TypeID
    shape: tuple[int, ...]


class LeafChecks(NamedTuple):
    """The entries of one leaf to compare, as columns: for each, what the reader would read as
    ``rows[i]`` rows of ``row_shape`` and ``expected_type`` at ``offsets[i]``."""

    path: bytes
    """The dataset's path under each ``episode_<episode_ids[i]>``."""
    expected_type: h5py.h5t.TypeID
    row_shape: tuple[int, ...]
    episode_ids: np.ndarray
    offsets: np.ndarray
    rows: np.ndarray

    def entry(self, index: int) -> EntryCheck:
        """Entry ``index`` on its own."""
        return EntryCheck(int(self.episode_ids[index]), self.path, int(self.offsets[index]),
                          self.expected_type, (int(self.rows[index]), *self.row_shape))


def compare_entries(file: h5py.File, checks: Sequence[EntryCheck],
                    raw: RawFile | None = None) -> list[bool]:
    """Whether each entry agrees with ``file`` (see :func:`agrees`), in the order given:
    :func:`compare_leaves` of the entries grouped by path, type and row shape."""
    kinds: dict[tuple[bytes, tuple[int, ...]], list[tuple[h5py.h5t.TypeID, list[int]]]] = {}
    for position, check in enumerate(checks):
        types = kinds.setdefault((check.path, check.shape[1:]), [])
        for expected_type, positions in types:
            if check.expected_type is expected_type or check.expected_type.equal(expected_type):
                positions.append(position)
                break
        else:
            types.append((check.expected_type, [position]))
    groups = [positions for types in kinds.values() for _, positions in types]
    leaves = []
    for positions in groups:
        first = checks[positions[0]]
        leaves.append(LeafChecks(
            first.path, first.expected_type, first.shape[1:],
            np.array([checks[p].episode_id for p in positions], dtype=np.int64),
            np.array([checks[p].offset for p in positions], dtype=np.int64),
            np.array([checks[p].shape[0] for p in positions], dtype=np.int64)))
    results = [False] * len(checks)
    for positions, agreed in zip(groups, compare_leaves(file, leaves, raw), strict=True):
        for position, verdict in zip(positions, agreed.tolist(), strict=True):
            results[position] = verdict
    return results


def compare_leaves(file: h5py.File, leaves: Sequence[LeafChecks],
                   raw: RawFile | None = None) -> list[np.ndarray]:
    """For each leaf, ``(entries,)`` bool: whether each of its entries agrees with ``file``
    (see :func:`agrees`).

    The entries of a leaf that has several are compared together: one of them by HDF5, the
    others against its object header where the file allows (:mod:`.header_template`: ``raw``
    supplies the headers' bytes, the same bytes HDF5 reads; ``None``: a local file's own,
    read by ``pread``, and none for any other), every entry left by HDF5, episode by episode
    (each episode group opened once).
    """
    return _leaves_and_counts(file, leaves, raw)[0]


def _leaves_and_counts(file: h5py.File, leaves: Sequence[LeafChecks], raw: RawFile | None,
                       counted: bool = False) -> tuple[list[np.ndarray], dict[int, int]]:
    """:func:`compare_leaves`, and with ``counted`` the ``total_steps`` of the episodes whose
    groups the entries' lookups matched to templates that read it from their bytes
    (:func:`~.group_templates.counted_varying`), by episode: as HDF5 reads it, without
    opening those groups."""
    results = [np.full(len(leaf.episode_ids), _UNCOMPARED, dtype=np.int8) for leaf in leaves]
    counts = _compare_by_templates(file, leaves, raw, results, counted=counted)
    group: h5py.h5g.GroupID | None = None
    current = -1
    for k, index in _by_episode(leaves, {k: np.flatnonzero(result == _UNCOMPARED)
                                         for k, result in enumerate(results)}):
        check = leaves[k].entry(index)
        if check.episode_id != current:
            current = check.episode_id
            group = episode_group(file, current)
        results[k][index] = group is not None and agrees(group, check)
    return [result == 1 for result in results], counts


_UNCOMPARED: Final = -1
"""A result not known yet (else ``0``: disagrees, ``1``: agrees)."""


def _by_episode(leaves: Sequence[LeafChecks], chosen: Mapping[int, np.ndarray]
                ) -> list[tuple[int, int]]:
    """``(leaf, entry)`` of the entries ``chosen`` (their positions, by leaf), episode by
    episode, so that HDF5's metadata cache holds each episode's groups while they are read
    (a leaf's in their order within an episode)."""
    leaf_of = np.concatenate([np.zeros(0, dtype=np.int64)]
                             + [np.full(len(at), k) for k, at in chosen.items()])
    index_of = np.concatenate([np.zeros(0, dtype=np.int64), *chosen.values()])
    order = np.argsort(np.concatenate([np.zeros(0, dtype=np.int64)]
                                      + [leaves[k].episode_ids[at] for k, at in chosen.items()]),
                       kind="stable")
    return list(zip(leaf_of[order].tolist(), index_of[order].tolist(), strict=True))


class RawFile(Protocol):
    """The bytes HDF5 reads a file from (a ``ByteRanges`` supplier is one)."""

    size: int

    def read_ranges(self, ranges: Sequence[tuple[int, int]]
                    ) -> Sequence[bytes | memoryview]: ...


def _rows_of(raw: RawFile) -> header_template.ReadRows:
    """``raw``'s own gather of many small rows where it has one (``read_rows``, as
    ``registry.remote_file.RemoteFile``), else a range per row."""
    read_rows = getattr(raw, "read_rows", None)
    return read_rows if read_rows is not None else header_template.rows_reader(raw.read_ranges)


class _LocalRaw:
    def __init__(self, descriptor: int) -> None:
        self._descriptor = descriptor
        self.size = os.fstat(descriptor).st_size

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        return [os.pread(self._descriptor, length, offset) for offset, length in ranges]


def _local_raw(file: h5py.File) -> RawFile | None:
    """The descriptor HDF5 reads a local file through (its default driver), read directly."""
    if file.driver != "sec2":
        return None
    return _LocalRaw(file.id.get_vfd_handle())


def _compare_by_templates(file: h5py.File, leaves: Sequence[LeafChecks],
                          raw: RawFile | None, results: list[np.ndarray],
                          from_bytes: bool = True, counted: bool = False) -> dict[int, int]:
    """Fill in ``results`` the first entry of each leaf that has several (compared by HDF5)
    and the entries whose object headers match its template; leave the others
    :data:`_UNCOMPARED`. A leaf with one entry makes no template: nothing is looked up or
    read for it. With ``counted``, the ``total_steps`` that the episode groups' bytes say
    (only where the lookups were made from the bytes and stand)."""
    several = [k for k, leaf in enumerate(leaves) if len(leaf.episode_ids) > 1]
    if not several:
        return {}
    raw = raw if raw is not None else _local_raw(file)
    if raw is None:
        return {}
    end = header_template.end_of_allocation(raw.read_ranges, raw.size)
    if end is None:
        return {}
    addresses, group_spans, counts = _header_addresses(file, leaves, raw, several, from_bytes,
                                                       counted)
    header_spans = _compare_paths(file, leaves, raw, addresses, end, results,
                                  group_spans is not None)
    if group_spans is None or (header_spans is not None
                               and symbol_tables.disjoint(group_spans + header_spans)):
        return counts
    # Found from the bytes, a header HDF5 finds elsewhere or one sharing bytes with a group's
    # structures (HDF5 would not read both): never in a file HDF5 wrote, but then everything
    # again with HDF5's own lookups (and no count from the bytes).
    for result in results:
        result[:] = _UNCOMPARED
    return _compare_by_templates(file, leaves, raw, results, from_bytes=False)


def _compare_paths(file: h5py.File, leaves: Sequence[LeafChecks], raw: RawFile,
                   addresses: dict[int, np.ndarray], end: int, results: list[np.ndarray],
                   confirm_first: bool) -> symbol_tables.Spans | None:
    """Compare the entries of each leaf ``k`` whose headers are at ``addresses[k]``: the
    first by HDF5, the others by its template. The headers read (for
    :func:`symbol_tables.disjoint`); ``None`` when ``confirm_first`` and HDF5 finds a first
    entry's header somewhere else."""
    spans: symbol_tables.Spans = []
    for k, at in addresses.items():
        leaf = leaves[k]
        found = np.flatnonzero(at >= 0)
        if len(found) < 2:
            continue
        head = int(found[0])
        first = leaf.entry(head)
        if confirm_first and _header_address(file.id, first) != at[head]:
            return None
        group = episode_group(file, first.episode_id)
        agreed_first = group is not None and agrees(group, first)
        results[k][head] = agreed_first
        template = _template(first, int(at[head]), raw) if agreed_first else None
        if template is None:
            continue
        rest = found[1:][at[found[1:]] + template.length <= end]
        headers = _rows_of(raw)(at[rest], template.length)
        agreed = header_template.matches(template, headers, leaf.offsets[rest],
                                         leaf.rows[rest], end)
        matched = rest[agreed]
        results[k][matched] = 1
        spans.append((at[np.concatenate([found[:1], matched])].astype(np.uint64),
                      template.length))
    return spans


def _header_addresses(file: h5py.File, leaves: Sequence[LeafChecks], raw: RawFile,
                      several: list[int], from_bytes: bool, counted: bool = False
                      ) -> tuple[dict[int, np.ndarray], symbol_tables.Spans | None,
                                 dict[int, int]]:
    """Where the object header of each entry of the leaves ``several`` lies (``-1``: none by
    a hard link), by leaf, the group structures read to find them (``None``: HDF5 found
    them) and, with ``counted``, the episode groups' ``total_steps`` their bytes say. Found
    from the file's bytes (:mod:`.group_templates`, ``from_bytes``) where the file allows,
    else by HDF5's lookups."""
    resolved = None
    if from_bytes:
        resolved = group_templates.resolve(
            raw.read_ranges, raw.size,
            np.concatenate([leaves[k].episode_ids for k in several]).tolist(),
            [path for k in several for path in [leaves[k].path] * len(leaves[k].episode_ids)],
            partial(hard_link_address, file.id), _rows_of(raw),
            partial(_hdf5_count, file) if counted else None)
    if resolved is not None:
        bounds = np.cumsum([0] + [len(leaves[k].episode_ids) for k in several]).tolist()
        return ({k: resolved.addresses[bounds[n]:bounds[n + 1]]
                 for n, k in enumerate(several)}, resolved.spans, resolved.counts)
    addresses = {k: np.full(len(leaves[k].episode_ids), -1, dtype=np.int64) for k in several}
    # Episode by episode: path by path costs 3 us more each.
    root = file.id
    for k, index in _by_episode(leaves, {k: np.arange(len(leaves[k].episode_ids))
                                         for k in several}):
        addresses[k][index] = _header_address(root, leaves[k].entry(index))
    return addresses, None, {}


def _hdf5_count(file: h5py.File, path: bytes) -> int | None:
    """HDF5's reading of the ``total_steps`` of the group at ``path`` (:func:`read_count`)."""
    group = group_in_file(file.id, path)
    return None if group is None else read_count(group, np.empty(1, dtype=np.int64))


def _header_address(root: h5py.h5f.FileID, check: EntryCheck) -> int:
    """Where the entry's object header lies, by HDF5's own lookup of its link from the root
    (:func:`~marl_minari.format.in_file.hard_link_address`; the root's B-tree is in HDF5's
    cache after the first, which costs less than opening each episode group); ``-1`` where
    the entry is not reached by a hard link in the file."""
    address = hard_link_address(root, b"episode_%d/%s" % (check.episode_id, check.path))
    return -1 if address is None else address


def _template(check: EntryCheck, address: int, raw: RawFile
              ) -> header_template.HeaderTemplate | None:
    """The template of ``check``'s path, an entry HDF5 said agrees (so HDF5 read its whole
    object header, inside the file's end of allocation): that header."""
    (prefix,) = raw.read_ranges([(address, 16)])
    length = header_template.header_length(prefix)
    if length is None:
        return None
    (header,) = raw.read_ranges([(address, length)])
    row_bytes = check.expected_type.get_size() * int(np.prod(check.shape[1:], dtype=np.int64))
    return header_template.make_template(header, check.offset, check.shape[0], row_bytes)


def episode_group(file: h5py.File, episode_id: int) -> h5py.h5g.GroupID | None:
    """The low-level group ``episode_<episode_id>`` of ``file``; ``None`` if there is none
    in the file itself (an external link leads elsewhere)."""
    return group_in_file(file.id, b"episode_%d" % episode_id)


def agrees(group: h5py.h5g.GroupID, check: EntryCheck) -> bool:
    """Whether ``check.path`` under ``group`` is a dataset stored contiguously at
    ``check.offset`` with exactly the expected type and shape.

    ``H5Dget_offset`` is defined only for contiguous storage in the file itself (none for
    chunked, compact, external or virtual datasets, or unallocated ones); a dataset reached
    through an external link would have an offset in the other file, which is never opened
    (:func:`~marl_minari.format.in_file.dataset_in_file`): it never agrees.
    """
    if check.offset < 0:
        return False
    dataset = dataset_in_file(group, check.path)
    return (dataset is not None
            and stored_offset(dataset) == check.offset
            and dataset.get_type().equal(check.expected_type)
            and dataset.get_space().get_simple_extent_dims() == check.shape)


def stored_offset(dataset: h5py.h5d.DatasetID) -> int | None:
    """``H5Dget_offset``: where the dataset's bytes lie, ``None`` when not contiguous in the
    file, or at address 0, which h5py takes for HDF5's error value (the superblock is there:
    no dataset's bytes are)."""
    try:
        return dataset.get_offset()
    except RuntimeError:
        return None


class ReadAs(NamedTuple):
    """How readers read every entry of one indexed path as bytes: ``steps + extra_rows`` rows
    of ``row_shape``, of a type HDF5 calls equal to ``expected_type``."""

    expected_type: h5py.h5t.TypeID
    row_shape: tuple[int, ...]
    extra_rows: int


def first_indexed(file: h5py.File, path: str, offsets: np.ndarray
                  ) -> tuple[int, h5py.h5d.DatasetID | None] | None:
    """The lowest episode whose index entry for ``path`` is not ``-1`` (``offsets``: the
    path's entries), with its dataset there (``None``: not a dataset in the file); ``None``
    when no episode has an entry. How that entry is stored is how readers read every entry
    of a path the spec does not name (``docs/format.md``)."""
    having = np.flatnonzero(offsets >= 0)
    if not having.size:
        return None
    first = int(having[0])
    group = episode_group(file, first)
    return first, None if group is None else dataset_in_file(group, path.encode())


def read_as_stored(file: h5py.File, offsets: Mapping[str, np.ndarray],
                   named: Mapping[str, ReadAs | None]) -> tuple[dict[str, ReadAs | None],
                                                               list[str]]:
    """How readers read each indexed path, and lines naming the paths that cannot be told.

    A path in ``named`` (the spec's leaves) is read as it says (``None``: never as bytes, a
    JPEG or text leaf). Any other path is read as its first index entry is stored
    (:func:`first_indexed`): that dataset's type and row shape, one row more than the steps
    (every other leaf of the layout holds a row per observation), whatever episode a read
    starts at. For a whole file to be read that way, every entry of the path must be stored
    as that one is: that is what this returns for it.
    """
    layouts: dict[str, ReadAs | None] = {}
    wrong: list[str] = []
    for path, found in offsets.items():
        if path in named:
            layouts[path] = named[path]
            continue
        first = first_indexed(file, path, found)
        if first is None:
            continue
        episode_id, dataset = first
        if dataset is None:
            wrong.append(f"episode_{episode_id}/{path}: not a dataset in the file")
            continue
        if h5py.check_string_dtype(dataset.dtype) is not None:  # text: only its own type
            expected = dataset.get_type()
        else:
            try:
                expected = h5py.h5t.py_create(dataset.dtype)
            except (TypeError, ValueError):  # no numpy type for it: never read as bytes
                wrong.append(f"episode_{episode_id}/{path}: of a type numpy cannot hold")
                continue
        layouts[path] = ReadAs(expected, dataset.shape[1:], 1)
    return layouts, wrong


def layout_mismatches(file: h5py.File, steps: np.ndarray, offsets: Mapping[str, np.ndarray],
                      layouts: Mapping[str, ReadAs | None], episode_ids: Sequence[int]
                      ) -> list[str]:
    """Entries of ``episode_ids`` a reader could not read as bytes the way ``layouts`` says
    (:func:`read_as_stored`), and episodes whose ``total_steps`` is not the index's, as
    ``"episode_<e>/<path>: ..."`` lines; empty when every entry agrees (:func:`agrees`: the
    indexed offset, the type and the shape).

    This is what a whole file must pass before its index is trusted whole: a reader that
    trusts it compares nothing, and reads every entry of a path the way ``layouts`` says.
    """
    found: list[str] = []
    into = np.empty(1, dtype=np.int64)
    episodes = np.asarray(episode_ids, dtype=np.int64)
    leaves = []
    for path, layout in layouts.items():
        if layout is not None:
            having = episodes[offsets[path][episodes] >= 0]
            leaves.append(LeafChecks(path.encode(), layout.expected_type, layout.row_shape,
                                     having, offsets[path][having].astype(np.int64),
                                     steps[having].astype(np.int64) + layout.extra_rows))
    # The groups whose lookups the bytes settled say their total_steps too: only the others
    # are opened to read it.
    by_leaf, counts = _leaves_and_counts(file, leaves, None, counted=True)
    missing = set()
    for episode_id in episode_ids:
        count = counts.get(episode_id)
        if count is None:
            group = episode_group(file, episode_id)
            if group is None:
                found.append(f"episode_{episode_id}: missing from the file")
                missing.add(episode_id)
                continue
            count = read_count(group, into)
        if count is None or count != steps[episode_id]:
            found.append(f"episode_{episode_id}: total_steps differs from the index")
    disagreeing = [leaf.entry(index) for leaf, agreed in zip(leaves, by_leaf, strict=True)
                   for index in np.flatnonzero(~agreed).tolist()]
    for check in sorted(disagreeing, key=lambda check: check.episode_id):  # stable: by path
        if check.episode_id not in missing:
            held = _stored(file.id, b"episode_%d/%s" % (check.episode_id, check.path))
            found.append(f"episode_{check.episode_id}/{check.path.decode()}: index says "
                         f"offset {check.offset} holding {check.shape} of "
                         f"{_type_name(check.expected_type)}; {held}")
    return found


def read_count(group: h5py.h5g.GroupID, into: np.ndarray) -> int | None:
    """Read the group's scalar integer ``total_steps`` attribute into ``into``; ``None`` when
    it is missing or not one integer."""
    try:
        attribute = h5py.h5a.open(group, b"total_steps")
    except KeyError:
        return None
    if attribute.shape not in ((), (1,)) or attribute.dtype.kind not in "iu":
        return None
    attribute.read(into)
    return int(into[0])


def _type_name(type_id: h5py.h5t.TypeID) -> str:
    try:
        return str(type_id.dtype)
    except (TypeError, ValueError):
        return "its type"


def _stored(loc: h5py.h5g.GroupID, path: bytes) -> str:
    """What the file holds at ``path`` under ``loc``, for an error message."""
    dataset = dataset_in_file(loc, path)
    if dataset is None:
        return "the file has no dataset there"
    offset = stored_offset(dataset)
    where = "not contiguous" if offset is None else f"at offset {offset}"
    return f"the file holds {dataset.shape} of {_type_name(dataset.get_type())}, {where}"
