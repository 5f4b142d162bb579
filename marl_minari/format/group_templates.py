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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

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


def make_template(table: SymbolTable, header_chunks: Sequence[tuple[int, bytes]],
                  varying: Sequence[Sequence[tuple[int, int]]], sources: Sequence[tuple[int, int]],
                  symbol_table: tuple[int, int]) -> GroupTemplate | None:
    """The template of a group (its header's chunks, what in them may vary, and its symbol
    table); ``None`` when its B-tree is more than one node or a node is not allowed."""
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
        snods, names, slots, hard)


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
          ) -> tuple[np.ndarray, np.ndarray, Spans]:
    """Which groups whose headers are at ``addresses`` repeat ``template``: ``(positions,
    (positions, names) child addresses, the structures read for them)``."""
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
    heap, prefix, (btree,) = rows.fetch(heap, HEAP_PREFIX, template.heap_prefix,
                                        np.arange(HEAP_PREFIX) < 24, btree)
    data_at = _column(prefix, 24)
    _, _, (btree,) = rows.fetch(data_at, len(template.heap_data), template.heap_data, None,
                                btree)
    node_fixed = np.ones(len(template.node), dtype=bool)
    child_at = [NODE_HEADER + 8 + 16 * i for i in range(len(template.snods))]
    for at_child in child_at:
        node_fixed[at_child:at_child + 8] = False
    btree, node, _ = rows.fetch(btree, sb.node_length, np.resize(template.node, sb.node_length),
                                np.resize(node_fixed, sb.node_length)
                                & (np.arange(sb.node_length) < len(template.node)))
    found: list[np.ndarray] = []
    snod_rows: list[np.ndarray] = []
    for index, (data, fixed, _) in enumerate(template.snods):
        children = _column(node, child_at[index])
        full = np.zeros(sb.snod_length, dtype=np.uint8)
        full[:len(data)] = data
        full_fixed = np.zeros(sb.snod_length, dtype=bool)
        full_fixed[:len(data)] = fixed
        _, got, carried = rows.fetch(children, sb.snod_length, full, full_fixed, node,
                                     *snod_rows)
        node, *snod_rows = carried
        snod_rows.append(got)
    for snod, position in template.slots:
        found.append(_column(snod_rows[snod], template.snods[snod][2][position]))
    addresses_found = (np.stack(found, axis=1) if found
                       else np.empty((len(rows.alive), 0), dtype=np.uint64))
    return rows.alive, addresses_found, rows.spans


def _column(rows: np.ndarray, at: int) -> np.ndarray:
    return np.ascontiguousarray(rows[:, at:at + 8]).view("<u8")[:, 0].astype(np.uint64)



@dataclass(frozen=True)
class Resolved:
    """Object-header addresses found from the file's bytes (``-1``: left to HDF5), and every
    structure read to find them (for :func:`disjoint` with what the caller reads next)."""

    addresses: np.ndarray
    spans: Spans


Confirm = Callable[[bytes], "int | None"]
"""HDF5's own lookup of a path from the root: the hard link's address, ``None`` if none."""


def resolve(read: ReadRanges, file_size: int, episode_ids: Sequence[int],
            paths: Sequence[bytes], confirm: Confirm, read_rows: ReadRows | None = None
            ) -> Resolved | None:
    """Where each ``episode_<episode_ids[i]>/<paths[i]>`` leads by a hard link, as HDF5's
    lookup answers (``-1``: the name is not there), or ``None``: nothing is resolved.

    All or nothing: every group on every path must be the root or match a template
    (the module's docstring), no path may pass or end at a soft link, and no two structures
    read may share a byte. Then HDF5, looking these paths up in any order, reads only
    structures read here, and its metadata cache never holds one where another is asked for
    (a group left to it could put its heap where a matched group's node lies: HDF5 would then
    fail on that group's paths after reading the other's, not before). ``confirm`` is HDF5's
    lookup, for the first group of each template. ``read_rows`` reads the same bytes as
    ``read``, the groups' structures many at once (by default, a range each).
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
    for kind in sorted(kinds, key=lambda k: (k.count(b"/") + bool(k), k)):
        if kind not in headers:
            parent, _, name = kind.rpartition(b"/")
            headers[kind] = children[parent].get(name, np.full(len(episodes), _ABSENT))
        found = _resolve_kind(read, read_rows or rows_reader(read), sb, kind, episodes,
                              headers[kind], confirm)
        if found is None:
            return None
        children[kind], kind_spans = found
        spans += kind_spans
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
    return Resolved(addresses, spans)


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
                  episodes: np.ndarray, headers: np.ndarray, confirm: Confirm
                  ) -> tuple[dict[bytes, np.ndarray], Spans] | None:
    """The links of the groups at ``kind`` under each episode (``headers``: their object
    headers, or :data:`_ABSENT`): ``name -> (episodes,)`` addresses, :data:`_ABSENT` or
    :data:`_UNSURE`, and the structures read; ``None`` when a group is unsure or matches none
    of :data:`_MOST_TEMPLATES` templates."""
    if (headers == _UNSURE).any():
        return None
    found: dict[bytes, np.ndarray] = {}
    spans: Spans = []
    remaining = np.flatnonzero(headers >= 0)
    for _ in range(_MOST_TEMPLATES):
        if not remaining.size:
            return found, spans
        first = int(remaining[0])
        template = _confirmed_template(read, sb, kind, int(episodes[first]),
                                       int(headers[first]), confirm)
        if template is None:
            return None
        alive, addresses, matched_spans = match(template, read_rows, sb,
                                                headers[remaining].astype(np.uint64))
        rows = remaining[alive]
        for column, (name, hard) in enumerate(zip(template.names, template.hard,
                                                  strict=True)):
            into = found.setdefault(name, np.full(len(episodes), _ABSENT, dtype=np.int64))
            into[rows] = _addresses(addresses[:, column]) if hard else _UNSURE
        spans += matched_spans
        remaining = np.setdiff1d(remaining, rows, assume_unique=True)
    return (found, spans) if not remaining.size else None


def _addresses(values: np.ndarray) -> np.ndarray:
    """As signed addresses, one past any file (HDF5's undefined address too) :data:`_UNSURE`."""
    signed = values.astype(np.int64)
    signed[values >= np.uint64(1 << 62)] = _UNSURE
    return signed


def _confirmed_template(read: ReadRanges, sb: Superblock, kind: bytes, episode_id: int,
                        address: int, confirm: Confirm) -> GroupTemplate | None:
    """The template of the group at ``kind`` in ``episode_id``, once HDF5's own lookups find
    that group and each of its hard links where the template does."""
    opened = open_group(read, address, sb)
    if opened is None:
        return None
    header, table = opened
    template = make_template(table, header.chunks, header.varying, header.sources,
                             header.symbol_table)
    if template is None:
        return None
    base = b"episode_%d" % episode_id + (b"/" + kind if kind else b"")
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
