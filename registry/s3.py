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

Without credentials a public bucket is read unsigned (:mod:`.s3_clients`). boto3 is imported
only when an ``s3://`` remote is opened, and its absence is a
:class:`~marl_minari.errors.MissingExtraError` naming the ``s3`` extra.

Deadline: every request spends from its operation's :class:`~.deadline.Deadline`, checked
before each request and after each piece of data boto3 hands over (up to 1 MiB per read of a
small object, boto3's own chunks for data files and parts); boto3's sockets are its own, so
waits inside one read are bounded by its timeouts (``AWS_*`` configuration), not cut by the
deadline's watchdog.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
from collections.abc import Callable, Iterator
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

from .backend import Backend, Staging
from .credentials import url_secrets
from .deadline import Deadline, DeadlineExceeded
from .s3_clients import NO_CREDENTIALS, boto3_module, shared_client, unsigned
from .settings import RemoteSettings
from .transfer import (
    Progress,
    changed_since_hashed,
    missing_remote_file,
    too_large,
    uploaded_digests,
)

logger = logging.getLogger("marl_minari.registry")

_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{1,254}$")
_MISSING = {"NoSuchKey", "404", "NotFound"}
_CONFLICT = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
_UNSUPPORTED = {"NotImplemented", "501"}
_REFUSED = {"AccessDenied", "AllAccessDisabled", "403"}
_PART_SIZE = 8 << 20
"""Bytes per part of a staged upload (S3 wants at least 5 MiB for every part but the last)."""
_MAX_PARTS = 10_000
_PART_WORKERS = 8
_SMALL_CHUNK = 1 << 20
"""Bytes per read of a small object: the deadline is checked between them."""


class S3Backend(Backend):
    """A registry in an S3 bucket, below an optional key prefix. ``name``: ``bucket[/prefix]``."""

    kind = "s3"
    writable = True

    def __init__(self, name: str, token: str | None = None, *,
                 settings: RemoteSettings | None = None,
                 deadline: Deadline | None = None) -> None:
        super().__init__(name, token, settings=settings, deadline=deadline)
        boto3_module()
        if url_secrets(f"s3://{name}"):
            raise self.fail(
                f"s3://{name} carries credentials in the URL; s3:// remotes read them from "
                "the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, AWS_PROFILE, ...): "
                "remove the part before '@'"
            )
        bucket, _, prefix = unquote(name).partition("/")
        if not _BUCKET_RE.match(bucket):
            raise self.fail(f"malformed S3 bucket name {bucket!r} in s3://{name}")
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
        """The boto3 S3 client for the environment's configuration (see
        :func:`~.s3_clients.shared_client`)."""
        with self._client_lock:
            if self._client is None:
                self._client = shared_client()
            return self._client

    def require_writable(self) -> None:
        """Refuse to write without credentials, before anything is sent: the client would
        send the writes unsigned (see :mod:`.s3_clients`)."""
        super().require_writable()
        if unsigned(self.client):
            raise self.fail(f"cannot write to {self.location}: {NO_CREDENTIALS}; reading a "
                            "public bucket needs none, writing does")

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
            return self.fail(f"{message}: {NO_CREDENTIALS}")
        code = self._code(exc)
        if code in _REFUSED:  # for a key it does not have too, to who may not list the bucket
            if unsigned(self.client):
                return self.forbidden(f"{message}: refused (HTTP 403) to a request sent "
                                      f"unsigned, which only a public bucket answers: "
                                      f"{NO_CREDENTIALS}")
            return self.forbidden(f"{message}: refused (HTTP 403 {code}): the credentials "
                                  "boto3 found may not read it")
        if code == "NoSuchBucket":
            return self.fail(f"{message}: bucket {self.bucket!r} does not exist")
        return self.fail(message, exc)

    @contextlib.contextmanager
    def _request(self, what: str) -> Iterator[None]:
        """Around one request or transfer (``what``, for the error): the operation's deadline
        is checked first, and its expiry inside becomes :meth:`deadline_passed`."""
        try:
            self.deadline.check()
            yield
        except DeadlineExceeded:
            raise self.deadline_passed(what) from None

    def _spend(self, count: int) -> None:
        """``count`` bytes moved: credit them to the deadline, then check it."""
        self.deadline.credit(count)
        self.deadline.check()

    def read_versioned(self, key: str, limit: int) -> tuple[bytes | None, str | None]:
        where = f"{self.location}/{key}"
        with self._request(f"reading {where}"):
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
                with response["Body"] as body:
                    if int(response.get("ContentLength") or 0) > limit:
                        raise too_large(where, limit)
                    data = bytearray()
                    while len(data) <= limit:
                        chunk = body.read(min(_SMALL_CHUNK, limit + 1 - len(data)))
                        self._spend(len(chunk))
                        if not chunk:
                            break
                        data += chunk
            except self._errors() as exc:
                if self._code(exc) in _MISSING:
                    return None, None
                raise self._explain(f"cannot read {where}", exc) from None
        if len(data) > limit:
            raise too_large(where, limit)
        return bytes(data), response.get("ETag")

    def read(self, key: str, limit: int) -> bytes | None:
        return self.read_versioned(key, limit)[0]

    def write(self, key: str, data: bytes) -> None:
        where = f"{self.location}/{key}"
        with self._request(f"writing {where}"):
            try:
                self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
            except self._errors() as exc:
                raise self._explain(f"cannot write {where}", exc) from None
            self._spend(len(data))

    def _conditional_put(self, key: str, data: bytes, condition: dict[str, str]) -> bool | None:
        """True written, False condition failed, None: the store ignores conditions."""
        from botocore.exceptions import ParamValidationError

        if not self._conditional:
            return None
        where = f"{self.location}/{key}"
        with self._request(f"writing {where}"):
            try:
                self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data,
                                       **condition)
            except ParamValidationError:
                # boto3 older than 1.36 does not know IfMatch/IfNoneMatch on PutObject.
                logger.warning("boto3 is too old for conditional writes; upgrade it (>= 1.36) "
                               "so concurrent publishers cannot overwrite each other's index "
                               "entries")
                self._conditional = False
                return None
            except self._errors() as exc:
                code = self._code(exc)
                if code in _CONFLICT:
                    return False
                if code in _UNSUPPORTED:
                    self._conditional = False
                    return None
                raise self._explain(f"cannot write {where}", exc) from None
            self._spend(len(data))
            return True

    def write_if(self, key: str, data: bytes, version: str | None) -> bool:
        condition = {"IfMatch": version} if version else {"IfNoneMatch": "*"}
        done = self._conditional_put(key, data, condition)
        if done is None:
            self.write(key, data)
            return True
        return done

    def write_new(self, key: str, data: bytes) -> bool:
        done = self._conditional_put(key, data, {"IfNoneMatch": "*"})
        if done is None:
            if self._exists(key):
                return False
            self.write(key, data)
            return True
        return done

    def put_file(self, key: str, source: Path, progress: Progress | None,
                 known: RememberedDigests | None) -> FileDigests:
        # Hash the file on a second thread while boto3 uploads it (both release the GIL),
        # unless its digests are remembered. boto3 also sends a CRC checksum per part,
        # which the store verifies on arrival.
        before = stat_key(os.stat(source))
        if known is not None and before != known.stat:
            raise changed_since_hashed(source)

        def sent(count: int) -> None:
            self._spend(count)
            if progress is not None:
                progress(count)

        where = f"{self.location}/{key}"
        with self._request(f"upload of {source.name} to {where}"):
            try:
                with ThreadPoolExecutor(max_workers=1) as hasher:
                    hashing = None if known else hasher.submit(hash_file, source, ALGORITHMS)
                    self.client.upload_file(str(source), self.bucket, self._key(key),
                                            Callback=sent)
                    size, computed = hashing.result() if hashing else (before[2], {})
            except self._errors() as exc:
                raise self._explain(f"cannot upload {source.name} to {where}", exc) from None
            self.deadline.check()
        if stat_key(os.stat(source)) != before or size != before[2]:
            raise RemoteError(f"{source} changed while it was uploaded; publish again")
        return uploaded_digests(source, size, computed, known)

    def _exists(self, key: str) -> bool:
        with self._request(f"reading {self.location}/{key}"):
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
    def stage(self, staging: Staging, relative: str, source: Path,
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
        with self._request(f"upload of {source.name} to {where}"):
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
                        self.deadline.check()
                        data = os.pread(handle.fileno(), part_size, offset)
                        answer = self.client.upload_part(
                            Bucket=self.bucket, Key=key, UploadId=upload_id,
                            PartNumber=number, Body=data)
                        self._spend(len(data))
                        if progress is not None:
                            progress(len(data))
                        return {"PartNumber": number, "ETag": answer["ETag"],
                                **{k: v for k, v in answer.items() if k.startswith("Checksum")
                                   and isinstance(v, str)}}

                    staged.parts = list(senders.map(send, range(1, len(offsets) + 1), offsets))
                    hashed, computed = hashing.result() if hashing else (size, {})
            except self._errors() as exc:
                raise self._explain(f"cannot upload {source.name} to {where}", exc) from None
            except DeadlineExceeded:
                raise
            except OSError as exc:
                raise self.fail(f"cannot read {source} to upload it", exc) from None
        if stat_key(os.stat(source)) != before or hashed != size:
            raise RemoteError(f"{source} changed while it was uploaded; publish again")
        return uploaded_digests(source, size, computed, known)

    def commit(self, staging: Staging, files: list[str]) -> None:
        for relative in files:
            staged = staging.uploads[relative]
            where = f"{self.location}/{staging.dataset_id}/{relative}"
            with self._request(f"completing the upload of {where}"):
                try:
                    if staged.upload_id is None:
                        self.client.put_object(Bucket=self.bucket, Key=staged.key, Body=b"")
                    else:
                        self.client.complete_multipart_upload(
                            Bucket=self.bucket, Key=staged.key, UploadId=staged.upload_id,
                            MultipartUpload={"Parts": staged.parts})
                except self._errors() as exc:
                    raise self._explain(f"cannot complete the upload of {where}",
                                        exc) from None
            del staging.uploads[relative]

    def discard(self, staging: Staging) -> None:
        # Not bound by the deadline: aborting is cleanup, needed most when it has passed.
        for staged in staging.uploads.values():
            if staged.upload_id is None:
                continue
            try:
                self.client.abort_multipart_upload(Bucket=self.bucket, Key=staged.key,
                                                   UploadId=staged.upload_id)
            except self._errors() as exc:
                # An open upload is invisible; it only holds storage until the bucket's
                # lifecycle rule (AbortIncompleteMultipartUpload) removes it.
                logger.warning("%s", self.fail(f"could not abort an upload to {self.location}",
                                               exc))
        staging.uploads.clear()

    def get_file(self, key: str, target: Path, size: int, algorithm: str,
                 progress: Progress | None) -> tuple[int, str]:
        where = f"{self.location}/{key}"
        with self._request(f"download of {where}"):
            try:
                with open(target, "wb") as handle:
                    sink = _HashingSink(handle, size, algorithm, where, self._spend)
                    # A sink that cannot seek makes boto3 fetch ranges in parallel but hand
                    # them over in order, so every byte is hashed once, as it arrives.
                    self.client.download_fileobj(self.bucket, self._key(key), sink,
                                                 Callback=progress)
            except self._errors() as exc:
                if self._code(exc) in _MISSING:
                    raise missing_remote_file(where) from None
                raise self._explain(f"download of {where} failed", exc) from None
            except DeadlineExceeded:
                raise
            except OSError as exc:
                raise self.fail(f"download of {where} failed", exc) from None
        return sink.size, sink.digests.hexdigests()[algorithm]

    def read_range(self, key: str, offset: int, length: int) -> bytes | memoryview:
        where = f"{self.location}/{key}"
        with self._request(f"reading bytes {offset}-{offset + length - 1} of {where}"):
            try:
                response = self.client.get_object(
                    Bucket=self.bucket, Key=self._key(key),
                    Range=f"bytes={offset}-{offset + length - 1}")
                with response["Body"] as body:
                    data = bytearray()
                    while len(data) < length:
                        chunk = body.read(min(_SMALL_CHUNK, length - len(data)))
                        if not chunk:
                            break
                        self._spend(len(chunk))
                        data += chunk
                    return bytes(data)
            except self._errors() as exc:
                code = self._code(exc)
                if code in _MISSING:
                    raise missing_remote_file(where) from None
                if code in ("InvalidRange", "416"):
                    return b""  # past the end: the caller's verification names the range
                raise self._explain(f"cannot read {where}", exc) from None

    def list_keys(self, prefix: str) -> Iterator[str]:
        start = self._key(prefix) if prefix else (f"{self.prefix}/" if self.prefix else "")
        with self._request(f"listing {self.location}"):
            try:
                pages = self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=start)
                for page in pages:
                    self.deadline.check()
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
    """Write-only, non-seekable file object that hashes, counts and limits what it writes,
    and spends every write from the operation's deadline."""

    def __init__(self, handle: Any, limit: int, algorithm: str, where: str,
                 spend: Callable[[int], None]) -> None:
        self._handle = handle
        self._limit = limit
        self._spend = spend
        self._where = where
        self.size = 0
        self.digests = MultiHash((algorithm,))

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self._limit:
            raise CorruptedDataError(f"{self._where} has more than the {self._limit} bytes the "
                                     "manifest records")
        self._spend(len(data))
        self.digests.update(data)
        self._handle.write(data)
        return len(data)

    def seekable(self) -> bool:
        return False
