"""SimpleConsumer: pop, ack, invisibility, retries, the DLQ and FIFO, on both transports."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mqcore import Broker, Message, Producer, PullConsumer, SimpleConsumer
from mqcore.errors import BrokerError, ReceiptHandleError
from mqcore.message import MessageQueue
from mqcore.protocol.codes import ResponseCode

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker_options() -> dict[str, Any]:
    return {"revive_interval_ms": 100, "max_reconsume_times": 2}


def _send(broker: Broker, n: int, topic: str = "T", **kw: Any) -> list[str]:
    with Producer("pg", broker=broker) as p:
        return [p.send(Message(topic=topic, body=f"m{i}".encode(), **kw)).msg_id for i in range(n)]


def test_three_consumers_each_failing_a_tenth_ack_every_message_once(broker: Broker) -> None:
    """Criterion 3: three consumers of one group on a 4-queue topic, each failing a random
    tenth: every message is acked exactly once, a failed one returns with attempt + 1."""
    ids = _send(broker, 200)
    acked: dict[str, int] = {}
    attempts: dict[str, list[int]] = {}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with SimpleConsumer("sg", broker=broker, subscriptions={"T": "*"},
                                await_duration=0.5) as c:  # fmt: skip
                while not stop.is_set():
                    for m in c.receive(16, 1.0):
                        with lock:
                            attempts.setdefault(m.msg_id, []).append(m.delivery_attempt)
                        if m.delivery_attempt == 1 and rnd.random() < 0.1:
                            continue  # failed: not acked
                        c.ack(m)
                        with lock:
                            acked[m.msg_id] = acked.get(m.msg_id, 0) + 1
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if len(acked) == len(ids):
                break
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(acked) == sorted(ids)
    assert set(acked.values()) == {1}
    failed = [a for a in attempts.values() if len(a) > 1]
    assert failed, "some messages were failed and delivered again"
    for a in failed:
        assert a == list(range(1, len(a) + 1))


def test_failed_message_returns_after_invisible_time_with_next_attempt(broker: Broker) -> None:
    _send(broker, 1)
    with SimpleConsumer("sg", broker=broker, subscriptions={"T": "*"}, await_duration=0) as c:
        (m,) = c.receive(1, 1.0)
        assert m.delivery_attempt == 1 and m.topic == "T" and m.body == b"m0"
        t0 = time.monotonic()
        assert c.receive(1, 1.0) == []  # invisible
        c.await_duration = 5.0
        (again,) = c.receive(1, 1.0)
        assert time.monotonic() - t0 >= 0.9
        assert again.delivery_attempt == 2 and again.topic == "T" and again.body == b"m0"
        assert again.msg_id == m.msg_id
        with pytest.raises(ReceiptHandleError):
            c.ack(m)  # the first delivery's handle expired
        c.ack(again)
        c.await_duration = 1.5
        assert c.receive(1, 1.0) == []


def test_change_invisible_duration_extends_the_time(broker: Broker) -> None:
    _send(broker, 1)
    with SimpleConsumer("sg", broker=broker, subscriptions={"T": "*"}, await_duration=0) as c:
        (m,) = c.receive(1, 1.0)
        old = m.receipt_handle
        new = c.change_invisible_duration(m, 4.0)
        assert new == m.receipt_handle != old
        c.await_duration = 2.0
        assert c.receive(1, 1.0) == []  # past the first second: still invisible
        with pytest.raises(ReceiptHandleError):
            stale = type(m)(m.record_bytes())
            stale.receipt_handle, stale._broker_name = old, m._broker_name
            c.ack(stale)
        c.ack(m)
        c.await_duration = 0
        assert c.receive(1, 1.0) == []


def test_after_the_maximum_attempts_the_message_is_dead_lettered(broker: Broker) -> None:
    ids = _send(broker, 1)
    seen = []
    with SimpleConsumer("sg", broker=broker, subscriptions={"T": "*"}, await_duration=4) as c:
        while True:
            got = c.receive(1, 1.0)
            if not got:
                break
            seen.append(got[0].delivery_attempt)
    assert seen == [1, 2, 3]  # max_reconsume_times 2: three deliveries
    with PullConsumer("dlq-reader", broker=broker) as pc:
        r = pc.pull(MessageQueue("%DLQ%sg", "broker-a", 0), "*", 0, 32)
        assert [m.msg_id for m in r.messages] == ids


def _queue_one(mqs: list[MessageQueue], msg: Message, arg: object) -> MessageQueue:
    return next(q for q in mqs if q.queue_id == 1)


def test_fifo_keeps_queue_order_and_blocks_while_unacked(broker: Broker) -> None:
    with Producer("pg", broker=broker) as p:
        for i in range(6):
            p.send(Message(topic="T", body=f"{i}".encode()), selector=_queue_one)
    with SimpleConsumer("fg", broker=broker, subscriptions={"T": "*"}, await_duration=0,
                        fifo=True) as c:  # fmt: skip
        first = c.receive(2, 1.0)
        assert [m.body for m in first] == [b"0", b"1"]
        assert c.receive(2, 1.0) == []  # the queue is blocked while 0 and 1 are invisible
        c.ack(first[0])
        assert c.receive(2, 1.0) == []  # 1 is still unacked
        c.await_duration = 3.0
        again = c.receive(2, 1.0)  # 1 comes back first, in order
        assert [m.body for m in again] == [b"1", b"2"]
        assert again[0].delivery_attempt == 2 and again[1].delivery_attempt == 1
        for m in again:
            c.ack(m)
        c.await_duration = 0
        rest = c.receive(32, 1.0)
        assert [m.body for m in rest] == [b"3", b"4", b"5"]


def test_pop_and_pull_groups_share_a_topic(broker: Broker) -> None:
    _send(broker, 8)
    with SimpleConsumer("sg", broker=broker, subscriptions={"T": "*"}, await_duration=0) as c:
        got = c.receive(32, 5.0)
        assert len(got) == 8
        for m in got:
            c.ack(m)
    with PullConsumer("cg", broker=broker) as pc:
        total = sum(
            len(pc.pull(MessageQueue("T", "broker-a", q), "*", 0, 32).messages) for q in range(4)
        )
    assert total == 8


def test_tag_and_sql92_subscriptions(broker: Broker) -> None:
    _send(broker, 3, tags="A")
    with Producer("pg", broker=broker) as p:
        p.send(Message(topic="T", body=b"b", tags="B", properties={"n": "7"}))
    with SimpleConsumer("tg", broker=broker, subscriptions={"T": "B"}, await_duration=0) as c:
        assert [m.body for m in c.receive(32, 5.0)] == [b"b"]
    from mqcore import FilterExpression

    subs = {"T": FilterExpression("n > 5", "SQL92")}
    with SimpleConsumer("qg", broker=broker, subscriptions=subs, await_duration=0) as c:
        assert [m.body for m in c.receive(32, 5.0)] == [b"b"]


def test_bad_handles_and_times_are_refused_and_change_nothing(broker: Broker) -> None:
    """Criterion 5: forged, truncated and expired handles, acks for another group, absurd
    invisible times: RocketMQ's codes, and the message stays invisible, then comes back."""
    _send(broker, 1)
    with SimpleConsumer("sg", broker=broker, subscriptions={"T": "*"}, await_duration=0) as c, \
            SimpleConsumer("other", broker=broker, subscriptions={"T": "*"},
                           await_duration=0) as o:  # fmt: skip
        (m,) = c.receive(1, 2.0)
        good = m.receipt_handle
        parts = good.split(" ")
        cases = {
            " ".join(parts[:5]): ResponseCode.INVALID_PARAMETER,  # truncated
            "garbage": ResponseCode.INVALID_PARAMETER,
            " ".join([parts[0], str(int(parts[1]) - 7), *parts[2:]]): ResponseCode.NO_MESSAGE,
        }
        for handle, code in cases.items():
            m.receipt_handle = handle
            with pytest.raises(BrokerError) as info:
                c.ack(m)
            assert info.value.code == code, handle
        m.receipt_handle = good
        with pytest.raises(BrokerError) as info:  # another group's ack
            o.ack(m)
        assert info.value.code == ResponseCode.NO_MESSAGE
        with pytest.raises(BrokerError) as info:
            c.broker.change_invisible_time(
                MessageQueue("T", "broker-a", m.queue_id), "sg", good, m.queue_offset, -5
            )
        assert info.value.code == ResponseCode.INVALID_PARAMETER
        with pytest.raises(BrokerError) as info:
            c.broker.pop_message(MessageQueue("T", "broker-a", -1), "sg", 1, 10**12)
        assert info.value.code == ResponseCode.INVALID_PARAMETER
        assert c.receive(1, 1.0) == []  # still invisible: nothing changed
        c.await_duration = 4.0
        (again,) = c.receive(1, 1.0)
        assert again.msg_id == m.msg_id and again.delivery_attempt == 2
        c.ack(again)


def test_ack_batch_acks_many_with_one_record_per_receive(broker: Broker) -> None:
    _send(broker, 20)
    with SimpleConsumer("sg", broker=broker, subscriptions={"T": "*"}, await_duration=0) as c:
        got = c.receive(32, 1.0)
        assert len(got) == 20
        topic = broker.pop.revive_topic
        before = sum(broker.get_max_offset(topic, q) for q in range(8))
        c.ack_batch(got[:15])
        after = sum(broker.get_max_offset(topic, q) for q in range(8))
        # A bAck per queue (checkpoint) the acked messages came from, not one per message.
        assert after - before == len({m.queue_id for m in got[:15]}) < 15
        assert broker.pop.invisible_counts() == {("sg", "T"): 5}
        with pytest.raises(ReceiptHandleError):
            stale = type(got[0])(got[0].record_bytes())
            stale.receipt_handle, stale._broker_name = "1 2 3", got[0]._broker_name
            c.ack_batch([stale])
        c.await_duration = 4.0
        back = c.receive(32, 5.0)
        assert sorted(m.msg_id for m in back) == sorted(m.msg_id for m in got[15:])
        c.ack_batch(back)


def test_three_fifo_consumers_failing_a_tenth_keep_each_queue_in_order(
    tmp_path: Path, store_name: str
) -> None:
    """Three FIFO consumers of one group, each failing a random tenth (a failure ends the
    batch, as an orderly listener stops at its first failure): every queue's messages are
    acked once each, in queue order (16 attempts: none is dead-lettered)."""
    with Broker(tmp_path / "fifo", store=store_name, revive_interval_ms=100) as broker:
        broker.create_topic("T", queue_nums=4)
        _send(broker, 120)
        _fifo_run(broker, acked := {})
    assert acked == {q: list(range(30)) for q in range(4)}


def _fifo_run(broker: Broker, acked: dict[int, list[int]]) -> None:
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[BaseException] = []

    def run(seed: int) -> None:
        rnd = random.Random(seed)
        try:
            with SimpleConsumer("fg", broker=broker, subscriptions={"T": "*"},
                                await_duration=0.3, fifo=True) as c:  # fmt: skip
                while not stop.is_set():
                    for m in c.receive(8, 1.0):
                        if rnd.random() < 0.1:
                            break  # failed: it and the rest of the batch come back
                        with lock:
                            acked.setdefault(m.queue_id, []).append(m.queue_offset)
                            c.ack(m)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with lock:
            if sum(map(len, acked.values())) >= 120:
                break
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join()
    assert not errors


def test_fifo_change_invisible_duration_keeps_the_queue_blocked(broker: Broker) -> None:
    with Producer("pg", broker=broker) as p:
        for i in range(3):
            p.send(Message(topic="T", body=f"{i}".encode()), selector=_queue_one)
    with SimpleConsumer("fg", broker=broker, subscriptions={"T": "*"}, await_duration=0,
                        fifo=True) as c:  # fmt: skip
        (m,) = c.receive(1, 1.0)
        c.change_invisible_duration(m, 3.0)
        c.await_duration = 1.5
        assert c.receive(1, 1.0) == []  # past the first second: blocked by the new time
        c.ack(m)
        c.await_duration = 0
        assert [x.body for x in c.receive(2, 1.0)] == [b"1", b"2"]


def test_fifo_ack_of_a_later_message_first_redelivers_only_the_earlier(broker: Broker) -> None:
    with Producer("pg", broker=broker) as p:
        for i in range(3):
            p.send(Message(topic="T", body=f"{i}".encode()), selector=_queue_one)
    with SimpleConsumer("fg", broker=broker, subscriptions={"T": "*"}, await_duration=0,
                        fifo=True) as c:  # fmt: skip
        first, second = c.receive(2, 1.0)
        assert (first.body, second.body) == (b"0", b"1")
        c.ack(second)
        c.await_duration = 3.0
        again = c.receive(2, 1.0)
        assert [m.body for m in again] == [b"0", b"2"]  # 1 was acked: skipped
        assert [m.delivery_attempt for m in again] == [2, 1]
        c.ack_batch(again)
        c.await_duration = 0
        assert c.receive(2, 1.0) == []
