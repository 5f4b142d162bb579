"""Every Python and shell block of README.md and docs/*.md runs as written, or says it is a
fragment.

Blocks are read by pytest-codeblocks (``extract_from_file``), so its markers apply:
``<!--pytest-codeblocks:cont-->`` joins a block to the one before it (one script, shown in two
parts), ``<!--pytest-codeblocks:importorskip(ray)-->`` names the extra a block needs (it is
skipped, and said so, where that extra is missing). A block whose first line is
``# fragment: <why>`` is not run: it needs a server, a long run, the network or a placeholder
the reader fills in, and says so where readers see it.

Each runnable block runs alone, in a fresh process (a Python block as a script, a shell block
in bash with the venv's commands first on ``PATH``), in the order of its file, with a fresh
home (so a fresh registry and Minari datasets root) per file. README runs first; the docs
start from the datasets and vaults README's examples wrote, which they read
(``mpe2/spread/readme-v0``, ``vaults/mpe2/spread/readme-v0.vlt/Random`` and others).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_codeblocks import extract_from_file

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = {"python", "bash", "sh"}
FRAGMENT = "# fragment: "
USER_SETTINGS = {"MINARI_DATASETS_PATH", "MARL_MINARI_REGISTRY",
                 "MARL_MINARI_TRUSTED_ENV_PACKAGES"}
"""Left unset, so that blocks see a user's defaults, all under the fresh home:
``~/.minari/datasets`` and ``~/.minari/registry``."""
DATASETS = Path("home", ".minari", "datasets")


@dataclass(frozen=True)
class Block:
    """One runnable or fragment block: where it is, its language, code and needed module."""

    document: Path
    line: int
    language: str
    code: str
    needs: str | None

    @property
    def fragment(self) -> bool:
        return self.code.startswith(FRAGMENT)

    def __str__(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def blocks(document: Path) -> list[Block]:
    """The Python and shell blocks of a Markdown file, continuations joined."""
    return [Block(document, block.lineno, block.syntax or "", block.code, block.importorskip)
            for block in extract_from_file(document) if block.syntax in RUNNABLE]


def run_block(block: Block, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run one block alone, in ``folder``, the way a user pastes it into a fresh shell or
    Python; every path it writes (home, datasets, registry) is under ``folder``."""
    env = {name: value for name, value in os.environ.items() if name not in USER_SETTINGS}
    env.update(HOME=str(folder / "home"), SDL_VIDEODRIVER="dummy", JAX_PLATFORMS="cpu",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               # ray.init() joins the last cluster `ray start` made on the machine, if any:
               # a block gets a Ray of its own, as on a user's fresh machine
               RAY_ADDRESS="local")
    if block.language == "python":
        script = folder / f"block_{block.line}.py"
        script.write_text(block.code, encoding="utf-8")
        command = [sys.executable, str(script)]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.code]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, (f"{block} failed (exit {done.returncode}):\n{block.code}\n"
                                  f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-4000:]}")
    for unclean in ("Traceback", "Exception ignored"):  # e.g. a library's exit-time error
        assert unclean not in done.stderr, f"{block} ends unclean:\n{done.stderr[-4000:]}"
    return done


def run_document(document: Path, folder: Path) -> list[str]:
    """Run the runnable blocks of a document in order; a block whose extra is missing is left
    out (skipping the rest would hide their failures) and returned."""
    missing = []
    for block in blocks(document):
        if block.fragment:
            continue
        if block.needs and not _importable(block.needs):
            missing.append(f"{block} (needs {block.needs})")
            continue
        run_block(block, folder)
    return missing


def _importable(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def readme_world(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder where README's blocks ran, in order: its datasets are the docs' start."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "home").mkdir()
    README_LEFT_OUT.extend(run_document(ROOT / "README.md", folder))
    return folder


README_LEFT_OUT: list[str] = []


def test_readme_runs(readme_world: Path) -> None:
    """README's examples ran (in the fixture) and left what they say they write."""
    assert (readme_world / "compare.png").stat().st_size > 0
    assert (readme_world / "home" / ".minari" / "registry" / "mpe2" / "spread").is_dir()
    assert (readme_world / "vaults" / "mpe2" / "spread" / "readme-v0.vlt" / "Random").is_dir()
    assert (readme_world / DATASETS / "mpe2" / "spread" / "all-v0").is_dir()
    if README_LEFT_OUT:
        pytest.skip(f"not installed here: {', '.join(README_LEFT_OUT)}")
    assert any((readme_world / "rllib-data").rglob("*.parquet"))


DOCS_WITH_BLOCKS = [document for document in DOCUMENTS[1:]
                    if any(not block.fragment for block in blocks(document))]


@pytest.mark.parametrize("document", DOCS_WITH_BLOCKS, ids=lambda path: path.name)
def test_doc_runs(document: Path, readme_world: Path, tmp_path: Path) -> None:
    for written in (DATASETS, Path("vaults")):
        shutil.copytree(readme_world / written, tmp_path / written)
    missing = run_document(document, tmp_path)
    if missing:
        pytest.skip(f"not installed here: {', '.join(missing)}")


def test_every_fragment_says_why() -> None:
    """A fragment names what it needs (a server, a long run, a placeholder), where readers see
    it; blocks of other languages (console, text, json) are output or synopses, not code."""
    for document in DOCUMENTS:
        for block in blocks(document):
            if block.fragment:
                reason = block.code.splitlines()[0].removeprefix(FRAGMENT).strip()
                assert len(reason) > 10, f"{block}: say why it is a fragment"

