"""File digests (SHA-256 and BLAKE3) and the digests a dataset folder remembers of its files.

Every dataset that marl-minari writes remembers the size, SHA-256 and BLAKE3 of its files in a
hidden sidecar (:data:`marl_minari.format.layout.DIGESTS_FILE_NAME`), computed while the files are
still in the page cache. Publishing reuses them instead of reading every byte again, the way
DVC and git reuse hashes of files they have seen. A remembered entry is trusted only while the
file is provably the one that was hashed: same device, inode, size, mtime and ctime (ctime
changes on every write and cannot be set back by users), and a ctime older than the sidecar
itself, so a write in the same clock tick as the hashing is never missed (git's "racy clean"
rule). Anything else, including a missing or damaged sidecar, means hashing the file again.

SHA-256 is what manifests promise and what ``sha256sum`` checks; BLAKE3 (several GB/s on one
core) is what downloads verify when a manifest records it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import blake3

from marl_minari.errors import InvalidOptionError
from marl_minari.format import layout

SHA256: Final = "sha256"
BLAKE3: Final = "blake3"
ALGORITHMS: Final = (SHA256, BLAKE3)
"""Digests recorded for every file, in the order manifests list them."""

CHUNK_SIZE: Final = 1 << 20
"""Bytes hashed per step: small enough to stay in the CPU cache between the two digests."""

StatKey = tuple[int, int, int, int, int]
"""``(device, inode, size, mtime_ns, ctime_ns)``: what identifies an unchanged file."""

_SIDECAR_FORMAT: Final = "marl-minari-digests"
_HEX_DIGEST: Final = re.compile(r"[0-9a-f]{64}")

logger = logging.getLogger(__name__)


class Hash(Protocol):
    """What :mod:`hashlib` and :mod:`blake3` objects share."""

    def update(self, data: Any, /) -> Any: ...

    def hexdigest(self) -> str: ...


def new_hash(algorithm: str) -> Hash:
    """A fresh incremental hash; ``algorithm`` is ``"sha256"`` or ``"blake3"``."""
    if algorithm == SHA256:
        return hashlib.sha256()
    if algorithm == BLAKE3:
        return blake3.blake3()
    raise InvalidOptionError(
        f"unknown digest algorithm {algorithm!r}; expected one of {ALGORITHMS}")


class MultiHash:
    """Several digests of the same bytes, fed in one pass (both release the GIL)."""

    def __init__(self, algorithms: Sequence[str] = ALGORITHMS) -> None:
        self._hashes = {algorithm: new_hash(algorithm) for algorithm in algorithms}

    def update(self, data: Any) -> None:
        """Feed ``data`` (bytes-like) to every digest."""
        for state in self._hashes.values():
            state.update(data)

    def hexdigests(self) -> dict[str, str]:
        """``{algorithm: hex digest}`` of everything fed so far."""
        return {algorithm: state.hexdigest() for algorithm, state in self._hashes.items()}


@dataclass(frozen=True)
class FileDigests:
    """Size and every digest of one file's bytes."""

    size: int
    sha256: str
    blake3: str


@dataclass(frozen=True)
class RememberedDigests:
    """Digests remembered for a file, with the identity it had when it was hashed."""

    stat: StatKey
    digests: FileDigests


def stat_key(status: os.stat_result) -> StatKey:
    """The identity of a file as :func:`os.stat` / :func:`os.fstat` reports it."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
            status.st_ctime_ns)


def hash_handle(handle: io.FileIO, algorithms: Sequence[str] = ALGORITHMS,
                stop: threading.Event | None = None, *,
                expected_size: int | None = None) -> tuple[int, dict[str, str]]:
    """``(size, {algorithm: hex digest})`` of an unbuffered binary file, from its position to
    its end, read once in small chunks; reading ends early once ``stop`` is set.

    ``expected_size``: about how many bytes are left, when known: a smaller file is read
    into a buffer of its size (a new chunk-sized buffer is fresh memory whose every page
    faults in, which costs more than hashing a small file)."""
    digests = MultiHash(algorithms)
    size = 0
    buffer = bytearray(CHUNK_SIZE if expected_size is None
                       else max(1, min(CHUNK_SIZE, expected_size + 1)))
    view = memoryview(buffer)
    while not (stop is not None and stop.is_set()) and (count := handle.readinto(buffer)):
        digests.update(view[:count])
        size += count
    return size, digests.hexdigests()


def hash_file(path: Path, algorithms: Sequence[str] = ALGORITHMS) -> tuple[int, dict[str, str]]:
    """``(size, {algorithm: hex digest})`` of a local file (see :func:`hash_handle`)."""
    with open(path, "rb", buffering=0) as handle:
        return hash_handle(handle, algorithms, expected_size=os.fstat(handle.fileno()).st_size)


def file_digests(path: Path) -> RememberedDigests | None:
    """Hash ``path`` with every algorithm; ``None`` if it changed while it was read."""
    before = stat_key(os.stat(path))
    size, digests = hash_file(path)
    if stat_key(os.stat(path)) != before or size != before[2]:
        return None
    return RememberedDigests(before, FileDigests(size, digests[SHA256], digests[BLAKE3]))


def remember_digests(folder: Path, files: Iterable[str],
                     expected: Mapping[str, StatKey] | None = None) -> None:
    """Hash ``files`` (paths relative to ``folder``) and remember them in its sidecar.

    The sidecar is replaced, so it names exactly these files. Best effort: a folder that
    cannot be written only means that publishing hashes the files itself.

    Args:
        expected: ``{relative path: StatKey}``: such a file is remembered only if it was in
            that state when hashed (the state in which its caller verified it).
    """
    entries: dict[str, Any] = {}
    for relative in files:
        try:
            remembered = file_digests(folder / relative)
        except OSError as exc:
            logger.debug("cannot hash %s: %s", folder / relative, exc)
            continue
        if remembered is not None and (expected is None or relative not in expected
                                       or expected[relative] == remembered.stat):
            digests = remembered.digests
            entries[relative] = {"stat": list(remembered.stat), "size": digests.size,
                                 SHA256: digests.sha256, BLAKE3: digests.blake3}
    _replace_sidecar(folder, {"format": _SIDECAR_FORMAT, "files": entries})


def forget_digests(folder: Path, relative: str) -> None:
    """Drop ``relative`` (a path relative to ``folder``) from ``folder``'s sidecar, keeping
    the other entries: nothing then vouches for that file (best effort, as
    :func:`remember_digests`)."""
    sidecar = folder / layout.DIGESTS_FILE_NAME
    try:
        document = json.loads(sidecar.read_bytes())
    except (OSError, ValueError):
        return
    files = document.get("files") if isinstance(document, dict) else None
    if not isinstance(files, dict) or relative not in files:
        return
    del files[relative]
    _replace_sidecar(folder, document)


def _replace_sidecar(folder: Path, document: dict[str, Any]) -> None:
    """Write ``document`` as ``folder``'s sidecar, whole or not at all (best effort: a folder
    that cannot be written keeps what it had)."""
    sidecar = folder / layout.DIGESTS_FILE_NAME
    temporary = sidecar.with_name(sidecar.name + ".tmp")
    try:
        temporary.write_text(json.dumps(document))
        os.replace(temporary, sidecar)
    except OSError as exc:
        temporary.unlink(missing_ok=True)
        logger.debug("cannot write the digests sidecar in %s: %s", folder, exc)


def remembered_digests(folder: Path) -> dict[str, RememberedDigests]:
    """The remembered digests of ``folder``'s files that still describe them, by relative path.

    Entries for files that changed, vanished or were hashed in the same clock tick as their
    last write are left out, as is everything when the sidecar is missing or damaged.
    """
    sidecar = folder / layout.DIGESTS_FILE_NAME
    try:
        written = os.stat(sidecar).st_mtime_ns
        document = json.loads(sidecar.read_bytes())
    except (OSError, ValueError):
        return {}
    files = document.get("files") if isinstance(document, dict) else None
    if document.get("format") != _SIDECAR_FORMAT or not isinstance(files, dict):
        return {}
    found = {}
    for relative, entry in files.items():
        remembered = _still_valid(folder, relative, entry, written)
        if remembered is not None:
            found[relative] = remembered
    return found


def _still_valid(folder: Path, relative: Any, entry: Any,
                 written: int) -> RememberedDigests | None:
    try:
        recorded = tuple(int(part) for part in entry["stat"])
        digests = FileDigests(int(entry["size"]), str(entry[SHA256]), str(entry[BLAKE3]))
        current = stat_key(os.stat(folder / str(relative)))
    except (OSError, TypeError, KeyError, ValueError):
        return None
    if (recorded != current or recorded[4] >= written or digests.size != current[2]
            or not is_hex_digest(digests.sha256) or not is_hex_digest(digests.blake3)):
        return None
    return RememberedDigests(current, digests)


def is_hex_digest(value: Any) -> bool:
    """True for a 256-bit digest written as 64 lowercase hex digits (nothing else)."""
    return isinstance(value, str) and _HEX_DIGEST.fullmatch(value) is not None
