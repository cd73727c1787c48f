"""A push consumer's rebalance takes one allocation at a time, reckoned from one member list:
a member that looks settled is settled, and a group that looks settled delivers once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from mqtest import group_member
from mqtest import wait_until as _wait_until

from mqcore import (
    Broker,
    Message,
    MessageExt,
    Producer,
    PushConsumer,
    SendStatus,
)
from mqcore.message import MessageQueue
from mqcore.protocol.heartbeat import SubscriptionData

pytestmark = pytest.mark.timeout(60)


def wait_until(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    return _wait_until(cond, timeout, interval=0.02)


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"T": 4}


def _member(
    broker: Broker, name: str, sink: list[MessageExt], lock: threading.Lock
) -> PushConsumer:
    return group_member(broker, name, sink, lock)


def test_an_allocation_from_an_older_member_list_is_not_taken(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first member starts alone and reckons all four queues its own; while it is still
    taking them (reading where each starts), a second member joins and takes its half. The
    first member shows none of its four while taking them (not the two it had read, which
    with the newcomer's two looked like a settled group), and once the membership notice
    has come it drops that allocation for the one of the new list: it never pulls the
    newcomer's queues, and messages sent once both hold two queues are delivered once."""
    members: dict[str, PushConsumer] = {}
    reached, go, noticed = threading.Event(), threading.Event(), threading.Event()
    pulled: dict[str, set[int]] = {"a": set(), "b": set()}
    real_compute = PushConsumer._compute_pull_from_where
    real_notice = PushConsumer.consumer_ids_changed
    real_pull_loop = PushConsumer._pull_loop

    def compute(self: PushConsumer, mq: MessageQueue) -> int:
        # The first member's first allocation halts at its third queue until released.
        if self is members.get("a") and mq.topic == "T" and mq.queue_id == 2 and not go.is_set():
            reached.set()
            assert go.wait(20)
        return real_compute(self, mq)

    def notice(self: PushConsumer, group: str) -> None:
        real_notice(self, group)
        if self is members.get("a") and reached.is_set():
            noticed.set()

    def pull_loop(
        self: PushConsumer, mq: MessageQueue, sub: SubscriptionData, pq: Any, offset: int
    ) -> None:
        if mq.topic == "T":
            pulled["a" if self is members["a"] else "b"].add(mq.queue_id)
        real_pull_loop(self, mq, sub, pq, offset)

    monkeypatch.setattr(PushConsumer, "_compute_pull_from_where", compute)
    monkeypatch.setattr(PushConsumer, "consumer_ids_changed", notice)
    monkeypatch.setattr(PushConsumer, "_pull_loop", pull_loop)
    lock = threading.Lock()
    got_a: list[MessageExt] = []
    got_b: list[MessageExt] = []
    a = members["a"] = _member(broker, "c1", got_a, lock)
    b = members["b"] = _member(broker, "c2", got_b, lock)
    try:
        a.start()
        assert reached.wait(20)  # its allocation was reckoned from a list of one
        b.start()
        assert wait_until(lambda: len(b.assigned_queues("T")) == 2)
        # Part way through taking its allocation, the first member shows none of it.
        assert a.assigned_queues("T") == set()
        assert noticed.wait(20)
        go.set()
        assert wait_until(lambda: len(a.assigned_queues("T")) == 2 == len(b.assigned_queues("T")))
        assert a.assigned_queues("T").isdisjoint(b.assigned_queues("T"))
        with Producer("pg", broker=broker) as p:
            for i in range(200):
                sent = p.send(Message(topic="T", body=b"%d" % i))
                assert sent.send_status is SendStatus.SEND_OK
        assert wait_until(lambda: len(got_a) + len(got_b) >= 200)
        # Before the shutdowns: the member left behind by the first takes its queues.
        took = {name: set(queues) for name, queues in pulled.items()}
    finally:
        go.set()
        a.shutdown()
        b.shutdown()
    assert took == {"a": {0, 1}, "b": {2, 3}}
    assert got_a and got_b
    assert sorted(int(m.body) for m in got_a + got_b) == list(range(200))
