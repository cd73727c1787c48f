"""PushConsumer: rebalance, listeners, retries to the DLQ, broadcasting and orderly consumption."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mqtest import fast_clock
from mqtest import wait_until as _wait_until
from structlog.testing import capture_logs

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageModel,
    Producer,
    PushConsumer,
)
from mqcore.errors import MQClientError, NotRegisteredError
from mqcore.message import MessageQueue
from mqcore.plugins.offset_broker import BrokerOffsetStore

pytestmark = pytest.mark.timeout(60)


def wait_until(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    """:func:`mqtest.wait_until` with room for a rebalance (20 s by default)."""
    return _wait_until(cond, timeout, interval=0.02)


@pytest.fixture
def broker_options() -> dict[str, Any]:
    """Delays and retries pass in milliseconds (a fast clock)."""
    return {"delay_scheduler_options": {"clock": fast_clock()}}


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"T": 8}


def _produce(broker: Broker, n: int, **kw: str) -> None:
    with Producer("pg", broker=broker) as p:
        for i in range(n):
            p.send(Message(topic="T", body=b"%d" % i, **kw))


def _consumer(broker: Broker, name: str, sink: list, **kw) -> PushConsumer:  # type: ignore[no-untyped-def, type-arg]
    lock = threading.Lock()
    expr = kw.pop("expr", "*")

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            sink.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(
        kw.pop("group", "cg"),
        broker=broker,
        instance_name=name,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        **kw,
    )
    c.subscribe("T", expr)
    c.register_message_listener(listener)
    return c


def test_consumes_everything_once_and_commits(broker: Broker) -> None:
    _produce(broker, 400)
    got: list = []  # type: ignore[type-arg]
    c = _consumer(broker, "c1", got)
    c.start()
    try:
        assert wait_until(lambda: len(got) >= 400)
        assert len(c.assigned_queues("T")) == 8
    finally:
        c.shutdown()
    assert sorted(int(m.body) for m in got) == list(range(400))
    committed = sum(broker.query_consumer_offset("cg", "T", q) for q in range(8))
    assert committed == 400


def test_two_members_share_queues_and_rebalance_on_leave(broker: Broker) -> None:
    a, b = [], []  # type: ignore[var-annotated]
    c1 = _consumer(broker, "c1", a)
    c2 = _consumer(broker, "c2", b)
    c1.start()
    c2.start()
    try:
        assert wait_until(lambda: len(c1.assigned_queues("T")) == 4 == len(c2.assigned_queues("T")))
        assert c1.assigned_queues("T").isdisjoint(c2.assigned_queues("T"))
        _produce(broker, 200)
        assert wait_until(lambda: len(a) + len(b) >= 200)
        assert a and b
        c2.shutdown()
        # The leave notification rebalances at once, not after the 20 s period.
        assert wait_until(lambda: len(c1.assigned_queues("T")) == 8, timeout=10)
        _produce(broker, 100)
        assert wait_until(lambda: len(a) + len(b) >= 300)
    finally:
        c1.shutdown()
        c2.shutdown()
    assert sorted(int(m.body) for m in a + b) == sorted(list(range(200)) + list(range(100)))


def test_queue_changing_member_never_moves_the_offset_back(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new member reads a queue's offset before the old member's release commit lands,
    and commits before it consumes anything: the old member's offset stays (no
    consumer_offset_moved_back), and only what the old member consumed before that commit
    is delivered again."""
    cond = threading.Condition()
    read_by_new: dict[MessageQueue, int] = {}
    released: set[MessageQueue] = set()
    new_committed = threading.Event()
    old_committed = threading.Event()
    c1: PushConsumer | None = None
    c2: PushConsumer | None = None
    real_read, real_persist = BrokerOffsetStore.read_offset, BrokerOffsetStore.persist
    real_persist_all = BrokerOffsetStore.persist_all

    def read_offset(self: BrokerOffsetStore, mq: MessageQueue, from_store: bool = False) -> int:
        offset = real_read(self, mq, from_store)
        if c2 is not None and self is c2.offset_store and from_store:
            with cond:
                read_by_new[mq] = offset
                cond.notify_all()
        return offset

    def persist(self: BrokerOffsetStore, mq: MessageQueue) -> None:
        # The old member's release commit waits for the new member's read of the queue.
        if c1 is not None and self is c1.offset_store:
            with cond:
                assert cond.wait_for(lambda: mq in read_by_new, timeout=20)
        real_persist(self, mq)
        with cond:
            released.add(mq)
            cond.notify_all()

    def persist_all(self: BrokerOffsetStore, mqs: Any) -> None:
        # The new member's first commit comes after the old member's release commits.
        mqs = list(mqs)
        if c2 is not None and self is c2.offset_store and not new_committed.is_set():
            with cond:
                assert cond.wait_for(lambda: set(read_by_new) <= released, timeout=20)
        real_persist_all(self, mqs)
        if c2 is not None and self is c2.offset_store:
            new_committed.set()
        if c1 is not None and self is c1.offset_store:
            old_committed.set()

    monkeypatch.setattr(BrokerOffsetStore, "read_offset", read_offset)
    monkeypatch.setattr(BrokerOffsetStore, "persist", persist)
    monkeypatch.setattr(BrokerOffsetStore, "persist_all", persist_all)

    a, b = [], []  # type: ignore[var-annotated]
    gate = threading.Event()
    c1 = _consumer(broker, "c1", a, persist_consumer_offset_interval=3600)
    c2 = PushConsumer(
        "cg",
        broker=broker,
        instance_name="c2",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        persist_consumer_offset_interval=3600,
    )
    c2.subscribe("T", "*")
    lock = threading.Lock()

    def held(msgs, ctx):  # type: ignore[no-untyped-def]
        gate.wait(20)  # nothing consumed before the new member's first commit
        with lock:
            b.extend(msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c2.register_message_listener(held)
    try:
        with capture_logs() as logs:
            c1.start()
            assert wait_until(lambda: len(c1.assigned_queues("T")) == 8)
            # The old member's first round ends with a commit (of nothing yet); after it, it
            # commits only when it releases a queue.
            assert old_committed.wait(20)
            _produce(broker, 200)
            assert wait_until(lambda: len(a) >= 200)
            c2.start()
            assert wait_until(lambda: len(c2.assigned_queues("T")) == 4)
            with cond:
                assert cond.wait_for(lambda: len(read_by_new) == 4 <= len(released), timeout=20)
            moved = {mq.queue_id for mq in c2.assigned_queues("T")}
            assert new_committed.wait(20)  # c2's first round commits after its rebalance
            committed = {q: broker.query_consumer_offset("cg", "T", q) for q in moved}
            gate.set()
            # c1 consumed each of the moved queues to its end before releasing it.
            again = [m for m in a if m.queue_id in moved]
            assert wait_until(lambda: len(b) >= len(again))
    finally:
        gate.set()
        c1.shutdown()
        c2.shutdown()
    assert [e for e in logs if e["event"] == "consumer_offset_moved_back"] == []
    maxes = {q: broker.get_max_offset("T", q) for q in range(8)}
    assert committed == {q: maxes[q] for q in moved}  # the old member's, kept
    assert {q: broker.query_consumer_offset("cg", "T", q) for q in range(8)} == maxes
    assert sorted(int(m.body) for m in a) == list(range(200))
    # Delivered again: exactly what the old member consumed of the moved queues, once.
    assert sorted(int(m.body) for m in b) == sorted(int(m.body) for m in again)


def test_unknown_strategy_fails_at_start_listing_names(broker: Broker) -> None:
    c = _consumer(broker, "c1", [], allocate_strategy="no_such_strategy")
    with pytest.raises(NotRegisteredError, match="no_such_strategy.*avg"):
        c.start()
    c.shutdown()


def test_start_needs_listener_and_subscription(broker: Broker) -> None:
    c = PushConsumer("cg", broker=broker)
    with pytest.raises(MQClientError, match="listener"):
        c.start()
    c.register_message_listener(lambda m, c: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    with pytest.raises(MQClientError, match="subscribe"):
        c.start()


def test_failures_are_retried_then_dead_lettered(broker: Broker) -> None:
    attempts: Counter[bytes] = Counter()
    seen_topics: set[str] = set()
    reconsume: list[int] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        for m in msgs:
            attempts[m.body] += 1
            seen_topics.add(m.topic)
            reconsume.append(m.reconsume_times)
            if m.body == b"bad":
                raise RuntimeError("cannot handle this one")
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(
        "cg", broker=broker, instance_name="c1", max_reconsume_times=2,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )  # fmt: skip
    c.subscribe("T")
    c.register_message_listener(listener)
    c.start()
    try:
        broker.send_message(
            "T", 0, [Message(topic="T", body=b"good"), Message(topic="T", body=b"bad")]
        )
        assert wait_until(lambda: broker.get_max_offset("%DLQ%cg", 0) == 1)
    finally:
        c.shutdown()
    assert attempts[b"good"] == 1 and attempts[b"bad"] == 3  # first try + 2 retries
    assert seen_topics == {"T"}  # retries are shown under their original topic
    assert sorted(set(reconsume)) == [0, 1, 2]
    dead = broker.pull_message("x", "%DLQ%cg", 0, 0).messages
    assert [m.body for m in dead] == [b"bad"] and dead[0].properties["RETRY_TOPIC"] == "T"


def test_broadcasting_delivers_to_every_member(
    broker: Broker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQCORE_OFFSETS_DIR", str(tmp_path / "offsets"))
    a, b = [], []  # type: ignore[var-annotated]
    opts = {"message_model": MessageModel.BROADCASTING, "group": "bg"}
    c1, c2 = _consumer(broker, "c1", a, **opts), _consumer(broker, "c2", b, **opts)
    c1.start()
    c2.start()
    try:
        _produce(broker, 50)
        assert wait_until(lambda: len(a) >= 50 and len(b) >= 50)
    finally:
        c1.shutdown()
        c2.shutdown()
    assert sorted(int(m.body) for m in a) == sorted(int(m.body) for m in b) == list(range(50))


def test_tag_subscription(broker: Broker) -> None:
    if "TAG" not in broker.kernel.names("filter"):
        pytest.skip("filter 'TAG' is not registered")
    got: list = []  # type: ignore[type-arg]
    c = _consumer(broker, "c1", got, expr="A")
    c.start()
    try:
        with Producer("pg", broker=broker) as p:
            for i in range(40):
                p.send(Message(topic="T", body=b"%d" % i, tags="A" if i % 2 else "B"))
        assert wait_until(lambda: len(got) >= 20)
        time.sleep(0.2)
    finally:
        c.shutdown()
    assert sorted(int(m.body) for m in got) == list(range(1, 40, 2))


def test_orderly_consumption_keeps_queue_order(broker: Broker) -> None:
    seen: dict[int, list[int]] = {}
    lock = threading.Lock()
    failed_once: set[int] = set()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        m = msgs[0]
        if m.queue_offset == 3 and m.queue_id not in failed_once:
            failed_once.add(m.queue_id)
            ctx.suspend_current_queue_time_millis = 10
            return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        with lock:
            seen.setdefault(m.queue_id, []).append(m.queue_offset)
        return ConsumeOrderlyStatus.SUCCESS

    with Producer("pg", broker=broker) as p:
        for i in range(80):
            p.send(
                Message(topic="T", body=b"%d" % i), selector=lambda mqs, m, arg: mqs[arg % 4], arg=i
            )
    c = PushConsumer(
        "og", broker=broker, instance_name="o1",
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )  # fmt: skip
    c.subscribe("T")
    c.register_message_listener_orderly(listener)
    c.start()
    try:
        assert wait_until(lambda: sum(len(v) for v in seen.values()) >= 80)
    finally:
        c.shutdown()
    assert set(seen) == {0, 1, 2, 3}
    for offsets in seen.values():
        assert offsets == list(range(20))  # in order, the suspended one retried in place
