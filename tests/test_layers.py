"""The seams between layers hold: what the clients and the plugins import.

DESIGN.md's layers: the clients meet the broker only at the client/broker seam (protocol
values and the transports), so no client module imports the broker; plugins see the kernel
and below, never the broker or the clients. Every import counts, type-only and
function-level ones too.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: folder -> packages its modules must not import
FORBIDDEN = {
    "mqcore/client": ("mqcore.broker", "mqcore.plugins", "mqcore.commands", "mqcore.contrib"),
    "plugins": ("mqcore.broker", "mqcore.client", "mqcore.commands", "mqcore.contrib"),
}


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module
            for alias in node.names:  # from mqcore import broker
                yield node.lineno, f"{node.module}.{alias.name}"


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_a_layer_imports_nothing_above_it(folder: str) -> None:
    banned = FORBIDDEN[folder]
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, name in _imports(path)
        if any(name == b or name.startswith(b + ".") for b in banned)
    ]
    assert not found, "\n".join(found)


def test_the_scan_sees_type_only_imports(tmp_path: Path) -> None:
    """The check would catch an import hidden under TYPE_CHECKING or inside a function."""
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from mqcore.broker.broker import Broker\n"
        "def f():\n    from mqcore import broker\n"
    )
    names = {name for _, name in _imports(module)}
    assert {"mqcore.broker.broker", "mqcore.broker"} <= names
