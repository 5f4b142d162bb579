"""Registry limits: a total deadline per downloaded file, size caps on the small objects.

Real servers on 127.0.0.1: a server that trickles bytes must be cut off at the deadline the
file's manifest size gives, and an oversized ``_index.json`` or ``manifest.json`` is refused
before it is read, with an error naming the file.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from marl_minari.registry import RemoteSettings, StreamSettings
from marl_minari.registry.index import MAX_INDEX_BYTES
from marl_minari.registry.manifest import MAX_MANIFEST_BYTES
from registry_helpers import DrippingHandler, no_partial_dataset

from marl_minari import registry
from marl_minari.errors import CorruptedDataError, InvalidOptionError, RemoteError
from marl_minari.format.ids import dataset_dir


def test_trickling_server_is_cut_off_at_the_deadline(
        published: str, registry_dir: Path,
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    # Two bytes a second: every read returns well within the socket timeout, so only the
    # total deadline (http_timeout + size / min_download_rate, about 2 s here) stops it.
    handler = type("Handler", (DrippingHandler,), {"drip": ("main_data.hdf5",),
                                                   "interval": 0.5, "give_up": 30.0})
    url = thread_server(registry_dir, handler)
    settings = RemoteSettings(http_timeout=2.0, min_download_rate=1 << 20)
    started = time.monotonic()
    with pytest.raises(RemoteError, match="did not finish within 2.0 s") as caught:
        registry.download(published, url, settings=settings)
    elapsed = time.monotonic() - started
    assert 2.0 <= elapsed < 10.0, elapsed
    assert "main_data.hdf5" in str(caught.value)
    no_partial_dataset(published)


def test_deadline_scales_with_the_manifest_size() -> None:
    settings = RemoteSettings(http_timeout=60, min_download_rate=64 * 1024)
    assert settings.download_deadline(0) == 60
    assert settings.download_deadline(1 << 30) == 60 + 16384


def test_oversized_index_is_refused_by_name(published: str, registry_dir: Path,
                                            http_server: Callable[[Path], str]) -> None:
    index = registry_dir / "_index.json"
    with index.open("r+b") as handle:  # sparse: costs no disk, and is never read
        handle.truncate(MAX_INDEX_BYTES + 1)
    for remote in (str(registry_dir), http_server(registry_dir)):
        started = time.monotonic()
        with pytest.raises(CorruptedDataError, match=r"_index\.json is larger than") as caught:
            registry.list_datasets(remote)
        assert str(MAX_INDEX_BYTES) in str(caught.value)
        assert time.monotonic() - started < 5.0  # refused before the cap is read


def test_oversized_manifest_is_refused_by_name(published: str, registry_dir: Path,
                                               http_server: Callable[[Path], str]) -> None:
    manifest = registry_dir / published / "manifest.json"
    with manifest.open("r+b") as handle:
        handle.truncate(MAX_MANIFEST_BYTES + 1)
    for remote in (str(registry_dir), http_server(registry_dir)):
        with pytest.raises(CorruptedDataError, match=r"manifest\.json is larger than"):
            registry.download(published, remote)
        no_partial_dataset(published)


def test_oversized_index_on_s3_is_refused(s3_remote: str, s3_client: Any,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import marl_minari.registry.index as index

    bucket, _, prefix = s3_remote.removeprefix("s3://").partition("/")
    s3_client.put_object(Bucket=bucket, Key=f"{prefix}/_index.json", Body=b" " * 2048)
    monkeypatch.setattr(index, "MAX_INDEX_BYTES", 1024)  # moto holds nothing large
    with pytest.raises(CorruptedDataError, match=r"_index\.json is larger than the 1024"):
        registry.list_datasets(s3_remote)


def test_settings_come_from_parameters_then_environment(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MARL_MINARI_HTTP_TIMEOUT", "2.5")
    monkeypatch.setenv("MARL_MINARI_REGISTRY_FSYNC", "0")
    from_env = registry.open_backend(str(tmp_path)).settings
    assert from_env == RemoteSettings(http_timeout=2.5, fsync=False)
    given = RemoteSettings(http_timeout=7.0)
    assert registry.open_backend("http://127.0.0.1:9/x", settings=given).settings is given

    monkeypatch.setenv("MARL_MINARI_HTTP_TIMEOUT", "soon")
    with pytest.raises(RemoteError, match="MARL_MINARI_HTTP_TIMEOUT='soon'"):
        registry.list_datasets(str(tmp_path))
    monkeypatch.setenv("MARL_MINARI_HTTP_TIMEOUT", "60")
    monkeypatch.setenv("MARL_MINARI_REGISTRY_FSYNC", "no")
    with pytest.raises(RemoteError, match="MARL_MINARI_REGISTRY_FSYNC"):
        registry.list_datasets(str(tmp_path))
    for bad in ({"http_timeout": 0}, {"min_download_rate": -1.0}, {"fsync": "yes"}):
        with pytest.raises(RemoteError):
            RemoteSettings(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("option", "value"), [
    ("parallel_requests", 0), ("parallel_requests", 2.5), ("parallel_requests", None),
    ("max_request_bytes", 0), ("memory_bytes", -1), ("cache_bytes", -5),
    ("cache_bytes", True), ("connections_ahead", -1), ("connections_ahead", "10"),
    ("remote", 60.0), ("cache_dir", 123)])
def test_stream_settings_refuse_what_they_cannot_use(option: str, value: Any) -> None:
    with pytest.raises(InvalidOptionError, match=rf"StreamSettings\({option}={value!r}\)"):
        StreamSettings(**{option: value})


def test_stream_settings_take_their_documented_values() -> None:
    StreamSettings(cache_bytes=0, memory_bytes=0, connections_ahead=0, parallel_requests=1,
                   max_request_bytes=1, remote=RemoteSettings())
    StreamSettings(cache_bytes=None, connections_ahead=None, remote=None)


def test_stream_settings_take_a_cache_folder_as_a_string(tmp_path: Path) -> None:
    # A string was kept as given, and the open failed with "'str' object has no attribute".
    settings = StreamSettings(cache_dir=str(tmp_path / "blocks"))
    assert settings.cache_dir == tmp_path / "blocks"
    assert settings.cache().folder == tmp_path / "blocks"


def test_fsync_setting_is_honoured(registry_dir: Path, small_dataset: Callable[..., str],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    calls: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(descriptor: int) -> None:
        calls.append(descriptor)
        real_fsync(descriptor)

    dataset_id = small_dataset()
    monkeypatch.setattr(os, "fsync", counting_fsync)
    registry.publish(dataset_id, settings=RemoteSettings(fsync=False))
    assert calls == []
    registry.publish(dataset_id, str(registry_dir.parent / "durable"))
    assert len(calls) >= 4  # every file, the manifest and the folders holding them


def test_s3_download_has_the_same_deadline(s3_remote: str,
                                           small_dataset: Callable[..., str]) -> None:
    dataset_id = small_dataset()
    registry.publish(dataset_id, s3_remote)
    shutil.rmtree(dataset_dir(dataset_id))
    instant = RemoteSettings(http_timeout=1e-6, min_download_rate=1e12)  # about a microsecond
    with pytest.raises(RemoteError, match="did not finish within"):
        registry.download(dataset_id, s3_remote, settings=instant)
    no_partial_dataset(dataset_id)
    registry.download(dataset_id, s3_remote)  # the default deadline is generous
