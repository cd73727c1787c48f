"""Orderly push consumption: attempts and the DLQ, auto-commit, exclusivity and fairness."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from mqtest import wait_until
from structlog.testing import capture_logs

from mqcore import (
    Broker,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)
from mqcore.client import push_consumer

pytestmark = pytest.mark.timeout(60)

SUCCESS = ConsumeOrderlyStatus.SUCCESS
SUSPEND = ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT


def _send(broker: Broker, bodies: list[bytes], queue_id: int = 0, topic: str = "T") -> None:
    with Producer("pg", broker=broker) as p:
        for body in bodies:
            p.send(
                Message(topic=topic, body=body), selector=lambda mqs, m, arg: mqs[arg], arg=queue_id
            )


def _orderly(
    broker: Broker, listener: Callable[..., Any], name: str = "o1", topic: str = "T", **kw: Any
) -> PushConsumer:
    c = PushConsumer(
        kw.pop("group", "og"),
        broker=broker,
        instance_name=name,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        **kw,
    )
    c.subscribe(topic)
    c.register_message_listener_orderly(listener)
    return c


# -- reconsume times and the DLQ (item 3) ------------------------------------------------------


def test_suspend_counts_attempts_then_dead_letters(broker: Broker) -> None:
    """reconsume_times is 0, 1, 2 across suspends; after max_reconsume_times, the DLQ."""
    seen: list[tuple[bytes, int]] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        m = msgs[0]
        seen.append((m.body, m.reconsume_times))
        if m.body == b"bad":
            ctx.suspend_current_queue_time_millis = 10
            return SUSPEND
        return SUCCESS

    _send(broker, [b"bad", b"after"])
    c = _orderly(broker, listener, max_reconsume_times=2)
    c.start()
    try:
        assert wait_until(lambda: (b"after", 0) in seen)
        assert wait_until(lambda: broker.get_max_offset("%DLQ%og", 0) == 1)
    finally:
        c.shutdown()
    assert seen == [(b"bad", 0), (b"bad", 1), (b"bad", 2), (b"after", 0)]
    dead = broker.pull_message("x", "%DLQ%og", 0, 0).messages
    assert [m.body for m in dead] == [b"bad"]
    assert broker.query_consumer_offset("og", "T", 0) == 2  # both committed, in order


def test_orderly_default_retries_without_limit(broker: Broker) -> None:
    """RocketMQ's orderly default is Integer.MAX_VALUE attempts, not the concurrent 16."""
    counts: list[int] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        counts.append(msgs[0].reconsume_times)
        ctx.suspend_current_queue_time_millis = 10
        return SUSPEND if len(counts) <= 20 else SUCCESS

    _send(broker, [b"x"])
    c = _orderly(broker, listener)
    c.start()
    try:
        assert wait_until(lambda: len(counts) >= 21)
    finally:
        c.shutdown()
    assert counts == list(range(21))
    assert broker.topics.get("%DLQ%og") is None


# -- auto-commit (item 4) -------------------------------------------------------------------------


def test_auto_commit_takes_commit_and_rollback_as_success(broker: Broker) -> None:
    seen: list[int] = []
    answers = {0: ConsumeOrderlyStatus.ROLLBACK, 1: ConsumeOrderlyStatus.COMMIT}

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        seen.append(msgs[0].queue_offset)
        return answers.get(msgs[0].queue_offset, SUCCESS)

    _send(broker, [b"0", b"1", b"2"])
    c = _orderly(broker, listener)
    with capture_logs() as logs:
        c.start()
        try:
            assert wait_until(lambda: len(seen) >= 3)
            time.sleep(0.1)
        finally:
            c.shutdown()
    assert seen == [0, 1, 2]  # nothing consumed twice
    warned = [e for e in logs if e["event"] == "orderly_status_needs_auto_commit_off"]
    assert [e["status"] for e in warned] == ["ROLLBACK", "COMMIT"]
    assert broker.query_consumer_offset("og", "T", 0) == 3


def test_manual_commit_rollback_redelivers_from_last_commit(broker: Broker) -> None:
    seen: list[int] = []
    rolled_back: set[int] = set()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        ctx.auto_commit = False
        ctx.suspend_current_queue_time_millis = 10
        off = msgs[0].queue_offset
        seen.append(off)
        if off == 3 and off not in rolled_back:
            rolled_back.add(off)
            return ConsumeOrderlyStatus.ROLLBACK
        if off in (1, 3, 4):
            return ConsumeOrderlyStatus.COMMIT
        return SUCCESS  # consumed, not committed

    _send(broker, [b"%d" % i for i in range(6)])
    c = _orderly(broker, listener)
    c.start()
    try:
        assert wait_until(lambda: 5 in seen)
        time.sleep(0.1)
    finally:
        c.shutdown()
    assert seen == [0, 1, 2, 3, 2, 3, 4, 5]  # the rollback went back to offset 2
    assert broker.query_consumer_offset("og", "T", 0) == 5  # offset 5 was never committed


# -- exclusivity across a rebalance (item 5) ----------------------------------------------------


def test_rebalance_never_lets_two_members_consume_one_queue(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The old owner keeps the lock while its slow listener runs; the new one waits for it."""
    monkeypatch.setattr(push_consumer, "_UNLOCK_DELAY_S", 0.5)  # RocketMQ's 20 s, shortened
    broker.create_topic("X", queue_nums=1)
    mq = MessageQueue("X", broker.config.broker_name, 0)
    guard = threading.Lock()
    running: list[str] = []
    overlaps: list[tuple[str, ...]] = []
    runs: list[tuple[str, int, float, float]] = []
    lock_held_by_old: list[bool] = []

    def listener_for(member: str) -> Callable[..., Any]:
        def listener(msgs, ctx):  # type: ignore[no-untyped-def]
            with guard:
                running.append(member)
                if len(running) > 1:
                    overlaps.append(tuple(running))
            begin = time.monotonic()
            # The first delivery is slow: rebalance happens while it runs.
            time.sleep(2.5 if member == "z1" and msgs[0].queue_offset == 0 else 0.02)
            with guard:
                running.remove(member)
            runs.append((member, msgs[0].queue_offset, begin, time.monotonic()))
            return SUCCESS

        return listener

    _send(broker, [b"%d" % i for i in range(6)], topic="X")
    old = _orderly(broker, listener_for("z1"), "z1", "X", group="xg", rebalance_interval=0.3)
    # "a2" sorts before "z1": the queue moves to the newcomer.
    new = _orderly(broker, listener_for("a2"), "a2", "X", group="xg", rebalance_interval=0.3)
    old.start()
    try:
        assert wait_until(lambda: running == ["z1"])
        new.start()
        assert wait_until(lambda: not old.assigned_queues("X"), timeout=5)
        time.sleep(1.2)  # past the 1 s rebalance wait: the listener still runs
        assert running == ["z1"]
        lock_held_by_old.append(broker.locks.is_locked("xg", mq, old.client_id))
        assert wait_until(lambda: {o for m, o, *_ in runs if m == "a2"} >= set(range(6)))
    finally:
        new.shutdown()
        old.shutdown()
    assert overlaps == []
    assert lock_held_by_old == [True]
    old_runs = [r for r in runs if r[0] == "z1"]
    new_runs = [r for r in runs if r[0] == "a2"]
    assert [r[1] for r in old_runs] == [0]
    # The new owner starts from the offset the old one left (the slow message again: its
    # commit was dropped with the queue), and only after the old listener returned.
    assert [r[1] for r in new_runs] == list(range(6))
    assert new_runs[0][2] >= old_runs[0][3]


# -- fairness (item 6) ---------------------------------------------------------------------------


def _fairness(broker: Broker, slice_s: float | None = None, **kw: Any) -> float:
    """Flood queue 0, then send one message to queue 1: seconds until it is consumed."""
    consumed: dict[int, float] = {}
    started = threading.Event()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        m = msgs[0]
        if m.queue_id == 0:
            started.set()
            time.sleep(0.01)
        else:
            consumed[m.queue_id] = time.monotonic()
        return SUCCESS

    _send(broker, [b"%d" % i for i in range(400)], queue_id=0)
    c = _orderly(broker, listener, **kw)
    if slice_s is not None:
        c.max_time_consume_continuously = slice_s  # RocketMQ's 60 s, shortened
    c.start()
    try:
        assert started.wait(10)
        time.sleep(0.3)  # queue 0's pulls have all reached the consumer by now
        _send(broker, [b"idle"], queue_id=1)
        sent = time.monotonic()
        wait_until(lambda: 1 in consumed, timeout=5)
    finally:
        c.shutdown()
    return consumed.get(1, float("inf")) - sent


def test_backlogged_queue_does_not_take_every_consume_thread(broker: Broker) -> None:
    """The dispatch gate: one task per queue, so the idle queue gets the other thread."""
    assert _fairness(broker, consume_thread_min=2, consume_thread_max=2) < 1.0


def test_orderly_task_yields_after_max_time_consume_continuously(broker: Broker) -> None:
    """With a single consume thread, the flooded queue's task hands it over in time."""
    assert _fairness(broker, 0.2, consume_thread_min=1, consume_thread_max=1) < 1.0
