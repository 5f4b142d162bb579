"""The boto3 clients of the ``s3://`` remotes: one per AWS configuration of the environment,
unsigned where that configuration holds no credentials.

A public bucket (``s3:GetObject`` and ``s3:ListBucket`` granted to everyone, as datasets are
often shared) answers unsigned requests; boto3 itself refuses to send any without credentials
(``NoCredentialsError``), where the AWS CLI needs ``--no-sign-request`` and ``s3fs``
``anon=True``. A reader with no credentials at all gets an unsigned client, so a public
registry reads as an ``https://`` one does; writing needs credentials
(:meth:`~.s3.S3Backend.require_writable`, which every write operation calls first).
"""

from __future__ import annotations

import os
import threading
from typing import Any

from marl_minari.extras import require

NO_CREDENTIALS = ("no AWS credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                  "AWS_PROFILE, or another source boto3 reads")
"""What a message says when a request needs credentials and none were found."""

_CLIENTS: dict[tuple[tuple[str, str], ...], Any] = {}
_CLIENTS_LOCK = threading.Lock()
_MAX_CLIENTS = 8


def boto3_module() -> Any:
    """boto3, or :class:`~marl_minari.errors.MissingExtraError` naming the ``s3`` extra."""
    return require("boto3", "s3", "an s3:// remote")


def shared_client() -> Any:
    """One boto3 S3 client per AWS configuration in the environment (``AWS_*`` variables):
    signed with the credentials boto3 finds, unsigned when it finds none.

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
            from botocore import UNSIGNED
            from botocore.config import Config

            session = boto3_module().session.Session()
            signing = {} if session.get_credentials() is not None else {
                "signature_version": UNSIGNED}
            client = session.client("s3", config=Config(max_pool_connections=32, **signing))
            if len(_CLIENTS) >= _MAX_CLIENTS:
                del _CLIENTS[next(iter(_CLIENTS))]
            _CLIENTS[key] = client
        return client


def unsigned(client: Any) -> bool:
    """Whether ``client`` sends its requests unsigned (no credentials were found)."""
    from botocore import UNSIGNED

    return client.meta.config.signature_version is UNSIGNED
