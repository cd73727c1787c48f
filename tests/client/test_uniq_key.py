"""Unique message ids (UNIQ_KEY): set by the producer, kept through holds, retries and the DLQ."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from mqtest import fast_clock, wait_until

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    PushConsumer,
)
from mqcore.errors import BrokerError
from mqcore.message import PROPERTY_UNIQ_KEY, system_message
from mqcore.uniqkey import create_uniq_id

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def broker_options() -> dict[str, Any]:
    """Delays and retries pass in milliseconds (a fast clock)."""
    return {"delay_scheduler_options": {"clock": fast_clock()}}


def test_layout_is_message_client_id_setters() -> None:
    """ip 4, pid 2, loader-hash stand-in 4, ms since the month began 4, counter 2 bytes."""
    before = int(time.time() * 1000)
    a, b = create_uniq_id(), create_uniq_id()
    after = int(time.time() * 1000)
    assert len(a) == 32 and a == a.upper() and bytes.fromhex(a)
    raw_a, raw_b = bytes.fromhex(a), bytes.fromhex(b)
    try:
        ip = socket.inet_aton(socket.gethostbyname(socket.gethostname()))
    except OSError:
        ip = raw_a[:4]  # a fake address (the time), as RocketMQ's createFakeIP
    assert raw_a[:4] == ip
    assert int.from_bytes(raw_a[4:6], "big") == os.getpid() & 0xFFFF
    assert raw_a[:10] == raw_b[:10]  # the fixed part
    month = datetime.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    start = int(month.timestamp() * 1000)
    assert before - start - 1 <= int.from_bytes(raw_a[10:14], "big") <= after - start + 1
    assert (int.from_bytes(raw_b[14:], "big") - int.from_bytes(raw_a[14:], "big")) % 65536 == 1


def test_send_results_carry_both_ids(broker: Broker) -> None:
    """msg_id is the unique id (set on the message unless present), offset_msg_id the
    stored one; both look the message up."""
    with Producer("pg", broker=broker) as p:
        msg = Message(topic="T", body=b"one")
        r = p.send(msg)
        assert msg.properties[PROPERTY_UNIQ_KEY] == r.msg_id  # set on the caller's message
        again = p.send(msg)  # sent again: the id it already has is kept, as RocketMQ
        assert again.msg_id == r.msg_id and again.offset_msg_id != r.offset_msg_id
        preset = system_message(topic="T", body=b"two", properties={PROPERTY_UNIQ_KEY: "MY-ID"})
        r2 = p.send(preset)  # e.g. a copy made by a tool that keeps the original id
        assert r2.msg_id == "MY-ID"
        batch = [Message(topic="T", body=b"b%d" % i, keys=f"k{i}") for i in range(3)]
        rb = p.send_batch(batch)
        fut = p.send_async(Message(topic="T", body=b"async"))
        ra = fut.result(timeout=30)
    assert r.msg_id != r.offset_msg_id and len(r.msg_id) == 32
    stored = broker.view_message_by_id(r.offset_msg_id or "")
    assert stored.body == b"one" and stored.msg_id == r.msg_id
    assert stored.offset_msg_id == r.offset_msg_id
    assert broker.query_message_by_uniq_key("T", r.msg_id).body == b"one"
    assert broker.query_message_by_uniq_key("T", "MY-ID").body == b"two"
    assert rb.msg_id == ",".join(m.properties[PROPERTY_UNIQ_KEY] for m in batch)
    assert len((rb.offset_msg_id or "").split(",")) == 3
    for m in batch:  # each message of a batch is found by its own id and by its key
        uniq = m.properties[PROPERTY_UNIQ_KEY]
        assert broker.query_message_by_uniq_key("T", uniq).body == m.body
        assert [x.body for x in broker.query_message("T", m.keys or "")] == [m.body]
    assert broker.query_message_by_uniq_key("T", ra.msg_id).body == b"async"
    with pytest.raises(BrokerError):
        broker.view_message_by_id(r.msg_id)  # a unique id is not an offset id
    with pytest.raises(BrokerError):
        broker.query_message_by_uniq_key("T", create_uniq_id())
    with PullConsumer("audit", broker=broker) as c:
        assert c.view_message(r.msg_id, "T").body == b"one"
        assert c.view_message(r.offset_msg_id or "").body == b"one"


def test_lookup_by_unique_id_after_reopen(tmp_path: Path, store_name: str) -> None:
    """The unique id is in the persisted key index: found again after a restart."""
    with Broker(tmp_path, store=store_name) as b:
        b.create_topic("T", queue_nums=2)
        with Producer("pg", broker=b) as p:
            ids = [p.send(Message(topic="T", body=b"%d" % i)).msg_id for i in range(20)]
    with Broker(tmp_path, store=store_name) as b:
        for i, uniq in enumerate(ids):
            assert b.query_message_by_uniq_key("T", uniq).body == b"%d" % i


def test_msg_id_kept_through_delay_retries_and_dlq(broker: Broker) -> None:
    """A message's msg_id is equal at send, after a delay-level hold, on each retry and in
    the DLQ; offset ids differ per stored copy."""
    seen: list[tuple[str, str, int]] = []

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        for m in msgs:
            seen.append((m.msg_id, m.offset_msg_id, m.reconsume_times))
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    c = PushConsumer(
        "cg",
        broker=broker,
        max_reconsume_times=2,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    c.subscribe("T")
    c.register_message_listener(listener)
    c.start()
    try:
        with Producer("pg", broker=broker) as p:
            r = p.send(Message(topic="T", body=b"delayed", delay_level=3))
        assert wait_until(lambda: broker.get_max_offset("%DLQ%cg", 0) == 1, timeout=60)
    finally:
        c.shutdown()
    assert [t for _, _, t in seen] == [0, 1, 2]  # first delivery, then two retries
    assert {i for i, _, _ in seen} == {r.msg_id}
    offset_ids = [o for _, o, _ in seen]
    assert len(set(offset_ids)) == 3 and r.offset_msg_id not in offset_ids  # held, then copies
    (dead,) = broker.pull_message("x", "%DLQ%cg", 0, 0).messages
    assert dead.msg_id == r.msg_id and dead.offset_msg_id not in offset_ids
    assert broker.query_message_by_uniq_key("%DLQ%cg", r.msg_id).body == b"delayed"


def test_store_indexes_unique_ids_and_rebuilds_them(tmp_path: Path, store_name: str) -> None:
    """Stores index UNIQ_KEY beside the keys (single puts and batches); the mmap store
    rebuilds the index from the commit log when its index directory is gone."""
    import shutil

    from mqcore import Kernel

    msgs = [
        system_message(topic="T", body=b"%d" % i, keys=f"k{i}" if i % 2 else None,
                       properties={PROPERTY_UNIQ_KEY: f"ID{i}"})
        for i in range(6)
    ]  # fmt: skip
    kernel = Kernel(autoload=False)
    with kernel.open_store(store_name, tmp_path / "s") as store:
        store.put("T", 0, msgs[:1])
        store.put("T", 1, msgs[1:])
        store.put("T", 1, [Message(topic="T", body=b"plain")])  # nothing to index
        for i, m in enumerate(msgs):
            assert [x.body for x in store.lookup("T", f"ID{i}")] == [m.body]
        assert [x.body for x in store.lookup("T", "k3")] == [b"3"]
        assert store.lookup("U", "ID1") == []  # per topic
    if store_name == "mmap":
        shutil.rmtree(tmp_path / "s" / "index")
    with kernel.open_store(store_name, tmp_path / "s") as store:
        for i, m in enumerate(msgs):
            assert [x.body for x in store.lookup("T", f"ID{i}")] == [m.body]


def test_index_hash_of_unique_ids_is_rocketmqs() -> None:
    """The mmap index hashes a unique id by parts (fixed head cached); the result is
    RocketMQ's hash of ``topic#key``, for unique ids and any other 32-character key."""
    from mqcore.codec import string_hash_code
    from mqcore.plugins.store_mmap.indexfile import index_key_hash

    def java(topic: str, key: str) -> int:
        h = string_hash_code(f"{topic}#{key}")
        return 0 if h == -(2**31) else abs(h)

    keys = [create_uniq_id() for _ in range(200)] + ["x" * 32, "é" * 32, "k1", "y" * 40]
    for topic in ("T", "%RETRY%g", "SCHEDULE_TOPIC_XXXX"):
        for key in keys:
            assert index_key_hash(topic, key) == java(topic, key)
