"""The embedded broker: topics, send, pull statuses, long polling, groups, send-back, locks."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from mqtest import wait_until
from structlog.testing import capture_logs

from mqcore import Broker, Message, MessageQueue
from mqcore.broker import ConsumerData, ResponseCode
from mqcore.errors import (
    BrokerClosedError,
    BrokerError,
    MessageIllegalError,
    TopicNotExistError,
)


@pytest.fixture
def broker_options() -> dict[str, Any]:
    """Held pulls give up after 2 s."""
    return {"suspend_max_time_ms": 2000}


def _send(b: Broker, n: int, queue_id: int = 0, topic: str = "T", **kw: str) -> list:  # type: ignore[type-arg]
    return b.send_message(
        topic, queue_id, [Message(topic=topic, body=b"m%d" % i, **kw) for i in range(n)]
    )


def test_topics_persist_across_restart(tmp_path: Path, store_name: str) -> None:
    with Broker(tmp_path, store=store_name) as b:
        b.create_topic("A", queue_nums=3)
        b.create_topic("B", read_queue_nums=2, write_queue_nums=5)
        assert b.delete_topic("A")
    with Broker(tmp_path, store=store_name) as b:
        assert [t.topic_name for t in b.list_topics()] == ["B"]
        route = b.get_route_info_by_topic("B")
        assert (len(route.read_queues()), len(route.write_queues())) == (2, 5)


@pytest.mark.parametrize("name", ["", "a b", "x" * 128, "tópico", "a/b"])
def test_illegal_topic_names(broker: Broker, name: str) -> None:
    with pytest.raises(MessageIllegalError) as info:
        broker.create_topic(name)
    assert info.value.code == ResponseCode.MESSAGE_ILLEGAL


def test_unknown_topic_is_rocketmqs_error(tmp_path: Path, store_name: str) -> None:
    """With auto-creation off, a send or a route lookup names the missing topic."""
    with Broker(tmp_path, store=store_name, auto_create_topic_enable=False) as b:
        with pytest.raises(TopicNotExistError, match=r"topic\[Nope\] not exist") as info:
            b.send_message("Nope", 0, [Message(topic="Nope", body=b"x")])
        assert info.value.code == ResponseCode.TOPIC_NOT_EXIST
        with pytest.raises(TopicNotExistError):
            b.get_route_info_by_topic("Nope")
        assert "Nope" not in [t.topic_name for t in b.list_topics()]


def test_auto_create_topic_is_on_by_default_and_logged_once(
    tmp_path: Path, store_name: str
) -> None:
    """As RocketMQ's autoCreateTopicEnable: a first send creates the topic with 4 queues."""
    with Broker(tmp_path, store=store_name) as b, capture_logs() as logs:
        assert b.config.auto_create_topic_enable is True
        _send(b, 1, topic="Fresh")
        _send(b, 1, topic="Fresh")
        assert len(b.get_route_info_by_topic("Fresh").write_queues()) == 4
        # A lookup creates nothing; the template TBW102 is routed for producers instead.
        with pytest.raises(TopicNotExistError):
            b.get_route_info_by_topic("ByRoute")
        assert len(b.get_route_info_by_topic("TBW102").write_queues()) == 4
        assert [t.topic_name for t in b.list_topics()] == ["Fresh"]
    created = [e for e in logs if e["event"] == "topic_auto_created"]
    assert [(e["topic"], e["queue_nums"]) for e in created] == [("Fresh", 4)]


def test_oversized_body_and_system_topic_are_refused_and_store_unchanged(broker: Broker) -> None:
    _send(broker, 2)
    with pytest.raises(MessageIllegalError, match="over the max value"):
        broker.send_message("T", 0, [Message(topic="T", body=bytes(4 * 1024 * 1024 + 1))])
    with pytest.raises(MessageIllegalError, match="forbidden"):
        broker.send_message(
            "SCHEDULE_TOPIC_XXXX", 0, [Message(topic="SCHEDULE_TOPIC_XXXX", body=b"x")]
        )
    with pytest.raises(BrokerError, match="queueId"):
        _send(broker, 1, queue_id=9)
    assert broker.get_max_offset("T", 0) == 2
    got = broker.pull_message("g", "T", 0, 0)
    assert [m.body for m in got.messages] == [b"m0", b"m1"]


def test_pull_codes_follow_rocketmq(broker: Broker) -> None:
    assert broker.pull_message("g", "T", 1, 0).code is ResponseCode.PULL_NOT_FOUND
    assert broker.pull_message("g", "T", 1, 5).code is ResponseCode.PULL_OFFSET_MOVED
    _send(broker, 3, queue_id=1)
    found = broker.pull_message("g", "T", 1, 0, 2)
    assert found.code is ResponseCode.SUCCESS and found.next_begin_offset == 2
    assert (found.min_offset, found.max_offset) == (0, 3)
    assert broker.pull_message("g", "T", 1, 3).code is ResponseCode.PULL_NOT_FOUND
    moved = broker.pull_message("g", "T", 1, 10)
    assert moved.code is ResponseCode.PULL_OFFSET_MOVED and moved.next_begin_offset == 0


@pytest.mark.timeout(60)
def test_long_poll_wakes_on_arrival(tmp_path: Path, store_name: str) -> None:
    """A pull held for want of messages answers with the message that arrives meanwhile,
    woken by its arrival: it returns long before its hold would end.

    No clock bound on the wake-up itself: the woken thread's turn to run measures the
    machine (a loaded one, or a garbage collection, took more than the 50 ms once allowed),
    not the broker. The pull is seen held before the message is sent, so the answer cannot
    come from the pull's first read."""
    hold_s = 30
    with Broker(tmp_path, store=store_name, suspend_max_time_ms=hold_s * 1000) as broker:
        broker.create_topic("T", queue_nums=1)
        _send(broker, 1)
        answers: list[Any] = []
        puller = threading.Thread(
            target=lambda: answers.append(
                broker.pull_message("g", "T", 0, 1, suspend_timeout_ms=hold_s * 1000)
            )
        )
        puller.start()
        try:
            assert wait_until(lambda: broker.waiters.waiting(("T", 0)) == 1, timeout=20)
            _send(broker, 1)
        finally:
            puller.join(timeout=hold_s / 2)  # a pull the arrival did not wake is still held
        assert not puller.is_alive()
        [resp] = answers
        assert resp.code is ResponseCode.SUCCESS and [m.queue_offset for m in resp.messages] == [1]
        assert broker.waiters.waiting(("T", 0)) == 0


@pytest.mark.timeout(30)
def test_long_poll_times_out(broker: Broker) -> None:
    begin = time.monotonic()
    resp = broker.pull_message("g", "T", 3, 0, suspend_timeout_ms=300)
    elapsed = time.monotonic() - begin
    assert resp.code is ResponseCode.PULL_NOT_FOUND
    assert 0.29 <= elapsed < 2


@pytest.mark.timeout(30)
def test_close_wakes_held_pulls(tmp_path: Path, store_name: str) -> None:
    b = Broker(tmp_path, store=store_name)
    b.create_topic("T", queue_nums=1)
    out: list[object] = []
    t = threading.Thread(
        target=lambda: out.append(b.pull_message("g", "T", 0, 0, suspend_timeout_ms=20_000))
    )
    t.start()
    time.sleep(0.2)
    begin = time.monotonic()
    b.close()
    t.join(timeout=5)
    assert not t.is_alive() and time.monotonic() - begin < 5
    with pytest.raises(BrokerClosedError):
        b.create_topic("U")


def test_offsets_commit_query_and_restart(tmp_path: Path, store_name: str) -> None:
    with Broker(tmp_path, store=store_name) as b:
        b.create_topic("T", queue_nums=2)
        assert b.query_consumer_offset("g", "T", 0) == 0  # RocketMQ: new group, min offset 0
        b.update_consumer_offset("g", "T", 1, 42)
        b.pull_message("g", "T", 0, 0, commit_offset=7)
    with Broker(tmp_path, store=store_name) as b:
        assert b.query_consumer_offset("g", "T", 1) == 42
        assert b.query_consumer_offset("g", "T", 0) == 7


def test_query_by_key_and_id_and_timestamp(broker: Broker) -> None:
    results = broker.send_message(
        "T",
        0,
        [
            Message(topic="T", body=b"a", keys="k1 shared"),
            Message(topic="T", body=b"b", keys="shared"),
        ],
    )
    assert [m.body for m in broker.query_message("T", "k1")] == [b"a"]
    assert sorted(m.body for m in broker.query_message("T", "shared")) == [b"a", b"b"]
    assert broker.view_message_by_id(results[1].msg_id).body == b"b"
    assert broker.search_offset_by_timestamp("T", 0, 0) == 0
    assert broker.get_earliest_msg_storetime("T", 0) == results[0].store_timestamp


class _Channel:
    """A client channel that records the notices it gets."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def consumer_ids_changed(self, group: str) -> None:
        self.seen.append(group)

    def reset_offset(self, group: str, topic: str, offsets: dict[MessageQueue, int]) -> None:
        raise AssertionError("no reset expected")


def test_heartbeat_membership_and_notifications(broker: Broker) -> None:
    channel = _Channel()
    seen = channel.seen
    data = ConsumerData(group_name="cg")
    broker.heartbeat("c1", [data], channel=channel)
    broker.heartbeat("c2", [data])
    assert broker.get_consumer_list_by_group("cg") == ["c1", "c2"]
    assert seen == ["cg", "cg"]  # c1 hears of itself and of c2 joining
    broker.unregister_client("c2", "cg")
    assert broker.get_consumer_list_by_group("cg") == ["c1"] and len(seen) == 3
    assert len(broker.get_route_info_by_topic("%RETRY%cg").write_queues()) == 1


def test_silent_clients_expire(broker: Broker) -> None:
    broker.heartbeat("old", [ConsumerData(group_name="cg")])
    dropped = broker.consumers.scan_expired(now_ms=int(time.time() * 1000) + 121_000)
    assert dropped == [("cg", "old")] and broker.get_consumer_list_by_group("cg") == []


def test_send_back_goes_to_retry_then_dlq(broker: Broker) -> None:
    (orig,) = _send(broker, 1, tags="A")
    r = broker.consumer_send_msg_back("cg", orig.commitlog_offset, origin_msg_id=orig.msg_id)
    retry = broker.view_message_by_id(r.msg_id)
    # Held by the delay scheduler until level 3 (10 s) has passed.
    assert retry.topic == "SCHEDULE_TOPIC_XXXX" and retry.queue_id == 2
    assert retry.properties["REAL_TOPIC"] == "%RETRY%cg" and retry.properties["REAL_QID"] == "0"
    assert retry.reconsume_times == 1 and retry.delay_level == 3
    assert (
        retry.properties["RETRY_TOPIC"] == "T"
        and retry.properties["ORIGIN_MESSAGE_ID"] == orig.msg_id
    )
    assert retry.body == b"m0" and retry.tags == "A"
    r2 = broker.consumer_send_msg_back("cg", r.commitlog_offset, max_reconsume_times=1)
    dlq = broker.view_message_by_id(r2.msg_id)
    assert dlq.topic == "%DLQ%cg" and dlq.reconsume_times == 2 and dlq.delay_level == 0
    assert dlq.properties["RETRY_TOPIC"] == "T"


def test_sent_back_copies_keep_the_producer_s_born_host(broker: Broker) -> None:
    """The retry and dead-letter copies name the producer that made the message, as the
    original does (RocketMQ's sendMessageBack), not the broker that copied it."""
    producer = "10.1.2.3:4567"
    (orig,) = broker.send_message("T", 0, [Message(topic="T", body=b"x")], born_host=producer)
    assert broker.view_message_by_id(orig.msg_id).born_host == producer
    r = broker.consumer_send_msg_back("cg", orig.commitlog_offset)
    r2 = broker.consumer_send_msg_back("cg", r.commitlog_offset, max_reconsume_times=1)
    retry, dlq = broker.view_message_by_id(r.msg_id), broker.view_message_by_id(r2.msg_id)
    assert dlq.topic == "%DLQ%cg"
    assert (retry.born_host, dlq.born_host) == (producer, producer)
    assert dlq.store_host != producer


def test_queue_locks(broker: Broker) -> None:
    mqs = [MessageQueue("T", "broker-a", i) for i in range(2)]
    assert broker.lock_batch_mq("cg", "c1", mqs) == set(mqs)
    assert broker.lock_batch_mq("cg", "c2", mqs) == set()
    broker.unlock_batch_mq("cg", "c1", mqs[:1])
    assert broker.lock_batch_mq("cg", "c2", mqs) == {mqs[0]}
