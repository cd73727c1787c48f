"""The Sphinx build of docs/ (warnings are errors) lists every hook with its docstring.

Needs Sphinx and MyST-Parser (the ``docs`` tox environment runs this test after its build);
without them it skips saying so.
"""

from __future__ import annotations

import html
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mqcore import hookspecs

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not (ROOT / "docs" / "conf.py").is_file(), reason="the docs are not next to the tests"
)

HOOKS = sorted(
    name
    for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
    if name.startswith("mqcore_")
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML build of docs/ (skips without Sphinx and MyST-Parser)."""
    pytest.importorskip("sphinx", reason="Sphinx is not installed (tox -e docs has it)")
    pytest.importorskip("myst_parser", reason="MyST-Parser is not installed (tox -e docs has it)")
    out = tmp_path_factory.mktemp("html")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
    proc = subprocess.run(
        [*command, str(ROOT / "docs"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"the docs build failed:\n{proc.stderr}"
    return out


def _text(page: str) -> str:
    """The visible text of an HTML page, whitespace collapsed, Sphinx's smart quotes and
    ellipses undone."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    smart_marks = (("\u2019", "'"), ("\u2018", "'"), ("\u201c", '"'), ("\u201d", '"'))
    for smart, plain in (*smart_marks, ("\u2026", "...")):
        text = text.replace(smart, plain)
    return " ".join(text.split())


@pytest.mark.timeout(600)
def test_every_hook_is_in_the_built_reference(built: Path) -> None:
    """Each mqcore_* hook spec has an entry in hooks.html showing its docstring's summary."""
    assert len(HOOKS) >= 11
    page = (built / "hooks.html").read_text(encoding="utf-8")
    squeezed = re.sub(r"\s", "", _text(page))
    missing = [h for h in HOOKS if f'id="mqcore.hookspecs.{h}"' not in page]
    assert not missing, f"hooks missing from the built reference: {missing}"
    for hook in HOOKS:
        doc = inspect.getdoc(getattr(hookspecs, hook)) or ""
        summary = " ".join(doc.split("\n\n")[0].split())
        assert summary, f"{hook} has no docstring"
        # Compared without spaces: markup splits words differently from the docstring.
        plain = re.sub(r"[`*\s]|:\w+:", "", summary)[:40]
        assert plain in squeezed, f"{hook}: its docstring is not in hooks.html"


@pytest.mark.timeout(600)
def test_the_index_links_every_page(built: Path) -> None:
    """index.md is a starting point on GitHub too: its prose links each page of its toctree."""
    source = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    toctree = re.search(r"```\{toctree\}\n(.*?)```", source, re.S)
    assert toctree is not None
    pages = [line.strip() for line in toctree.group(1).splitlines()]
    pages = [p for p in pages if p and not p.startswith(":")]
    prose = source[: toctree.start()]
    assert pages and all(f"]({p}.md)" in prose for p in pages), pages
    index = (built / "index.html").read_text(encoding="utf-8")
    assert all(f'href="{p}.html"' in index for p in pages)
