"""The official RocketMQ 5 Python client's SimpleConsumer against ``mqcore serve
--grpc-listen``: it receives what a 4.x producer (mqcore's remote Producer, on the remoting
port of the same server) sent, acks, sees a message it did not ack come back with
``delivery_attempt`` 2, and an empty receive returns an empty list after the await
duration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grpcserve import GrpcServe, run_script

from mqcore import Message, Producer

pytestmark = pytest.mark.timeout(300)

CONSUME = r"""
import json, sys, time
from rocketmq import ClientConfiguration, Credentials, FilterExpression, SimpleConsumer
addr = sys.argv[1]
config = ClientConfiguration(addr, Credentials("ak", "sk"))
consumer = SimpleConsumer(config, "G5", {"X": FilterExpression("TagA")}, await_duration=2)
consumer.startup()
out = {}
try:
    got = []
    deadline = time.time() + 30
    while len(got) < 3 and time.time() < deadline:
        got += consumer.receive(16, 10)
    out["first"] = sorted([m.body.decode(), m.delivery_attempt, m.tag] for m in got)
    kept = min(got, key=lambda m: m.body)
    for m in got:
        if m is not kept:
            consumer.ack(m)
    start = time.time()
    out["empty"] = [m.body.decode() for m in consumer.receive(16, 10)]
    out["empty_s"] = time.time() - start
    again = []
    deadline = time.time() + 30
    while not again and time.time() < deadline:
        again = consumer.receive(16, 10)
    out["again"] = [[m.body.decode(), m.delivery_attempt, m.message_id] for m in again]
    out["kept_id"] = kept.message_id
    for m in again:
        consumer.ack(m)
    try:
        consumer.ack(again[0])
        out["second_ack"] = "ok"
    except Exception as exc:
        out["second_ack"] = type(exc).__name__ + ": " + str(exc)
finally:
    consumer.shutdown()
print(json.dumps(out))
"""


def test_simple_consumer_receives_what_a_4x_producer_sent(serve: GrpcServe, tmp_path: Path):
    """4.x producer to 5.x consumer: receive, ack, redelivery with attempt 2, empty receive."""
    with Producer("pg4", broker=serve.address) as p:
        for i in range(3):
            p.send(Message(topic="X", body=f"m{i}".encode(), tags="TagA"))
        p.send(Message(topic="X", body=b"other tag", tags="TagB"))
    out = json.loads(run_script(CONSUME, serve.grpc_address, home=tmp_path))
    assert out["first"] == [["m0", 1, "TagA"], ["m1", 1, "TagA"], ["m2", 1, "TagA"]]
    assert out["empty"] == []
    assert out["empty_s"] >= 1.5  # held for the await duration (2 s), not answered at once
    assert [a[:2] for a in out["again"]] == [["m0", 2]]
    assert out["again"][0][2] == out["kept_id"]
    assert "INVALID_RECEIPT_HANDLE" in out["second_ack"] or "40013" in out["second_ack"]
