"""mqcore's remote clients and admin CLI against two servers: ``mqcore serve`` and Apache
RocketMQ's own name server and broker (from Maven Central's jars). One scenario, the same
expected results on both: produce, consume by TAG and by SQL92, consume orderly, retry to the
dead-letter queue, pull, reset a group's offsets. Run by the tox env ``java``."""

from __future__ import annotations

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
