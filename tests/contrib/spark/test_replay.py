"""mqcore replay: the checks it makes before starting Spark, and its message without pyspark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from mqtest import as_foreground, wait_until

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
    assert "option namesrv" in result.output


def test_load_transform() -> None:
    """module:function names a callable."""
    assert load_transform("os.path:join") is os.path.join


def _one_line(result: Any) -> str:
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--where", "price > AND region = 'eu'"], "--where \"price > AND region = 'eu'\""),
        (["--where", "a >"], "expected a value after '>'"),
        (["--transform", "no_such_module_x:f"], "No module named 'no_such_module_x'"),
    ],
    ids=["where-syntax", "where-incomplete", "transform-module"],
)
def test_replay_failures_are_one_line_before_spark(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, extra: list[str], says: str
) -> None:
    """A bad --where or transform: one line, Spark never started, no target directory made."""
    from mqcore.commands import replay

    monkeypatch.setattr(replay, "_spark_session", _no_spark)
    target = tmp_path / "new" / "dst"
    args = ["replay", "--from", str(source), "--topic", "T", "--to", str(target)]
    line = _one_line(CliRunner().invoke(main, [*args, "--to-topic", "T2", *extra]))
    assert says in line
    assert not (tmp_path / "new").exists()


def _no_spark(master: str) -> Any:
    raise AssertionError("Spark was started")


def test_replay_without_java_says_so(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No java (JAVA_HOME without bin/java): one line naming it, no target directory made."""
    from mqcore.commands import replay

    monkeypatch.setattr(replay, "_spark_session", _no_spark)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    target = tmp_path / "dst"
    args = ["replay", "--from", str(source), "--topic", "T", "--to", str(target)]
    line = _one_line(CliRunner().invoke(main, [*args, "--to-topic", "T2"]))
    assert "needs Java 17 or later" in line and "no-jdk" in line and "JAVA_HOME" in line
    assert not target.exists()


def test_a_failed_job_leaves_no_target_directory(
    spark: Any, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transform fails inside the job: the directory the run created is removed."""
    from mqcore.commands.replay import run_replay

    monkeypatch.chdir(tmp_path)
    (tmp_path / "failing_transform.py").write_text(
        "def boom(df):\n    raise ValueError('the transform failed')\n"
    )
    target = tmp_path / "new" / "dst"
    with pytest.raises(ValueError, match="the transform failed"):
        run_replay(
            source=str(source),
            topic="T",
            target=str(target),
            to_topic="T2",
            transform="failing_transform:boom",
            spark=spark,
        )
    assert not (tmp_path / "new").exists()


_TRANSFORM = """
from pyspark.sql import functions as F

def only_even(df):
    return df.where(F.col("queue_offset") % 2 == 0)
"""


def _replay_process(source: Path, cwd: Path, *cli: str) -> subprocess.CompletedProcess[str]:
    """`mqcore [cli] replay ...` with the transform module in ``cwd`` (PYTHONSAFEPATH=1)."""
    (cwd / "my_transforms.py").write_text(_TRANSFORM)
    env = {**os.environ, "PYTHONSAFEPATH": "1", "COLUMNS": "100"}
    env.pop("PYTHONPATH", None)
    args = ["replay", "--from", str(source), "--topic", "T", "--to", str(cwd / "dst")]
    args += ["--to-topic", "T2", "--transform", "my_transforms:only_even", "--master", "local[1]"]
    return subprocess.run(
        [str(Path(sys.executable).with_name("mqcore")), *cli, *args],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=cwd,
    )


@pytest.mark.timeout(900)
def test_replay_finds_the_transform_here_and_keeps_the_bar_clean(
    spark: Any, source: Path, tmp_path: Path
) -> None:
    """--transform from the current directory; no Spark stage bars or worker log lines.

    At --log-level debug the workers' mqcore events do show, following the CLI's level.
    """
    quiet = _replay_process(source, _mkdir(tmp_path / "quiet"))
    assert quiet.returncode == 0, quiet.stderr
    assert "[Stage" not in quiet.stderr and "spark worker" not in quiet.stderr, quiet.stderr
    assert not [line for line in quiet.stderr.splitlines() if " mqcore." in line], quiet.stderr
    row = next(line for line in quiet.stdout.splitlines() if line.count("│") == 6)
    assert [cell.strip() for cell in row.split("│")[1:4]] == ["3", "2", "1"]  # read, written
    loud = _replay_process(source, _mkdir(tmp_path / "loud"), "--log-level", "debug")
    assert loud.returncode == 0, loud.stderr
    worker = [line for line in loud.stderr.splitlines() if "[spark worker" in line]
    assert any(line.startswith("DEBUG mqcore.") for line in worker), loud.stderr


_SLOW_TRANSFORM = """
import os, time
from pyspark.sql import functions as F

def slow(df):
    @F.udf("binary")
    def held(body):
        open(os.environ["REPLAY_STARTED"], "w").close()  # the job runs: Ctrl-C now
        time.sleep(300)
        return body
    return df.withColumn("body", held("body"))
"""


@pytest.mark.timeout(900)
def test_ctrl_c_during_replay_exits_130_in_one_line(
    spark: Any, source: Path, tmp_path: Path
) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) while the job runs: the job is
    cancelled, status 130, one line after Spark's start-up lines, no Py4J traceback."""
    (tmp_path / "held_transforms.py").write_text(_SLOW_TRANSFORM)
    started = tmp_path / "started"
    env = {**os.environ, "PYTHONSAFEPATH": "1", "REPLAY_STARTED": str(started)}
    env.pop("PYTHONPATH", None)
    args = ["replay", "--from", str(source), "--topic", "T", "--to", str(tmp_path / "dst")]
    args += ["--to-topic", "T2", "--transform", "held_transforms:slow", "--master", "local[1]"]
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("mqcore")), *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=True,
        preexec_fn=as_foreground,
    )
    assert proc.stderr is not None
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or ()), daemon=True)
    reader.start()
    try:
        assert wait_until(lambda: started.exists() or proc.poll() is not None, timeout=600)
        assert proc.poll() is None, "".join(lines)
        before = len(lines)  # Spark's start-up lines, all written before the job ran
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=120) == 130, "".join(lines)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        reader.join(timeout=30)
        proc.stderr.close()
    assert lines[before:] == ["Aborted!\n"], "".join(lines)
    assert not (tmp_path / "dst").exists()  # the directory the run made is removed


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


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
