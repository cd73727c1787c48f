"""PushConsumer timing: rebalance and offset schedules, pull back-off, local re-consumption
after a failed send-back, and a shutdown that does not wait out its own long polls."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mqtest import wait_until

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PushConsumer,
)
from mqcore.client.consume_service import ConcurrentlyService
from mqcore.errors import BrokerError, RemotingConnectError
from mqcore.message import PullStatus
from mqcore.protocol.codes import ResponseCode

pytestmark = pytest.mark.timeout(60)


def _consumer(broker: Broker, listener: Callable[..., Any], name: str = "c1", **kw: Any):  # type: ignore[no-untyped-def]
    c = PushConsumer(
        "cg",
        broker=broker,
        instance_name=name,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        **kw,
    )
    c.subscribe("T")
    c.register_message_listener(listener)
    return c


def _ok(msgs, ctx):  # type: ignore[no-untyped-def]
    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def _count_calls(obj: Any, name: str) -> list[float]:
    """Wrap ``obj.name`` so that each call's time is recorded; returns the record."""
    calls: list[float] = []
    real = getattr(obj, name)

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(time.monotonic())
        return real(*args, **kw)

    setattr(obj, name, counted)
    return calls


# -- rebalance and persist schedules (item 7) --------------------------------------------------


def test_rebalance_and_offset_persistence_run_on_separate_schedules(broker: Broker) -> None:
    c = _consumer(broker, _ok, rebalance_interval=0.8, persist_consumer_offset_interval=0.1)
    rebalances = _count_calls(c, "_rebalance")
    persists = _count_calls(c, "_persist")
    c.start()
    try:
        time.sleep(1.5)
    finally:
        c.shutdown()
    assert len(persists) >= 8  # every 0.1 s
    assert 2 <= len(rebalances) <= 4  # at start, then every 0.8 s (not every 0.1 s)


def test_membership_notice_rebalances_at_once(broker: Broker) -> None:
    first = _consumer(broker, _ok, "c1")  # rebalance_interval: RocketMQ's 20 s
    rebalances = _count_calls(first, "_rebalance")
    first.start()
    second = _consumer(broker, _ok, "c2")
    try:
        assert wait_until(lambda: len(first.assigned_queues("T")) == 4)
        before = len(rebalances)
        second.start()
        assert wait_until(lambda: len(first.assigned_queues("T")) == 2, timeout=2)
        assert len(rebalances) > before
    finally:
        second.shutdown()
        first.shutdown()


# -- pull back-off and the broker's hold limit (item 8) -----------------------------------------


def test_pull_error_backs_off_one_second(broker: Broker) -> None:
    c = _consumer(broker, _ok)
    transport = c.broker
    real = transport.pull_message
    calls: dict[int, list[float]] = {}

    def failing_pull(mq, *args, **kw):  # type: ignore[no-untyped-def]
        if mq.topic == "T":
            times = calls.setdefault(mq.queue_id, [])
            times.append(time.monotonic())
            if len(times) <= 2:
                raise RemotingConnectError("connection reset", addr="127.0.0.1:10911")
        return real(mq, *args, **kw)

    transport.pull_message = failing_pull  # type: ignore[method-assign]
    c.start()
    try:
        assert wait_until(lambda: all(len(calls.get(q, ())) >= 3 for q in range(4)), timeout=10)
    finally:
        c.shutdown()
    for q in range(4):
        first, second, third = calls[q][:3]
        assert 0.9 <= second - first < 2.0  # RocketMQ 4.7+: 1 s, not 3 s
        assert 0.9 <= third - second < 2.0


def test_broker_holds_a_pull_at_most_suspend_max_time(tmp_path: Path) -> None:
    with Broker(tmp_path, suspend_max_time_ms=300) as b:
        b.create_topic("T", queue_nums=1)
        begin = time.monotonic()
        resp = b.pull_message("g", "T", 0, 0, suspend_timeout_ms=10_000)
        assert resp.messages == [] and 0.29 <= time.monotonic() - begin < 3.0


# -- a failed send-back is consumed again locally (item 9) ---------------------------------------


def test_failed_send_back_is_reconsumed_later_without_blocking_a_thread(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ConcurrentlyService, "consume_later_delay_s", 1.0)  # RocketMQ: 5 s
    seen: list[tuple[bytes, int, float]] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        m = msgs[0]
        seen.append((m.body, m.reconsume_times, time.monotonic()))
        if m.body == b"bad" and m.reconsume_times == 0:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    # One consume thread: a sleep in it would hold up every other message.
    c = _consumer(broker, listener, consume_thread_min=1, consume_thread_max=1)

    def send_back_fails(*args: Any, **kw: Any) -> None:
        raise BrokerError("send back refused", code=ResponseCode.SYSTEM_ERROR)

    c.broker.consumer_send_msg_back = send_back_fails  # type: ignore[method-assign]
    c.start()
    try:
        with Producer("pg", broker=broker) as p:
            p.send(Message(topic="T", body=b"bad"))
            assert wait_until(lambda: len(seen) == 1)
            p.send(Message(topic="T", body=b"good"))
        assert wait_until(lambda: len(seen) >= 3, timeout=10)
    finally:
        c.shutdown()
    (b0, r0, t0), (b1, r1, t1), (b2, r2, t2) = seen
    assert (b0, r0) == (b"bad", 0)
    assert (b1, r1) == (b"good", 0) and t1 - t0 < 0.8  # the thread was free meanwhile
    assert (b2, r2) == (b"bad", 1) and t2 - t0 >= 0.9  # re-consumed here, counted as a retry
    assert broker.get_max_offset("%RETRY%cg", 0) == 0  # nothing reached the broker


# -- shutdown (issue 19) -----------------------------------------------------------------------


def test_shutdown_wakes_its_own_long_polls(broker: Broker) -> None:
    c = _consumer(broker, _ok)
    c.start()
    holding = threading.Event()
    # A pull is held in wait_for (embedded: the pulling thread waits) or parked (remote: the
    # server parks it as a future); either one means the broker holds it now.
    real_wait, real_park = broker.waiters.wait_for, broker.waiters.park

    def watched(*args: Any, **kw: Any) -> bool:
        holding.set()
        return real_wait(*args, **kw)

    def parked(*args: Any, **kw: Any) -> bool:
        holding.set()
        return real_park(*args, **kw)

    broker.waiters.wait_for = watched  # type: ignore[method-assign]
    broker.waiters.park = parked  # type: ignore[method-assign]
    try:
        assert wait_until(lambda: len(c.assigned_queues("T")) == 4)
        assert holding.wait(5)
        time.sleep(0.2)  # every queue's pull is held by the broker now
    finally:
        begin = time.monotonic()
        c.shutdown()
        elapsed = time.monotonic() - begin
    assert elapsed < 0.5


def test_pull_consumer_shutdown_ends_a_blocking_pull(broker: Broker) -> None:
    c = PullConsumer("pcg", broker=broker)
    c.start()
    mq = MessageQueue("T", broker.config.broker_name, 0)
    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(c.pull_blocking_if_not_found(mq, "*", 0)))
    t.start()
    time.sleep(0.3)  # held by the broker (20 s by default)
    begin = time.monotonic()
    c.shutdown()
    t.join(timeout=5)
    assert not t.is_alive() and time.monotonic() - begin < 0.5
    assert out[0].pull_status is PullStatus.NO_NEW_MSG and out[0].msg_found_list == []


def test_shutdown_commits_what_running_listeners_finish(broker: Broker) -> None:
    """A listener still running when shutdown() starts finishes, and its messages' offsets are
    committed: a clean shutdown redelivers nothing that was consumed (RocketMQ's shutdown lets
    the consume service finish before it persists offsets)."""
    with Producer("pg", broker=broker) as p:
        sent = p.send_batch([Message(topic="T", body=b"m%d" % i) for i in range(4)])
    queue_id = sent.message_queue.queue_id
    entered, release = threading.Event(), threading.Event()
    done: list[bytes] = []

    def slow(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        entered.set()
        release.wait(5)
        done.extend(bytes(m.body) for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = _consumer(broker, slow, consume_message_batch_max_size=32)
    c.start()
    assert entered.wait(10)
    stopper = threading.Thread(target=c.shutdown)
    stopper.start()
    time.sleep(0.2)  # shutdown is under way while the listener still runs
    release.set()
    stopper.join(30)
    assert not stopper.is_alive()
    assert len(done) == 4
    assert broker.query_consumer_offset("cg", "T", queue_id) == 4
