"""The official RocketMQ 4.x Python client (``rocketmq`` 0.4.4, remoting) and the official 5.x
one (``rocketmq-python-client``, gRPC) on one ``mqcore serve --grpc-listen``: each consumes
what the other produced. Run by the tox env ``official`` (which installs both)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from grpcserve import GrpcServe, mqcore_cli, run_script
from mqserve import run_client

if not os.environ.get("MQCORE_REQUIRE_OFFICIAL_CLIENT"):  # the tox env official must run them
    pytest.importorskip("rocketmq.client", reason="the official 4.x client: tox -e official")
    pytest.importorskip("rocketmq.v5", reason="the official 5.x client: tox -e official")

pytestmark = pytest.mark.timeout(300)

PRODUCE_4 = r"""
import json, sys
from rocketmq.client import Message, Producer
addr = sys.argv[1]
p = Producer("PID_exchange")
p.set_namesrv_addr(addr)
p.start()
ids = []
for i in range(5):
    m = Message("From4")
    m.set_tags("TagA")
    m.set_keys("key-%d" % i)
    m.set_property("seq", str(i))
    m.set_body(("four-%d" % i).encode())
    ids.append(p.send_sync(m).msg_id)
p.shutdown()
print(json.dumps(ids))
"""

CONSUME_4 = r"""
import json, sys, threading, time
from rocketmq.client import PushConsumer
addr, expected = sys.argv[1], int(sys.argv[2])
got, lock = [], threading.Lock()
def on_message(msg):
    with lock:
        got.append({"body": msg.body.decode(), "tags": msg.tags.decode(), "id": msg.id,
                    "seq": msg.get_property("seq").decode()})
c = PushConsumer("CID_exchange")
c.set_namesrv_addr(addr)
c.subscribe("From5", on_message, "*")
c.start()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.2)
    with lock:
        if len(got) >= expected:
            break
time.sleep(1)
c.shutdown()
print(json.dumps(got))
"""

FIVE = r"""
import json, sys, time
from rocketmq import (ClientConfiguration, Credentials, FilterExpression, Message, Producer,
                      SimpleConsumer)
addr = sys.argv[1]
config = ClientConfiguration(addr, Credentials("ak", "sk"))
out = {"sent": [], "got": []}
producer = Producer(config, ("From5",))
producer.startup()
consumer = SimpleConsumer(config, "G_exchange", {"From4": FilterExpression("TagA")},
                          await_duration=2)
consumer.startup()
try:
    for i in range(5):
        m = Message()
        m.topic, m.body, m.tag = "From5", ("five-%d" % i).encode(), "TagB"
        m.add_property("seq", str(i))
        out["sent"].append(producer.send(m).message_id)
    deadline = time.time() + 60
    while time.time() < deadline and len(out["got"]) < 5:
        for m in consumer.receive(16, 15):
            out["got"].append([m.body.decode(), m.tag, m.properties.get("seq"), m.message_id])
            consumer.ack(m)
finally:
    producer.shutdown()
    consumer.shutdown()
print(json.dumps(out))
"""


def test_4x_and_5x_clients_exchange_both_ways(tmp_path: Path) -> None:
    srv = GrpcServe(tmp_path / "data")
    srv.start_grpc()
    try:
        for topic in ("From4", "From5"):
            mqcore_cli("topic", "create", topic, "--queues", "4", "--server", srv.address)
        ids4 = json.loads(run_client(PRODUCE_4, srv.address))
        five = json.loads(run_script(FIVE, srv.grpc_address, home=tmp_path))
        got5 = sorted(five["got"])
        assert [g[:3] for g in got5] == [[f"four-{i}", "TagA", str(i)] for i in range(5)]
        assert [g[3] for g in got5] == ids4  # the 4.x producer's ids, as the 5.x client sees
        got4 = sorted(json.loads(run_client(CONSUME_4, srv.address, "5")), key=lambda g: g["seq"])
        assert [(g["body"], g["tags"]) for g in got4] == [(f"five-{i}", "TagB") for i in range(5)]
        assert [g["id"] for g in got4] == five["sent"]  # the 5.x client's ids, kept
    finally:
        srv.stop()
