"""Offset-index comparisons of a published file, remembered on disk for other processes.

A published file read in place serves only bytes checked against the digests of its manifest
(``docs/registry.md``, *Reading in place*), so what HDF5 said of an index entry over those
bytes (:mod:`.index_trust`) holds for every reader of the same digests and the same index.
This process's results are kept in a record file in the stream's cache folder, so that another
pass, process or Ray task on the machine compares nothing again (``docs/format.md``,
"Remembered entry comparisons").

Only results this library computed are believed: the record carries a keyed BLAKE3 (a MAC)
made with a 32-byte key of the user's own (a file readable by its owner alone, created on
first use), and names the digests and the index it was made for. A record that fails any
check (damaged, edited, copied from another user or machine, made for other bytes or another
index) is ignored, and the entries are compared again. Writing is best effort: a record that
cannot be written leaves the results in this process only.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import blake3
import numpy as np

RECORD_FORMAT: Final = "marl-minari-entry-comparisons"
RECORD_VERSION: Final = 1
KEY_BYTES: Final = 32
MAX_RECORD_BYTES: Final = 256 << 20
"""A larger record is ignored (about 10 million entries fit)."""

logger = logging.getLogger(__name__)

Checked = dict[tuple[str, str], np.ndarray]
"""``(leaf path, leaf signature)`` -> per episode int8: 1 agrees, -1 differs, 0 not compared."""


@dataclass(frozen=True)
class PublishedBytes:
    """What pins every byte a published file's reader gets, and where its comparisons go.

    Attributes:
        identity: a digest of the manifest digests every served byte was checked against
            (range digests, or the whole-file digest of a file without them).
        record: the record file of this file's comparisons.
        key: the user's key file that signs records.
    """

    identity: str
    record: Path
    key: Path


def load(published: PublishedBytes, index_content: str, episodes: int) -> Checked:
    """The comparisons remembered for these bytes and this index; ``{}`` when there is no
    record, or one that is not believed (see the module docstring)."""
    key = _key(published.key, create=False)
    if key is None:
        return {}
    try:
        raw = _read_regular(published.record, MAX_RECORD_BYTES)
        if raw is None:
            return {}
        document = json.loads(raw)
        body, mac = document["body"], document["mac"]
        if (not isinstance(mac, str)
                or blake3.blake3(_canonical(body), key=key).hexdigest() != mac
                or body["format"] != RECORD_FORMAT or body["version"] != RECORD_VERSION
                or body["bytes"] != published.identity or body["index"] != index_content
                or body["episodes"] != episodes):
            logger.debug("ignoring the comparison record %s: not ours, or not of these bytes",
                         published.record)
            return {}
        checked: Checked = {}
        for path, signature, encoded in body["entries"]:
            values = np.frombuffer(base64.b64decode(encoded, validate=True), dtype=np.int8)
            if values.shape != (episodes,) or not np.isin(values, (-1, 0, 1)).all():
                return {}
            checked[(str(path), str(signature))] = values.copy()
        return checked
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        logger.debug("ignoring the comparison record %s: %s", published.record, exc)
        return {}


def save(published: PublishedBytes, index_content: str, checked: Checked) -> None:
    """Remember ``checked`` (merged with a believed record already there), atomically."""
    key = _key(published.key, create=True)
    if key is None:
        return
    episodes = len(next(iter(checked.values()))) if checked else 0
    merged = load(published, index_content, episodes)
    for name, values in checked.items():
        before = merged.get(name)
        merged[name] = values if before is None else np.where(values != 0, values, before)
    body = {"format": RECORD_FORMAT, "version": RECORD_VERSION, "bytes": published.identity,
            "index": index_content, "episodes": episodes,
            "entries": [[path, signature, base64.b64encode(
                np.ascontiguousarray(values, dtype=np.int8).tobytes()).decode()]
                for (path, signature), values in sorted(merged.items())]}
    document = {"body": body, "mac": blake3.blake3(_canonical(body), key=key).hexdigest()}
    target = published.record
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
    try:  # into the stream's folder as it is: one deleted meanwhile is not made again
        temporary.write_text(json.dumps(document))
        os.replace(temporary, target)
    except OSError as exc:
        logger.debug("cannot write the comparison record %s: %s", target, exc)
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)


def _canonical(body: Any) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _key(path: Path, *, create: bool) -> bytes | None:
    """The user's record key: a regular file of :data:`KEY_BYTES` bytes that this user owns
    and no one else can read or write; made (``create``) when there is none. ``None`` when
    there is no such key (records are then neither believed nor written)."""
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(handle, "wb") as out:
            out.write(os.urandom(KEY_BYTES))
        with contextlib.suppress(FileExistsError):  # another process made it first
            os.link(temporary, path)
        return _read_key(path)
    except OSError as exc:
        logger.debug("no key for comparison records at %s: %s", path, exc)
        return None
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink(missing_ok=True)


def _read_key(path: Path) -> bytes | None:
    handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(handle, "rb") as key_file:
        status = os.fstat(key_file.fileno())
        if (not stat.S_ISREG(status.st_mode) or status.st_uid != os.getuid()
                or status.st_mode & 0o077 or status.st_size != KEY_BYTES):
            logger.debug("ignoring the comparison key %s: not the user's own, or malformed",
                         path)
            return None
        key = key_file.read(KEY_BYTES + 1)
    return key if len(key) == KEY_BYTES else None


def _read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file (not a link, a FIFO or a device: never
    waited on) of at most ``limit`` bytes; else ``None``."""
    handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(handle, "rb") as found:
        status = os.fstat(found.fileno())
        if not stat.S_ISREG(status.st_mode) or status.st_size > limit:
            return None
        return found.read(limit + 1)
