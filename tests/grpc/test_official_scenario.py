"""The official RocketMQ 5 Python client end to end against ``mqcore serve --grpc-listen``, in
one run and again after a SIGKILL of the server and a restart on its data directory:

- a Producer sends normal, FIFO (a message group of five), delayed (a few seconds) and
  transactional messages (one committed, one rolled back, one left unknown and resolved by
  the broker's check, which the producer's checker answers);
- a SimpleConsumer receives them: the delayed one not before it is due, the rolled-back one
  never, the group in order; it acks all but one, which comes back with delivery_attempt 2;
  an empty receive returns [] after the await duration;
- a PushConsumer whose listener fails a message gets it again (delivery_attempt 2).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from grpcserve import GrpcServe, mqcore_cli, run_script

pytestmark = pytest.mark.timeout(400)

#: The broker checks an undecided half after 2 s, every second.
SETTINGS = ("transaction_timeout=2000", "transaction_check_interval=1000")

SCENARIO = r"""
import json, sys, threading, time
from rocketmq import (ClientConfiguration, ConsumeResult, Credentials, FilterExpression, Message,
                      MessageListener, Producer, PushConsumer, SimpleConsumer, TransactionChecker,
                      TransactionResolution)
addr, run = sys.argv[1], sys.argv[2]
config = ClientConfiguration(addr, Credentials("ak", "sk"))
now_ms = lambda: int(time.time() * 1000)
mine = lambda m: m.body.decode().endswith("-" + run)
out = {"checked": []}

class Checker(TransactionChecker):
    def check(self, message):
        out["checked"].append(message.body.decode())
        return TransactionResolution.COMMIT

pushed = []
class Listener(MessageListener):
    def consume(self, message):
        pushed.append([message.body.decode(), message.delivery_attempt])
        if mine(message) and message.delivery_attempt == 1:
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS

everything = {t: FilterExpression("*") for t in ("N", "F", "D", "TX")}
simple = SimpleConsumer(config, "S-" + run, everything, await_duration=2)
simple.startup()
push = PushConsumer(config, "P-" + run, Listener(), {"P": FilterExpression("*")})
push.startup()
producer = Producer(config, ("N", "F", "D", "TX", "P"), checker=Checker())
producer.startup()
try:
    def message(topic, body, **fields):
        m = Message()
        m.topic, m.body = topic, (body + "-" + run).encode()
        for k, v in fields.items():
            setattr(m, k, v)
        return m

    producer.send(message("N", "normal-ack"))
    out["kept_id"] = producer.send(message("N", "normal-keep")).message_id
    for i in range(5):
        producer.send(message("F", "fifo%d" % i, message_group="group-" + run))
    due_s = int(time.time()) + 4
    producer.send(message("D", "delayed", delivery_timestamp=due_s))
    out["due_ms"] = due_s * 1000
    outcomes = (("tx-commit", "commit"), ("tx-rollback", "rollback"), ("tx-unknown", None))
    for body, action in outcomes:
        tx = producer.begin_transaction()
        producer.send(message("TX", body), tx)
        if action == "commit":
            tx.commit()
        elif action == "rollback":
            tx.rollback()
    producer.send(message("P", "push"))

    want = {"normal-ack", "normal-keep", "delayed", "tx-commit", "tx-unknown"}
    want |= {"fifo%d" % i for i in range(5)}
    got, fifo = {}, []
    deadline = time.time() + 60
    while time.time() < deadline and not (want <= set(got) and got["normal-keep"][0] == 2):
        for m in simple.receive(16, 10):
            if not mine(m):
                simple.ack(m)  # an earlier run's
                continue
            name = m.body.decode()[: -len(run) - 1]
            got[name] = [m.delivery_attempt, now_ms()]
            if name.startswith("fifo"):
                fifo.append(name)
            if name == "normal-keep" and m.delivery_attempt == 1:
                out["kept_receipt_id"] = m.message_id
                continue  # not acked: it comes back
            simple.ack(m)
    out["got"], out["fifo"] = got, fifo
    start = time.time()
    out["empty"] = [m.body.decode() for m in simple.receive(16, 10)]
    out["empty_s"] = time.time() - start
    deadline = time.time() + 30
    while time.time() < deadline and ["push-" + run, 2] not in pushed:
        time.sleep(0.2)
    out["pushed"] = [p for p in pushed if p[0].endswith("-" + run)]
finally:
    for client in (push, simple, producer):
        client.shutdown()
print(json.dumps(out))
"""


def _start(srv: GrpcServe) -> None:
    srv.start_grpc("127.0.0.1:0", *SETTINGS)


def _create_topics(srv: GrpcServe) -> None:
    for name, kind in (("N", "NORMAL"), ("F", "FIFO"), ("D", "DELAY"), ("TX", "TRANSACTION")):
        mqcore_cli("topic", "create", name, "--queues", "4", "--message-type", kind,
                   "--server", srv.address)  # fmt: skip
    mqcore_cli("topic", "create", "P", "--queues", "2", "--server", srv.address)


def _run_and_check(srv: GrpcServe, run: str, home: Path) -> None:
    out = json.loads(run_script(SCENARIO, srv.grpc_address, run, home=home, timeout=240))
    got = out["got"]
    assert set(got) == {"normal-ack", "normal-keep", "delayed", "tx-commit", "tx-unknown"} | {
        f"fifo{i}" for i in range(5)
    }, out
    assert "tx-rollback" not in got  # never delivered
    assert f"tx-unknown-{run}" in out["checked"]  # resolved by the broker's check
    assert got["delayed"][1] >= out["due_ms"]  # not before it was due
    assert out["fifo"] == [f"fifo{i}" for i in range(5)]  # the group in order
    assert got["normal-keep"][0] == 2  # not acked: back, second attempt
    assert got["normal-ack"][0] == 1
    assert out["empty"] == [] and out["empty_s"] >= 1.5
    assert out["pushed"][:2] == [[f"push-{run}", 1], [f"push-{run}", 2]]


def test_official_client_scenario_and_again_after_sigkill(tmp_path: Path):
    srv = GrpcServe(tmp_path / "data")
    _start(srv)
    try:
        _create_topics(srv)
        _run_and_check(srv, "one", tmp_path)
        srv.kill()
        _start(srv)
        _run_and_check(srv, "two", tmp_path)
    finally:
        srv.stop()
