"""Logging: the library prints nothing unless the application asks, through stdlib logging."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mqcore.logs import get_logger

pytestmark = pytest.mark.timeout(120)

# An application embedding broker, producer and push consumer, configuring no logging at all.
_EMBEDDED = textwrap.dedent(
    """
    import sys, threading
    from mqcore import (Broker, ConsumeConcurrentlyStatus, ConsumeFromWhere, Message,
                        Producer, PushConsumer)

    got = threading.Event()
    seen = []

    def listener(msgs, ctx):
        seen.extend(msgs)
        if len(seen) >= 10:
            got.set()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with Broker(sys.argv[1], store=sys.argv[2]) as broker:
        broker.create_topic("T", queue_nums=4)
        with Producer("pg", broker=broker) as p:
            for i in range(10):
                p.send(Message(topic="T", body=b"x%d" % i, keys=f"k{i}"))
        c = PushConsumer("cg", broker=broker,
                         consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        c.subscribe("T", "*")
        c.register_message_listener(listener)
        c.start()
        ok = got.wait(30)
        c.shutdown()
    sys.exit(0 if ok else 3)
    """
)


def test_embedded_use_prints_nothing(tmp_path: Path, store_name: str) -> None:
    """Broker, producer and consumer with no logging configured: stdout and stderr stay empty
    (the info events of start-up, rebalance and shutdown are not shown)."""
    script = tmp_path / "app.py"
    script.write_text(_EMBEDDED)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "data"), store_name],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr == ""


def test_events_reach_the_applications_logging(caplog: pytest.LogCaptureFixture) -> None:
    """The application's logging config decides: records carry the event and its context."""
    log = get_logger("mqcore.tests.sample")
    with caplog.at_level(logging.INFO, logger="mqcore"):
        log.debug("not_shown", topic="T")
        log.info("queue_assigned", group="g", queue_id=3, note="two words")
    records = [r for r in caplog.records if r.name == "mqcore.tests.sample"]
    assert [r.getMessage() for r in records] == [
        "queue_assigned group=g queue_id=3 note='two words'"
    ]
    assert records[0].levelno == logging.INFO
    assert records[0].mqcore_event == "queue_assigned"  # type: ignore[attr-defined]
    assert records[0].mqcore_context == {"group": "g", "queue_id": 3, "note": "two words"}  # type: ignore[attr-defined]


def test_exceptions_keep_their_traceback(caplog: pytest.LogCaptureFixture) -> None:
    """``log.exception`` hands the exception to the record (handlers print the traceback)."""
    log = get_logger("mqcore.tests.sample")
    with caplog.at_level(logging.ERROR, logger="mqcore"):
        try:
            raise KeyError("boom")
        except KeyError:
            log.exception("round_failed", group="g")
    (record,) = [r for r in caplog.records if r.name == "mqcore.tests.sample"]
    assert record.exc_info is not None and record.exc_info[0] is KeyError


def test_warnings_go_to_stderr_without_configuration(tmp_path: Path) -> None:
    """With no configuration Python's last-resort handler shows warnings on stderr only."""
    script = tmp_path / "warn.py"
    script.write_text(
        "from mqcore.logs import get_logger\n"
        "log = get_logger('mqcore.x')\n"
        "log.info('quiet_event')\n"
        "log.warning('loud_event', topic='T')\n"
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert proc.stdout == ""
    assert proc.stderr.strip() == "loud_event topic=T"


def test_capture_logs_sees_every_level() -> None:
    """structlog.testing.capture_logs captures mqcore's events, debug ones included."""
    log = get_logger("mqcore.tests.sample")
    with capture_logs() as captured:
        log.debug("tiny_event", n=1)
    assert captured == [{"event": "tiny_event", "n": 1, "log_level": "debug"}]


def test_no_module_uses_structlogs_global_configuration() -> None:
    """Every mqcore module logs through mqcore.logs (stdlib logging), never through
    structlog.get_logger, whose default configuration prints to stdout."""
    import mqcore

    root = Path(mqcore.__file__).resolve().parents[1]
    offenders = [
        str(path.relative_to(root))
        for folder in ("mqcore", "plugins", "contrib")
        for path in (root / folder).rglob("*.py")
        if path.name != "logs.py"
        and ("structlog.get_logger(" in (text := path.read_text(encoding="utf-8"))
             or "structlog.configure(" in text)
    ]  # fmt: skip
    assert offenders == []


def test_cli_sends_mqcore_logs_to_stderr_at_the_chosen_level() -> None:
    """`mqcore -v`: info events on stderr (warnings by default, -vv debug), none on stdout."""
    from click.testing import CliRunner

    from mqcore.cli import main

    log = get_logger("mqcore.tests.cli")
    for args, shown in (([], {"warn_event"}), (["-v"], {"warn_event", "info_event"})):
        runner = CliRunner()
        result = runner.invoke(main, [*args, "plugins"])
        assert result.exit_code == 0, result.output
        # The handler the command installed writes to whatever stderr is now.
        buf = __import__("io").StringIO()
        old, sys.stderr = sys.stderr, buf
        try:
            log.info("info_event", n=1)
            log.warning("warn_event", n=2)
            log.debug("debug_event", n=3)
        finally:
            sys.stderr = old
        lines = buf.getvalue().splitlines()
        assert {line.split()[2] for line in lines} == shown, lines
        assert all(line.split()[1] == "mqcore.tests.cli:" for line in lines)
    assert logging.getLogger("mqcore").propagate is False  # the command owns these loggers
