"""Comparing many offset-index entries with HDF5 at the cost of one: header templates.

Opening a dataset with HDF5 costs ~40 us of the ~70 us a comparison takes
(``benchmarks/bench_entry_checks.py``), and a file holds one dataset per leaf per episode. The
datasets of one leaf differ only in where their bytes lie and how many rows they hold, so their
object headers are the same bytes but for those fields. Here one entry of a leaf is compared
by HDF5 itself (:func:`~marl_minari.format.entry_checks.agrees`); its object header becomes the
template, and every other entry of the leaf agrees only when its header, found through HDF5's
own link lookup, is the template's bytes except in these fields, holding the values the index
says (``docs/format.md``, "marl_minari_index.npz"):

* the layout's address (the indexed offset) and size (rows x the row's bytes);
* the dataspace's first dimension (the indexed rows) and its first maximum dimension, which
  must equal it (a template whose header holds another maximum is not made);
* the modification time's seconds.

Equal bytes decode as equal messages, so HDF5 would open such a dataset as it opened the
template's, with the type and row shape it compared. A template is made only from the headers
HDF5 writes for a plain contiguous dataset: version 1, one chunk (no continuation), no shared
message, messages of the types in :data:`_MESSAGE_TYPES` only, in a file whose superblock puts
every address at its file offset. Anything else, and any entry that does not match, is compared
by HDF5: a template only ever says yes sooner, never no.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

ReadRanges = Callable[[Sequence[tuple[int, int]]], Sequence[bytes | memoryview]]
"""The bytes of each ``(offset, length)`` range of a file, in the order asked."""

ReadRows = Callable[[np.ndarray, int], np.ndarray]
"""``length`` bytes at each of a file's offsets, as ``(offsets, length)`` uint8 rows."""


def rows_reader(read: ReadRanges) -> ReadRows:
    """:data:`ReadRows` by ``read``, one range per row (a supplier may offer a faster one)."""

    def read_rows(addresses: np.ndarray, length: int) -> np.ndarray:
        pieces = read([(at, length) for at in addresses.tolist()])
        return np.frombuffer(b"".join(pieces), dtype=np.uint8).reshape(len(addresses), length)

    return read_rows

UNDEFINED: Final = 0xFFFF_FFFF_FFFF_FFFF
"""HDF5's undefined address (and unlimited dimension)."""

_NIL, _DATASPACE, _DATATYPE, _LAYOUT, _MODIFIED = 0x0, 0x1, 0x3, 0x8, 0x12
_OLD_FILL_VALUE, _FILL_VALUE = 0x4, 0x5
_MESSAGE_TYPES: Final = frozenset({_NIL, _DATASPACE, _DATATYPE, _OLD_FILL_VALUE, _FILL_VALUE,
                                   _LAYOUT, _MODIFIED})
"""Messages whose bytes say all they mean: none refers to another place in the file."""
_SHARED_FLAG: Final = 0x02
_PREFIX: Final = 16
"""A version-1 object header's prefix: version, reserved, messages, references, size, pad."""
_LONGEST_HEADER: Final = 4096
_SIGNATURE: Final = b"\x89HDF\r\n\x1a\n"


def end_of_allocation(read: ReadRanges, file_size: int) -> int | None:
    """The end-of-allocation address of the file, from its superblock at offset 0, when every
    address in it is a file offset: 8-byte addresses and lengths, base address 0, no
    driver-information block (version 0 or 1), and the file holding that many bytes. ``None``
    otherwise (no template is made for such a file)."""
    if file_size < 96:
        return None
    (head,) = read([(0, 96)])
    block = bytes(head)
    if block[:8] != _SIGNATURE:
        return None
    version = block[8]
    if version in (0, 1):
        sizes, base_at = (block[13], block[14]), 24 if version == 0 else 28
        base, _, end, driver = struct.unpack_from("<4Q", block, base_at)
        if driver != UNDEFINED:
            return None
    elif version in (2, 3):
        sizes = (block[9], block[10])
        base, _, end = struct.unpack_from("<3Q", block, 12)
    else:
        return None
    if sizes != (8, 8) or base != 0 or end > file_size:
        return None
    return int(end)


@dataclass(frozen=True)
class HeaderTemplate:
    """One dataset's object header, HDF5-compared, and where its per-entry fields lie.

    Attributes:
        header: ``(length,)`` uint8, the whole header.
        fixed: ``(length,)`` bool, the bytes every matching header repeats.
        address_at, size_at, rows_at: where the layout's address and size and the first
            dimension lie (8 little-endian bytes each).
        max_rows_at: where the first maximum dimension lies (``-1``: the header holds no
            maximum dimensions).
        row_bytes: the bytes of one row.
    """

    header: np.ndarray
    fixed: np.ndarray
    address_at: int
    size_at: int
    rows_at: int
    max_rows_at: int
    row_bytes: int

    @property
    def length(self) -> int:
        return len(self.header)


def header_length(prefix: bytes | memoryview) -> int | None:
    """The length of the version-1 object header that starts with ``prefix`` (its first
    :data:`_PREFIX` bytes), ``None`` when it is not one or longer than a template may be."""
    if len(prefix) < _PREFIX or prefix[0] != 1:
        return None
    length = _PREFIX + struct.unpack_from("<I", prefix, 8)[0]
    return length if length <= _LONGEST_HEADER else None


def make_template(header: bytes | memoryview, offset: int, rows: int, row_bytes: int
                  ) -> HeaderTemplate | None:
    """The template of ``header``, the object header of a dataset HDF5 found stored
    contiguously at ``offset`` with ``rows`` rows of ``row_bytes``; ``None`` when it is not one
    a template may be made of (the module's docstring)."""
    data = bytes(header)
    fixed = np.ones(len(data), dtype=bool)
    found: dict[int, int] = {}
    max_rows_at, messages, at = -1, 0, _PREFIX
    while at < len(data):
        if at + 8 > len(data):
            return None
        kind, size, flags = struct.unpack_from("<HHB", data, at)
        body = at + 8
        if kind not in _MESSAGE_TYPES or flags & _SHARED_FLAG or body + size > len(data):
            return None
        if kind != _NIL:
            if kind in found:
                return None
            found[kind] = body
        if kind == _DATASPACE:
            varying_max = _dataspace(data, body, size, fixed)
            if varying_max is None:
                return None
            max_rows_at = varying_max
        elif kind == _LAYOUT and not _contiguous(data, body, size, fixed):
            return None
        elif kind == _MODIFIED:
            if size < 8 or data[body] != 1:
                return None
            fixed[body + 4:body + 8] = False
        messages += 1
        at = body + size
    if (messages != struct.unpack_from("<H", data, 2)[0]
            or not {_DATASPACE, _DATATYPE, _LAYOUT} <= found.keys()):
        return None
    rows_at = _rows_at(data, found[_DATASPACE])
    address_at, size_at = found[_LAYOUT] + 2, found[_LAYOUT] + 10
    stored_rows, address, size = (_u64(data, rows_at), _u64(data, address_at),
                                  _u64(data, size_at))
    if stored_rows != rows or address != offset or size != rows * row_bytes:
        return None
    return HeaderTemplate(np.frombuffer(data, dtype=np.uint8), fixed, address_at, size_at,
                          rows_at, max_rows_at, row_bytes)


def matches(template: HeaderTemplate, headers: np.ndarray, offsets: np.ndarray,
            rows: np.ndarray, end: int) -> np.ndarray:
    """``(n,)`` bool: which of ``headers`` (``(n, template.length)`` uint8) are the template's
    bytes but for a dataset of ``rows[i]`` rows stored at ``offsets[i]``, inside the first
    ``end`` bytes of the file (its end of allocation)."""
    same = (headers[:, template.fixed] == template.header[template.fixed]).all(axis=1)
    address, size, stored_rows = (_column(headers, at) for at in
                                  (template.address_at, template.size_at, template.rows_at))
    offsets = offsets.astype(np.uint64)
    rows = rows.astype(np.uint64)
    fits = rows <= np.uint64(end // max(template.row_bytes, 1))  # rows * row_bytes: no wrap
    wanted = rows * np.uint64(template.row_bytes)
    same &= (fits & (stored_rows == rows) & (address == offsets) & (size == wanted)
             & (address <= np.uint64(end)))
    same &= size <= np.uint64(end) - np.minimum(address, np.uint64(end))
    if template.max_rows_at >= 0:
        same &= _column(headers, template.max_rows_at) == rows
    return same


def _dataspace(data: bytes, body: int, size: int, fixed: np.ndarray) -> int | None:
    """Mark the dataspace's varying fields; the first maximum dimension's place when the
    message holds maximum dimensions (``-1`` when not), ``None`` when no template can vary
    this dataspace (its maximum is not its size: an entry's would not follow its rows)."""
    rank, flags = data[body + 1], data[body + 2]
    rows_at = _rows_at(data, body)
    max_at = rows_at + 8 * rank
    if rows_at + 8 * rank * (2 if flags & 1 else 1) > body + size:
        return None
    fixed[rows_at:rows_at + 8] = False
    if not flags & 1:
        return -1
    if _u64(data, max_at) != _u64(data, rows_at):
        return None
    fixed[max_at:max_at + 8] = False
    return max_at


def _rows_at(data: bytes, body: int) -> int:
    """The first dimension of a dataspace message: after 8 bytes in version 1, 4 in 2 (the
    only versions HDF5 reads, and the template's was read by HDF5)."""
    return body + (8 if data[body] == 1 else 4)


def _contiguous(data: bytes, body: int, size: int, fixed: np.ndarray) -> bool:
    """Mark a version-3 contiguous layout's address and size; ``False`` for any other."""
    if size < 18 or data[body] != 3 or data[body + 1] != 1:
        return False
    fixed[body + 2:body + 18] = False
    return True


def _u64(data: bytes, at: int) -> int:
    return int(struct.unpack_from("<Q", data, at)[0])


def _column(headers: np.ndarray, at: int) -> np.ndarray:
    return np.ascontiguousarray(headers[:, at:at + 8]).view("<u8")[:, 0].astype(np.uint64)
