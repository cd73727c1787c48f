"""FIFO consumption over gRPC: a group whose topics are all FIFO topics consumes in order. The
official SimpleConsumer gets nothing more of a message group while its first message is
invisible and unacked; once it comes back (delivery_attempt 2) the rest follow in order. The
official PushConsumer (told ``fifo`` in its Settings) retries a failed message before the
next of its group."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grpcserve import GrpcServe, mqcore_cli, run_script

pytestmark = pytest.mark.timeout(300)

SCRIPT = r"""
import json, sys, time
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message,
                      MessageListener, Producer, PushConsumer, SimpleConsumer)
config = ClientConfiguration(sys.argv[1], Credentials("ak", "sk"))
out = {}
producer = Producer(config, ("F",))
producer.startup()
simple = SimpleConsumer(config, "SF", {"F": FilterExpression("A")}, await_duration=2)
simple.startup()
seen = []
class Listener(MessageListener):
    def consume(self, m):
        seen.append(m.body.decode())
        failed = seen.count("p1") == 1 and m.body == b"p1"
        return ConsumeResult.FAILURE if failed else ConsumeResult.SUCCESS
push = PushConsumer(config, "PF", Listener(), {"F": FilterExpression("B")})
push.startup()
try:
    for i in range(4):
        m = Message()
        m.topic, m.body, m.tag, m.message_group = "F", b"f%d" % i, "A", "g"
        producer.send(m)
    first = simple.receive(1, 10)
    out["first"] = [[m.body.decode(), m.delivery_attempt] for m in first]
    out["blocked"] = [m.body.decode() for m in simple.receive(4, 10)]
    time.sleep(9)
    after = []
    deadline = time.time() + 30
    while time.time() < deadline and len(after) < 4:
        for m in simple.receive(4, 10):
            after.append([m.body.decode(), m.delivery_attempt])
            simple.ack(m)
    out["after"] = after
    for i in range(3):
        m = Message()
        m.topic, m.body, m.tag, m.message_group = "F", b"p%d" % i, "B", "h"
        producer.send(m)
    deadline = time.time() + 30
    while time.time() < deadline and "p2" not in seen:
        time.sleep(0.2)
    out["pushed"] = seen
finally:
    for client in (push, simple, producer):
        client.shutdown()
print(json.dumps(out))
"""


def test_fifo_groups_consume_in_order(serve: GrpcServe, tmp_path: Path):
    mqcore_cli("topic", "create", "F", "--queues", "2", "--message-type", "FIFO",
               "--server", serve.address)  # fmt: skip
    out = json.loads(run_script(SCRIPT, serve.grpc_address, home=tmp_path))
    assert out["first"] == [["f0", 1]]
    assert out["blocked"] == []  # the group waits for its first message
    assert out["after"] == [["f0", 2], ["f1", 1], ["f2", 1], ["f3", 1]]
    assert out["pushed"] == ["p0", "p1", "p1", "p2"]  # p1 failed, retried before p2
