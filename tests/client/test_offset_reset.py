"""Admin offset resets reach running consumers (RESET_CONSUMER_CLIENT_OFFSET) and stick."""

from __future__ import annotations

import threading
import time

import pytest
from mqtest import wait_until
from structlog.testing import capture_logs

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"T": 2}


def _send(broker: Broker, bodies: list[bytes]) -> dict[bytes, int]:
    """Send ``bodies``; returns body -> queue id."""
    with Producer("pg", broker=broker) as p:
        return {b: p.send(Message(topic="T", body=b)).message_queue.queue_id for b in bodies}


class _Sink:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.bodies: list[bytes] = []

    def __call__(self, msgs, ctx):  # type: ignore[no-untyped-def]
        with self.lock:
            self.bodies.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    def count(self) -> int:
        with self.lock:
            return len(self.bodies)

    def since(self, n: int) -> list[bytes]:
        with self.lock:
            return self.bodies[n:]


def _consumer(broker: Broker, sink: _Sink) -> PushConsumer:
    c = PushConsumer(
        "g",
        broker=broker,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        persist_consumer_offset_interval=0.1,
    )
    c.subscribe("T", "*")
    c.register_message_listener(sink)
    return c


def _committed(broker: Broker) -> list[int]:
    return [broker.query_consumer_offset("g", "T", q) for q in range(2)]


def _maxes(broker: Broker) -> list[int]:
    return [broker.get_max_offset("T", q) for q in range(2)]


def test_update_consumer_offset_rewinds_a_running_group(broker: Broker) -> None:
    """An offset set while the group runs is followed (queue 0 is consumed again from 0),
    not overwritten by the members' next commit."""
    queues = _send(broker, [b"a%d" % i for i in range(20)])
    sink = _Sink()
    c = _consumer(broker, sink)
    c.start()
    try:
        assert wait_until(lambda: sink.count() >= 20, timeout=30)
        assert wait_until(lambda: _committed(broker) == _maxes(broker), timeout=10)
        before = sink.count()
        broker.update_consumer_offset("g", "T", 0, 0)
        queue0 = sorted(b for b, q in queues.items() if q == 0)
        assert wait_until(lambda: sorted(set(sink.since(before))) == queue0, timeout=30)
        # Several commits later the group is at the end again, not stuck or undone.
        time.sleep(0.5)
        assert _committed(broker) == _maxes(broker)
        assert sorted(sink.since(before)) == queue0  # queue 1 was left alone
    finally:
        c.shutdown()


def test_reset_to_timestamp_redelivers_what_came_after(broker: Broker) -> None:
    """reset_offset_by_timestamp: every queue to the first message stored at or after it;
    the running group consumes exactly those messages again. Offsets moved back by the
    reset are what was asked for: no consumer_offset_moved_back warning."""
    _send(broker, [b"old%d" % i for i in range(10)])
    time.sleep(0.05)
    cut = int(time.time() * 1000)
    time.sleep(0.05)
    new = _send(broker, [b"new%d" % i for i in range(10)])
    sink = _Sink()
    c = _consumer(broker, sink)
    c.start()
    try:
        assert wait_until(lambda: sink.count() >= 20, timeout=30)
        assert wait_until(lambda: _committed(broker) == _maxes(broker), timeout=10)
        before = sink.count()
        with capture_logs() as logs:
            table = broker.reset_offset_by_timestamp("g", "T", cut)
            per_queue = [sum(1 for q in new.values() if q == i) for i in range(2)]
            assert table == {
                MessageQueue("T", broker.config.broker_name, q): _maxes(broker)[q] - per_queue[q]
                for q in range(2)
            }
            assert wait_until(lambda: sorted(sink.since(before)) == sorted(new), timeout=30)
        moved = [e for e in logs if e["event"] == "consumer_offset_moved_back"]
        assert moved and {e["log_level"] for e in moved} == {"debug"}
        time.sleep(0.5)
        assert sorted(sink.since(before)) == sorted(new)
        assert _committed(broker) == _maxes(broker)
    finally:
        c.shutdown()


def test_reset_without_running_members_and_force(broker: Broker) -> None:
    """With no member running the offsets are simply set; a new member starts there.
    Without ``force`` an offset only moves back."""
    _send(broker, [b"m%d" % i for i in range(10)])
    assert broker.reset_offset_by_timestamp("g", "T", -1) == {
        MessageQueue("T", broker.config.broker_name, q): m for q, m in enumerate(_maxes(broker))
    }  # -1: the end of each queue
    late = _send(broker, [b"late%d" % i for i in range(4)])
    sink = _Sink()
    c = _consumer(broker, sink)
    c.start()
    try:
        assert wait_until(lambda: sorted(sink.since(0)) == sorted(late), timeout=30)
    finally:
        c.shutdown()
    ends = _maxes(broker)
    kept = broker.reset_offset_by_timestamp("g", "T", int(time.time() * 1000) + 60_000, force=False)
    assert sorted(kept.values()) == sorted(ends) and _committed(broker) == ends
    back = broker.reset_offset_by_timestamp("g", "T", 0, force=False)
    assert sorted(back.values()) == [0, 0] and _committed(broker) == [0, 0]


def test_a_late_offset_commit_does_not_undo_a_reset(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A member's periodic offset commit may be sent before it learns of a reset and stored
    after it. The member still restarts the queues at the reset offsets (the notice names
    them) rather than at what the broker holds when it reads it back."""
    _send(broker, [b"m%d" % i for i in range(10)])
    sink = _Sink()
    c = _consumer(broker, sink)
    c.start()
    try:
        assert wait_until(lambda: sink.count() >= 10, timeout=30)
        assert wait_until(lambda: _committed(broker) == _maxes(broker), timeout=10)
        ends, before = _maxes(broker), sink.count()
        store = c.offset_store
        assert store is not None
        persist, handling = type(store).persist, threading.Event()

        def persist_then_late_commit(self: object, mq: MessageQueue) -> None:
            persist(self, mq)  # type: ignore[arg-type]
            if handling.is_set():  # the old offset, committed by a persist already under way
                broker.update_consumer_offset(
                    "g", "T", mq.queue_id, ends[mq.queue_id], reset_clients=False
                )

        monkeypatch.setattr(type(store), "persist", persist_then_late_commit)
        reset = c.reset_offset

        def reset_offset(group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
            handling.set()
            try:
                reset(group, topic, offsets)
            finally:
                handling.clear()

        c.reset_offset = reset_offset  # type: ignore[method-assign]
        broker.reset_offset_by_timestamp("g", "T", 0)
        assert wait_until(
            lambda: sorted(set(sink.since(before))) == sorted(b"m%d" % i for i in range(10)),
            timeout=30,
        )
        assert wait_until(lambda: _committed(broker) == _maxes(broker), timeout=10)
    finally:
        c.shutdown()
