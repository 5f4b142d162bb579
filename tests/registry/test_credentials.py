"""No credential given in a remote URL, a token or the AWS variables appears in any error.

Every entry point (list, publish, download, info) is driven with credentialed remotes of every
kind against real failures: a malformed bucket, a refused connection, a server answering 500, a
TLS handshake with a plain HTTP server, a registry folder that does not exist.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from marl_minari.registry.credentials import scrub, url_secrets
from registry_helpers import FailingHandler, free_port, use_s3_endpoint
from typer.testing import CliRunner

from marl_minari import registry
from marl_minari.errors import MarlMinariError, RemoteError

KEY = "AKIAFAKEKEYID7788"
SECRET = "sEcReT/with+chars=9f3a"
DATASET = "mpe2/spread/random-v0"

ENTRY_POINTS: dict[str, Callable[[str], Any]] = {
    "list": lambda remote: registry.list_datasets(remote),
    "publish": lambda remote: registry.publish(DATASET, remote),
    "download": lambda remote: registry.download(DATASET, remote),
    "info": lambda remote: registry.open_remote(remote).get_dataset_metadata(DATASET),
}


def _everything_shown(exc: BaseException) -> str:
    """What a user can see of ``exc``: its traceback text and every chained exception."""
    shown = "".join(traceback.format_exception(exc))
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        shown += f"\n{current!r}\n{current}"
        hidden = current.__suppress_context__  # ``raise ... from None``: never shown
        current = current.__cause__ or (None if hidden else current.__context__)
    return shown


def _assert_no_echo(exc: BaseException) -> None:
    shown = _everything_shown(exc)
    for secret in (SECRET, KEY, "sEcReT%2Fwith", "sEcReT"):
        assert secret not in shown, shown


@pytest.fixture
def credentialed_remotes(tmp_path: Path, thread_server: Callable[[Path, type[Any]], str],
                         moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Remotes whose URL carries ``KEY:SECRET``, each of which fails for a real reason."""
    use_s3_endpoint(monkeypatch, moto_endpoint)
    failing = thread_server(tmp_path / "served", FailingHandler).split("://", 1)[1]
    closed = f"127.0.0.1:{free_port()}"
    return {
        "s3 user-info": f"s3://{KEY}:{SECRET}@bucket-name/registry",
        "s3 user-info, encoded": f"s3://{KEY}:sEcReT%2Fwith+chars=9f3a@bucket/r",
        "s3 malformed bucket": f"s3://{KEY}:{SECRET}@x/r",
        "http refused": f"http://{KEY}:{SECRET}@{closed}/registry",
        "http 500": f"http://{KEY}:{SECRET}@{failing}/registry",
        "https to a plain server": f"https://{KEY}:{SECRET}@{failing}/registry",
        "file user-info": f"file://{KEY}:{SECRET}@{tmp_path}/registry",
        "unknown kind": f"ftp://{KEY}:{SECRET}@example.org/registry",
    }


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_no_entry_point_echoes_url_credentials(entry: str,
                                               credentialed_remotes: dict[str, str]) -> None:
    for name, remote in credentialed_remotes.items():
        with pytest.raises(MarlMinariError) as caught:
            ENTRY_POINTS[entry](remote)
        _assert_no_echo(caught.value)
        assert isinstance(caught.value, RemoteError), (name, caught.value)


def test_s3_errors_do_not_echo_aws_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    # A store that refuses the connection: boto3's error names the endpoint, never the keys.
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    for entry in ENTRY_POINTS.values():
        with pytest.raises(MarlMinariError) as caught:
            entry("s3://bucket-name/registry")
        _assert_no_echo(caught.value)


def test_http_token_is_not_echoed(tmp_path: Path,
                                  thread_server: Callable[[Path, type[Any]], str]) -> None:
    url = thread_server(tmp_path / "served", FailingHandler)
    storage = registry.open_remote(url, token=SECRET)
    with pytest.raises(RemoteError, match="HTTP 500") as caught:
        storage.get_dataset_metadata(DATASET)
    _assert_no_echo(caught.value)


def test_cli_error_line_is_scrubbed() -> None:
    from marl_minari.cli import app

    result = CliRunner().invoke(app, ["remote", "list", "--remote",
                                      f"s3://{KEY}:{SECRET}@bucket-name/r"])
    assert result.exit_code == 1
    assert result.output.startswith("error: ") and "Traceback" not in result.output
    assert SECRET not in result.output and KEY not in result.output


def test_scrub_and_url_secrets() -> None:
    assert url_secrets("https://host/x") == []
    pieces = url_secrets(f"https://{KEY}:sEcReT%2Fx@host/x")
    assert {KEY, "sEcReT%2Fx", "sEcReT/x", f"{KEY}:sEcReT%2Fx"} <= set(pieces)
    text = f"bucket 'u:{SECRET}@b' in s3://u:{SECRET}@b/r?X-Amz-Signature=abcdef"
    cleaned = scrub(text, [SECRET])
    assert SECRET not in cleaned and "abcdef" not in cleaned
    assert cleaned == "bucket 'u:***@b' in s3://***@b/r?X-Amz-Signature=***"
    assert scrub("short pw", ["pw"]) == "short pw"  # too short to replace blindly
