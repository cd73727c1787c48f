"""``mqcore timer stats`` reads a broker's timer state from its data directory."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from mqcore import Broker, Message
from mqcore.cli import main

pytestmark = pytest.mark.timeout(60)


def test_stats_of_a_stopped_broker(tmp_path: Path, store_name: str) -> None:
    now = time.time_ns() // 1_000_000
    with Broker(tmp_path, store=store_name) as b:
        b.create_topic("T", queue_nums=1)
        msgs = [Message(topic="T", body=b"x", deliver_time_ms=now + 60_000 + i) for i in range(3)]
        b.send_message("T", 0, msgs)
    runner = CliRunner()
    got = runner.invoke(main, ["timer", "stats", "--data-dir", str(tmp_path), "--json"])
    assert got.exit_code == 0, got.output
    stats = json.loads(got.output)
    assert stats["pending"] == 3
    # Taken into the wheel before the broker stopped, or still to be: either way counted.
    assert stats["in_wheel"] + stats["enqueue_backlog"] == 3
    text = runner.invoke(main, ["timer", "stats", "--data-dir", str(tmp_path)])
    assert text.exit_code == 0 and "pending timers   3" in text.output


def test_stats_of_a_directory_without_timers(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    got = CliRunner().invoke(main, ["timer", "stats", "--data-dir", str(tmp_path)])
    assert got.exit_code == 1
    assert "holds no timer state" in got.output
