"""http:// registries: a published file:// directory served by ``python -m http.server``."""

from __future__ import annotations

import dataclasses
import shutil
import ssl
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import minari
import pytest
from marl_minari.registry.kinds import open_backend
from marl_strategies import assert_tree_equal
from range_servers import (
    CredentialRecordingHandler,
    PublicBucketHandler,
    RangeHandler,
    RedirectingHandler,
    range_handler,
)
from registry_helpers import as_older_manifest

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import CorruptedDataError, DatasetNotFoundError, RemoteError
from marl_minari.format.ids import dataset_dir


@pytest.fixture
def served(registry_dir: Path, small_dataset: Callable[..., str],
           http_server: Callable[[Path], str]) -> tuple[str, list[str]]:
    """Two datasets published to a directory that a real HTTP server process serves."""
    ids = [small_dataset("mpe2/spread/random-v0"), small_dataset("flat-v0")]
    (dataset_dir(ids[0]) / "README.md").write_text("# card\n")
    for dataset_id in ids:
        registry.publish(dataset_id)
        shutil.rmtree(dataset_dir(dataset_id))
    return http_server(registry_dir), ids


def test_list_and_download_over_http(served: tuple[str, list[str]]) -> None:
    url, ids = served
    assert [d.dataset_id for d in registry.list_datasets(url)] == sorted(ids)
    for dataset_id in ids:
        registry.download(dataset_id, remote=url)
        assert mm.load_dataset(dataset_id).total_episodes == 2
    assert (dataset_dir(ids[0]) / "README.md").read_text() == "# card\n"
    assert (dataset_dir(ids[0]).parent / "namespace_metadata.json").exists()


def test_minari_functions_over_http(served: tuple[str, list[str]],
                                    monkeypatch: pytest.MonkeyPatch,
                                    minari_kinds: None) -> None:
    url, ids = served
    assert set(minari.list_remote_datasets(remote_path=url)) == set(ids)
    minari.download_dataset(f"{url}/flat-v0")  # the full remote path form
    assert minari.load_dataset("flat-v0").total_steps == 20
    monkeypatch.setenv("MINARI_REMOTE", url)
    dataset = minari.load_dataset("mpe2/spread/random-v0", download=True)
    assert dataset.total_episodes == 2


def test_a_redirect_to_another_host_is_followed_without_the_credentials(
        registry_dir: Path, small_dataset: Callable[..., str],
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """A registry whose data files redirect to another host (a Hugging Face repository and
    its CDN): the download and the streamed read follow the redirect, as curl and
    ``requests`` do, and the credentials go to the registry's own host only."""
    dataset_id = small_dataset("mpe2/spread/random-v0")
    registry.publish(dataset_id)
    local = mm.open_source(dataset_id).read([1])
    shutil.rmtree(dataset_dir(dataset_id))
    cdn_handler = range_handler("Cdn", CredentialRecordingHandler, authorizations=[])
    cdn = thread_server(registry_dir, cdn_handler)
    origin_handler = range_handler("Origin", RedirectingHandler, authorizations=[],
                                   elsewhere=cdn)
    origin = thread_server(registry_dir, origin_handler)
    credentialed = origin.replace("http://", "http://reader:pass-word-1@")

    registry.download(dataset_id, credentialed)
    assert mm.load_dataset(dataset_id).total_episodes == 2
    shutil.rmtree(dataset_dir(dataset_id))
    streamed = mm.open_source(f"{credentialed}/{dataset_id}", streaming=True).read([1])
    assert_tree_equal(dataclasses.asdict(streamed), dataclasses.asdict(local))

    assert any(path.endswith("main_data.hdf5") for path, _, _ in cdn_handler.served)
    assert cdn_handler.authorizations and not any(cdn_handler.authorizations)
    assert origin_handler.authorizations
    assert all(seen is not None and seen.startswith("Basic ")
               for seen in origin_handler.authorizations)


def test_a_bucket_answering_403_for_missing_files_is_found_along_the_url(
        registry_dir: Path, small_dataset: Callable[..., str],
        thread_server: Callable[[Path, type[Any]], str]) -> None:
    """A public S3 bucket over HTTPS (or its website) answers 403 for a file it does not
    have, as for the indexes of the registries a URL could also be read as: those publish
    nothing, and the dataset is found, streamed and downloaded; a bucket that refuses
    everything is one error saying what 403 may mean."""
    dataset_id = small_dataset("mpe2/spread/random-v0")
    registry.publish(dataset_id)
    local = mm.open_source(dataset_id).read([0, 1])
    shutil.rmtree(dataset_dir(dataset_id))
    bucket = thread_server(registry_dir, range_handler("Bucket", PublicBucketHandler))
    url = f"{bucket}/{dataset_id}"  # also read as registries .../mpe2/spread and .../mpe2

    streamed = mm.open_source(url, streaming=True).read([0, 1])
    assert_tree_equal(dataclasses.asdict(streamed), dataclasses.asdict(local))
    assert mm.load_dataset(url).total_episodes == 2  # downloaded
    with pytest.raises(DatasetNotFoundError, match="no registry along"):
        mm.open_source(f"{bucket}/mpe2/spread/other-v0", streaming=True)

    private = thread_server(registry_dir, range_handler("Private", PublicBucketHandler,
                                                        refuse_all=True))
    with pytest.raises(RemoteError, match="403.*refused its index.*credentials"):
        mm.open_source(f"{private}/{dataset_id}", streaming=True)


def test_a_registry_over_https_is_read_with_the_certificates_loaded_once(
        registry_dir: Path, small_dataset: Callable[..., str],
        https_server: Callable[[Path, type[Any], Any], str], tls_authority: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real TLS server: the dataset is found along the URL, streamed and downloaded, the
    server's certificate checked; the system's certificates are loaded once for all the
    backends of these operations (each candidate registry, the manifest, each published
    file), not once each (20-100 ms apiece)."""
    dataset_id = small_dataset("mpe2/spread/random-v0")
    registry.publish(dataset_id)
    local = mm.open_source(dataset_id).read([0, 1])
    shutil.rmtree(dataset_dir(dataset_id))
    url = https_server(registry_dir, range_handler("Tls", RangeHandler), tls_authority)
    loads: list[int] = []
    load = ssl.SSLContext.load_default_certs
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs",
                        lambda self, *args: (loads.append(1), load(self, *args))[1])

    streamed = mm.open_source(f"{url}/{dataset_id}", streaming=True).read([0, 1])
    assert_tree_equal(dataclasses.asdict(streamed), dataclasses.asdict(local))
    registry.download(dataset_id, url)
    assert mm.load_dataset(dataset_id).total_episodes == 2
    assert len(loads) == 1


def test_a_certificate_no_trusted_authority_issued_is_refused(
        registry_dir: Path, small_dataset: Callable[..., str],
        https_server: Callable[[Path, type[Any], Any], str], tls_authority: Any) -> None:
    import trustme

    dataset_id = small_dataset("mpe2/spread/random-v0")
    registry.publish(dataset_id)
    shutil.rmtree(dataset_dir(dataset_id))
    url = https_server(registry_dir, RangeHandler, trustme.CA())  # not the trusted one
    with pytest.raises(RemoteError, match="CERTIFICATE_VERIFY_FAILED"):
        registry.download(dataset_id, url)
    with pytest.raises(RemoteError, match="CERTIFICATE_VERIFY_FAILED"):
        mm.open_source(f"{url}/{dataset_id}", streaming=True)
    assert not dataset_dir(dataset_id).exists()


def test_http_is_read_only(served: tuple[str, list[str]],
                           small_dataset: Callable[..., str]) -> None:
    url, _ = served
    dataset_id = small_dataset("mpe2/spread/random-v5")
    with pytest.raises(RemoteError, match="read-only"):
        registry.publish(dataset_id, remote=url)
    with pytest.raises(RemoteError, match="read-only"):
        registry.open_remote(url).upload_dataset(dataset_id)


def test_http_tampering_and_missing(served: tuple[str, list[str]], registry_dir: Path) -> None:
    url, ids = served
    with pytest.raises(DatasetNotFoundError):
        registry.download("mpe2/spread/random-v9", remote=url)
    target = registry_dir / ids[1] / "data" / "main_data.hdf5"
    target.write_bytes(target.read_bytes()[:-1] + b"X")
    with pytest.raises(CorruptedDataError, match="BLAKE3"):
        registry.download(ids[1], remote=url)
    manifest = registry_dir / ids[1] / "manifest.json"
    manifest.write_bytes(as_older_manifest(manifest.read_bytes()))
    with pytest.raises(CorruptedDataError, match="SHA-256"):
        registry.download(ids[1], remote=url)
    target.write_bytes(target.read_bytes()[:100])
    with pytest.raises(CorruptedDataError, match="truncated"):
        registry.download(ids[1], remote=url)
    assert not dataset_dir(ids[1]).exists()


def test_unreachable_server_is_a_remote_error(registry_dir: Path) -> None:
    with pytest.raises(RemoteError, match="127.0.0.1:1"):
        registry.list_datasets("http://127.0.0.1:1/registry")


def test_the_system_certificates_are_loaded_on_the_first_https_request_not_before(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A streaming open builds several backends; each loading the system's certificates
    (30-100 ms with OpenSSL 3) cost a far reader more than its reads. From Python 3.12 on,
    urllib's ``HTTPSHandler`` makes a default TLS context when it is constructed: the stand-in
    below does that on any Python."""
    from marl_minari.registry import http

    monkeypatch.setattr(http, "_system_tls", None)  # as in a new process
    loads: list[str] = []
    monkeypatch.setattr(ssl.SSLContext, "load_default_certs",
                        lambda self, *args: loads.append("certificates"))
    constructor = urllib.request.HTTPSHandler.__init__

    def like_python_3_12(self: Any, debuglevel: Any = None, context: Any = None,
                         check_hostname: Any = None) -> None:
        constructor(self, 0, context, check_hostname)
        if context is None:
            self._context = ssl.create_default_context()

    monkeypatch.setattr(urllib.request.HTTPSHandler, "__init__", like_python_3_12)
    for url in ("https://registry.invalid/datasets", "http://registry.invalid/datasets"):
        open_backend(url)
    assert loads == []
    # the first HTTPS request loads them, and fails on a server that speaks no TLS; the
    # process's later backends use them as they are
    with pytest.raises(RemoteError, match="127.0.0.1:1"):
        registry.list_datasets("https://127.0.0.1:1/registry")
    with pytest.raises(RemoteError, match="127.0.0.1:1"):
        registry.list_datasets("https://127.0.0.1:1/registry")
    assert loads == ["certificates"]
