"""Resolving the same paths in every episode at once: group templates.

The groups at one path under every episode (``episode_<e>``, ``episode_<e>/observations``...)
are the same bytes but for the addresses they hold and their attributes' values, in one of a
few layouts (how the writer's chunks fell). So the first group of each layout is parsed
(:mod:`.symbol_tables`) and HDF5's own lookups of its path and of each of its links must find
what the parse finds; it becomes a *template*, and every other group is compared with it as
numpy arrays: its object header chunks, local heap, B-tree node and symbol-table nodes must
repeat the template's bytes except for the addresses linking them (each inside the end of
allocation) and the bodies of its attribute and time messages. Equal bytes decode as equal
structures, so HDF5's search for a name visits the same positions in every such group and
ends at the same entry: the one whose address the template says. Groups of a further layout,
or of a B-tree of more than one node, are left to HDF5 (``docs/format.md``, "Agreement by
header template").
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final, NamedTuple

import numpy as np

from marl_minari.format.header_template import ReadRanges, ReadRows, rows_reader
from marl_minari.format.symbol_tables import (
    ENTRY_BYTES,
    HEAP_PREFIX,
    NODE_HEADER,
    SNOD_HEADER,
    SOFT_LINK,
    Found,
    GroupHeader,
    Search,
    Spans,
    Superblock,
    SymbolTable,
    disjoint,
    open_group,
    read_superblock,
)

_MOST_TEMPLATES: Final = 16
"""Layouts tried per group path (the writer's make 5-6); a group of any further layout
leaves the whole lookup to HDF5."""
COUNT_ATTRIBUTE: Final = b"total_steps"
"""The episode groups' attribute that :func:`resolve` can read from their bytes."""
_INT64: Final = bytes.fromhex("100800000800000000004000")
"""A version-1 datatype message of a signed 64-bit little-endian integer (what h5py writes
for a Python ``int``): HDF5 reads its 8 bytes into an ``int64`` as they are."""


@dataclass(frozen=True)
class GroupTemplate:
    """A group whose B-tree is one leaf node, as the bytes others must repeat."""

    chunks: list[tuple[np.ndarray, np.ndarray]]
    """Each object header chunk's bytes (the first with its prefix) and which are fixed."""
    sources: list[tuple[int, int]]
    """For each chunk after the first: (chunk, offset) of the continuation address to it."""
    symbol_table: tuple[int, int]
    heap_prefix: np.ndarray
    heap_data: np.ndarray
    node: np.ndarray
    """The node's bytes up to its last key (the rest HDF5 reads but never decodes)."""
    snods: list[tuple[np.ndarray, np.ndarray, list[int]]]
    """Each symbol-table node's entries' bytes, which are fixed, where its addresses lie."""
    names: list[bytes]
    """The names HDF5's search finds, each at ``slots[i]`` (node, position) ..."""
    slots: list[tuple[int, int]]
    hard: list[bool]
    """... and whether that entry is a hard link."""
    count: tuple[int, int] | None = None
    """Where the group's :data:`COUNT_ATTRIBUTE` value lies, ``(chunk, offset)``: 8 bytes,
    little-endian, signed (:func:`counted_varying`); ``None``: not read from the bytes."""


def make_template(table: SymbolTable, header_chunks: Sequence[tuple[int, bytes]],
                  varying: Sequence[Sequence[tuple[int, int]]], sources: Sequence[tuple[int, int]],
                  symbol_table: tuple[int, int], count: tuple[int, int] | None = None
                  ) -> GroupTemplate | None:
    """The template of a group (its header's chunks, what in them may vary, its symbol table
    and where its count lies); ``None`` when its B-tree is more than one node or a node is not
    allowed."""
    heap = table.heap
    parsed = table.node(table.btree)  # one node, or a search of a name below is unsure
    if parsed is None:
        return None
    node = parsed[0]
    snods = []
    entries: list[bytes] = []
    for child in node.children:
        found = table.snod(child)
        if found is None:
            return None
        snod, names = found
        data = np.frombuffer(snod.data, dtype=np.uint8,
                             count=SNOD_HEADER + ENTRY_BYTES * len(snod.entries))
        fixed = np.ones(len(data), dtype=bool)
        header_at = []
        for position, cache in enumerate(snod.entries["cache"].tolist()):
            at = SNOD_HEADER + ENTRY_BYTES * position
            fixed[at + 8:at + 16] = False
            if cache == 1:  # a group's cached B-tree and heap: never read
                fixed[at + 24:at + 40] = False
            header_at.append(at + 8)
        snods.append((data, fixed, header_at))
        entries += names
    chunks = []
    for (_, data_bytes), ranges in zip(header_chunks, varying, strict=True):
        fixed = np.ones(len(data_bytes), dtype=bool)
        for start, stop in ranges:
            fixed[start:stop] = False
        chunks.append((np.frombuffer(data_bytes, dtype=np.uint8), fixed))
    at_node = {address: index for index, address in enumerate(node.children)}
    names, slots, hard = [], [], []
    for name in entries:
        found_at = table.find(name)
        if found_at is Search.UNSURE:  # e.g. a node whose level says its children are nodes
            return None
        if found_at is Search.ABSENT:  # names out of order: HDF5's search misses it too
            continue
        snod, position = found_at
        names.append(name)
        slots.append((at_node[snod.address], position))
        hard.append(int(snod.entries["cache"][position]) != SOFT_LINK)
    return GroupTemplate(
        chunks, list(sources), symbol_table, np.frombuffer(heap.prefix, dtype=np.uint8),
        np.frombuffer(heap.data, dtype=np.uint8),
        np.frombuffer(node.data, dtype=np.uint8, count=NODE_HEADER + 16 * len(node.children) + 8),
        snods, names, slots, hard, count)


def counted_varying(header: GroupHeader, name: bytes
                    ) -> tuple[list[list[tuple[int, int]]], tuple[int, int]] | None:
    """What may vary between groups whose attribute ``name`` is read from their bytes, and
    where its value lies in this group's header: ``(varying, (chunk, offset))``.

    Then every attribute message must repeat this group's bytes but for its data: its
    version, sizes, name, datatype and dataspace are fixed, so HDF5 finds the same attributes
    in the same messages, decodes them alike, and reads ``name``'s value from the same 8 bytes.
    ``None`` unless every attribute message is version 1, exactly one is named ``name`` (its
    NUL-terminated bytes: HDF5 refuses a name whose NUL is elsewhere), and it holds a signed
    64-bit little-endian integer (:data:`_INT64`) whose data lies inside its message. Its
    dataspace is left to HDF5's reading of the template's own value, which must equal what
    these bytes say (HDF5 reads one value from the first 8 bytes of its data, or none).
    """
    varying = [list(ranges) for ranges in header.varying]
    slot = None
    for chunk, body, size in header.attributes:
        data = header.chunks[chunk][1]
        if size < 8 or data[body] != 1:
            return None
        name_size, type_size, space_size = struct.unpack_from("<HHH", data, body + 2)
        name_at = body + 8
        type_at = name_at + _padded(name_size)
        value_at = type_at + _padded(type_size) + _padded(space_size)
        varying[chunk].remove((body, body + size))
        varying[chunk].append((value_at, body + size))
        if data[name_at:name_at + name_size] == name + b"\0":
            if (slot is not None or data[type_at:type_at + type_size] != _INT64
                    or value_at + 8 > body + size):
                return None
            slot = (chunk, value_at)
    return None if slot is None else (varying, slot)


def _padded(size: int) -> int:
    """A version-1 attribute message's field length: ``size`` rounded up to 8 bytes."""
    return (size + 7) & ~7


class Matched(NamedTuple):
    """The groups that repeat a template (:func:`match`)."""

    positions: np.ndarray
    """Which of the addresses matched."""
    children: np.ndarray
    """``(positions, names)``: the address each of the template's names leads to."""
    spans: Spans
    """The structures read for them."""
    counts: np.ndarray
    """``(positions,)``: each group's count (zeros when the template reads none)."""


class _Rows:
    """The groups still matching a template: their positions and what they were read at."""

    def __init__(self, read_rows: ReadRows, sb: Superblock, addresses: np.ndarray) -> None:
        self.read_rows, self.sb = read_rows, sb
        self.alive = np.arange(len(addresses))
        self.spans: list[tuple[np.ndarray, int]] = []

    def keep(self, mask: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
        self.alive = self.alive[mask]
        self.spans = [(addresses[mask], length) for addresses, length in self.spans]
        return [array[mask] for array in arrays]

    def fetch(self, addresses: np.ndarray, length: int, expected: np.ndarray,
              fixed: np.ndarray | None, *carried: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
        """Read ``length`` bytes at each address inside the end; keep the rows whose bytes
        equal ``expected`` where ``fixed`` (everywhere when ``None``): (addresses, bytes,
        carried arrays), for the rows kept."""
        fits = (addresses <= np.uint64(self.sb.end - length) if self.sb.end >= length
                else np.zeros(len(addresses), dtype=bool))
        addresses, *carried_list = self.keep(fits, addresses, *carried)
        rows = self.read_rows(addresses.astype(np.int64), length)
        same = ((rows == expected).all(axis=1) if fixed is None
                else (rows[:, fixed] == expected[fixed]).all(axis=1))
        addresses, rows, *carried_list = self.keep(same, addresses, rows, *carried_list)
        self.spans.append((addresses, length))
        return addresses, rows, carried_list


def match(template: GroupTemplate, read_rows: ReadRows, sb: Superblock, addresses: np.ndarray
          ) -> Matched:
    """Which groups whose headers are at ``addresses`` repeat ``template``, and what their
    bytes say."""
    rows = _Rows(read_rows, sb, addresses)
    chunk_rows: list[np.ndarray] = []
    at = addresses.astype(np.uint64)
    for index, (data, fixed) in enumerate(template.chunks):
        if index:
            source, source_at = template.sources[index - 1]
            at = _column(chunk_rows[source], source_at)
        at, got, chunk_rows = rows.fetch(at, len(data), data, fixed, *chunk_rows)
        chunk_rows.append(got)
    chunk, table_at = template.symbol_table
    btree = _column(chunk_rows[chunk], table_at)
    heap = _column(chunk_rows[chunk], table_at + 8)
    counts = (_column(chunk_rows[template.count[0]], template.count[1]).view(np.int64)
              if template.count is not None else np.zeros(len(heap), dtype=np.int64))
    heap, prefix, (btree, counts) = rows.fetch(heap, HEAP_PREFIX, template.heap_prefix,
                                               np.arange(HEAP_PREFIX) < 24, btree, counts)
    data_at = _column(prefix, 24)
    _, _, (btree, counts) = rows.fetch(data_at, len(template.heap_data), template.heap_data,
                                       None, btree, counts)
    node_fixed = np.ones(len(template.node), dtype=bool)
    child_at = [NODE_HEADER + 8 + 16 * i for i in range(len(template.snods))]
    for at_child in child_at:
        node_fixed[at_child:at_child + 8] = False
    btree, node, (counts,) = rows.fetch(
        btree, sb.node_length, np.resize(template.node, sb.node_length),
        np.resize(node_fixed, sb.node_length) & (np.arange(sb.node_length) < len(template.node)),
        counts)
    found: list[np.ndarray] = []
    snod_rows: list[np.ndarray] = []
    for index, (data, fixed, _) in enumerate(template.snods):
        children = _column(node, child_at[index])
        full = np.zeros(sb.snod_length, dtype=np.uint8)
        full[:len(data)] = data
        full_fixed = np.zeros(sb.snod_length, dtype=bool)
        full_fixed[:len(data)] = fixed
        _, got, carried = rows.fetch(children, sb.snod_length, full, full_fixed, node, counts,
                                     *snod_rows)
        node, counts, *snod_rows = carried
        snod_rows.append(got)
    for snod, position in template.slots:
        found.append(_column(snod_rows[snod], template.snods[snod][2][position]))
    addresses_found = (np.stack(found, axis=1) if found
                       else np.empty((len(rows.alive), 0), dtype=np.uint64))
    return Matched(rows.alive, addresses_found, rows.spans, counts)


def _column(rows: np.ndarray, at: int) -> np.ndarray:
    return np.ascontiguousarray(rows[:, at:at + 8]).view("<u8")[:, 0].astype(np.uint64)



@dataclass(frozen=True)
class Resolved:
    """Object-header addresses found from the file's bytes (``-1``: left to HDF5), and every
    structure read to find them (for :func:`disjoint` with what the caller reads next)."""

    addresses: np.ndarray
    spans: Spans
    counts: dict[int, int] = field(default_factory=dict)
    """Episode groups' :data:`COUNT_ATTRIBUTE` as HDF5 reads it, by episode, for those whose
    bytes say it (``resolve``'s ``count``)."""


Confirm = Callable[[bytes], "int | None"]
"""HDF5's own lookup of a path from the root: the hard link's address, ``None`` if none."""
Count = Callable[[bytes], "int | None"]
"""HDF5's own reading of the :data:`COUNT_ATTRIBUTE` of the group at a path from the root as
an ``int64``, ``None`` if it cannot."""


def resolve(read: ReadRanges, file_size: int, episode_ids: Sequence[int],
            paths: Sequence[bytes], confirm: Confirm, read_rows: ReadRows | None = None,
            count: Count | None = None) -> Resolved | None:
    """Where each ``episode_<episode_ids[i]>/<paths[i]>`` leads by a hard link, as HDF5's
    lookup answers (``-1``: the name is not there), or ``None``: nothing is resolved.

    All or nothing: every group on every path must be the root or match a template
    (the module's docstring), no path may pass or end at a soft link, and no two structures
    read may share a byte. Then HDF5, looking these paths up in any order, reads only
    structures read here, and its metadata cache never holds one where another is asked for
    (a group left to it could put its heap where a matched group's node lies: HDF5 would then
    fail on that group's paths after reading the other's, not before). ``confirm`` is HDF5's
    lookup, for the first group of each template. ``read_rows`` reads the same bytes as
    ``read``, the groups' structures many at once (by default, a range each). ``count``
    (HDF5's reading, for the first episode group of each template) has the episode groups'
    counts read from their bytes too where the file allows (:func:`counted_varying`).
    """
    sb = read_superblock(read, file_size)
    root = None if sb is None else open_group(read, sb.root, sb)
    if sb is None or root is None:
        return None
    root_header, root_table = root
    episodes = np.unique(np.asarray(episode_ids, dtype=np.int64))
    headers: dict[bytes, np.ndarray] = {b"": np.array(
        [_link(entry) for entry in root_table.find_all(
            [b"episode_%d" % e for e in episodes.tolist()])], dtype=np.int64)}
    kinds: set[bytes] = set()
    for path in set(paths):
        parts = path.split(b"/")
        kinds.update(b"/".join(parts[:depth]) for depth in range(len(parts)))
    spans: Spans = [(np.zeros(1, dtype=np.uint64), sb.length), *_chunk_spans(root_header),
                    *root_table.spans()]
    children: dict[bytes, dict[bytes, np.ndarray]] = {}
    counts: dict[int, int] = {}
    for kind in sorted(kinds, key=lambda k: (k.count(b"/") + bool(k), k)):
        if kind not in headers:
            parent, _, name = kind.rpartition(b"/")
            headers[kind] = children[parent].get(name, np.full(len(episodes), _ABSENT))
        found = _resolve_kind(read, read_rows or rows_reader(read), sb, kind, episodes,
                              headers[kind], confirm, None if kind else count)
        if found is None:
            return None
        children[kind], kind_spans, kind_counts = found
        spans += kind_spans
        counts.update(kind_counts)
    addresses = np.full(len(paths), _ABSENT, dtype=np.int64)
    wanted = np.asarray(episode_ids, dtype=np.int64)
    positions: dict[bytes, list[int]] = {}
    for position, path in enumerate(paths):
        positions.setdefault(path, []).append(position)
    for path, at in positions.items():
        parent, _, name = path.rpartition(b"/")
        column = children[parent].get(name)
        if column is not None:
            addresses[at] = column[np.searchsorted(episodes, wanted[at])]
    if (addresses == _UNSURE).any() or not disjoint(spans):
        return None
    return Resolved(addresses, spans, counts)


_ABSENT: Final = -1
"""No entry of that name: HDF5's search ends without one, in structures read here."""
_UNSURE: Final = -2
"""A soft link, a group no template matches, an address past any file: left to HDF5."""


def _link(entry: Found) -> int:
    """What a search's end says: its entry's object header, :data:`_ABSENT` or
    :data:`_UNSURE`."""
    if isinstance(entry, Search):
        return _ABSENT if entry is Search.ABSENT else _UNSURE
    snod, position = entry
    if int(snod.entries["cache"][position]) == SOFT_LINK:
        return _UNSURE
    return int(_addresses(snod.entries["header"][position:position + 1])[0])


def _resolve_kind(read: ReadRanges, read_rows: ReadRows, sb: Superblock, kind: bytes,
                  episodes: np.ndarray, headers: np.ndarray, confirm: Confirm,
                  count: Count | None = None
                  ) -> tuple[dict[bytes, np.ndarray], Spans, dict[int, int]] | None:
    """The links of the groups at ``kind`` under each episode (``headers``: their object
    headers, or :data:`_ABSENT`): ``name -> (episodes,)`` addresses, :data:`_ABSENT` or
    :data:`_UNSURE`, the structures read, and the groups' counts by episode where their
    templates read them (``count``); ``None`` when a group is unsure or matches none of
    :data:`_MOST_TEMPLATES` templates."""
    if (headers == _UNSURE).any():
        return None
    found: dict[bytes, np.ndarray] = {}
    spans: Spans = []
    counts: dict[int, int] = {}
    remaining = np.flatnonzero(headers >= 0)
    for _ in range(_MOST_TEMPLATES):
        if not remaining.size:
            return found, spans, counts
        first = int(remaining[0])
        template = _confirmed_template(read, sb, kind, int(episodes[first]),
                                       int(headers[first]), confirm, count)
        if template is None:
            return None
        matched = match(template, read_rows, sb, headers[remaining].astype(np.uint64))
        rows = remaining[matched.positions]
        for column, (name, hard) in enumerate(zip(template.names, template.hard,
                                                  strict=True)):
            into = found.setdefault(name, np.full(len(episodes), _ABSENT, dtype=np.int64))
            into[rows] = _addresses(matched.children[:, column]) if hard else _UNSURE
        if template.count is not None:
            counts.update(zip(episodes[rows].tolist(), matched.counts.tolist(), strict=True))
        spans += matched.spans
        remaining = np.setdiff1d(remaining, rows, assume_unique=True)
    return (found, spans, counts) if not remaining.size else None


def _addresses(values: np.ndarray) -> np.ndarray:
    """As signed addresses, one past any file (HDF5's undefined address too) :data:`_UNSURE`."""
    signed = values.astype(np.int64)
    signed[values >= np.uint64(1 << 62)] = _UNSURE
    return signed


def _confirmed_template(read: ReadRanges, sb: Superblock, kind: bytes, episode_id: int,
                        address: int, confirm: Confirm, count: Count | None = None
                        ) -> GroupTemplate | None:
    """The template of the group at ``kind`` in ``episode_id``, once HDF5's own lookups find
    that group and each of its hard links where the template does; with ``count``, reading
    the group's count from the bytes where HDF5 reads the same value there."""
    opened = open_group(read, address, sb)
    if opened is None:
        return None
    header, table = opened
    base = b"episode_%d" % episode_id + (b"/" + kind if kind else b"")
    varying: list[list[tuple[int, int]]] = header.varying
    slot = None
    counted = None if count is None else counted_varying(header, COUNT_ATTRIBUTE)
    if count is not None and counted is not None:
        chunk, at = counted[1]
        if count(base) == int.from_bytes(header.chunks[chunk][1][at:at + 8], "little",
                                          signed=True):
            varying, slot = counted
    template = make_template(table, header.chunks, varying, header.sources,
                             header.symbol_table, slot)
    if template is None:
        return None
    if confirm(base) != address:
        return None
    for name, (node, position), hard in zip(template.names, template.slots, template.hard,
                                            strict=True):
        _, _, header_at = template.snods[node]
        data = template.snods[node][0]
        child = int(data[header_at[position]:header_at[position] + 8].view("<u8")[0])
        if confirm(base + b"/" + name) != (child if hard else None):
            return None
    return template


def _chunk_spans(header: GroupHeader) -> Spans:
    return [(np.array([at], dtype=np.uint64), len(data)) for at, data in header.chunks]
