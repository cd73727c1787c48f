"""The ``mqcore`` command's errors are one line, its listings whole, its plans bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from mqtest import as_foreground

from mqcore.cli import main
from mqcore.commands.allocate import MAX_PLAN_STEPS, max_consumers

MQCORE = str(Path(sys.executable).with_name("mqcore"))

_TYPO = """
from mqcore import hookimpl

@hookimpl
def mqcore_register_allocator(register):   # the hook is mqcore_register_allocators
    register("typo", object)
"""

_STRATEGY = """
from mqcore import hookimpl

class Weighted:
    name = "WEIGHTED"

    def __init__(self, *, weight=1):
        self.weight = weight

    def allocate(self, consumer_group, current_cid, mq_all, cid_all):
        return list(mq_all) if cid_all and current_cid == cid_all[0] else []

@hookimpl
def mqcore_register_allocators(register):
    register("weighted", Weighted)

@hookimpl
def mqcore_register_filters(register):
    register("a_filter_with_a_name_much_longer_than_any_terminal_column_would_show", object)
"""


def _distribution(where: Path, name: str, module: str, source: str) -> None:
    """An installed distribution (dist-info + module) with one entry point in group mqcore."""
    (where / f"{module}.py").write_text(source)
    info = where / f"{name.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[mqcore]\n{name} = {module}\n")


def _mqcore(where: Path, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(where), "PATH": "/usr/bin:/bin", "COLUMNS": str(columns)}
    return subprocess.run(
        [MQCORE, *args], capture_output=True, text=True, timeout=120, env=env, cwd=where
    )


def test_a_misspelt_hook_is_one_line_naming_the_switch(tmp_path: Path) -> None:
    """The error names the plugin, the unknown hook, and how to disable the plugin."""
    _distribution(tmp_path, "mqcore-typo", "mqcore_typo", _TYPO)
    proc = _mqcore(tmp_path, "plugins")
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "mqcore-typo" in lines[0] and "mqcore_register_allocator" in lines[0]
    assert "MQCORE_DISABLED_PLUGINS=mqcore-typo" in lines[0]
    disabled = subprocess.run(
        [MQCORE, "plugins", "--format", "names"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
        | {"MQCORE_DISABLED_PLUGINS": "mqcore-typo"},
        cwd=tmp_path,
    )
    assert disabled.returncode == 0, disabled.stderr


def test_an_unknown_option_to_a_third_party_strategy_is_one_line(tmp_path: Path) -> None:
    """mqcore allocate -o colour=red on a strategy taking only weight: one line, no traceback."""
    _distribution(tmp_path, "mqcore-weighted", "mqcore_weighted", _STRATEGY)
    proc = _mqcore(tmp_path, "allocate", "-s", "weighted", "-o", "colour=red")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "'weighted'" in lines[0] and "colour" in lines[0] and "weight" in lines[0]
    assert "mqcore-weighted" in lines[0]
    ok = _mqcore(tmp_path, "allocate", "-s", "weighted", "-o", "weight=2", "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["plan"]["c1"]


def test_plugins_shows_whole_names_at_80_columns(tmp_path: Path) -> None:
    """The table folds long names instead of cutting them; --format names prints plain lines."""
    _distribution(tmp_path, "mqcore-weighted", "mqcore_weighted", _STRATEGY)
    long_name = "a_filter_with_a_name_much_longer_than_any_terminal_column_would_show"
    table = _mqcore(tmp_path, "plugins", columns=80)
    assert table.returncode == 0, table.stderr
    assert "…" not in table.stdout
    assert all(len(line) <= 80 for line in table.stdout.splitlines())
    cells = "".join(line.split("│")[2].strip() for line in table.stdout.splitlines() if "│" in line)
    assert long_name in cells
    names = _mqcore(tmp_path, "plugins", "--format", "names", columns=80)
    assert names.returncode == 0, names.stderr
    rows = [line.split("\t") for line in names.stdout.splitlines()]
    assert ["filter", long_name, "mqcore-weighted", "mqcore-weighted"] in rows
    assert ["allocator", "avg", "allocate", "mqcore"] in rows


def test_allocate_refuses_a_plan_too_large_with_its_bound() -> None:
    """--consumers 100000 is refused at once, in one line saying how many it takes."""
    result = CliRunner().invoke(main, ["allocate", "--consumers", "100000"])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"at most {max_consumers(8):,} consumers" in lines[0]
    n = max_consumers(8)
    assert n * (n + 8) <= MAX_PLAN_STEPS < (n + 1) * (n + 9)


@pytest.mark.timeout(120)
def test_allocate_plans_at_the_bound() -> None:
    """A plan just under the bound is made, and covers every queue once."""
    n = max_consumers(8)
    result = CliRunner().invoke(main, ["allocate", "--consumers", str(n), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.output)["plan"]
    assert len(plan) == n and sum(len(share) for share in plan.values()) == 8


@pytest.mark.timeout(180)
def test_demo_explains_its_expected_warnings(tmp_path: Path) -> None:
    """The demo's stdout says the stderr warnings of its failing listener are expected."""
    proc = subprocess.run(
        [MQCORE, "demo", "--messages", "200", "--data-dir", str(tmp_path / "d")],
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "consume_listener_failed" in line]
    assert len(warnings) == 3, proc.stderr  # the first attempt and max_reconsume_times=2
    out = " ".join(proc.stdout.split())
    assert "each of its 3 attempts logs a consume_listener_failed warning on stderr" in out
    # The rebalance may add offset moves; every line on stderr is one the demo announced.
    assert "logs as a consumer_offset_moved_back warning (expected" in out
    explained = ("consume_listener_failed", "consumer_offset_moved_back")
    unexplained = [
        line for line in proc.stderr.splitlines() if not any(e in line for e in explained)
    ]
    assert unexplained == [], proc.stderr


def test_offset_moved_back_carries_its_fields(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The warning names the client, group, topic, queue and both offsets."""
    from mqcore.broker.offsets import ConsumerOffsetManager

    offsets = ConsumerOffsetManager(tmp_path / "consumerOffset.json")
    offsets.commit_offset("10.0.0.1@c1", "g", "T", 3, 50)
    with caplog.at_level("WARNING", logger="mqcore"):
        offsets.commit_offset("10.0.0.1@c1", "g", "T", 3, 20)
    [record] = [r for r in caplog.records if "consumer_offset_moved_back" in r.getMessage()]
    text = record.getMessage()
    for field in ("client_host=10.0.0.1@c1", "group=g", "topic=T", "queue_id=3", "offset=20"):
        assert field in text, text
    assert "previous=50" in text


@pytest.mark.timeout(120)
def test_a_reader_gone_ends_the_demo_quietly(tmp_path: Path) -> None:
    """`mqcore demo | head -1`: once the reader is gone the command stops with status 141
    (128 + SIGPIPE, as a shell command killed by the closed pipe) and says nothing."""
    proc = subprocess.Popen(
        [MQCORE, "demo", "--messages", "50", "--data-dir", str(tmp_path / "d")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith("1. broker")
    proc.stdout.close()  # as head -1 does once it has its line
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=100) == 141, err
    assert "Traceback" not in err and "Broken pipe" not in err and "Aborted" not in err


@pytest.mark.timeout(120)
def test_ctrl_c_ends_the_demo_with_130_and_one_line(tmp_path: Path) -> None:
    """Ctrl-C (SIGINT to the terminal's process group): status 130, one line, no traceback."""
    proc = subprocess.Popen(
        [MQCORE, "demo", "--messages", "500000", "--data-dir", str(tmp_path / "d")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=as_foreground,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith("1. broker")  # it is sending now
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=100)
    assert proc.returncode == 130, err
    assert err.splitlines() == ["Aborted!"], err
