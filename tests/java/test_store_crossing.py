"""Store directories crossing between mqcore's mmap store and Apache RocketMQ's broker, both
ways, on stopped brokers: Apache RocketMQ serves the messages and consumer offsets that
``mqcore serve`` wrote, and mqcore reads (read-only) what Apache RocketMQ wrote. What does not
match is listed in docs/storage.md ("Crossing to and from Apache RocketMQ"). Run by the tox
env ``java``."""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import pytest
from apache_rocketmq import ApacheRocketMQ
from mqjava import require_java
from mqserve import ServeProcess

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Kernel,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)
from mqcore.client.admin import MQAdmin
from mqcore.protocol import fastjson

pytestmark = pytest.mark.timeout(600)

TOPIC = "Crossing"
GROUP = "CID_crossing"


@pytest.fixture(autouse=True)
def _java() -> None:
    require_java()


def _send(server: str, first: int, count: int) -> dict[str, str]:
    """Bodies m-FIRST.. with keys k-i; body -> message id."""
    ids = {}
    with Producer("PID_crossing", namesrv_addr=server) as producer:
        for i in range(first, first + count):
            body = f"m-{i}"
            msg = Message(topic=TOPIC, body=body.encode(), tags="TagA", keys=f"k-{i}")
            ids[body] = producer.send(msg).msg_id
    return ids


def _consume_all(server: str, count: int) -> list[str]:
    """GROUP consumes until ``count`` messages came, then shuts down (committing)."""
    got: list[str] = []
    done = threading.Condition()

    def listener(msgs: list, ctx: object) -> ConsumeConcurrentlyStatus:  # type: ignore[type-arg]
        with done:
            got.extend(m.body.decode() for m in msgs)
            done.notify_all()
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        GROUP, namesrv_addr=server, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe(TOPIC, "*")
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        with done:
            assert done.wait_for(lambda: len(got) >= count, 90), f"{len(got)} of {count} came"
        time.sleep(0.5)  # a message past ``count`` would show in the callers' equalities
        return sorted(got)
    finally:
        consumer.shutdown()


def _pull_all(server: str) -> dict[str, str]:
    """Every message of TOPIC, pulled queue by queue from offset 0: body -> key."""
    out = {}
    consumer = PullConsumer("CID_crossing_pull", namesrv_addr=server)
    consumer.start()
    try:
        for mq in consumer.fetch_subscribe_message_queues(TOPIC):
            offset = 0
            while True:
                result = consumer.pull(mq, "*", offset, 32)
                if result.pull_status is not PullStatus.FOUND:
                    break
                out.update({m.body.decode(): m.keys for m in result.msg_found_list})
                offset = result.next_begin_offset
    finally:
        consumer.shutdown()
    return out


def _committed(server: str) -> int:
    with MQAdmin(server) as admin:
        stats = admin.consume_stats(GROUP, TOPIC)
        return sum(max(0, o.consumer_offset) for o in stats.offset_table.values())


#: The config files both brokers read and write in the same format (docs/storage.md): topics,
#: consumer offsets, delay-level progress. Their timer files share names, not formats.
SHARED_CONFIG = ("topics.json", "consumerOffset.json", "delayOffset.json")


def _copy_config(src: Path, dst: Path) -> None:
    dst.mkdir(parents=True, exist_ok=True)
    for name in SHARED_CONFIG:
        if (src / name).exists():
            shutil.copy2(src / name, dst / name)


def _bodies(first: int, count: int) -> list[str]:
    return sorted(f"m-{i}" for i in range(first, first + count))


def test_apache_rocketmq_serves_what_mqcore_serve_wrote(tmp_path: Path) -> None:
    """``mqcore serve`` (mmap) stores 20 messages and a group's offsets, and stops; Apache
    RocketMQ's broker started on that store serves the messages (by queue and by key) and
    the group's offsets, and goes on from them."""
    data = tmp_path / "data"
    srv = ServeProcess(data)
    addr = srv.start()
    try:
        with MQAdmin(addr) as admin:
            admin.create_topic(TOPIC, 4)
        ids = _send(addr, 0, 20)
        assert _consume_all(addr, 20) == _bodies(0, 20)
    finally:
        assert srv.stop() == 0
    # RocketMQ keeps its config files inside the store root, mqcore beside it.
    _copy_config(data / "config", data / "store" / "config")
    rmq = ApacheRocketMQ(tmp_path / "rocketmq", store_dir=data / "store")
    server = rmq.start()
    try:
        with MQAdmin(server) as admin:
            assert admin.topic(TOPIC).read_queue_nums == 4
            by_key = admin.query_by_key(TOPIC, "k-7")
            assert [m.body for m in by_key] == [b"m-7"]
            assert [m.msg_id for m in by_key] == [ids["m-7"]]
        assert _pull_all(server) == {f"m-{i}": f"k-{i}" for i in range(20)}
        assert _committed(server) == 20
        _send(server, 20, 5)
        assert _consume_all(server, 5) == _bodies(20, 5)  # from the offsets mqcore committed
    finally:
        rmq.stop()


def test_mqcore_reads_what_apache_rocketmq_wrote(tmp_path: Path) -> None:
    """Apache RocketMQ's broker stores 20 messages and a group's offsets, and stops; mqcore's
    mmap store opens its store read-only and reads every message, by queue and by key, and
    ``mqcore serve`` started on the directory serves them with the group's offsets."""
    root = tmp_path / "data"
    rmq = ApacheRocketMQ(tmp_path / "rocketmq", store_dir=root / "store")
    server = rmq.start()
    try:
        with MQAdmin(server) as admin:
            admin.create_topic(TOPIC, 4)
        ids = _send(server, 0, 20)
        assert _consume_all(server, 20) == _bodies(0, 20)
    finally:
        rmq.stop()

    with Kernel().open_store("mmap", root / "store", read_only=True) as store:
        bodies = {}
        for queue_id in range(4):
            got = store.get(TOPIC, queue_id, 0, max_count=100)
            assert [m.queue_offset for m in got.messages] == list(range(len(got.messages)))
            bodies.update({m.body.decode(): m.keys for m in got.messages})
        assert bodies == {f"m-{i}": f"k-{i}" for i in range(20)}
        assert sorted(store.queue_ids(TOPIC)) == [0, 1, 2, 3]
        found = store.lookup(TOPIC, "k-3")
        assert [m.body for m in found] == [b"m-3"]
        assert [m.msg_id for m in found] == [ids["m-3"]]
    offsets = fastjson.loads((root / "store" / "config" / "consumerOffset.json").read_bytes())
    assert sum(offsets["offsetTable"][f"{TOPIC}@{GROUP}"].values()) == 20

    # mqcore serve on the directory: config beside the store, as mqcore keeps it.
    _copy_config(root / "store" / "config", root / "config")
    log = tmp_path / "serve.log"
    srv = ServeProcess(root, log=log)
    try:
        addr = srv.start()
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{log.read_text()[-3000:]}") from None
    try:
        assert _pull_all(addr) == {f"m-{i}": f"k-{i}" for i in range(20)}
        assert _committed(addr) == 20
        _send(addr, 20, 5)
        assert _consume_all(addr, 5) == _bodies(20, 5)
    finally:
        srv.stop()
