"""Consumer retries through the delay levels, then the DLQ, on a fake clock (no real waits)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from mqtest import FakeClock, wait_until

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    PushConsumer,
)
from mqcore.broker.topics import SCHEDULE_TOPIC

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def broker_options(clock: FakeClock) -> dict[str, Any]:
    """Delays pass when the test moves ``clock``."""
    return {"delay_scheduler_options": {"clock": clock}}


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"T": 1}


class Recorder:
    """A listener failing the first ``fail`` attempts of each message (raising or not)."""

    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.seen: list[tuple[int, str, bytes]] = []
        self.succeeded = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        with self._lock:
            for m in msgs:
                self.seen.append((m.reconsume_times, m.topic, m.body))
                if m.reconsume_times < self.fail:
                    if m.reconsume_times % 2:
                        raise RuntimeError("not this time")
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER
            self.succeeded.set()
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def _consumer(broker: Broker, listener: Recorder, **kw: Any) -> PushConsumer:
    c = PushConsumer(
        "cg", broker=broker, instance_name="c1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, **kw,
    )  # fmt: skip
    c.subscribe("T")
    c.register_message_listener(listener)
    c.start()
    return c


def _held(broker: Broker, level: int, count: int) -> Any:
    """Wait for the ``count``-th message held at ``level``; return it."""
    qid = min(level, 18) - 1
    assert wait_until(lambda: broker.get_max_offset(SCHEDULE_TOPIC, qid) >= count), level
    return broker.store.get(SCHEDULE_TOPIC, qid, count - 1, max_count=1).messages[0]


def test_failing_k_times_returns_k_times_with_growing_delays(
    broker: Broker, clock: FakeClock
) -> None:
    k = 3
    rec = Recorder(fail=k)
    c = _consumer(broker, rec)
    delays: list[int] = []
    try:
        broker.send_message("T", 0, [Message(topic="T", body=b"m", tags="A")])
        for i in range(k):
            level = 3 + i  # the broker's choice: 3 + reconsume_times
            held = _held(broker, level, 1)
            assert held.delay_level == level and held.reconsume_times == i + 1
            assert held.properties["REAL_TOPIC"] == "%RETRY%cg"
            due = broker.delay_scheduler.deliver_at(level, held.store_timestamp)
            delays.append(due - held.store_timestamp)
            clock.now = due - 1
            broker.delay_scheduler.run_due()
            assert broker.get_max_offset("%RETRY%cg", 0) == i  # not a millisecond early
            clock.now = due
            broker.delay_scheduler.run_due()
            assert broker.get_max_offset("%RETRY%cg", 0) == i + 1
        assert rec.succeeded.wait(10)
    finally:
        c.shutdown()
    assert delays == [10_000, 30_000, 60_000]
    assert [r for r, _, _ in rec.seen] == [0, 1, 2, 3]  # k returns, the last one succeeds
    assert {t for _, t, _ in rec.seen} == {"T"} and {b for _, _, b in rec.seen} == {b"m"}
    assert broker.get_max_offset("%DLQ%cg", 0) == 0


def test_always_failing_reaches_the_dlq_after_16_retries(broker: Broker, clock: FakeClock) -> None:
    rec = Recorder(fail=10**6)
    c = _consumer(broker, rec)
    levels: list[int] = []
    try:
        (orig,) = broker.send_message("T", 0, [Message(topic="T", body=b"bad", tags="A")])
        for i in range(16):
            held = _held(broker, 3 + i, 1)
            levels.append(held.delay_level)
            clock.now = max(
                clock.now, broker.delay_scheduler.deliver_at(3 + i, held.store_timestamp)
            )
            broker.delay_scheduler.run_due()
        assert wait_until(lambda: broker.get_max_offset("%DLQ%cg", 0) == 1)
    finally:
        c.shutdown()
    assert levels == list(range(3, 19))  # 10 s, 30 s, 1 m ... 2 h
    assert [r for r, _, _ in rec.seen] == list(range(17))  # the first try and 16 retries
    (dead,) = broker.store.get("%DLQ%cg", 0, 0).messages
    # As RocketMQ's consumerSendMsgBack: reconsume times + 1, the first topic in RETRY_TOPIC,
    # the first message id in ORIGIN_MESSAGE_ID, no delay; body, tags, born time kept.
    assert dead.topic == "%DLQ%cg" and dead.reconsume_times == 17 and dead.delay_level == 0
    assert dead.properties["RETRY_TOPIC"] == "T"
    assert dead.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id
    assert (dead.body, dead.tags, dead.born_timestamp) == (b"bad", "A", held.born_timestamp)
    # It stays there: every level held it once, nothing is scheduled again.
    assert [broker.get_max_offset(SCHEDULE_TOPIC, q) for q in range(18)] == [0, 0] + [1] * 16
