"""The admin calls the dashboard adds to :class:`MQAdmin`: messages by time, the groups that
read a topic, whether a group consumed a message, and resending one message to one group;
against two broker groups behind ``mqcore namesrv`` and against a single ``mqcore serve``."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
)
from mqcore.client.admin import MQAdmin
from mqcore.errors import BrokerError, TopicNotExistError

pytestmark = pytest.mark.timeout(240)

Cluster = Any  # the `cluster` fixture's (tests/commands/conftest.py)


def wait_for(cond: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def test_messages_by_time_range(cluster: Cluster) -> None:
    with MQAdmin(cluster.address) as admin:
        admin.create_topic("Timed", 2)
        cluster.wait_routed("Timed")
        with Producer("pg-timed", namesrv_addr=cluster.address) as p:
            first = [p.send(Message(topic="Timed", body=b"a%d" % i)) for i in range(4)]
            time.sleep(0.05)  # store timestamps are milliseconds: leave a gap between the halves
            middle = int(time.time() * 1000)
            time.sleep(0.05)
            second = [p.send(Message(topic="Timed", body=b"b%d" % i)) for i in range(4)]
        assert {s.message_queue.broker_name for s in first + second} == set(cluster.brokers)
        now = int(time.time() * 1000)

        # Oldest first; two broker groups' messages of the same millisecond have no order.
        every = admin.messages_by_time("Timed", 0, now)
        assert sorted(m.msg_id for m in every) == sorted(s.msg_id for s in first + second)
        stamps = [m.store_timestamp for m in every]
        assert stamps == sorted(stamps)
        later = admin.messages_by_time("Timed", middle, now)
        assert sorted(bytes(m.body) for m in later) == [b"b0", b"b1", b"b2", b"b3"]
        earlier = admin.messages_by_time("Timed", 0, middle)
        assert sorted(bytes(m.body) for m in earlier) == [b"a0", b"a1", b"a2", b"a3"]
        assert admin.messages_by_time("Timed", 0, now, limit=3) == every[:3]
        assert admin.messages_by_time("Timed", now + 60_000, now + 120_000) == []
        with pytest.raises(TopicNotExistError, match="'Nowhere' does not exist"):
            admin.messages_by_time("Nowhere", 0, now)


def test_who_reads_a_topic_consumed_what_and_a_message_resent_to_one_group(
    cluster: Cluster,
) -> None:
    got: list[Any] = []
    changed = threading.Condition()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        with changed:
            got.extend(msgs)
            changed.notify_all()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with MQAdmin(cluster.address) as admin:
        admin.create_topic("Read", 2)
        cluster.wait_routed("Read")
        assert admin.topic_groups("Read") == []
        c = PushConsumer(
            "cg-read",
            namesrv_addr=cluster.address,
            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            persist_consumer_offset_interval=0.2,
        )
        c.subscribe("Read", "*")
        c.register_message_listener(listener)
        c.start()
        try:
            with Producer("pg-read", namesrv_addr=cluster.address) as p:
                sent = p.send(Message(topic="Read", body=b"once", keys="read-1"))
            with changed:
                assert changed.wait_for(lambda: len(got) == 1, 60)
            wait_for(lambda: admin.consume_stats("cg-read", "Read").total_lag() == 0)
            assert admin.topic_groups("Read") == ["cg-read"]
            (msg,) = admin.query_by_key("Read", "read-1")
            assert admin.consumed_by(msg) == {"cg-read": True}

            admin.resend_to_group("cg-read", msg)
            with changed:
                assert changed.wait_for(lambda: len(got) == 2, 60)
            again = got[1]
            assert (again.topic, again.keys, bytes(again.body)) == ("Read", "read-1", b"once")
            assert again.msg_id == sent.msg_id
            with pytest.raises(BrokerError, match="'cg-nobody' is unknown"):
                admin.resend_to_group("cg-nobody", msg)
        finally:
            c.shutdown()
        # Sent while the group is away: not consumed yet.
        with Producer("pg-read", namesrv_addr=cluster.address) as p:
            p.send(Message(topic="Read", body=b"later", keys="read-2"))
        (waiting,) = admin.query_by_key("Read", "read-2")
        assert admin.consumed_by(waiting) == {"cg-read": False}
