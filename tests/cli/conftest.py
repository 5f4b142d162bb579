"""Run the real ``marl-minari`` command in a subprocess, as a user does."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class CliResult:
    """What one run of the command printed and returned."""

    code: int
    stdout: str
    stderr: str

    @property
    def error_lines(self) -> list[str]:
        """The ``error:`` lines of stderr."""
        return [line for line in self.stderr.splitlines() if line.startswith("error:")]

    def assert_one_error(self, code: int, *fragments: str) -> str:
        """Exactly one ``error:`` line holding every fragment, no traceback, exit ``code``;
        every other stderr line is a ``warning:``. Returns the error line."""
        everything = self.stdout + self.stderr
        assert "Traceback" not in everything, everything
        assert self.code == code, everything
        assert len(self.error_lines) == 1, everything
        others = [line for line in self.stderr.splitlines()
                  if line.strip() and not line.startswith(("error:", "warning:"))]
        assert others == [], everything
        for fragment in fragments:
            assert fragment in self.error_lines[0], everything
        return self.error_lines[0]


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The working folder of the command (vault paths are relative to it)."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@pytest.fixture
def cli(workdir: Path) -> Callable[..., CliResult]:
    """``cli(*args, env={...})`` runs ``python -m marl_minari *args`` in :func:`workdir` with
    this test's datasets root."""

    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> CliResult:
        completed = subprocess.run(
            [sys.executable, "-m", "marl_minari", *args], cwd=workdir, capture_output=True,
            text=True, timeout=timeout,
            env={**os.environ, "COLUMNS": "100", **(env or {})})
        return CliResult(completed.returncode, completed.stdout, completed.stderr)

    return run


def snapshot(*folders: Path) -> set[str]:
    """Every path under ``folders`` (to show that a failed command left nothing behind)."""
    return {str(path) for folder in folders for path in folder.rglob("*")}


@pytest.fixture
def tree() -> Callable[..., set[str]]:
    """:func:`snapshot`, for the test files (conftest cannot be imported in importlib mode)."""
    return snapshot
