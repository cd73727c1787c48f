"""The official RocketMQ 4.x Python client (PyPI ``rocketmq`` 0.4.4, a C++ core) against
``mqcore serve``: it produces, consumes with a TAG subscription, resumes in its group, and
keeps doing so across a SIGKILL of the server. Run by the tox env ``official``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from mqserve import ServeProcess, run_client

if not os.environ.get("MQCORE_REQUIRE_OFFICIAL_CLIENT"):  # the tox env official must run them
    pytest.importorskip("rocketmq.client", reason="the official client: tox -e official")

pytestmark = pytest.mark.timeout(300)

PRODUCE = r"""
import json, sys
from rocketmq.client import Message, Producer
addr, start, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
p = Producer("PID_official")
p.set_namesrv_addr(addr)
p.start()
out = []
for i in range(start, start + count):
    m = Message("OfficialTopic")
    tag = "TagA" if i % 2 == 0 else "TagB"
    # Every fifth body is over 4 KiB: the client sends it zlib-compressed.
    body = (("body-%d-" % i) * (700 if i % 5 == 0 else 1)).encode()
    m.set_tags(tag)
    m.set_keys("key-%d" % i)
    m.set_property("seq", str(i))
    m.set_body(body)
    r = p.send_sync(m)
    out.append({"i": i, "status": int(r.status), "id": r.msg_id, "tag": tag, "len": len(body)})
p.shutdown()
print(json.dumps(out))
"""

CONSUME = r"""
import json, sys, threading, time
from rocketmq.client import PushConsumer
addr, expected, quiet = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
got, lock, last = [], threading.Lock(), [time.monotonic()]
def on_message(msg):
    with lock:
        got.append({"tags": msg.tags.decode(), "keys": msg.keys.decode(),
                    "body": msg.body.decode(), "seq": msg.get_property("seq").decode(),
                    "id": msg.id})
        last[0] = time.monotonic()
c = PushConsumer("CID_official")
c.set_namesrv_addr(addr)
c.subscribe("OfficialTopic", on_message, "TagA")
c.start()
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    time.sleep(0.2)
    with lock:
        if len(got) >= expected and time.monotonic() - last[0] > quiet:
            break
c.shutdown()
print(json.dumps(got))
"""


def _produce(addr: str, start: int, count: int) -> list[dict]:  # type: ignore[type-arg]
    sent = json.loads(run_client(PRODUCE, addr, str(start), str(count)))
    assert [s["status"] for s in sent] == [0] * count  # SEND_OK
    return sent


def _consume(addr: str, expected: int, quiet: float = 3.0) -> list[dict]:  # type: ignore[type-arg]
    return json.loads(run_client(CONSUME, addr, str(expected), str(quiet)))


def _expected_body(i: int) -> str:
    return f"body-{i}-" * (700 if i % 5 == 0 else 1)


def _check(got: list[dict], sent: list[dict]) -> None:  # type: ignore[type-arg]
    wanted = {s["i"]: s for s in sent if s["tag"] == "TagA"}
    seqs = sorted(int(g["seq"]) for g in got)
    assert seqs == sorted(wanted), "exactly the TagA messages, each once"
    for g in got:
        i = int(g["seq"])
        assert g["tags"] == "TagA" and g["keys"] == f"key-{i}"
        assert g["body"] == _expected_body(i)  # byte for byte, > 4 KiB bodies included
        assert g["id"] == wanted[i]["id"]  # the id the producer was given


def test_produce_and_consume_by_tag(server: ServeProcess) -> None:
    sent = _produce(server.address, 0, 20)
    assert len({s["id"] for s in sent}) == 20
    _check(_consume(server.address, 10), sent)


def test_restarted_consumer_gets_only_new_messages(server: ServeProcess) -> None:
    first = _produce(server.address, 0, 10)
    _check(_consume(server.address, 5), first)
    second = _produce(server.address, 10, 10)
    _check(_consume(server.address, 5), second)


def test_sigkill_and_restart_on_the_same_data(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path / "data")
    addr = srv.start()
    try:
        first = _produce(addr, 0, 10)
        _check(_consume(addr, 5), first)
        # The consumer committed its offsets on shutdown; the broker persists them every 5 s.
        time.sleep(6)
        srv.kill()
        addr = srv.start(listen=addr)  # same port: the group's offsets name this broker
        second = _produce(addr, 10, 10)
        _check(_consume(addr, 5), second)
    finally:
        srv.stop()
