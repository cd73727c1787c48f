"""No import cycle anywhere in mqcore, its bundled plugins or contrib.

Every import counts: those under ``if TYPE_CHECKING:`` and those inside functions too, since a
circle of type-only imports is still a circle a reader must untangle. The graph is built from
the source tree with :mod:`ast`, each folder under the package name it is installed as.
Importing a module is not counted as importing its parent packages (as import-linter counts).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: source folder -> the package it is installed as (pyproject.toml's package-dir)
PACKAGES = {"mqcore": "mqcore", "plugins": "mqcore.plugins", "contrib": "mqcore.contrib"}

Edge = tuple[str, str, str]  # importer, imported, "path:line"


def _modules(root: Path, packages: Mapping[str, str]) -> dict[str, Path]:
    found = {}
    for folder, package in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


def _imported_names(module: str, path: Path) -> Iterator[tuple[int, str]]:
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            for alias in node.names:  # from mqcore import codec: the module mqcore.codec
                yield node.lineno, f"{stem}.{alias.name}"


def import_graph(root: Path, packages: Mapping[str, str]) -> list[Edge]:
    """The imports between the modules of ``packages`` (folders of ``root``)."""
    modules = _modules(root, packages)
    edges: list[Edge] = []  # the first import of each pair
    seen: set[tuple[str, str]] = set()
    for module, path in modules.items():
        for line, name in _imported_names(module, path):
            target = name
            while target and target not in modules:  # a name imported from a module
                target = target.rpartition(".")[0]
            if target and target != module and (module, target) not in seen:
                seen.add((module, target))
                edges.append((module, target, f"{path.relative_to(root)}:{line}"))
    return edges


def cycles(edges: list[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    graph: dict[str, set[str]] = {}
    for a, b, _ in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:
        # Iterative, so that a deep import chain cannot reach the recursion limit.
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_cycle() -> None:
    edges = import_graph(ROOT, PACKAGES)
    found = cycles(edges)
    report = []
    for component in found:
        members = set(component)
        report.append(" <-> ".join(component))
        report += [f"    {a} -> {b} ({where})" for a, b, where in edges if {a, b} <= members]
    assert not found, "import cycles:\n" + "\n".join(report)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A package ``pkg`` whose modules import each other in the ways the scan must see."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from .leaf import f\n")
    (pkg / "sub" / "leaf.py").write_text("def f():\n    from pkg import top\n")
    (pkg / "top.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import leaf\n"
    )
    (pkg / "alone.py").write_text("import pkg.top\n")
    return tmp_path


def test_the_scan_sees_type_only_function_level_and_relative_imports(tree: Path) -> None:
    edges = {(a, b) for a, b, _ in import_graph(tree, {"pkg": "pkg"})}
    assert edges == {
        ("pkg.sub", "pkg.sub.leaf"),
        ("pkg.sub.leaf", "pkg.top"),
        ("pkg.top", "pkg.sub.leaf"),
        ("pkg.alone", "pkg.top"),
    }
    assert cycles(import_graph(tree, {"pkg": "pkg"})) == [["pkg.sub.leaf", "pkg.top"]]
