"""Byte suppliers: random access to one data file's bytes, local or remote, by ranges.

The range reader plans a pass over a dataset as ``(offset, length)`` ranges of
``main_data.hdf5`` and asks a :class:`ByteRanges` for them. A local file and a published file
on a remote registry are two suppliers of the same bytes; everything above this protocol reads
them the same way.
"""

from __future__ import annotations

import io
import os
import stat
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import h5py
import numpy as np

from marl_minari.errors import CorruptedDataError
from marl_minari.format.regular_files import not_regular


@runtime_checkable
class ByteRanges(Protocol):
    """Random access to the bytes of one file.

    Attributes:
        name: how errors name the file (a path or a URL).
        size: the file's length in bytes.

    Whatever a supplier verifies, the episode reader compares every offset-index entry it
    reads through it with HDF5 (``docs/format.md``): a published file's index comes from the
    same hand as the file. A supplier whose requests cost a round trip may also offer
    ``prefetch_ranges(ranges)`` and ``prefetch_budget`` (bytes per call; ``0``: do not):
    the episode reader then asks for a read's leaves, that many bytes at a time, before it
    compares their entries (``registry.remote_file.RemoteFile``); and ``block_size``, the
    fixed blocks it verifies in: the reader then cuts its requests where a piece starts in
    another block, so that most ranges come back as views of one block; and
    ``read_windows(ranges)``, the verified bytes covering them as ``(file offset, bytes)``
    windows that do not overlap, each valid until the next is asked for: the range reader
    then copies each window's pieces out before asking for the next
    (:func:`~marl_minari.storage.range_reader.scatter_windows`); and ``read_rows(offsets,
    length)``, the bytes of many ranges of one length as one ``(offsets, length)`` uint8
    array: the offset-index comparisons then gather the small structures they read, one
    per episode, through it instead of a range each.
    """

    name: str
    size: int

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        """The bytes of every ``(offset, length)`` range, in the order asked.

        Raises:
            CorruptedDataError: a range reaches past the end of the file, or its bytes could
                not be verified.
        """
        ...


class LocalFileRanges:
    """A local file read with ``pread``: the supplier for datasets on this machine."""

    def __init__(self, path: Path) -> None:
        self.name = str(path)
        # Not blocking: a FIFO in a dataset's place would wait forever for a writer.
        self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        status = os.fstat(self._fd)
        if not stat.S_ISREG(status.st_mode):
            os.close(self._fd)
            raise not_regular(path, status.st_mode)
        self.size = status.st_size

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[memoryview]:
        out: list[memoryview] = []
        for offset, length in ranges:
            if offset < 0 or length < 0 or offset + length > self.size:
                raise CorruptedDataError(
                    f"{self.name}: range {offset}+{length} reaches past the file's "
                    f"{self.size} bytes; the file is truncated: download or copy it again")
            out.append(memoryview(os.pread(self._fd, length, offset)))
        return out

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> LocalFileRanges:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RangesFile(io.RawIOBase):
    """A read-only, seekable file object over a :class:`ByteRanges`, for ``h5py.File(...)``.

    HDF5 reads its metadata (superblock, object headers, B-trees) through this, in thousands of
    reads of a few hundred bytes each, clustered in the file: small reads are served from the
    last ``pages_kept`` aligned pages of ``page_size`` bytes asked of the source (bytes the
    source already returned, so verified where it verifies). Reads of a page or more go to the
    source as they are; bulk leaf bytes go through :meth:`ByteRanges.read_ranges` directly,
    where they can be coalesced.
    """

    def __init__(self, source: ByteRanges, *, page_size: int = 64 * 1024,
                 pages_kept: int = 64) -> None:
        super().__init__()
        self.source = source
        self._position = 0
        self._page_size = page_size
        self._pages_kept = pages_kept
        self._pages: OrderedDict[int, memoryview] = OrderedDict()

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.source.size}
        self._position = max(0, base[whence] + offset)
        return self._position

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        count = max(0, min(len(view), self.source.size - self._position))
        number, start = divmod(self._position, self._page_size)
        page = self._pages.get(number)
        if page is not None and start + count <= len(page):  # most of HDF5's metadata reads
            self._pages.move_to_end(number)
            view[:count] = page[start:start + count]
            self._position += count
            return count
        if count >= self._page_size:
            (data,) = self.source.read_ranges([(self._position, count)])
            view[:count] = data
        else:
            done = 0
            while done < count:
                at = self._position + done
                page = self._page(at // self._page_size)
                start = at % self._page_size
                piece = min(count - done, len(page) - start)
                view[done:done + piece] = page[start:start + piece]
                done += piece
        self._position += count
        return count

    def _page(self, number: int) -> memoryview:
        page = self._pages.get(number)
        if page is not None:
            self._pages.move_to_end(number)
            return page
        begin = number * self._page_size
        (page,) = self.source.read_ranges(
            [(begin, min(self._page_size, self.source.size - begin))])
        self._pages[number] = page
        if len(self._pages) > self._pages_kept:
            self._pages.popitem(last=False)
        return page


def holds_its_views(owner: object) -> bool:
    """True when ``owner``'s whole buffer, read as bytes, holds the bytes of every memoryview
    of it: ``bytes``, ``bytearray``, a C-contiguous numpy array (a supplier's block
    buffers). Views of such an owner can be located in it by address, joined and copied
    from together; any other exporter's views are taken one at a time."""
    return isinstance(owner, (bytes, bytearray)) or (
        isinstance(owner, np.ndarray) and owner.flags.c_contiguous)


def open_hdf5(source: ByteRanges) -> h5py.File:
    """The file ``source`` supplies (``main_data.hdf5``) opened by HDF5 over its bytes.

    Raises:
        CorruptedDataError: HDF5 cannot open it.
    """
    try:
        return h5py.File(RangesFile(source), "r")
    except OSError as exc:
        raise CorruptedDataError(f"{source.name} is damaged and cannot be opened ({exc}); "
                                 "download it again") from exc
