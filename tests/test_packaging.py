"""Packaging guards: every package folder ships, and only ``mqcore`` is top level."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {"mqcore": "mqcore", "plugins": "mqcore.plugins", "contrib": "mqcore.contrib"}


def test_every_package_folder_is_listed() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = set()
    for top, dotted in MAPPING.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            found.add(".".join((dotted, *rel)))
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - found == set(), "listed packages without a folder"
