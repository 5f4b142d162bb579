"""Credential scrubbing: the one function every registry message passes through.

Credentials reach this package in three ways: in a remote URL's user-info
(``https://user:pass@host``, ``s3://KEY:SECRET@bucket``), as Minari's ``token``, and through
the ``AWS_*`` environment variables boto3 reads. None of them may appear in an error, a warning
or a log line. :func:`scrub` removes all three; :func:`url_secrets` lists the pieces of a URL's
user-info so a message that quotes only a fragment of the URL (a bucket name, a host) is
scrubbed too.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote

SECRET_ENV_VARS: Final = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID",
                          "AWS_SECURITY_TOKEN")
"""Environment variables whose values never appear in a message."""

MASK: Final = "***"

_USERINFO = r"(?P<userinfo>[^@\s/]*:[^@\s]*|[^/@\s]+)@"
"""User-info before an ``@``: with a ``:`` it may hold unencoded ``/`` (AWS secret keys do, and
users paste them so); without one it is a plain user name. A path that contains ``@`` may be
taken for user-info: over-scrubbing a message is the safe side."""
_USERINFO_RE = re.compile(rf"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://){_USERINFO}")
_LEADING_USERINFO_RE = re.compile(rf"^{_USERINFO}")
_SIGNED_QUERY_RE = re.compile(r"([?&](?:X-Amz-[A-Za-z-]+|Signature|AWSAccessKeyId|token|"
                              r"access_token|sig)=)[^&\s'\"]+", re.IGNORECASE)
_MIN_SECRET_LENGTH: Final = 4
"""Shorter values are not replaced on their own (they would mask ordinary words); URL
user-info of any length is still removed by its position."""


def split_userinfo(name: str) -> tuple[str | None, str]:
    """``("user:password", "host/path")`` for a remote name (the URL after ``kind://``).

    ``(None, name)`` when it has no user-info. Unlike ``urllib.parse``, a ``/`` inside the
    password is kept in the password, not read as the start of the path.
    """
    found = _LEADING_USERINFO_RE.match(name)
    if found is None:
        return None, name
    return found.group("userinfo"), name[found.end():]


def url_secrets(url: str) -> list[str]:
    """The user-info of ``url`` (``kind://user:password@...``) in every form a message may show.

    ``[]`` when the URL has none. The forms are the raw user-info, user and password, each also
    percent-decoded.
    """
    _, separator, rest = url.partition("://")
    userinfo, _ = split_userinfo(rest if separator else url)
    if userinfo is None:
        return []
    user, _, password = userinfo.partition(":")
    pieces = {userinfo, user, password}
    pieces |= {unquote(piece) for piece in pieces}
    return sorted((piece for piece in pieces if piece), key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with credentials removed: URL user-info, signed query strings, known secrets.

    Args:
        text: a message about a remote.
        secrets: values that must not appear (a token, a URL's :func:`url_secrets`); the
            values of :data:`SECRET_ENV_VARS` are always removed.
    """
    text = _USERINFO_RE.sub(rf"\g<scheme>{MASK}@", text)
    text = _SIGNED_QUERY_RE.sub(rf"\1{MASK}", text)
    values = [os.environ.get(name) for name in SECRET_ENV_VARS]
    # Longest first, so a secret that contains another is removed whole.
    for secret in sorted({v for v in [*values, *secrets] if v}, key=len, reverse=True):
        if len(secret) >= _MIN_SECRET_LENGTH:
            text = text.replace(secret, MASK)
    return text
