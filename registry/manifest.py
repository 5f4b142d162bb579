"""Per-version manifests: the size, SHA-256 and BLAKE3 of every file of a published dataset.

A manifest is the commit record of a published dataset version: it is written after every
file it names, and a download trusts nothing that does not match it. Paths in a manifest are
checked strictly (relative POSIX paths inside the dataset folder, no ``..``, no hidden parts),
so a damaged or hostile manifest can never make a download write outside its dataset.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any, Final

from marl_minari.errors import CorruptedDataError, LayoutError
from marl_minari.format.digests import (
    BLAKE3,
    SHA256,
    hash_file,
    is_hex_digest,
    remembered_digests,
)
from marl_minari.storage.open_blocks import MAX_OPEN_BLOCKS
from marl_minari.version import __version__

from .blocks import MAX_BLOCK_SIZE, MIN_BLOCK_SIZE, Block, block_count, blocks_of
from .jsonfiles import parse_json_object, typed
from .transfer import wrong_size

MANIFEST_FILE_NAME: Final = "manifest.json"
"""File next to ``data/`` on a remote: the manifest of that dataset version."""

MANIFEST_FORMAT: Final = "marl-minari-manifest"
MANIFEST_FORMAT_VERSION: Final = 1

MAX_FILES: Final = 100_000
MAX_PATH_LENGTH: Final = 1024
MAX_FILE_SIZE: Final = 1 << 50
MAX_MANIFEST_BYTES: Final = 32 << 20
"""Largest ``manifest.json`` read (``MAX_FILES`` entries take about 25 MB)."""

_DIGEST_LABELS: Final = {SHA256: "SHA-256", BLAKE3: "BLAKE3"}
_PART_RE = re.compile(r"^[A-Za-z0-9_][\w.+=@,-]*$")


def check_relative_path(path: str) -> str:
    """Check that ``path`` is a safe relative POSIX path of a file inside a dataset folder.

    Raises:
        LayoutError: absolute, empty, ``.``/``..`` or hidden parts, backslashes, odd characters.
    """
    if not isinstance(path, str) or not path:
        raise LayoutError("a file path must be a non-empty string")
    if len(path) > MAX_PATH_LENGTH:
        raise LayoutError(f"file path longer than {MAX_PATH_LENGTH} characters")
    if path.startswith("/") or "\\" in path or "\x00" in path:
        raise LayoutError(f"file path {path!r} is absolute or not a POSIX path")
    for part in path.split("/"):
        if part in ("", ".", ".."):
            raise LayoutError(f"file path {path!r} has an empty, '.' or '..' part")
        if not _PART_RE.match(part):
            raise LayoutError(
                f"file path {path!r}: part {part!r} must start with a letter, digit or '_' and "
                "hold only letters, digits and _ . + = @ , -"
            )
    if path == MANIFEST_FILE_NAME:
        raise LayoutError(f"{MANIFEST_FILE_NAME!r} is reserved for the registry's manifest")
    return path


@dataclass(frozen=True)
class FileEntry:
    """One file of a dataset version: path relative to the dataset folder, size, digests.

    ``blake3`` is recorded by marl-minari 0.1 and later; manifests without it are verified
    with SHA-256 alone. ``block_size`` and ``block_blake3`` are the file's range digests
    (:mod:`.blocks`): recorded for files larger than one block by publishes that write them,
    ``None`` otherwise.
    """

    path: str
    size: int
    sha256: str
    blake3: str | None = None
    block_size: int | None = None
    block_blake3: tuple[str, ...] | None = None
    open_blocks: tuple[int, ...] = ()
    """Blocks HDF5 reads to open the file and check it (``main_data.hdf5`` only): a
    streaming reader fetches them together instead of one dependent read at a time."""

    @property
    def blocks(self) -> tuple[Block, ...]:
        """The pieces a range reader verifies: one per range digest, or the whole file as one
        block (checked by :attr:`check_digest`) when the entry has none."""
        return blocks_of(self.size, self.block_size, self.block_blake3,
                         self.check_algorithm, self.check_digest)

    @property
    def check_algorithm(self) -> str:
        """The digest a download verifies: BLAKE3 when recorded (fastest), else SHA-256."""
        return BLAKE3 if self.blake3 is not None else SHA256

    @property
    def check_digest(self) -> str:
        """The recorded digest of :attr:`check_algorithm`."""
        return self.blake3 if self.blake3 is not None else self.sha256

    def check_arrived(self, where: str, size: int, digest: str) -> None:
        """Check a downloaded copy of this file: its size and :attr:`check_algorithm` digest.

        Raises:
            CorruptedDataError: either differs from the manifest.
        """
        if size != self.size:
            raise wrong_size(where, size, self.size)
        if digest != self.check_digest:
            raise CorruptedDataError(
                f"{where} has {_DIGEST_LABELS[self.check_algorithm]} {digest}, the manifest "
                f"records {self.check_digest}: the remote file was modified or damaged after "
                "publishing"
            )

    def to_dict(self) -> dict[str, Any]:
        """The entry as stored in ``manifest.json``."""
        entry: dict[str, Any] = {"path": self.path, "size": self.size, SHA256: self.sha256}
        if self.blake3 is not None:
            entry[BLAKE3] = self.blake3
        if self.block_size is not None and self.block_blake3 is not None:
            entry["block_size"] = self.block_size
            entry["block_blake3"] = list(self.block_blake3)
        if self.open_blocks:
            entry["open_blocks"] = list(self.open_blocks)
        return entry


@dataclass(frozen=True)
class Manifest:
    """Every file of one published dataset version, with sizes and digests."""

    dataset_id: str
    files: tuple[FileEntry, ...]
    created: str = ""
    tool: str = ""

    @property
    def total_size(self) -> int:
        """Bytes of all files together."""
        return sum(entry.size for entry in self.files)

    def same_content(self, other: Manifest) -> bool:
        """True when both name the same dataset and the same files with the same bytes."""

        def content(manifest: Manifest) -> set[tuple[str, int, str]]:
            return {(e.path, e.size, e.sha256) for e in manifest.files}

        return self.dataset_id == other.dataset_id and content(self) == content(other)

    def to_json(self) -> bytes:
        """The manifest as UTF-8 JSON bytes (what the remote stores)."""
        document = {
            "format": MANIFEST_FORMAT,
            "format_version": MANIFEST_FORMAT_VERSION,
            "dataset_id": self.dataset_id,
            "created": self.created,
            "tool": self.tool,
            "total_size": self.total_size,
            "files": [e.to_dict() for e in sorted(self.files, key=lambda e: e.path)],
        }
        return (json.dumps(document, indent=1) + "\n").encode()

    def digest(self) -> str:
        """SHA-256 of :meth:`to_json` (recorded in the registry index)."""
        return hashlib.sha256(self.to_json()).hexdigest()

    @classmethod
    def from_json(cls, raw: bytes, expected_id: str, where: str) -> Manifest:
        """Parse and check a stored manifest.

        Args:
            raw: the stored bytes.
            expected_id: the dataset id the manifest must describe.
            where: where the manifest came from, for error messages (no credentials).

        Raises:
            CorruptedDataError: not a manifest, a newer format, another dataset's, or any
                entry with an unsafe path, a bad size or a bad digest; the message names the
                manifest and the key.
        """
        document = parse_json_object(raw, f"manifest {where}")
        if document.get("format") != MANIFEST_FORMAT:
            raise CorruptedDataError(f"{where} is not a marl-minari manifest ('format' is "
                                     f"{document.get('format')!r}, not {MANIFEST_FORMAT!r})")
        version = typed(document, "format_version", int, f"manifest {where}")
        if version > MANIFEST_FORMAT_VERSION:
            raise CorruptedDataError(
                f"manifest {where} has format version {version!r}; this marl-minari reads "
                f"version {MANIFEST_FORMAT_VERSION}: upgrade marl-minari"
            )
        if document.get("dataset_id") != expected_id:
            raise CorruptedDataError(
                f"manifest {where} describes {document.get('dataset_id')!r}, not {expected_id!r}"
            )
        files = typed(document, "files", list, f"manifest {where}")
        if not files or len(files) > MAX_FILES:
            raise CorruptedDataError(f"manifest {where}: 'files' must list 1 to {MAX_FILES} "
                                     f"files, not {len(files)}")
        entries = [_entry(item, f"manifest {where}", f"files[{number}]")
                   for number, item in enumerate(files)]
        _check_entries(entries, where)
        created = typed(document, "created", str, f"manifest {where}", required=False)
        tool = typed(document, "tool", str, f"manifest {where}", required=False)
        return cls(expected_id, tuple(entries), created or "", tool or "")


def _entry(item: Any, where: str, key: str) -> FileEntry:
    """The file entry ``item``, found at ``key`` (``files[3]``) of the manifest ``where``."""
    if not isinstance(item, dict):
        raise CorruptedDataError(f"{where}: {key} must be an object, not "
                                 f"{type(item).__name__}")
    path = typed(item, "path", str, where, label=f"{key}.path")
    try:
        check_relative_path(path)
    except LayoutError as exc:
        raise CorruptedDataError(
            f"{where}: {key}.path names an unsafe path: {exc}; refusing to download it"
        ) from exc
    size = typed(item, "size", int, where, label=f"{key}.size")
    if not 0 <= size <= MAX_FILE_SIZE:
        raise CorruptedDataError(f"{where}: bad size {size!r} at {key}.size ({path!r})")
    sha, fast = item.get(SHA256), item.get(BLAKE3)
    if not isinstance(sha, str) or not is_hex_digest(sha):
        raise CorruptedDataError(f"{where}: bad SHA-256 {sha!r} at {key}.{SHA256} ({path!r})")
    if fast is not None and not is_hex_digest(fast):
        raise CorruptedDataError(f"{where}: bad BLAKE3 {fast!r} at {key}.{BLAKE3} ({path!r})")
    block_size, blocks = _range_digests(item, size, where, key, path)
    return FileEntry(path, size, sha, fast, block_size, blocks,
                     _open_blocks(item, blocks, where, key, path))


def _open_blocks(item: dict[str, Any], blocks: tuple[str, ...] | None, where: str, key: str,
                 path: str) -> tuple[int, ...]:
    """The ``open_blocks`` hint of a file entry (block numbers of the file), checked."""
    hint = typed(item, "open_blocks", list, where, label=f"{key}.open_blocks", required=False)
    if hint is None:
        return ()
    if blocks is None or len(hint) > MAX_OPEN_BLOCKS or any(
            isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < len(blocks)
            for n in hint):
        raise CorruptedDataError(
            f"{where}: {key}.open_blocks must list at most {MAX_OPEN_BLOCKS} block numbers of "
            f"the file's range digests ({path!r})")
    return tuple(hint)


def _range_digests(item: dict[str, Any], size: int, where: str, key: str, path: str
                   ) -> tuple[int | None, tuple[str, ...] | None]:
    """The ``block_size`` and ``block_blake3`` of a file entry (both or neither), checked."""
    block_size = typed(item, "block_size", int, where, label=f"{key}.block_size",
                       required=False)
    digests = typed(item, "block_blake3", list, where, label=f"{key}.block_blake3",
                    required=False)
    if block_size is None and digests is None:
        return None, None
    if block_size is None or digests is None:
        raise CorruptedDataError(f"{where}: {key} has only one of block_size and block_blake3 "
                                 f"({path!r}); a manifest records both or neither")
    if (block_size < MIN_BLOCK_SIZE or block_size > MAX_BLOCK_SIZE
            or block_size & (block_size - 1)):
        raise CorruptedDataError(
            f"{where}: bad block size {block_size!r} at {key}.block_size ({path!r}): a power of "
            f"two from {MIN_BLOCK_SIZE} to {MAX_BLOCK_SIZE}")
    if len(digests) != block_count(size, block_size):
        raise CorruptedDataError(
            f"{where}: {key}.block_blake3 lists {len(digests)} digests, but a file of {size} "
            f"bytes has {block_count(size, block_size)} blocks of {block_size} ({path!r})")
    for number, digest in enumerate(digests):
        if not isinstance(digest, str) or not is_hex_digest(digest):
            raise CorruptedDataError(f"{where}: bad BLAKE3 {_short(digest)} at "
                                     f"{key}.block_blake3[{number}] ({path!r})")
    return block_size, tuple(digests)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _check_entries(entries: Iterable[FileEntry], where: str) -> None:
    paths = [e.path for e in entries]
    if len(set(paths)) != len(paths):
        raise CorruptedDataError(f"manifest {where} lists a file twice")
    folders = {str(parent) for p in paths for parent in PurePosixPath(p).parents}
    clash = folders.intersection(paths)
    if clash:
        raise CorruptedDataError(f"manifest {where}: {sorted(clash)[0]!r} is both file and folder")
    if "data/metadata.json" not in paths:
        raise CorruptedDataError(f"manifest {where} has no data/metadata.json")


def new_manifest(dataset_id: str, entries: Iterable[FileEntry]) -> Manifest:
    """A manifest stamped with the current UTC time and this library's version."""
    files = tuple(sorted(entries, key=lambda e: e.path))
    _check_entries(files, dataset_id)
    return Manifest(dataset_id, files,
                    datetime.now(UTC).replace(microsecond=0).isoformat(),
                    f"marl-minari {__version__}")


def dataset_files(folder: Path) -> list[str]:
    """Relative paths of the files of a local dataset folder, sorted.

    Every regular file is included (``data/*``, a ``README.md`` dataset card, ...) except
    hidden ones (any path part starting with ``.``).

    Raises:
        LayoutError: a symlink or special file, or a file name a manifest cannot hold.
    """
    found = []
    for current, dirs, names in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        base = Path(current)
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = base / name
            relative = path.relative_to(folder).as_posix()
            mode = os.lstat(path).st_mode
            if not stat.S_ISREG(mode):
                raise LayoutError(
                    f"{path} is a symlink or special file: publish copies regular files only"
                )
            try:
                check_relative_path(relative)
            except LayoutError as exc:
                raise LayoutError(f"cannot publish {path}: {exc}") from exc
            found.append(relative)
        for name in dirs:
            if os.path.islink(base / name):
                raise LayoutError(f"{base / name} is a symlink: publish copies regular files only")
    return found


def local_manifest(dataset_id: str, local: Path, files: list[str] | None = None) -> Manifest:
    """The manifest (sizes, SHA-256) of the local dataset folder ``local`` (its ``files``):
    remembered digests where its writer kept them, the files hashed otherwise."""
    known = remembered_digests(local)
    entries = []
    for relative in dataset_files(local) if files is None else files:
        if relative in known:
            size, sha = known[relative].digests.size, known[relative].digests.sha256
        else:
            size, computed = hash_file(local / relative, (SHA256,))
            sha = computed[SHA256]
        entries.append(FileEntry(relative, size, sha))
    return new_manifest(dataset_id, entries)
