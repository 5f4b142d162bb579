"""The Minari internals this library relies on are where it expects them: a Minari release
that moves one fails here, loudly, before it fails a user."""

from __future__ import annotations

from pathlib import Path

import minari
import pytest
from minari.dataset.minari_storage import MinariStorage

from marl_minari.errors import DependencyVersionError
from marl_minari.minari_compat import SUPPORTED_MINARI, check_minari, remote_kinds, storage_class


def test_the_installed_minari_is_a_supported_one() -> None:
    check_minari()
    low, high = SUPPORTED_MINARI
    assert low <= type(low)(minari.__version__) < high


@pytest.mark.parametrize("version", ["0.5.3", "0.6.0", "1.0"])
def test_an_unsupported_minari_is_named_with_the_supported_range(version: str) -> None:
    with pytest.raises(DependencyVersionError, match=rf"minari {version} is installed.*>=0\.5\.4"):
        check_minari(version)


def test_minari_storage_classes_are_where_they_were() -> None:
    hdf5 = storage_class("hdf5")
    assert issubclass(hdf5, MinariStorage) and hdf5.FORMAT == "hdf5"
    assert storage_class("arrow").FORMAT == "arrow"


def test_minari_remote_kinds_table_is_where_it_was(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from marl_minari.registry import register_remote_kinds
    from minari.storage.remotes import get_cloud_storage
    from minari.storage.remotes.cloud_storage import CloudStorage

    kinds = remote_kinds()
    for kind, loader in dict(kinds).items():  # put the table back as it was afterwards
        monkeypatch.setitem(kinds, kind, loader)
    for kind in ("file", "s3", "http", "https"):
        if kind not in kinds:
            monkeypatch.setitem(kinds, kind, None)
            monkeypatch.delitem(kinds, kind)
    assert {"hf", "gcp"} <= set(kinds)  # loaders of classes needing minari[hf] / minari[gcs]
    assert all(callable(loader) for loader in kinds.values())
    register_remote_kinds()
    assert {"file", "s3", "http", "https"} <= set(remote_kinds())
    # Minari's own lookup finds what was added to the table
    assert isinstance(get_cloud_storage(f"file://{tmp_path}"), CloudStorage)
