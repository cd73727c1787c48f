"""The official RocketMQ 5 Python client's Producer (``rocketmq-python-client``) against
``mqcore serve --grpc-listen``: normal, FIFO and delayed messages land in the broker as the
Java proxy stores them, a 4.x client (mqcore's remote PullConsumer, on the remoting port of
the same server) reads them, and it all holds across a SIGKILL of the server."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from grpcserve import GrpcServe, mqcore_cli, run_script

from mqcore import MessageQueue, PullConsumer, PullStatus

pytestmark = pytest.mark.timeout(300)

PRODUCE = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, Message, Producer
addr, run = sys.argv[1], sys.argv[2]
producer = Producer(ClientConfiguration(addr, Credentials("ak", "sk")), ("N", "F", "D"))
producer.startup()
out = {"fifo": []}
try:
    m = Message()
    m.topic, m.body, m.tag = "N", ("normal-" + run).encode(), "TagA"
    m.keys = "key-" + run
    m.add_property("run", run)
    out["normal"] = producer.send(m).message_id
    for i in range(5):
        m = Message()
        m.topic, m.body, m.message_group = "F", ("fifo-%s-%d" % (run, i)).encode(), "order-" + run
        out["fifo"].append(producer.send(m).message_id)
    due = int(time.time()) + 3
    m = Message()
    m.topic, m.body, m.delivery_timestamp = "D", ("delayed-" + run).encode(), due
    out["delayed"] = producer.send(m).message_id
    out["due_ms"] = due * 1000
    m = Message()
    m.topic, m.body, m.message_group = "N", b"wrong type", "g"
    try:
        producer.send(m)
        out["wrong_type"] = "sent"
    except Exception as exc:
        out["wrong_type"] = str(exc)
finally:
    producer.shutdown()
print(json.dumps(out))
"""


def _create_topics(srv: GrpcServe) -> None:
    for name, kind in (("N", "NORMAL"), ("F", "FIFO"), ("D", "DELAY")):
        out = mqcore_cli(
            "topic", "create", name, "--queues", "4", "--message-type", kind,
            "--server", srv.address,
        )  # fmt: skip
        assert f"message type {kind}" in out


def _pull_all(addr: str, topic: str, wait_for: int, timeout: float = 30) -> list:
    """Every message of ``topic`` (at least ``wait_for``), by a 4.x pull consumer."""
    deadline = time.monotonic() + timeout
    with PullConsumer("reader", broker=addr) as c:
        while True:
            found = []
            for q in range(4):
                mq = MessageQueue(topic, "broker-a", q)
                offset = 0
                while True:
                    r = c.pull(mq, "*", offset, 32)
                    if r.pull_status is not PullStatus.FOUND:
                        break
                    found += r.msg_found_list
                    offset = r.next_begin_offset
            if len(found) >= wait_for or time.monotonic() > deadline:
                return found
            time.sleep(0.2)


def _produce_and_check(srv: GrpcServe, run: str, home: Path, earlier: int) -> dict:
    sent = json.loads(run_script(PRODUCE, srv.grpc_address, run, home=home))
    # The client refuses a message its route says the topic does not accept.
    assert "accept message types" in sent["wrong_type"]

    normal = [m for m in _pull_all(srv.address, "N", earlier + 1) if m.body.endswith(run.encode())]
    assert len(normal) == 1
    m = normal[0]
    assert m.msg_id == sent["normal"]  # the client's id, kept as UNIQ_KEY
    assert (m.tags, m.keys, m.properties["run"]) == ("TagA", "key-" + run, run)

    fifo = [m for m in _pull_all(srv.address, "F", 5 * (earlier + 1)) if f"-{run}-" in str(m.body)]
    assert [m.body for m in fifo] == [f"fifo-{run}-{i}".encode() for i in range(5)]
    assert len({m.queue_id for m in fifo}) == 1  # one group, one queue, in order
    assert [m.msg_id for m in fifo] == sent["fifo"]
    assert {m.properties["__SHARDINGKEY"] for m in fifo} == {"order-" + run}

    delayed = [m for m in _pull_all(srv.address, "D", earlier + 1) if m.body.endswith(run.encode())]
    assert len(delayed) == 1
    assert delayed[0].msg_id == sent["delayed"]
    assert delayed[0].store_timestamp >= sent["due_ms"]  # stored in D only once due
    return sent


def test_producer_normal_fifo_delayed_read_by_a_4x_consumer(serve: GrpcServe, tmp_path: Path):
    """Sent by the 5.x Producer, read by the 4.x pull consumer of the same server."""
    _create_topics(serve)
    _produce_and_check(serve, "one", tmp_path, 0)


def test_producer_after_sigkill_and_restart(tmp_path: Path):
    """What was sent before a SIGKILL is there after the restart, and sending goes on."""
    srv = GrpcServe(tmp_path / "data")
    srv.start_grpc()
    try:
        _create_topics(srv)
        _produce_and_check(srv, "before", tmp_path, 0)
        srv.kill()
        srv.start_grpc()
        _produce_and_check(srv, "after", tmp_path, 1)
        bodies = {m.body for m in _pull_all(srv.address, "N", 2)}
        assert bodies == {b"normal-before", b"normal-after"}
    finally:
        srv.stop()
