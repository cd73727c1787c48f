"""mqcore's remote clients and admin CLI against two servers: ``mqcore serve`` and Apache
RocketMQ's own name server and broker (from Maven Central's jars). One scenario, the same
expected results on both: produce, consume by TAG and by SQL92, consume orderly, retry to the
dead-letter queue, pull, reset a group's offsets. Run by the tox env ``java``."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from apache_rocketmq import ApacheRocketMQ
from click.testing import CliRunner
from mqjava import require_java
from mqserve import ServeProcess

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    ConsumeOrderlyStatus,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    SendStatus,
)
from mqcore.cli import main
from mqcore.client.admin import MQAdmin

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module", params=["mqcore", "rocketmq"])
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The name-server address of a running ``mqcore serve`` or Apache RocketMQ."""
    require_java()
    base = tmp_path_factory.mktemp(f"server-{request.param}")
    if request.param == "mqcore":
        srv = ServeProcess(base / "data")
        srv.start()
        try:
            yield srv.address
        finally:
            srv.stop()
    else:
        rmq = ApacheRocketMQ(base)
        try:
            yield rmq.start()
        finally:
            rmq.stop()


def _cli(*args: str) -> str:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _topic(server: str, name: str, queues: int = 4) -> str:
    """Created with the admin CLI, then looked up through it (the route is the server's)."""
    _cli("topic", "create", "--server", server, name, "--queues", str(queues))
    listed = json.loads(_cli("topic", "list", "--server", server, "--json"))
    assert name in json.dumps(listed)
    return name


def _send(server: str, topic: str, count: int, **kw: Any) -> list[Any]:
    out = []
    with Producer("PID_two_servers", namesrv_addr=server) as producer:
        for i in range(count):
            msg = Message(
                topic=topic,
                body=f"m-{i}".encode(),
                tags="TagA" if i % 2 == 0 else "TagB",
                keys=f"k-{i}",
                properties={"a": str(i)},
            )
            selector = kw.get("selector")
            if selector is not None:
                out.append(producer.send(msg, selector=selector, arg=i))
            else:
                out.append(producer.send(msg))
    assert {r.send_status for r in out} == {SendStatus.SEND_OK}
    return out


class _Collector:
    """What a listener got, and a way to wait for a count of it."""

    def __init__(self) -> None:
        self.got: list[Any] = []
        self.cond = threading.Condition()

    def add(self, msgs: list[Any]) -> None:
        with self.cond:
            self.got.extend(msgs)
            self.cond.notify_all()

    def wait(self, count: int, timeout: float = 90) -> list[Any]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.got) >= count, timeout), (
                f"{len(self.got)} of {count} messages came"
            )
            return list(self.got)


def _push(
    server: str,
    group: str,
    topic: str,
    expression: str = "*",
    expression_type: str = "TAG",
    *,
    orderly: bool = False,
    status: Any = None,
    **options: Any,
) -> tuple[PushConsumer, _Collector]:
    seen = _Collector()
    consumer = PushConsumer(
        group,
        namesrv_addr=server,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        **options,
    )
    consumer.subscribe(topic, expression, expression_type=expression_type)

    def listener(msgs: list[Any], ctx: Any) -> Any:
        seen.add(msgs)
        if status is not None:
            return status(ctx)
        if orderly:
            return ConsumeOrderlyStatus.SUCCESS
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    if orderly:
        consumer.register_message_listener_orderly(listener)
    else:
        consumer.register_message_listener(listener)
    consumer.start()
    return consumer, seen


def _consume(server: str, group: str, topic: str, count: int, **kw: Any) -> list[Any]:
    """Run a push consumer until ``count`` messages came, then a quiet half second more (a
    message past ``count`` would show in the callers' equalities), and shut it down."""
    consumer, seen = _push(server, group, topic, **kw)
    try:
        seen.wait(count)
        time.sleep(0.5)
        return list(seen.got)
    finally:
        consumer.shutdown()


def test_produce_and_consume_by_tag(server: str) -> None:
    topic = _topic(server, "TwoTag")
    _send(server, topic, 10)
    got = _consume(server, "CID_two_tag", topic, 5, expression="TagA")
    assert sorted(m.body for m in got) == sorted(f"m-{i}".encode() for i in range(0, 10, 2))
    assert {m.tags for m in got} == {"TagA"}
    assert {m.keys for m in got} == {f"k-{i}" for i in range(0, 10, 2)}


def test_consume_by_sql92(server: str) -> None:
    topic = _topic(server, "TwoSql")
    _send(server, topic, 10)
    got = _consume(
        server, "CID_two_sql", topic, 2, expression="a >= 6 AND TAGS = 'TagA'",
        expression_type="SQL92",
    )  # fmt: skip
    assert sorted(m.properties["a"] for m in got) == ["6", "8"]


def test_consume_orderly(server: str) -> None:
    topic = _topic(server, "TwoOrderly")

    def by_parity(mqs: list[MessageQueue], msg: Message, arg: int) -> MessageQueue:
        return sorted(mqs, key=lambda q: q.queue_id)[arg % 2]

    sent = _send(server, topic, 20, selector=by_parity)
    assert {r.message_queue.queue_id for r in sent} == {0, 1}
    got = _consume(server, "CID_two_orderly", topic, 20, orderly=True)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for m in got:
        per_queue[m.queue_id].append(int(m.properties["a"]))
    assert per_queue == {0: list(range(0, 20, 2)), 1: list(range(1, 20, 2))}


def test_retries_then_dead_letter_queue(server: str) -> None:
    topic = _topic(server, "TwoDlq")
    group = "CID_two_dlq"
    _send(server, topic, 2)

    def fail(ctx: Any) -> Any:
        ctx.delay_level_when_next_consume = 1  # retry after 1 s
        return ConsumeConcurrentlyStatus.RECONSUME_LATER

    got = _consume(server, group, topic, 4, status=fail, max_reconsume_times=1)
    tries: dict[bytes, list[int]] = defaultdict(list)
    for m in got:
        tries[m.body].append(m.reconsume_times)
    assert {b: sorted(t) for b, t in tries.items()} == {b"m-0": [0, 1], b"m-1": [0, 1]}
    with MQAdmin(server) as admin:
        deadline = time.monotonic() + 30
        while True:
            dead = sorted(m.body for m in admin.dead_letters(group))
            if dead or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    assert dead == [b"m-0", b"m-1"]


def test_pull_consumer_reads_each_queue(server: str) -> None:
    topic = _topic(server, "TwoPull")
    sent = _send(server, topic, 12)
    consumer = PullConsumer("CID_two_pull", namesrv_addr=server)
    consumer.start()
    try:
        queues = consumer.fetch_subscribe_message_queues(topic)
        assert len(queues) == 4
        got = []
        for mq in sorted(queues, key=lambda q: q.queue_id):
            assert consumer.min_offset(mq) == 0
            result = consumer.pull(mq, "*", 0, 32)
            assert result.pull_status is PullStatus.FOUND
            assert result.next_begin_offset == consumer.max_offset(mq)
            got += result.msg_found_list
            consumer.update_consume_offset(mq, result.next_begin_offset)
    finally:
        consumer.shutdown()  # commits the offsets
    assert sorted(m.body for m in got) == sorted(f"m-{i}".encode() for i in range(12))
    assert {m.msg_id for m in got} == {r.msg_id for r in sent}
    with MQAdmin(server) as admin:
        stats = admin.consume_stats("CID_two_pull", topic)
        assert sum(o.consumer_offset for o in stats.offset_table.values()) == 12


def test_reset_offsets_by_time(server: str) -> None:
    """A group consumes everything, the admin CLI resets it to before the first message, and
    the next run of the group gets everything again."""
    topic = _topic(server, "TwoReset")
    group = "CID_two_reset"
    before = int(time.time() * 1000) - 1000
    _send(server, topic, 6)
    first = _consume(server, group, topic, 6)
    assert len(first) == 6
    _await_committed(server, group, topic, 6)
    _cli("offset", "reset", "--server", server, "--group", group, "--topic", topic,
         "--timestamp", str(before))  # fmt: skip
    _await_committed(server, group, topic, 0)
    again = _consume(server, group, topic, 6)
    assert sorted(m.body for m in again) == sorted(m.body for m in first)


def _await_committed(server: str, group: str, topic: str, total: int) -> None:
    """Until the brokers report ``total`` committed for ``group`` in ``topic``."""
    deadline = time.monotonic() + 30
    with MQAdmin(server) as admin:
        while True:
            stats = admin.consume_stats(group, topic)
            seen = sum(max(0, o.consumer_offset) for o in stats.offset_table.values())
            if seen == total:
                return
            assert time.monotonic() < deadline, f"{group} committed {seen}, not {total}"
            time.sleep(0.1)


def test_admin_cli_topic_stats_and_lag(server: str) -> None:
    topic = _topic(server, "TwoAdmin", queues=2)
    _send(server, topic, 4)
    stats = json.loads(_cli("topic", "stats", "--server", server, topic, "--json"))
    text = json.dumps(stats)
    assert topic in text
    _consume(server, "CID_two_admin", topic, 4)
    _await_committed(server, "CID_two_admin", topic, 4)
    lag = json.loads(
        _cli("lag", "--server", server, "--group", "CID_two_admin", "--topic", topic, "--json")
    )
    assert lag, "no lag rows"
    assert "0" in json.dumps(lag)


# The Spark network read (option namesrv) against both servers: the same messages, the same
# rows. The tox env java installs the extra spark for it, so these run beside the brokers this
# module already started instead of starting an Apache RocketMQ in the env spark.

SPARK_TOPIC = "TwoSpark"
#: 48 a queue: more than the 32 messages an Apache RocketMQ broker answers per pull.
SPARK_SMALL = 192
SPARK_BIG = 4  # bodies past the producer's 4 KiB threshold: sent compressed


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local SparkSession with the mqcore source (pyspark is in the env: never skipped)."""
    import os
    import sys

    require_java()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from mqcore.contrib.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("mqcore-two-servers")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("warehouse")))
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def _spark_body(i: int) -> bytes:
    if i >= SPARK_SMALL:  # compressible, 10 KiB, different for each
        return (f"big-{i}-".encode() + bytes(range(256))) * 40
    return f"m-{i}".encode() * (1 + i % 5)


def _spark_fill(server: str) -> tuple[list[tuple[Any, ...]], int]:
    """Send the messages (message i to queue i % 4, so both servers place each alike); the
    rows a read must give, and a time between the first half's stores and the second's."""
    expected = []
    split_at = 0
    with Producer("PID_two_spark", namesrv_addr=server) as producer:

        def by_number(mqs: list[MessageQueue], msg: Message, arg: int) -> MessageQueue:
            return sorted(mqs, key=lambda q: q.queue_id)[arg % 4]

        total = SPARK_SMALL + SPARK_BIG
        for i in range(total):
            if i == total // 2:
                # Every store of the first half is at least 1 ms before split_at, every
                # store of the second at or after it.
                time.sleep(0.01)
                split_at = int(time.time() * 1000)
                time.sleep(0.01)
            props = {"a": str(i), "pct": str(i % 10)}
            msg = Message(topic=SPARK_TOPIC, body=_spark_body(i), tags=f"Tag{'ABC'[i % 3]}",
                          keys=f"k-{i}", properties=props)  # fmt: skip
            r = producer.send(msg, selector=by_number, arg=i)
            assert r.send_status is SendStatus.SEND_OK
            expected.append(
                (i % 4, r.queue_offset, msg.tags, msg.keys, props["a"], props["pct"],
                 hashlib.sha256(msg.body).hexdigest())
            )  # fmt: skip
    return expected, split_at


def _spark_rows(spark: Any, server: str, **options: str) -> list[tuple[Any, ...]]:
    reader = spark.read.format("mqcore").option("namesrv", server).option("topic", SPARK_TOPIC)
    for name, value in options.items():
        reader = reader.option(name, value)
    rows = reader.load().collect()
    return sorted(
        (r["queue_id"], r["queue_offset"], r["tags"], r["keys"], r["properties"]["a"],
         r["properties"]["pct"], hashlib.sha256(bytes(r["body"])).hexdigest())
        for r in rows
    )  # fmt: skip


def test_spark_network_read(server: str, spark: Any) -> None:
    """All rows (four queues of 49 past the 32-a-pull cap, compressed 10 KiB bodies among
    them), a TAG and a SQL92 filter, a queue subset and a timestamp range: on each server the
    rows are exactly what was sent."""
    _topic(server, SPARK_TOPIC)
    expected, split_at = _spark_fill(server)
    expected.sort()
    assert {e[1] for e in expected} == set(range((SPARK_SMALL + SPARK_BIG) // 4))
    assert _spark_rows(spark, server) == expected
    # Small pulls: many rounds per queue; the broker's own cap makes the rest.
    assert _spark_rows(spark, server, pull_batch_size="7", min_partitions="8") == expected
    assert _spark_rows(spark, server, filter_type="TAG", filter="TagA || TagC") == [
        e for e in expected if e[2] in ("TagA", "TagC")
    ]
    assert _spark_rows(spark, server, filter_type="SQL92", filter="pct < 3 AND a > 100") == [
        e for e in expected if int(e[5]) < 3 and int(e[4]) > 100
    ]
    assert _spark_rows(spark, server, queue_ids="1,3") == [e for e in expected if e[0] in (1, 3)]
    half = (SPARK_SMALL + SPARK_BIG) // 2
    second = sorted(e for e in expected if int(e[4]) >= half)
    first = sorted(e for e in expected if int(e[4]) < half)
    assert _spark_rows(spark, server, start_timestamp=str(split_at)) == second
    assert _spark_rows(spark, server, end_timestamp=str(split_at)) == first
