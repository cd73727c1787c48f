"""mqcore replay: the checks it makes before starting Spark, and its message without pyspark."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from click.testing import CliRunner

from mqcore import Kernel, Message
from mqcore.cli import main
from mqcore.commands.replay import load_transform


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """A store with topic T (one queue, three messages)."""
    path = tmp_path / "src"
    with Kernel().open_store(Kernel().names("store")[0], path) as store:
        store.put("T", 0, [Message(topic="T", body=b"%d" % i) for i in range(3)])
    return path


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["--topic", "Nope"], "not found in"),
        (["--topic", "T", "--since", "tomorrow"], "ISO-8601"),
        (["--topic", "T", "--transform", "no_such_module_x:f"], "cannot load"),
        (["--topic", "T", "--transform", "os.path"], "not module:function"),
    ],
)
def test_replay_checks_before_spark(
    source: Path, tmp_path: Path, extra: list[str], match: str
) -> None:
    """Bad arguments fail at once with a clear message (Spark is never started)."""
    args = ["replay", "--from", str(source), "--to", str(tmp_path / "dst"), "--to-topic", "T2"]
    result = CliRunner().invoke(main, args + extra)
    assert result.exit_code != 0
    assert match in result.output


def test_replay_refuses_a_held_target(source: Path, tmp_path: Path) -> None:
    """A target directory a writer holds names the holder."""
    target = tmp_path / "dst"
    with Kernel().open_store(Kernel().names("store")[0], target / "store"):
        args = ["replay", "--from", str(source), "--topic", "T", "--to", str(target)]
        result = CliRunner().invoke(main, [*args, "--to-topic", "T2"])
    assert result.exit_code == 1
    assert f"locked by process {os.getpid()}" in result.output
    assert "network server" in result.output


def test_load_transform() -> None:
    """module:function names a callable."""
    assert load_transform("os.path:join") is os.path.join


def test_replay_without_pyspark_names_the_extra(source: Path, tmp_path: Path) -> None:
    """Without pyspark the command says which extra to install."""
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "from mqcore.cli import main\n"
        "main(sys.argv[1:])\n"
    )
    args = ["replay", "--from", str(source), "--topic", "T", "--to", str(tmp_path / "d")]
    out = subprocess.run(
        [sys.executable, "-c", code, *args, "--to-topic", "T2"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert "pip install 'mqcore[spark]'" in out.stderr
