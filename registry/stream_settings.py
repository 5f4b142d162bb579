"""How a :class:`~.remote_file.RemoteFile` fetches and keeps blocks, and what it fetched."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

from marl_minari.errors import InvalidOptionError

from .block_cache import BlockCache, default_cache_bytes, default_cache_dir
from .settings import RemoteSettings


@dataclass(frozen=True)
class StreamSettings:
    """How a :class:`RemoteFile` fetches and keeps blocks.

    Attributes:
        cache_dir: folder of the block cache (default ``$MARL_MINARI_CACHE``, else
            ``~/.cache/marl-minari/blocks``).
        cache_bytes: its byte budget (default ``$MARL_MINARI_CACHE_BYTES``, else 4 GiB;
            ``0``: no disk cache).
        parallel_requests: requests in flight at once for one read.
        max_request_bytes: adjacent blocks are fetched together up to this many bytes.
        memory_bytes: recently used blocks kept in memory (HDF5 reads its metadata in many
            small pieces, mostly from a few blocks).
        remote: timeouts and rates of every request (:class:`RemoteSettings`); each
            ``read_ranges`` call is one operation with one deadline.
        connections_ahead: connections a streaming open of an ``http(s)://`` dataset makes
            to its server while its first requests are in flight, for the next ones
            (``docs/registry.md``); default ``parallel_requests`` + 2 (a read's requests and
            the two small files), or none for a host on this machine's loopback
            (``localhost``, ``127.0.0.0/8``, ``::1``), where a connection costs no round
            trip; ``0``: none.
    """

    cache_dir: str | os.PathLike[str] | None = None
    cache_bytes: int | None = None
    parallel_requests: int = 8
    max_request_bytes: int = 4 << 20
    memory_bytes: int = 64 << 20
    remote: RemoteSettings | None = None
    connections_ahead: int | None = None

    def __post_init__(self) -> None:
        if self.cache_dir is not None:
            if not isinstance(self.cache_dir, (str, os.PathLike)):
                raise InvalidOptionError(f"StreamSettings(cache_dir={self.cache_dir!r}): "
                                         "expected a folder's path or None (the default)")
            object.__setattr__(self, "cache_dir", Path(self.cache_dir).expanduser())
        for name, least, optional in (("cache_bytes", 0, True), ("parallel_requests", 1, False),
                                      ("max_request_bytes", 1, False),
                                      ("memory_bytes", 0, False),
                                      ("connections_ahead", 0, True)):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidOptionError(
                    f"StreamSettings({name}={value!r}): expected an integer >= {least}"
                    f"{' or None (the default)' if optional else ''}")
        if self.remote is not None and not isinstance(self.remote, RemoteSettings):
            raise InvalidOptionError(f"StreamSettings(remote={self.remote!r}): expected a "
                                     "RemoteSettings or None (the default)")

    def cache(self) -> BlockCache:
        """The block cache these settings name."""
        return BlockCache(default_cache_dir() if self.cache_dir is None else Path(self.cache_dir),
                          default_cache_bytes() if self.cache_bytes is None
                          else self.cache_bytes)


@dataclass
class TransferCounts:
    """What a :class:`RemoteFile` has fetched from its remote (not from caches)."""

    requests: int = 0
    bytes: int = 0
    whole_downloads: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, count: int) -> None:
        with self._lock:
            self.requests += 1
            self.bytes += count
