"""The official RocketMQ client (PyPI ``rocketmq`` 0.4.4, a C++ core) against ``mqcore serve
--acl``: ``set_session_credentials`` signs as RocketMQ's brokers check it, so an account with
PUB|SUB produces and consumes; a wrong secret, an unknown key, a DENY topic and a SUB-only
topic are refused (the client logs the server's remark) and the store holds nothing of them.
Run by the tox env ``official``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from mqserve import ServeProcess, run_client

from mqcore.client.admin import MQAdmin

if not os.environ.get("MQCORE_REQUIRE_OFFICIAL_CLIENT"):  # the tox env official must run them
    pytest.importorskip("rocketmq.client", reason="the official client: tox -e official")

pytestmark = pytest.mark.timeout(300)

USER = ("official-key", "official-secret")
ADMIN = ("official-admin", "official-admin-secret")
ACL = f"""\
accounts:
  - accessKey: {USER[0]}
    secretKey: {USER[1]}
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms: [AclTopic=PUB|SUB, SubOnly=SUB, Denied=DENY]
  - accessKey: {ADMIN[0]}
    secretKey: {ADMIN[1]}
    admin: true
"""
TOPICS = ("AclTopic", "SubOnly", "Denied")

PRODUCE = r"""
import json, sys
from rocketmq.client import Message, Producer
addr, access_key, secret_key, topic, count = sys.argv[1:6]
p = Producer("PID_acl")
p.set_namesrv_addr(addr)
p.set_session_credentials(access_key, secret_key, "")
p.start()
out = []
for i in range(int(count)):
    m = Message(topic)
    m.set_keys("key-%d" % i)
    m.set_body(("acl-%d" % i).encode())
    try:
        r = p.send_sync(m)
        out.append({"status": int(r.status), "id": r.msg_id})
    except Exception as exc:
        out.append({"error": str(exc)})
p.shutdown()
print(json.dumps(out))
"""

CONSUME = r"""
import json, sys, threading, time
from rocketmq.client import PushConsumer
addr, access_key, secret_key, expected = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
got, lock = [], threading.Lock()
def on_message(msg):
    with lock:
        got.append(msg.body.decode())
c = PushConsumer("CID_acl")
c.set_namesrv_addr(addr)
c.set_session_credentials(access_key, secret_key, "")
c.subscribe("AclTopic", on_message, "*")
c.start()
deadline = time.monotonic() + 60
while time.monotonic() < deadline and len(got) < expected:
    time.sleep(0.2)
time.sleep(1.0)
c.shutdown()
print(json.dumps(sorted(got)))
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServeProcess]:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL)
    srv = ServeProcess(tmp_path / "data", options=("--acl", str(acl)))
    srv.start()
    try:
        with MQAdmin(srv.address, credentials=ADMIN) as admin:
            for topic in TOPICS:
                admin.create_topic(topic, queue_nums=2)
        yield srv
    finally:
        srv.stop()


def _stored(srv: ServeProcess, topic: str) -> int:
    with MQAdmin(srv.address, credentials=ADMIN) as admin:
        return sum(o.max_offset for o in admin.topic_stats(topic).offset_table.values())


def _client_log(home: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in (home / "logs").rglob("*cpp.log*"))


def test_account_with_pub_sub_produces_and_consumes(server: ServeProcess, tmp_path: Path) -> None:
    sent = json.loads(run_client(PRODUCE, server.address, *USER, "AclTopic", "8", home=tmp_path))
    assert [s.get("status") for s in sent] == [0] * 8, sent  # SEND_OK
    assert _stored(server, "AclTopic") == 8
    got = json.loads(run_client(CONSUME, server.address, *USER, "8", home=tmp_path))
    assert got == sorted(f"acl-{i}" for i in range(8))


@pytest.mark.parametrize(
    ("credentials", "topic", "remark"),
    [
        (
            (USER[0], "not-the-secret"),
            "AclTopic",
            "Check signature failed for accessKey=official-key",
        ),
        (("unknown-key", "whatever-secret"), "AclTopic", "No acl config for unknown-key"),
        (USER, "Denied", "No permission for topic:Denied"),
        (USER, "SubOnly", "No permission for topic:SubOnly: accessKey=official-key needs PUB"),
    ],
)
def test_refused_sends_store_nothing(
    server: ServeProcess, tmp_path: Path, credentials: tuple[str, str], topic: str, remark: str
) -> None:
    out = json.loads(run_client(PRODUCE, server.address, *credentials, topic, "3", home=tmp_path))
    assert all("error" in s for s in out), out
    log = _client_log(tmp_path)
    assert remark in log  # the server's answer (NO_PERMISSION, 16), as the client logs it
    assert "not-the-secret" not in log and USER[1] not in log
    assert _stored(server, topic) == 0
