"""What users install: pyproject.toml's package list is the tree's packages, its metadata
claims only what CI runs, and the version is the changelog's latest release."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from marl_minari.version import __version__

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def tree_packages() -> set[str]:
    """Every folder holding an ``__init__.py``, under the name it installs as: ``marl_minari``'s
    own subfolders, and the top-level folders ``package-dir`` maps into it."""
    found = set()
    for package, folder in SETUPTOOLS["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join([package, *parts]))
    return found


def test_the_package_list_is_the_tree() -> None:
    """A package folder left out of ``packages`` is missing from the wheel (an editable
    install hides it), so the list must name every package folder and nothing else."""
    listed = set(SETUPTOOLS["packages"])
    assert listed == tree_packages(), (
        f"pyproject.toml [tool.setuptools] packages: add {sorted(tree_packages() - listed)}, "
        f"remove {sorted(listed - tree_packages())}")


def test_every_mapped_folder_is_a_package_of_the_project() -> None:
    assert all(name == "marl_minari" or name.startswith("marl_minari.")
               for name in SETUPTOOLS["package-dir"])
    for folder in SETUPTOOLS["package-dir"].values():
        assert (ROOT / folder / "__init__.py").is_file(), folder


def test_python_claims_are_what_ci_runs() -> None:
    """CI runs Python 3.11 (.ci/run): the classifiers and ``requires-python`` say no more."""
    project = PYPROJECT["project"]
    versions = {c.rsplit(" :: ", 1)[1] for c in project["classifiers"]
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)}
    assert versions == {"3.11"}
    assert project["requires-python"] == ">=3.11,<3.12"


def test_the_version_is_the_changelogs_latest_release() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    releases = re.findall(r"^## \[?(\d+\.\d+\.\d+)\]?", changelog, flags=re.M)
    assert releases and releases[0] == __version__, (releases[:1], __version__)
    assert len(releases) == len(set(releases))
