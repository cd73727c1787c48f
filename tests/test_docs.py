"""The Python blocks of README.md and docs/*.md run as written (with Sybil's MyST parsers).

Each document runs in a fresh working directory, its blocks in order in one namespace, as a
reader pasting them one after the other would. A block that must not run (it needs a Spark
cluster, a path of the reader's, or shows an excerpt) is preceded by the line
``<!-- skip: next -->``, which neither GitHub nor the Sphinx build shows.
"""

from __future__ import annotations

import ast
import codeop
import contextlib
import tempfile
import threading
import unittest
import warnings
from pathlib import Path
from typing import Any

import pytest
from sybil import Sybil
from sybil.parsers.myst import PythonCodeBlockParser, SkipParser

import mqcore
from mqcore import Broker, Kernel, Message, Producer, PullConsumer, PushConsumer

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ["README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])

pytestmark = pytest.mark.skipif(
    not (ROOT / "docs").is_dir(), reason="the docs are not next to the tests (an unpacked sdist?)"
)


def _close_all(namespace: dict[str, Any]) -> None:
    """Stop the clients, then close the brokers, that failed blocks left running."""
    values = list(namespace.values())
    for value in values:
        if isinstance(value, (PushConsumer, PullConsumer, Producer)):
            with contextlib.suppress(Exception):
                value.shutdown()
    for value in values:
        if isinstance(value, Broker):
            with contextlib.suppress(Exception):
                value.close()
    namespace.clear()


def _blocks(text: str) -> int:
    """How many ```python fences a Markdown text holds."""
    return sum(1 for line in text.splitlines() if line.strip() == "```python")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", DOCUMENTS)
def test_python_blocks_run(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Python block of the document runs, in order, in a fresh directory."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    # The blocks' temporary files go here, where the test sees what they leave behind.
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    document = SYBIL.parse(ROOT / name)
    threads = set(threading.enumerate())
    try:
        for example in document.examples():
            try:
                example.evaluate()
            except unittest.SkipTest:  # a marker with a reason: skip: next "why"
                continue
            except Exception as exc:
                raise AssertionError(f"{name}, line {example.line}: {exc!r}") from exc
    finally:
        _close_all(document.namespace)
    left = [t.name for t in set(threading.enumerate()) - threads if t.is_alive()]
    assert not left, f"{name}: its blocks leave threads running: {left}"
    kept = sorted(p.name for p in temp.iterdir())
    assert not kept, f"{name}: its blocks leave temporary files behind: {kept}"


def test_every_python_block_is_found() -> None:
    """Sybil sees each ```python fence (a fence it missed would silently never run)."""
    for name in DOCUMENTS:
        text = (ROOT / name).read_text(encoding="utf-8")
        document = SYBIL.parse(ROOT / name)
        code = [e for e in document.examples() if "skip" not in repr(e.region.evaluator).lower()]
        assert len(code) == _blocks(text), name


def test_a_failing_block_fails_the_test(tmp_path: Path) -> None:
    """The mechanism itself: a block raising NameError is reported, a skipped one is not run."""
    doc = tmp_path / "doc.md"
    doc.write_text(
        "```python\nx = 1\n```\n\n<!-- skip: next -->\n\n```python\nraise SystemExit\n```\n\n"
        "```python\nprint(undefined_name)\n```\n"
    )
    results = []
    for example in SYBIL.parse(doc).examples():
        try:
            example.evaluate()
            results.append("ok")
        except NameError:
            results.append("NameError")
    assert results == ["ok", "ok", "ok", "NameError"]  # block, skip marker, skipped, failing


def test_readme_tells_the_size_of_the_first_segment(tmp_path: Path) -> None:
    """The README's figures are the store's, and its small-store setting makes small segments."""
    from mqcore.plugins.store_mmap.mappedfile import ALLOCATION_CHUNK
    from mqcore.plugins.store_mmap.options import MmapStoreOptions

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "1 GiB sparse file" in text and MmapStoreOptions().segment_size == 1 << 30
    assert "next 64 MiB" in text and ALLOCATION_CHUNK == 64 << 20
    assert 'store_options={"segment_size": 64 * 1024 * 1024}' in text
    with Broker(tmp_path / "data", store_options={"segment_size": 64 * 1024 * 1024}) as broker:
        broker.create_topic("T", queue_nums=1)
        with Producer("pg", broker=broker) as producer:
            producer.send(Message(topic="T", body=b"hi"))
    segments = list((tmp_path / "data" / "store" / "commitlog").iterdir())
    assert [s.stat().st_size for s in segments] == [64 * 1024 * 1024]


#: The walk-throughs a newcomer pastes into an interactive Python, block by block.
PASTED = ["README.md", "docs/guide.md"]


def _fences(text: str) -> list[tuple[int, list[str]]]:
    """Each ```python block: its first line number and its lines."""
    found: list[tuple[int, list[str]]] = []
    current: tuple[int, list[str]] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if current is None and line.strip() == "```python":
            current = (number + 1, [])
        elif current is not None and line.strip() == "```":
            found.append(current)
            current = None
        elif current is not None:
            current[1].append(line)
    return found


def _paste(lines: list[str]) -> None:
    """Feed ``lines`` to the interactive interpreter's compiler as a REPL reads a paste (an
    empty line ends a compound statement, and a statement that follows one without it is
    refused); raises SyntaxError where the REPL would."""
    buffer: list[str] = []
    for line in [*lines, ""]:
        if not buffer and not line.strip():
            continue
        buffer.append(line)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes and the like: not this check's
            if codeop.compile_command("\n".join(buffer), "<stdin>", "single") is not None:
                buffer = []


@pytest.mark.parametrize("name", PASTED)
def test_blocks_paste_into_a_repl(name: str) -> None:
    """Each block of the walk-throughs works pasted into Python's REPL (3.11's reads a paste
    line by line: an empty line must end each loop or ``with`` before what follows)."""
    for start, lines in _fences((ROOT / name).read_text(encoding="utf-8")):
        try:
            _paste(lines)
        except SyntaxError as exc:
            raise AssertionError(
                f"{name}, block at line {start}: line {exc.lineno} of it fails pasted ({exc.msg})"
            ) from None


def test_readme_names_every_bundled_delay_scheduler() -> None:
    """The README names each delay scheduler by the name `mqcore plugins` lists and the
    configuration takes (``delay_scheduler=``, ``timer_scheduler=``)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    names = Kernel(autoload=False).names("delay_scheduler")
    missing = [name for name in names if f"`{name}`" not in readme]
    assert not missing, f"README.md does not name the delay schedulers {missing}"


def _unimported(source: str) -> set[str]:
    """The names of mqcore's public API that ``source`` uses without importing or binding."""
    tree = ast.parse(source)
    bound: set[str] = set()
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update(a.asname or a.name.split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, ast.Store) else used).add(node.id)
    return (used & set(mqcore.__all__)) - bound


@pytest.mark.parametrize("name", DOCUMENTS)
def test_blocks_import_the_mqcore_names_they_use(name: str) -> None:
    """A reader may paste any block alone: each one that runs imports the classes it uses
    (the variables of earlier blocks, such as ``broker``, it may take as given)."""
    document = SYBIL.parse(ROOT / name)
    skip_next = False  # the documents skip with "skip: next" alone (an excerpt follows)
    for example in document.examples():
        if "skip" in repr(example.region.evaluator).lower():
            skip_next = True
            continue
        source = example.region.parsed
        if skip_next or not isinstance(source, str):  # an excerpt, or a doctest
            skip_next = False
            continue
        missing = _unimported(source)
        assert not missing, f"{name}, line {example.line}: uses {sorted(missing)} unimported"
