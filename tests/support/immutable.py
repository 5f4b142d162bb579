"""Immutable files and folders (``chattr +i``, which binds root too: nothing in an immutable
folder can be created, renamed or deleted), for tests of writes this user may not make."""

from __future__ import annotations

import subprocess
from pathlib import Path


def chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)
