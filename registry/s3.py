"""``s3://bucket[/prefix]`` remotes: any S3-compatible object store, through boto3.

Endpoint, region and credentials come from boto3's usual sources: ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL`` (MinIO, Ceph, R2, a local test server, ...), ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE`` and ``~/.aws/config``,
instance roles, and ``AWS_MAX_ATTEMPTS`` / ``AWS_RETRY_MODE`` for retries. Nothing of that is
stored in the registry or printed: error messages go through
:func:`marl_minari.registry.credentials.scrub`. Credentials in the URL (``s3://KEY:SECRET@...``)
are refused without being echoed.

Concurrency: a publish uploads each file as a multipart upload it leaves open (invisible),
creates the manifest with ``If-None-Match: *`` (fails if another publisher created it first),
and only then completes its uploads, a server-side step that moves no data; a publish that
lost the claim aborts its uploads. The index is replaced with ``If-Match: <etag>`` (retried on
conflict). Stores without conditional writes get a check-then-write fallback.

boto3 is imported only when an ``s3://`` remote is opened, so its absence is a
:class:`~marl_minari.errors.RemoteError` with the install line, never an ``ImportError``.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from marl_minari.errors import CorruptedDataError, RemoteError
from marl_minari.format.digests import (
    ALGORITHMS,
    FileDigests,
    MultiHash,
    RememberedDigests,
    hash_file,
    stat_key,
)

from .credentials import url_secrets
from .manifest import missing_remote_file
from .settings import RemoteSettings
from .storage import RegistryStorage, Staging, logger
from .transfer import (
    DeadlineExceeded,
    Progress,
    changed_since_hashed,
    too_large,
    uploaded_digests,
)

_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")
_MISSING = {"NoSuchKey", "404", "NotFound"}
_CONFLICT = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_UNSUPPORTED = {"NotImplemented", "501"}
_PART_SIZE = 8 << 20
"""Bytes per part of a staged upload (S3 wants at least 5 MiB for every part but the last)."""
_MAX_PARTS = 10_000
_PART_WORKERS = 8


def _boto() -> Any:
    try:
        import boto3
    except ImportError:
        raise RemoteError(
            's3:// remotes need boto3: pip install "marl-minari[s3]" (or pip install boto3)'
        ) from None
    return boto3


_CLIENTS: dict[tuple[tuple[str, str], ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()
_MAX_CLIENTS = 8


def _shared_client() -> Any:
    """One boto3 S3 client per AWS configuration in the environment (``AWS_*`` variables).

    Creating a client takes about 0.15 s (mostly loading the service model), as long as
    publishing a small dataset; clients are thread-safe, so every remote of the same
    configuration shares one. Credentials read from files or instance roles refresh inside
    the client; edits to ``~/.aws/config`` apply to clients created afterwards.
    """
    key = tuple(sorted((name, value) for name, value in os.environ.items()
                       if name.startswith("AWS_")))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            from botocore.config import Config

            client = _boto().session.Session().client(
                "s3", config=Config(max_pool_connections=32))
            if len(_CLIENTS) >= _MAX_CLIENTS:
                del _CLIENTS[next(iter(_CLIENTS))]
            _CLIENTS[key] = client
        return client


class S3Storage(RegistryStorage):
    """A registry in an S3 bucket, below an optional key prefix. ``name``: ``bucket[/prefix]``."""

    kind = "s3"
    writable = True

    def __init__(self, name: str, token: str | None = None, *,
                 settings: RemoteSettings | None = None) -> None:
        super().__init__(name, token, settings=settings)
        _boto()
        if url_secrets(f"s3://{name}"):
            raise self._fail(
                f"s3://{name} carries credentials in the URL; s3:// remotes read them from "
                "the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ...): "
                "remove the part before '@'"
            )
        bucket, _, prefix = unquote(name).partition("/")
        if not _BUCKET_RE.match(bucket):
            raise self._fail(f"malformed S3 bucket name {bucket!r} in s3://{name}")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._client: Any = None
        self._client_lock = threading.Lock()
        self._conditional = True

    @property
    def location(self) -> str:
        """``s3://bucket[/prefix]``."""
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @property
    def client(self) -> Any:
        """The boto3 S3 client for the environment's configuration (see :func:`_shared_client`)."""
        with self._client_lock:
            if self._client is None:
                self._client = _shared_client()
            return self._client

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def _errors(self) -> tuple[type[BaseException], ...]:
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        return (ClientError, BotoCoreError, Boto3Error)

    def _code(self, exc: BaseException) -> str:
        response = getattr(exc, "response", None) or {}
        error = response.get("Error", {}) if isinstance(response, dict) else {}
        code = str(error.get("Code", ""))
        if not code:
            status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            code = str(status or "")
        return code

    def _explain(self, message: str, exc: BaseException) -> RemoteError:
        from botocore.exceptions import NoCredentialsError

        if isinstance(exc, NoCredentialsError):
            return self._fail(f"{message}: no AWS credentials found; set AWS_ACCESS_KEY_ID and "
                              "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or another source boto3 reads")
        if self._code(exc) == "NoSuchBucket":
            return self._fail(f"{message}: bucket {self.bucket!r} does not exist")
        return self._fail(message, exc)

    def _read_versioned(self, key: str, limit: int) -> tuple[bytes | None, str | None]:
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
            with response["Body"] as body:
                if int(response.get("ContentLength") or 0) > limit:
                    raise too_large(f"{self.location}/{key}", limit)
                data = body.read(limit + 1)
        except self._errors() as exc:
            if self._code(exc) in _MISSING:
                return None, None
            raise self._explain(f"cannot read {self.location}/{key}", exc) from None
        if len(data) > limit:
            raise too_large(f"{self.location}/{key}", limit)
        return data, response.get("ETag")

    def _read(self, key: str, limit: int) -> bytes | None:
        return self._read_versioned(key, limit)[0]

    def _write(self, key: str, data: bytes) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except self._errors() as exc:
            raise self._explain(f"cannot write {self.location}/{key}", exc) from None

    def _conditional_put(self, key: str, data: bytes, condition: dict[str, str]) -> bool | None:
        """True written, False condition failed, None: the store ignores conditions."""
        from botocore.exceptions import ParamValidationError

        if not self._conditional:
            return None
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data,
                                   **condition)
            return True
        except ParamValidationError:
            # boto3 older than 1.36 does not know IfMatch/IfNoneMatch on PutObject.
            logger.warning("boto3 is too old for conditional writes; upgrade it (>= 1.36) so "
                           "concurrent publishers cannot overwrite each other's index entries")
            self._conditional = False
            return None
        except self._errors() as exc:
            code = self._code(exc)
            if code in _CONFLICT:
                return False
            if code in _UNSUPPORTED:
                self._conditional = False
                return None
            raise self._explain(f"cannot write {self.location}/{key}", exc) from None

    def _write_if(self, key: str, data: bytes, version: str | None) -> bool:
        condition = {"IfMatch": version} if version else {"IfNoneMatch": "*"}
        done = self._conditional_put(key, data, condition)
        if done is None:
            self._write(key, data)
            return True
        return done

    def _write_new(self, key: str, data: bytes) -> bool:
        done = self._conditional_put(key, data, {"IfNoneMatch": "*"})
        if done is None:
            if self._exists(key):
                return False
            self._write(key, data)
            return True
        return done

    def _put_file(self, key: str, source: Path, progress: Progress | None,
                  known: RememberedDigests | None) -> FileDigests:
        # Hash the file on a second thread while boto3 uploads it (both release the GIL),
        # unless its digests are remembered. boto3 also sends a CRC checksum per part,
        # which the store verifies on arrival.
        before = stat_key(os.stat(source))
        if known is not None and before != known.stat:
            raise changed_since_hashed(source)
        try:
            with ThreadPoolExecutor(max_workers=1) as hasher:
                hashing = None if known else hasher.submit(hash_file, source, ALGORITHMS)
                self.client.upload_file(str(source), self.bucket, self._key(key),
                                        Callback=progress)
                size, computed = hashing.result() if hashing else (before[2], {})
        except self._errors() as exc:
            raise self._explain(f"cannot upload {source.name} to {self.location}/{key}",
                                exc) from None
        if stat_key(os.stat(source)) != before or size != before[2]:
            raise RemoteError(f"{source} changed while it was uploaded; publish again")
        return uploaded_digests(source, size, computed, known)

    def _exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except self._errors() as exc:
            if self._code(exc) in _MISSING:
                return False
            raise self._explain(f"cannot read {self.location}/{key}", exc) from None

    # A publish stages each file as a multipart upload to its published key, left open: its
    # parts are invisible (no reader or other publisher sees them, and another publisher's
    # parts for the same key are a different upload). Only the publish that claimed the
    # version completes its uploads, which is a server-side step; the loser aborts its own.
    def _stage_file(self, staging: Staging, relative: str, source: Path,
                    progress: Progress | None, known: RememberedDigests | None) -> FileDigests:
        key = self._key(f"{staging.dataset_id}/{relative}")
        where = f"{self.location}/{staging.dataset_id}/{relative}"
        before = stat_key(os.stat(source))
        if known is not None and before != known.stat:
            raise changed_since_hashed(source)
        size = before[2]
        if size == 0:
            staging.uploads[relative] = _StagedUpload(key, None)  # written at commit
            return uploaded_digests(source, 0, MultiHash(ALGORITHMS).hexdigests(), known)
        try:
            upload_id = self.client.create_multipart_upload(Bucket=self.bucket,
                                                            Key=key)["UploadId"]
        except self._errors() as exc:
            raise self._explain(f"cannot start the upload of {where}", exc) from None
        staged = staging.uploads[relative] = _StagedUpload(key, upload_id)
        part_size = max(_PART_SIZE, -(-size // _MAX_PARTS))
        offsets = range(0, size, part_size)
        try:
            with open(source, "rb", buffering=0) as handle, \
                    ThreadPoolExecutor(max_workers=1) as hasher, \
                    ThreadPoolExecutor(max_workers=_PART_WORKERS) as senders:
                hashing = None if known else hasher.submit(hash_file, source, ALGORITHMS)

                def send(number: int, offset: int) -> dict[str, Any]:
                    data = os.pread(handle.fileno(), part_size, offset)
                    answer = self.client.upload_part(
                        Bucket=self.bucket, Key=key, UploadId=upload_id,
                        PartNumber=number, Body=data)
                    if progress is not None:
                        progress(len(data))
                    return {"PartNumber": number, "ETag": answer["ETag"],
                            **{k: v for k, v in answer.items() if k.startswith("Checksum")
                               and isinstance(v, str)}}

                staged.parts = list(senders.map(send, range(1, len(offsets) + 1), offsets))
                hashed, computed = hashing.result() if hashing else (size, {})
        except self._errors() as exc:
            raise self._explain(f"cannot upload {source.name} to {where}", exc) from None
        except OSError as exc:
            raise self._fail(f"cannot read {source} to upload it", exc) from None
        if stat_key(os.stat(source)) != before or hashed != size:
            raise RemoteError(f"{source} changed while it was uploaded; publish again")
        return uploaded_digests(source, size, computed, known)

    def _commit_staging(self, staging: Staging, files: list[str]) -> None:
        for relative in files:
            staged = staging.uploads[relative]
            try:
                if staged.upload_id is None:
                    self.client.put_object(Bucket=self.bucket, Key=staged.key, Body=b"")
                else:
                    self.client.complete_multipart_upload(
                        Bucket=self.bucket, Key=staged.key, UploadId=staged.upload_id,
                        MultipartUpload={"Parts": staged.parts})
            except self._errors() as exc:
                raise self._explain(f"cannot complete the upload of {self.location}/"
                                    f"{staging.dataset_id}/{relative}", exc) from None
            del staging.uploads[relative]

    def _discard_staging(self, staging: Staging) -> None:
        for staged in staging.uploads.values():
            if staged.upload_id is None:
                continue
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=staged.key,
                                                   UploadId=staged.upload_id)
            except self._errors() as exc:
                # An open upload is invisible; it only holds storage until the bucket's
                # lifecycle rule (AbortIncompleteMultipartUpload) removes it.
                logger.warning("%s", self._fail(f"could not abort an upload to {self.location}",
                                                exc))
        staging.uploads.clear()

    def _get_file(self, key: str, target: Path, size: int, algorithm: str,
                  progress: Progress | None) -> tuple[int, str]:
        where = f"{self.location}/{key}"
        seconds = self.settings.download_deadline(size)
        try:
            with open(target, "wb") as handle:
                sink = _HashingSink(handle, size, algorithm, where,
                                    time.monotonic() + seconds)
                # A sink that cannot seek makes boto3 fetch ranges in parallel but hand them
                # over in order, so every byte is hashed once, as it arrives.
                self.client.download_fileobj(self.bucket, self._key(key), sink,
                                             Callback=progress)
        except self._errors() as exc:
            if self._code(exc) in _MISSING:
                raise missing_remote_file(where) from None
            raise self._explain(f"download of {where} failed", exc) from None
        except DeadlineExceeded:
            raise self._fail(f"download of {where} did not finish within {seconds:.1f} s, the "
                             f"deadline for {size} bytes (RemoteSettings.download_deadline); "
                             "try again later") from None
        except OSError as exc:
            raise self._fail(f"download of {where} failed", exc) from None
        return sink.size, sink.digests.hexdigests()[algorithm]

    def _list_keys(self, prefix: str) -> Iterator[str]:
        start = self._key(prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=start)
            for page in pages:
                for item in page.get("Contents", []):
                    key = item["Key"]
                    yield key[len(self.prefix) + 1:] if self.prefix else key
        except self._errors() as exc:
            raise self._explain(f"cannot list {self.location}", exc) from None


@dataclass
class _StagedUpload:
    """An open multipart upload of one staged file (``upload_id`` None: an empty file)."""

    key: str
    upload_id: str | None
    parts: list[dict[str, Any]] = field(default_factory=list)


class _HashingSink:
    """Write-only, non-seekable file object that hashes, counts and limits what it writes."""

    def __init__(self, handle: Any, limit: int, algorithm: str, where: str,
                 deadline: float) -> None:
        self._handle = handle
        self._limit = limit
        self._deadline = deadline
        self._where = where
        self.size = 0
        self.digests = MultiHash((algorithm,))

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self._limit:
            raise CorruptedDataError(f"{self._where} has more than the {self._limit} bytes the "
                                     "manifest records")
        if time.monotonic() > self._deadline:
            raise DeadlineExceeded
        self.digests.update(data)
        self._handle.write(data)
        return len(data)

    def seekable(self) -> bool:
        return False
