"""The package's shape, as docs/architecture.md states it: concept packages whose dependencies
point one way, no import circle (inside a package either), no private name taken from
another package, no module over about 500 lines."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAPPED = {"adapters": "marl_minari.adapters", "collectors": "marl_minari.collectors",
          "registry": "marl_minari.registry"}
"""Top-level folders mapped as subpackages (pyproject.toml, ``package-dir``)."""

LAYERS = ["errors", "user_warnings", "version", "extras", "minari_compat", "format", "envs",
          "joint", "storage", "vaults", "registry", "sources", "rows", "derive", "describe", "view",
          "adapters", "ray", "collectors", "cli", "__init__", "__main__"]
"""The packages (and top-level modules) of ``marl_minari``, lowest first: each may import
only those before it (and itself)."""

MAX_LINES = 520


def modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    found = {}
    for path in sorted((ROOT / "marl_minari").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    for folder, package in MAPPED.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            name = ".".join([package, *(parts[:-1] if parts[-1] == "__init__" else parts)])
            found[name] = path
    return found


def imports(name: str, path: Path, known: set[str]) -> Iterator[tuple[str, str, int]]:
    """``(imported module, imported name or "", line)`` of every import of ours in a module,
    at any depth (function-level imports are dependencies too); ``TYPE_CHECKING`` blocks are
    left out (annotations only)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skipped = {id(node) for node in ast.walk(tree) if isinstance(node, ast.If)
               and "TYPE_CHECKING" in ast.unparse(node.test) for node in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("marl_minari"):
                    yield _known(alias.name, known), "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                                + ([base] if base else []))
            if not base.startswith("marl_minari"):
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                yield (target if target in known else _known(base, known)), alias.name, \
                    node.lineno


def _known(name: str, known: set[str]) -> str:
    while name not in known and "." in name:
        name = name.rpartition(".")[0]
    return name


def layer(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: {target for target, _, _ in imports(name, path, known) if target != name}
            for name, path in found.items()}


def test_no_import_circle() -> None:
    edges = graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_dependencies_point_down_the_layers() -> None:
    upward = []
    for name, targets in graph().items():
        mine = LAYERS.index(layer(name))
        for target in targets:
            theirs = layer(target)
            if theirs not in LAYERS:
                upward.append(f"{name} -> {target} (unknown package {theirs!r})")
            elif LAYERS.index(theirs) > mine:
                upward.append(f"{name} -> {target}")
    assert not upward, "imports pointing up the layers:\n" + "\n".join(upward)


def test_no_private_name_taken_from_another_package() -> None:
    found = modules()
    known = set(found)
    taken = []
    for name, path in found.items():
        for target, imported, line in imports(name, path, known):
            private = (imported.startswith("_") and not imported.startswith("__")) or any(
                part.startswith("_") and part != "__init__" for part in target.split("."))
            if private and layer(target) != layer(name):
                taken.append(f"{path.relative_to(ROOT)}:{line}: {imported or target}")
    assert not taken, "private names taken across packages:\n" + "\n".join(taken)


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_stay_small(name: str) -> None:
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines: split it by concept"
