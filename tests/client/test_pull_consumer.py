"""PullConsumer: statuses, filtering, blocking pulls, offsets that survive restarts and crashes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from mqcore import Broker, Kernel, Message, MessageModel, PullConsumer, PullStatus
from mqcore.errors import FilterExpressionError, NotRegisteredError


def _needs(kind: str, name: str) -> None:
    if name not in Kernel(autoload=False).names(kind):
        pytest.skip(f"{kind} {name!r} is not registered")


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"T": 2}


@pytest.fixture
def broker(broker: Broker) -> Broker:
    """The shared broker; its tests keep offsets on the broker, so they need that plugin."""
    _needs("offset_store", "broker")
    return broker


def _fill(b: Broker, bodies_tags: list[tuple[bytes, str]], queue_id: int = 0) -> None:
    b.send_message(
        "T", queue_id, [Message(topic="T", body=body, tags=tag) for body, tag in bodies_tags]
    )


def test_statuses(broker: Broker) -> None:
    _fill(broker, [(b"a", "A"), (b"b", "B")])
    with PullConsumer("cg", broker=broker) as c:
        (mq0, mq1) = sorted(c.fetch_subscribe_message_queues("T"))
        found = c.pull(mq0, "*", 0)
        assert found.pull_status is PullStatus.FOUND and [m.body for m in found.msg_found_list] == [
            b"a",
            b"b",
        ]
        assert (found.next_begin_offset, found.min_offset, found.max_offset) == (2, 0, 2)
        assert c.pull(mq0, "*", 2).pull_status is PullStatus.NO_NEW_MSG
        assert c.pull(mq0, "*", 9).pull_status is PullStatus.OFFSET_ILLEGAL
        assert c.pull(mq1, "*", 0).pull_status is PullStatus.NO_NEW_MSG
        with pytest.raises(ValueError):
            c.pull(mq0, "*", -1)


def test_tag_filtering(broker: Broker) -> None:
    _needs("filter", "TAG")
    _fill(broker, [(b"a", "A"), (b"b", "B"), (b"c", "C"), (b"a2", "A")])
    with PullConsumer("cg", broker=broker) as c:
        mq = sorted(c.fetch_subscribe_message_queues("T"))[0]
        res = c.pull(mq, "A || C", 0)
        assert [m.body for m in res.msg_found_list] == [b"a", b"c", b"a2"]
        none = c.pull(mq, "Z", 0)
        assert none.pull_status is PullStatus.NO_MATCHED_MSG and none.next_begin_offset == 4


def test_sql92_filtering_and_bad_expressions(broker: Broker) -> None:
    _needs("filter", "SQL92")
    broker.send_message(
        "T", 0, [Message(topic="T", body=b"%d" % i, properties={"n": str(i)}) for i in range(10)]
    )
    with PullConsumer("cg", broker=broker) as c:
        mq = sorted(c.fetch_subscribe_message_queues("T"))[0]
        res = c.pull(mq, "n >= 7", 0, expression_type="SQL92")
        assert [m.body for m in res.msg_found_list] == [b"7", b"8", b"9"]
        with pytest.raises(FilterExpressionError):
            c.pull(mq, "n >", 0, expression_type="SQL92")
        with pytest.raises(NotRegisteredError, match="SQL92"):
            c.pull(mq, "x", 0, expression_type="NOPE")


@pytest.mark.timeout(30)
def test_blocking_pull_returns_when_a_message_arrives(broker: Broker) -> None:
    with PullConsumer("cg", broker=broker) as c:
        mq = sorted(c.fetch_subscribe_message_queues("T"))[1]
        sent: list[float] = []

        def later() -> None:
            time.sleep(0.3)
            _fill(broker, [(b"late", "L")], queue_id=1)
            # "Arrived" means stored: the clock starts when the send returns.
            sent.append(time.monotonic())

        t = threading.Thread(target=later)
        t.start()
        res = c.pull_blocking_if_not_found(mq, "*", 0, timeout=10)
        got_at = time.monotonic()
        t.join()
        assert [m.body for m in res.msg_found_list] == [b"late"]
        assert got_at - sent[0] < 0.05
        begin = time.monotonic()
        empty = c.pull_blocking_if_not_found(mq, "*", 1, timeout=0.3)
        assert empty.pull_status is PullStatus.NO_NEW_MSG and time.monotonic() - begin >= 0.29


def test_offsets_survive_broker_restart(tmp_path: Path, store_name: str) -> None:
    _needs("offset_store", "broker")
    with Broker(tmp_path, store=store_name) as b:
        b.create_topic("T", queue_nums=2)
        with PullConsumer("cg", broker=b) as c:
            mq = sorted(c.fetch_subscribe_message_queues("T"))[1]
            c.update_consume_offset(mq, 17)
            assert c.fetch_consume_offset(mq) == 17
        # shutdown committed it to the broker
        assert b.query_consumer_offset("cg", "T", 1) == 17
    with Broker(tmp_path, store=store_name) as b, PullConsumer("cg", broker=b) as c:
        assert c.fetch_consume_offset(mq, from_store=True) == 17


def test_broadcasting_keeps_offsets_in_a_local_file(
    tmp_path: Path, store_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _needs("offset_store", "local_file")
    monkeypatch.setenv("MQCORE_OFFSETS_DIR", str(tmp_path / "offsets"))
    with Broker(tmp_path / "b", store=store_name) as b:
        b.create_topic("T", queue_nums=1)
        opts = {"message_model": MessageModel.BROADCASTING, "instance_name": "i1"}
        with PullConsumer("bg", broker=b, **opts) as c:  # type: ignore[arg-type]
            mq = next(iter(c.fetch_subscribe_message_queues("T")))
            c.update_consume_offset(mq, 5)
        assert b.query_consumer_offset("bg", "T", 0) != 5  # never sent to the broker
        with PullConsumer("bg", broker=b, **opts) as c:  # type: ignore[arg-type]
            assert c.fetch_consume_offset(mq, from_store=True) == 5
    assert list((tmp_path / "offsets").rglob("*.json"))


CRASHER = textwrap.dedent(
    """
    import sys, time
    from mqcore import Broker, MessageQueue, PullConsumer
    b = Broker(sys.argv[1], store=sys.argv[2], flush_consumer_offset_interval_ms=200)
    b.create_topic("T", queue_nums=2)
    c = PullConsumer("cg", broker=b, persist_consumer_offset_interval=0.1)
    c.start()
    mq = MessageQueue("T", "broker-a", 1)
    c.update_consume_offset(mq, 99)
    time.sleep(1.0)  # several persistence rounds on both sides
    print("committed", flush=True)
    time.sleep(60)
    """
)


@pytest.mark.timeout(60)
def test_offsets_survive_a_crash_after_the_persist_window(tmp_path: Path, store_name: str) -> None:
    _needs("offset_store", "broker")
    env = {**os.environ, "PYTHONSAFEPATH": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", CRASHER, str(tmp_path), store_name],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines = iter(proc.stdout.readline, "")
        # structlog may print events first: wait for the marker line itself.
        assert any(line.strip() == "committed" for line in lines)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()
    with Broker(tmp_path, store=store_name) as b:
        assert b.query_consumer_offset("cg", "T", 1) == 99
