"""Where HDF5's lookup of a name in a group leads, read from the file's own bytes.

A full read of a file compares every offset-index entry it uses with HDF5
(:mod:`.entry_checks`), and finding an entry's object header by HDF5's own lookup
(``H5Lget_info``) costs 8-18 us: with one entry per leaf per episode, most of a first pass.
h5py writes every group in HDF5's original format, a *symbol table*: a B-tree whose leaves are
symbol-table nodes of entries sorted by name, the names kept in the group's local heap. Here
those structures are parsed and HDF5's search for a name is replayed over them
(:meth:`SymbolTable.find_all`: the binary search of ``H5B_find`` at each node, then the
node's binary search by ``strcmp``), so the entry found is the one HDF5 finds in the same
bytes, sorted or not. A structure is parsed only when it is one HDF5 decodes the same way
(``docs/format.md``, "Paths resolved from symbol tables"):

* the superblock is version 0 or 1 with 8-byte addresses and lengths, base address 0, no
  driver-information block and nonzero K values;
* a group's object header is version 1, its chunks (followed through continuation messages,
  at most 8 of at most 4,096 bytes) hold only nil, continuation, attribute, modification time
  and exactly one symbol table message, none flagged, each a multiple of 8 bytes, as many as
  the header counts; HDF5 decodes neither attributes nor times to look a name up;
* its local heap is version 0 and its free list, decoded as HDF5 decodes it, ends inside the
  heap's data; every key and name a search compares is a NUL-terminated string inside them;
* its B-tree nodes (a search follows at most 8) have 1 to 2K children, its symbol-table nodes
  are version 1 with 1 to 2K entries of known cache types;
* every structure lies inside the end of allocation.

Which groups may be resolved this way, and when HDF5's cache makes the answer its own, is
:mod:`.group_templates`' policy; anything else is left to HDF5.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Final, TypeVar

import numpy as np

from marl_minari.format.header_template import ReadRanges, end_of_allocation

_NIL, _ATTRIBUTE, _CONTINUATION, _SYMBOL_TABLE, _MODIFIED = 0x0, 0xC, 0x10, 0x11, 0x12
_OPAQUE_BODIES: Final = frozenset({_ATTRIBUTE, _MODIFIED})
"""Messages HDF5 does not decode to look a name up: their bodies may differ between groups."""
_PREFIX: Final = 16
_LONGEST_CHUNK: Final = 4096
_MOST_CHUNKS: Final = 8
_DEEPEST_TREE: Final = 8
_LARGEST_HEAP: Final = 64 << 20
HEAP_PREFIX: Final = 32
_FREE_END: Final = 1
"""``H5HL_FREE_NULL``: the offset that ends a local heap's free list."""
NODE_HEADER: Final = 24
SNOD_HEADER: Final = 8
ENTRY_BYTES: Final = 40
SOFT_LINK: Final = 2
_ENTRY_TYPE: Final = np.dtype([("name", "<u8"), ("header", "<u8"), ("cache", "<u4"),
                               ("reserved", "<u4"), ("scratch", "<u8", (2,))])

Spans = list[tuple[np.ndarray, int]]
"""Structures read: ``(addresses, length)`` pairs, for :func:`disjoint`."""


@dataclass(frozen=True)
class Superblock:
    """What a version-0/1 superblock says that lookups depend on."""

    end: int
    """The end-of-allocation address: every structure must end before it."""
    leaf_k: int
    """Half a symbol-table node's capacity."""
    internal_k: int
    """Half a group B-tree node's capacity."""
    root: int
    """The root group's object header."""
    length: int

    @property
    def node_length(self) -> int:
        return NODE_HEADER + 2 * self.internal_k * 8 + (2 * self.internal_k + 1) * 8

    @property
    def snod_length(self) -> int:
        return SNOD_HEADER + 2 * self.leaf_k * ENTRY_BYTES


def read_superblock(read: ReadRanges, file_size: int) -> Superblock | None:
    """The superblock at offset 0 when it is version 0 or 1, every address in it a file offset
    (:func:`~.header_template.end_of_allocation`), nonzero group K values, and the root
    group's entry caching nothing or a symbol table; ``None`` otherwise."""
    end = end_of_allocation(read, file_size)  # at least the 96 bytes read below
    if end is None:
        return None
    (head,) = read([(0, 96)])
    block = bytes(head)
    # Versions 2 and 3 keep their base address, which must be 0, where these K values lie:
    # neither is read as one of version 0 or 1.
    leaf_k, internal_k = struct.unpack_from("<HH", block, 16)
    root_at = (24 if block[8] == 0 else 28) + 32  # the root group's entry, after 4 addresses
    _, root, cache = struct.unpack_from("<QQI", block, root_at)
    if not leaf_k or not internal_k or cache not in (0, 1):
        return None
    return Superblock(end, leaf_k, internal_k, int(root), root_at + ENTRY_BYTES)


@dataclass
class GroupHeader:
    """A group's object header: its chunks (the first with its prefix), where in them the
    symbol table message lies, and what may differ between groups."""

    chunks: list[tuple[int, bytes]] = field(default_factory=list)
    varying: list[list[tuple[int, int]]] = field(default_factory=list)
    sources: list[tuple[int, int]] = field(default_factory=list)
    """For each chunk after the first: (chunk, offset) of the continuation address to it."""
    symbol_table: tuple[int, int] = (-1, -1)
    attributes: list[tuple[int, int, int]] = field(default_factory=list)
    """Each attribute message: (chunk, offset of its body, the body's length)."""


def parse_header(read: ReadRanges, address: int, sb: Superblock) -> GroupHeader | None:
    """A group's version-1 object header at ``address``, followed through its continuation
    chunks; ``None`` unless it is one the module's docstring allows."""
    if not _inside(address, _PREFIX, sb):
        return None
    (prefix,) = read([(address, _PREFIX)])
    prefix = bytes(prefix)
    if prefix[0] != 1:
        return None
    messages, size = struct.unpack_from("<H4xI", prefix, 2)
    header = GroupHeader()
    pending = [(address, _PREFIX + size, -1, -1)]
    counted = 0
    while pending:
        chunk_at, length, source, source_at = pending.pop(0)
        at = 0 if header.chunks else _PREFIX
        if (len(header.chunks) == _MOST_CHUNKS or length - at > _LONGEST_CHUNK
                or not _inside(chunk_at, length, sb)):
            return None
        (data,) = read([(chunk_at, length)])
        data = bytes(data)
        index = len(header.chunks)
        header.chunks.append((chunk_at, data))
        header.varying.append([])
        if index:
            header.sources.append((source, source_at))
        if length - at < 8:  # a chunk without a message
            return None
        while at < length:
            if at + 8 > length:
                return None
            kind, body_size, flags = struct.unpack_from("<HHB", data, at)
            body = at + 8
            if flags or body_size % 8 or body + body_size > length:
                return None
            if kind == _SYMBOL_TABLE:
                if header.symbol_table != (-1, -1) or body_size < 16:
                    return None
                header.symbol_table = (index, body)
                header.varying[index].append((body, body + 16))
            elif kind == _CONTINUATION:
                if body_size < 16:
                    return None
                next_at, next_length = struct.unpack_from("<QQ", data, body)
                pending.append((int(next_at), int(next_length), index, body))
                header.varying[index].append((body, body + 8))
            elif kind in _OPAQUE_BODIES:
                header.varying[index].append((body, body + body_size))
                if kind == _ATTRIBUTE:
                    header.attributes.append((index, body, body_size))
            elif kind != _NIL:
                return None
            counted += 1
            at = body + body_size
    if counted != messages or header.symbol_table == (-1, -1):
        return None
    return header


@dataclass
class LocalHeap:
    address: int
    prefix: bytes
    data_address: int
    data: bytes

    def strings(self, offsets: Sequence[int]) -> list[bytes] | None:
        """The NUL-terminated strings at ``offsets``; ``None`` when one does not end inside
        the heap (HDF5 would compare past it)."""
        found = []
        for offset in offsets:
            end = self.data.find(b"\0", offset)
            if end < 0:
                return None
            found.append(self.data[offset:end])
        return found


def parse_heap(read: ReadRanges, address: int, sb: Superblock) -> LocalHeap | None:
    """The local heap at ``address``: version 0, its data inside the end of allocation, its
    free list (as HDF5 decodes it when it loads the heap) ending inside the data."""
    if not _inside(address, HEAP_PREFIX, sb):
        return None
    (prefix,) = read([(address, HEAP_PREFIX)])
    prefix = bytes(prefix)
    if prefix[:5] != b"HEAP\0":
        return None
    size, free, data_at = (int(value) for value in struct.unpack_from("<3Q", prefix, 8))
    if not 0 < size <= _LARGEST_HEAP or not _inside(data_at, size, sb):
        return None
    (data,) = read([(data_at, size)])
    data = bytes(data)
    for _ in range(size // 16 + 1):
        if free == _FREE_END:
            return LocalHeap(address, prefix, data_at, data)
        if free + 16 > size:
            return None
        next_free, free_size = struct.unpack_from("<QQ", data, free)
        if next_free == 0 or free + free_size > size:
            return None
        free = int(next_free)
    return None  # a cycle


@dataclass
class Node:
    address: int
    data: bytes
    level: int
    keys: list[int]
    children: list[int]


def parse_node(read: ReadRanges, address: int, sb: Superblock) -> Node | None:
    """The group B-tree node at ``address`` (the whole node HDF5 reads, inside the end)."""
    return parse_nodes(read, [address], sb)[0]


def parse_nodes(read: ReadRanges, addresses: Sequence[int], sb: Superblock
                ) -> list[Node | None]:
    """:func:`parse_node` of each address, read together."""
    return _parse_each(read, addresses, sb.node_length, sb, _node)


def _node(address: int, data: bytes, sb: Superblock) -> Node | None:
    if data[:5] != b"TREE\0":
        return None
    level, used = data[5], struct.unpack_from("<H", data, 6)[0]
    if not 0 < used <= 2 * sb.internal_k:
        return None
    values = struct.unpack_from(f"<{2 * used + 1}Q", data, NODE_HEADER)
    return Node(address, data, level, [int(v) for v in values[0::2]],
                [int(v) for v in values[1::2]])


@dataclass
class Snod:
    address: int
    data: bytes
    entries: np.ndarray


_Parsed = TypeVar("_Parsed", Node, Snod)


def _parse_each(read: ReadRanges, addresses: Sequence[int], length: int, sb: Superblock,
                parse: Callable[[int, bytes, Superblock], _Parsed | None]
                ) -> list[_Parsed | None]:
    """``parse`` of the ``length`` bytes at each address, read together; ``None`` where they
    would pass the end."""
    inside = [address for address in addresses if _inside(address, length, sb)]
    found = dict(zip(inside, (bytes(data) for data in read([(a, length) for a in inside])),
                     strict=True)) if inside else {}
    return [None if address not in found else parse(address, found[address], sb)
            for address in addresses]


def parse_snod(read: ReadRanges, address: int, sb: Superblock) -> Snod | None:
    """The symbol-table node at ``address``: version 1, 1 to 2K entries of known cache types."""
    return parse_snods(read, [address], sb)[0]


def parse_snods(read: ReadRanges, addresses: Sequence[int], sb: Superblock
                ) -> list[Snod | None]:
    """:func:`parse_snod` of each address, read together."""
    return _parse_each(read, addresses, sb.snod_length, sb, _snod)


def _snod(address: int, data: bytes, sb: Superblock) -> Snod | None:
    count = struct.unpack_from("<H", data, 6)[0]
    if data[:6] != b"SNOD\x01\x00" or not 0 < count <= 2 * sb.leaf_k:
        return None
    entries = np.frombuffer(data, dtype=_ENTRY_TYPE, count=count, offset=SNOD_HEADER)
    if (entries["cache"] > SOFT_LINK).any():
        return None
    return Snod(address, data, entries)


class Search(Enum):
    """How a search ended without an entry."""

    ABSENT = "absent"
    """No entry of the name: HDF5's search ends there too."""
    UNSURE = "unsure"
    """At a structure not parsed here (or deeper than followed): left to HDF5."""


Found = tuple["Snod", int] | Search
"""Where a search ends: an entry's symbol-table node and position in it, or why none."""


class SymbolTable:
    """One group's symbol table, its nodes parsed as a search first visits them."""

    def __init__(self, read: ReadRanges, sb: Superblock, heap: LocalHeap, btree: int) -> None:
        self.read, self.sb, self.heap, self.btree = read, sb, heap, btree
        self.nodes: dict[int, tuple[Node, list[bytes]] | None] = {}
        self.snods: dict[int, tuple[Snod, list[bytes]] | None] = {}

    def find(self, name: bytes) -> Found:
        """Where HDF5's search for ``name`` ends (``H5B_find``, then the node's binary
        search): the entry's node and position, :attr:`Search.ABSENT` when it ends without
        one, :attr:`Search.UNSURE` when it meets a structure the module's docstring does not
        allow (HDF5 would read it, and may fail or find something)."""
        return self.find_all([name])[0]

    def find_all(self, names: Sequence[bytes]) -> list[Found]:
        """:meth:`find` of each name, the searches a level at a time: the nodes of each level
        read together."""
        found: list[Found] = [Search.UNSURE] * len(names)  # beyond the depth followed too
        searching = dict.fromkeys(range(len(names)), self.btree)
        for _ in range(_DEEPEST_TREE):  # a node may lead back up: HDF5 would never end
            self._parse_nodes(set(searching.values()))
            deeper: dict[int, int] = {}
            leaves: dict[int, int] = {}
            for number, address in searching.items():
                parsed = self.nodes[address]
                if parsed is None:
                    continue
                node, keys = parsed
                position = _child(keys, names[number])
                if position is None:
                    found[number] = Search.ABSENT
                else:  # a node's own level says what its children are
                    into = deeper if node.level else leaves
                    into[number] = node.children[position]
            self._parse_snods(set(leaves.values()))
            for number, address in leaves.items():
                found[number] = self._entry(address, names[number])
            if not deeper:
                break
            searching = deeper
        return found

    def _entry(self, address: int, name: bytes) -> Found:
        parsed = self.snods[address]
        if parsed is None:
            return Search.UNSURE
        snod, names = parsed
        low, high, position, compared = 0, len(names), 0, 1
        while low < high and compared:
            position = (low + high) // 2
            compared = (name > names[position]) - (name < names[position])
            if compared < 0:
                high = position
            else:
                low = position + 1
        return Search.ABSENT if compared else (snod, position)

    def node(self, address: int) -> tuple[Node, list[bytes]] | None:
        """The node at ``address`` and its keys' strings; ``None`` if it is not allowed."""
        self._parse_nodes({address})
        return self.nodes[address]

    def snod(self, address: int) -> tuple[Snod, list[bytes]] | None:
        """The symbol-table node at ``address`` and its names; ``None`` if not allowed."""
        self._parse_snods({address})
        return self.snods[address]

    def _parse_nodes(self, addresses: set[int]) -> None:
        new = sorted(addresses - self.nodes.keys())
        for address, node in zip(new, parse_nodes(self.read, new, self.sb), strict=True):
            keys = None if node is None else self.heap.strings(node.keys)
            self.nodes[address] = None if node is None or keys is None else (node, keys)

    def _parse_snods(self, addresses: set[int]) -> None:
        new = sorted(addresses - self.snods.keys())
        for address, snod in zip(new, parse_snods(self.read, new, self.sb), strict=True):
            names = (None if snod is None
                     else self.heap.strings(snod.entries["name"].tolist()))
            self.snods[address] = None if snod is None or names is None else (snod, names)

    def spans(self) -> Spans:
        """The heap, and every node parsed so far."""
        found: Spans = [(np.array([self.heap.address], dtype=np.uint64), HEAP_PREFIX),
                        (np.array([self.heap.data_address], dtype=np.uint64),
                         len(self.heap.data))]
        found += [(np.array(list(self.nodes), dtype=np.uint64), self.sb.node_length),
                  (np.array(list(self.snods), dtype=np.uint64), self.sb.snod_length)]
        return found


def _child(keys: list[bytes], name: bytes) -> int | None:
    """The child ``H5B_find`` follows for ``name`` among a node's keys (the name greater than
    the child's left key and at most its right one); ``None``: the search ends there."""
    low, high, position, compared = 0, len(keys) - 1, 0, 1
    while low < high and compared:
        position = (low + high) // 2
        compared = -1 if name <= keys[position] else 1 if name > keys[position + 1] else 0
        if compared < 0:
            high = position
        else:
            low = position + 1
    return None if compared else position


def open_group(read: ReadRanges, address: int, sb: Superblock
               ) -> tuple[GroupHeader, SymbolTable] | None:
    """The group whose object header is at ``address``: that header and its symbol table
    (its heap read, no node yet); ``None`` unless both are as the module's docstring says."""
    header = parse_header(read, address, sb)
    if header is None:
        return None
    chunk, at = header.symbol_table
    btree, heap_at = struct.unpack_from("<QQ", header.chunks[chunk][1], at)
    heap = parse_heap(read, int(heap_at), sb)
    if heap is None:
        return None
    return header, SymbolTable(read, sb, heap, int(btree))


def _inside(address: int, length: int, sb: Superblock) -> bool:
    return address >= 0 and length >= 0 and address + length <= sb.end


def disjoint(spans: Spans) -> bool:
    """Whether no two of ``spans`` share a byte."""
    if not spans:
        return True
    starts = np.concatenate([addresses.astype(np.uint64) for addresses, _ in spans])
    ends = np.concatenate([addresses.astype(np.uint64) + np.uint64(length)
                           for addresses, length in spans])
    order = np.argsort(starts, kind="stable")
    return bool((ends[order][:-1] <= starts[order][1:]).all())
