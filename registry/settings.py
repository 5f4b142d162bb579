"""How this package talks to remotes: timeouts, operation deadlines and flushing to disk.

Each is a parameter (:class:`RemoteSettings`, accepted by :func:`~marl_minari.registry.publish`,
:func:`~marl_minari.registry.download`, :func:`~marl_minari.registry.list_datasets` and
:func:`~marl_minari.registry.open_remote`). The environment variables below only give the
defaults, for Minari's own functions, which construct remotes without this package's
parameters.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from marl_minari.errors import RemoteError

HTTP_TIMEOUT_ENV_VAR: Final = "MARL_MINARI_HTTP_TIMEOUT"
FSYNC_ENV_VAR: Final = "MARL_MINARI_REGISTRY_FSYNC"
DEFAULT_HTTP_TIMEOUT: Final = 60.0
DEFAULT_MIN_DOWNLOAD_RATE: Final = 64 * 1024


@dataclass(frozen=True)
class RemoteSettings:
    """Settings of one remote.

    Attributes:
        http_timeout: seconds an ``http(s)://`` request may wait for the server (connecting,
            or between two arrivals of data), and the time every operation may take before
            any byte has arrived.
        min_download_rate: bytes per second an operation must keep on average: listing,
            downloading, publishing or resolving a URL, with all its requests (index,
            manifests, metadata, data files), must end within
            ``http_timeout + bytes / min_download_rate`` seconds of its first request, where
            ``bytes`` are those received (or sent) so far, so a server that trickles is cut
            off about ``http_timeout`` seconds in instead of holding the operation for days
            (see :mod:`marl_minari.registry.deadline`).
        fsync: ``file://`` publishes flush every file, the manifest and their folders to disk
            before the version is committed (off: faster on scratch disks, not crash-safe).
    """

    http_timeout: float = DEFAULT_HTTP_TIMEOUT
    min_download_rate: float = DEFAULT_MIN_DOWNLOAD_RATE
    fsync: bool = True

    def __post_init__(self) -> None:
        if not _positive(self.http_timeout):
            raise RemoteError(f"http_timeout must be a positive number of seconds, not "
                              f"{self.http_timeout!r}")
        if not _positive(self.min_download_rate):
            raise RemoteError(f"min_download_rate must be a positive number of bytes per "
                              f"second, not {self.min_download_rate!r}")
        if not isinstance(self.fsync, bool):
            raise RemoteError(f"fsync must be True or False, not {self.fsync!r}")

    @classmethod
    def from_env(cls) -> RemoteSettings:
        """Defaults, with ``MARL_MINARI_HTTP_TIMEOUT`` (seconds) and
        ``MARL_MINARI_REGISTRY_FSYNC`` (``0`` turns flushing off) applied.

        Raises:
            RemoteError: a variable holds something else than the documented values.
        """
        timeout = os.environ.get(HTTP_TIMEOUT_ENV_VAR, "").strip()
        fsync = os.environ.get(FSYNC_ENV_VAR, "").strip()
        if fsync not in ("", "0", "1"):
            raise RemoteError(f"{FSYNC_ENV_VAR}={fsync!r}: use 1 (flush, the default) or 0")
        try:
            seconds = float(timeout) if timeout else DEFAULT_HTTP_TIMEOUT
        except ValueError:
            raise RemoteError(f"{HTTP_TIMEOUT_ENV_VAR}={timeout!r} is not a number of seconds; "
                              "set it to e.g. 60") from None
        if not _positive(seconds):
            raise RemoteError(f"{HTTP_TIMEOUT_ENV_VAR}={timeout!r} must be positive")
        return cls(http_timeout=seconds, fsync=fsync != "0")

    def download_deadline(self, size: int) -> float:
        """Seconds an operation that has moved ``size`` bytes may take in total."""
        return self.http_timeout + size / self.min_download_rate


def _positive(value: object) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and 0 < value < float("inf"))
