"""s3:// registries against moto's standalone S3 server on loopback, with real boto3 requests."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import minari
import pytest
from marl_minari.registry.backend import Forbidden
from marl_strategies import assert_tree_equal
from registry_helpers import (
    S3_SECRET,
    Interrupted,
    as_older_manifest,
    interrupt_after,
    new_bucket,
    no_partial_dataset,
    start_moto,
    stop,
    use_s3_endpoint,
)

import marl_minari as mm
from marl_minari import registry
from marl_minari.errors import (
    CorruptedDataError,
    DatasetExistsError,
    DatasetNotFoundError,
    RemoteError,
)
from marl_minari.format.ids import dataset_dir

pytest.importorskip("boto3")


def _bucket_and_prefix(remote: str) -> tuple[str, str]:
    bucket, _, prefix = remote.removeprefix("s3://").partition("/")
    return bucket, prefix


@pytest.fixture
def published_s3(s3_remote: str, small_dataset: Callable[..., str]) -> str:
    """A small dataset published to the S3 remote, with its local copy removed."""
    dataset_id = small_dataset()
    registry.publish(dataset_id, s3_remote)
    minari.delete_dataset(dataset_id)
    return dataset_id


def _keys(client: Any, remote: str) -> list[str]:
    bucket, prefix = _bucket_and_prefix(remote)
    response = client.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return sorted(item["Key"] for item in response.get("Contents", []))


def test_publish_list_download(s3_remote: str, s3_client: Any,
                               small_dataset: Callable[..., str]) -> None:
    dataset_id = small_dataset()
    (dataset_dir(dataset_id) / "README.md").write_text("# card\n")
    result = registry.publish(dataset_id, s3_remote)
    assert result.remote == s3_remote
    keys = _keys(s3_client, s3_remote)
    assert "registry/_index.json" in keys
    assert f"registry/{dataset_id}/manifest.json" in keys
    assert f"registry/{dataset_id}/README.md" in keys
    assert "registry/mpe2/spread/namespace_metadata.json" in keys

    assert [d.dataset_id for d in registry.list_datasets(s3_remote)] == [dataset_id]
    bucket, prefix = _bucket_and_prefix(s3_remote)
    s3_client.delete_object(Bucket=bucket, Key=f"{prefix}/_index.json")
    assert registry.list_datasets(s3_remote) == []
    assert registry.reindex(s3_remote) == 1
    assert [d.dataset_id for d in registry.list_datasets(s3_remote)] == [dataset_id]
    minari.delete_dataset(dataset_id)
    registry.download(dataset_id, remote=s3_remote)
    assert mm.load_dataset(dataset_id).total_episodes == 2

    assert registry.publish(dataset_id, s3_remote).outcomes == {dataset_id: "unchanged"}


def test_minari_functions_over_s3(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch,
                                  small_dataset: Callable[..., str],
                                  minari_kinds: None) -> None:
    use_s3_endpoint(monkeypatch, moto_endpoint)
    bucket = new_bucket()
    remote = f"s3://{bucket}"  # registry at the bucket root: the full-path form works too
    monkeypatch.setenv("MINARI_REMOTE", remote)
    dataset_id = small_dataset()
    minari.upload_dataset(dataset_id, token="unused")
    assert set(minari.list_remote_datasets()) == {dataset_id}
    minari.delete_dataset(dataset_id)
    assert minari.load_dataset(dataset_id, download=True).total_episodes == 2
    minari.delete_dataset(dataset_id)
    minari.download_dataset(f"{remote}/{dataset_id}")
    assert mm.load_dataset(dataset_id).total_steps == 20


def test_s3_tampering_and_truncation(s3_remote: str, s3_client: Any, published_s3: str) -> None:
    dataset_id = published_s3
    bucket, prefix = _bucket_and_prefix(s3_remote)
    key = f"{prefix}/{dataset_id}/data/main_data.hdf5"
    original = s3_client.get_object(Bucket=bucket, Key=key)["Body"].read()

    flipped = bytearray(original)
    flipped[100] ^= 0xFF
    s3_client.put_object(Bucket=bucket, Key=key, Body=bytes(flipped))
    with pytest.raises(CorruptedDataError, match="BLAKE3"):
        registry.download(dataset_id, remote=s3_remote)
    no_partial_dataset(dataset_id)
    manifest_key = f"{prefix}/{dataset_id}/manifest.json"
    manifest = s3_client.get_object(Bucket=bucket, Key=manifest_key)["Body"].read()
    s3_client.put_object(Bucket=bucket, Key=manifest_key, Body=as_older_manifest(manifest))
    with pytest.raises(CorruptedDataError, match="SHA-256"):
        registry.download(dataset_id, remote=s3_remote)
    no_partial_dataset(dataset_id)

    s3_client.put_object(Bucket=bucket, Key=key, Body=original[:-10])
    with pytest.raises(CorruptedDataError, match="truncated"):
        registry.download(dataset_id, remote=s3_remote)
    no_partial_dataset(dataset_id)

    s3_client.put_object(Bucket=bucket, Key=key, Body=original + b"\0" * (12 << 20))
    with pytest.raises(CorruptedDataError, match="more than"):
        registry.download(dataset_id, remote=s3_remote)
    no_partial_dataset(dataset_id)

    s3_client.delete_object(Bucket=bucket, Key=key)
    with pytest.raises(CorruptedDataError, match="missing"):
        registry.download(dataset_id, remote=s3_remote)
    no_partial_dataset(dataset_id)


def test_s3_manifest_traversal(s3_remote: str, s3_client: Any, published_s3: str) -> None:
    dataset_id = published_s3
    bucket, prefix = _bucket_and_prefix(s3_remote)
    key = f"{prefix}/{dataset_id}/manifest.json"
    manifest = json.loads(s3_client.get_object(Bucket=bucket, Key=key)["Body"].read())
    manifest["files"][0]["path"] = "../../../outside.hdf5"
    s3_client.put_object(Bucket=bucket, Key=key, Body=json.dumps(manifest).encode())
    with pytest.raises(CorruptedDataError, match="unsafe path"):
        registry.download(dataset_id, remote=s3_remote)
    no_partial_dataset(dataset_id)


def test_s3_overwrite_refused_and_conditional_create(s3_remote: str, s3_client: Any,
                                                     record_parallel: Callable[..., Any]) -> None:
    dataset_id = "mpe2/spread/random-v0"
    record_parallel("mpe2/simple_spread_v3", 2, max_cycles=10, dataset_id=dataset_id)
    registry.publish(dataset_id, s3_remote)
    minari.delete_dataset(dataset_id)
    record_parallel("mpe2/simple_spread_v3", 3, max_cycles=10, dataset_id=dataset_id)
    with pytest.raises(DatasetExistsError, match="different files"):
        registry.publish(dataset_id, s3_remote)
    backend = registry.open_backend(s3_remote)
    assert backend.write_new("probe/manifest.json", b"1")
    assert not backend.write_new("probe/manifest.json", b"2")
    assert backend.read("probe/manifest.json", 100) == b"1"


def test_s3_interrupted_upload_never_shows_up(s3_remote: str, s3_client: Any,
                                              small_dataset: Callable[..., str],
                                              minari_kinds: None) -> None:
    dataset_id = small_dataset()
    with pytest.raises(Interrupted):
        registry.publish(dataset_id, s3_remote, progress=interrupt_after(2))
    assert not any(k.endswith("manifest.json") for k in _keys(s3_client, s3_remote))
    bucket = s3_remote.removeprefix("s3://").split("/")[0]
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert registry.list_datasets(s3_remote) == []
    assert minari.list_remote_datasets(remote_path=s3_remote) == {}
    assert registry.publish(dataset_id, s3_remote).outcomes == {dataset_id: "published"}


def test_s3_interrupted_download_leaves_nothing(s3_remote: str, published_s3: str) -> None:
    dataset_id = published_s3
    with pytest.raises(Interrupted):
        registry.download(dataset_id, remote=s3_remote, progress=interrupt_after(1))
    no_partial_dataset(dataset_id)


def test_s3_server_dying_mid_download(monkeypatch: pytest.MonkeyPatch,
                                      small_dataset: Callable[..., str]) -> None:
    process, endpoint = start_moto()  # a server of its own, killed during the transfer
    try:
        use_s3_endpoint(monkeypatch, endpoint)
        monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
        remote = f"s3://{new_bucket()}"
        dataset_id = small_dataset()
        (dataset_dir(dataset_id) / "README.md").write_bytes(b"x" * (24 << 20))
        registry.publish(dataset_id, remote)
        minari.delete_dataset(dataset_id)

        def kill_server(count: int) -> None:
            process.kill()

        with pytest.raises(RemoteError):
            registry.download(dataset_id, remote=remote, progress=kill_server)
        no_partial_dataset(dataset_id)
    finally:
        stop(process)


def test_s3_errors_carry_no_credentials(s3_remote: str, small_dataset: Callable[..., str],
                                        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="marl_minari")
    dataset_id = small_dataset()
    registry.publish(dataset_id, s3_remote)
    errors = []
    for call in (lambda: registry.download("mpe2/none-v0", remote=s3_remote),
                 lambda: registry.publish(dataset_id, "s3://no-such-bucket-here"),
                 lambda: registry.list_datasets("s3://no-such-bucket-here")):
        with pytest.raises((RemoteError, DatasetNotFoundError)) as info:
            call()
        errors.append(str(info.value))
    assert "does not exist" in errors[1]
    bucket, prefix = _bucket_and_prefix(s3_remote)
    stored = registry.open_backend(s3_remote).read("_index.json", 1 << 20)
    assert stored is not None
    for text in [*errors, caplog.text, stored.decode()]:
        assert S3_SECRET not in text


def _without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    """No credentials anywhere boto3 looks (variables, files, instance metadata)."""
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _make_public(client: Any, remote: str) -> None:
    """A bucket policy granting everyone reading and listing, as public datasets have."""
    bucket, _ = _bucket_and_prefix(remote)
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": "*",
                       "Action": ["s3:GetObject", "s3:ListBucket"],
                       "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"]}]}))


def test_a_public_bucket_is_read_without_credentials(
        s3_remote: str, s3_client: Any, small_dataset: Callable[..., str], block_cache: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """As ``aws s3 --no-sign-request`` reads a public bucket: listing, streaming and
    downloading, every request unsigned."""
    dataset_id = small_dataset()
    registry.publish(dataset_id, s3_remote)
    local = mm.open_source(dataset_id).read([0, 1])
    minari.delete_dataset(dataset_id)
    _make_public(s3_client, s3_remote)
    _without_credentials(monkeypatch)
    assert [d.dataset_id for d in registry.list_datasets(s3_remote)] == [dataset_id]
    streamed = mm.open_source(f"{s3_remote}/{dataset_id}", streaming=True).read([0, 1])
    assert_tree_equal(dataclasses.asdict(streamed), dataclasses.asdict(local))
    registry.download(dataset_id, s3_remote)
    assert mm.load_dataset(dataset_id).total_episodes == 2


def test_a_private_bucket_without_credentials_says_so(
        s3_remote: str, small_dataset: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A bucket that refuses the unsigned request (HTTP 403): a ``Forbidden`` (which a
    lookup along a URL takes as "nothing published here") saying credentials are missing."""
    registry.publish(small_dataset(), s3_remote)
    _without_credentials(monkeypatch)
    with pytest.raises(Forbidden, match="unsigned.*no AWS credentials found"):
        registry.list_datasets(s3_remote)


def test_writing_without_credentials_is_refused(
        s3_remote: str, s3_client: Any, small_dataset: Callable[..., str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way to write (ours, and Minari's upload functions) is refused before anything is
    sent: the bucket may well take unsigned writes (moto does)."""
    dataset_id = small_dataset()
    _without_credentials(monkeypatch)
    remote = registry.open_remote(s3_remote)
    for write in (lambda: registry.publish(dataset_id, s3_remote),
                  lambda: registry.reindex(s3_remote),
                  lambda: remote.upload_dataset(dataset_id),
                  lambda: remote.upload_namespace("mpe2/spread")):
        with pytest.raises(RemoteError, match="no AWS credentials found.*writing does"):
            write()
    assert _keys(s3_client, s3_remote) == []


def test_remotes_of_one_configuration_share_a_client(s3_remote: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from marl_minari.registry.s3 import S3Backend

    first, second = (S3Backend(name) for name in (s3_remote.removeprefix("s3://"),
                                                    f"{s3_remote.removeprefix('s3://')}/other"))
    assert first.client is second.client
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")
    third = S3Backend(s3_remote.removeprefix("s3://"))
    assert third.client is not first.client
    assert third.client.meta.config.retries["total_max_attempts"] == 3


def test_s3_multipart_staging_of_large_and_empty_files(
        s3_remote: str, s3_client: Any, small_dataset: Callable[..., str]) -> None:
    # A file of several parts (8 MiB each) and an empty one go through the open multipart
    # uploads a publish stages, and come back byte for byte.
    import os

    dataset_id = small_dataset()
    payload = os.urandom((17 << 20) + 123)
    (dataset_dir(dataset_id) / "extra.bin").write_bytes(payload)
    (dataset_dir(dataset_id) / "empty.txt").write_bytes(b"")
    manifest = registry.publish(dataset_id, s3_remote).manifest
    assert {e.path: e.size for e in manifest.files}["extra.bin"] == len(payload)
    bucket = s3_remote.removeprefix("s3://").split("/")[0]
    assert s3_client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    minari.delete_dataset(dataset_id)
    registry.download(dataset_id, s3_remote)
    assert (dataset_dir(dataset_id) / "extra.bin").read_bytes() == payload
    assert (dataset_dir(dataset_id) / "empty.txt").read_bytes() == b""
