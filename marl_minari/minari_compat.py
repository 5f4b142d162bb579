"""The parts of Minari this library uses that Minari does not export publicly, in one place.

Everything else goes through Minari's public API (``minari.load_dataset``,
``MinariDataset``, ``MinariStorage.read``...). What is here has no public equivalent in the
Minari releases this library supports (:data:`SUPPORTED_MINARI`); each function says why it
is needed. :func:`check_minari` runs before any of them, and the test suite checks every one
against the installed Minari, so a Minari release that moves them fails loudly, at once.
"""

from __future__ import annotations

from typing import Any, Final

import minari
from packaging.version import Version

from marl_minari.errors import DependencyVersionError

SUPPORTED_MINARI: Final = (Version("0.5.4"), Version("0.6"))
"""Minari releases whose private names below are known: ``>= 0.5.4, < 0.6``."""


def check_minari(version: str | None = None) -> None:
    """Raise :class:`DependencyVersionError` unless Minari ``version`` (default: the installed
    one) is one this module's private names are known for."""
    found = Version(version or minari.__version__)
    low, high = SUPPORTED_MINARI
    if not low <= found < high:
        raise DependencyVersionError(
            f"marl-minari supports minari >= {low}, < {high}; minari {found} is installed. "
            f'Install a supported one: pip install "minari[hdf5]>={low},<{high}"')


def storage_class(data_format: str) -> type[Any]:
    """Minari's ``MinariStorage`` subclass for ``data_format`` (``"hdf5"``, ``"arrow"``).

    Public ``MinariStorage.read(path)`` parses the spaces with Minari's own JSON reader,
    seconds for an image env's element-wise Box bounds; constructing the storage class with
    spaces parsed by :mod:`marl_minari.format.space_json` needs the class itself.
    """
    check_minari()
    from minari.dataset._storages import get_minari_storage

    return get_minari_storage(data_format)


def remote_kinds() -> dict[str, Any]:
    """Minari's table of remote kinds (``{"hf": ..., "gcp": ...}``).

    Minari has no public way to add a remote kind; adding ``file``, ``s3`` and ``http(s)``
    to this table is what lets ``minari.download_dataset`` and friends use them.
    """
    check_minari()
    from minari.storage.remotes import _registry

    registry: dict[str, Any] = _registry  # kind -> loader of its CloudStorage class
    return registry
