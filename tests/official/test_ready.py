"""The official RocketMQ client (PyPI ``rocketmq`` 0.4.4) against a ``mqcore serve`` that has
just started: its first send succeeds when it connects the instant the port accepts (fresh,
and after a SIGKILL with over 1 GiB to recover), and a send to a topic nobody created
succeeds by default and fails with TOPIC_NOT_EXIST when auto-creation is off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mqserve import ServeProcess, fill_and_kill, free_port

from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand

if not os.environ.get("MQCORE_REQUIRE_OFFICIAL_CLIENT"):  # the tox env official must run them
    pytest.importorskip("rocketmq.client", reason="the official client: tox -e official")

STARTS = 20
BIG_STORE = (1 << 30) + (1 << 24)

# Polls the port every 2 ms (printing "polling" first), then starts a producer and sends one
# message the moment a connection is accepted; prints the send status, or the error.
FIRST_SEND = r"""
import socket, sys, time
from rocketmq.client import Message, Producer
addr, topic = sys.argv[1], sys.argv[2]
host, port = addr.rsplit(":", 1)
print("polling", flush=True)
while True:
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
        break
    except OSError:
        time.sleep(0.002)
p = Producer("PID_ready")
p.set_namesrv_addr(addr)
p.start()
m = Message(topic)
m.set_body(b"first")
try:
    print("status", int(p.send_sync(m).status), flush=True)
except Exception as exc:
    print("error", type(exc).__name__, exc, flush=True)
p.shutdown()
"""


def _client(addr: str, topic: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env.setdefault("HOME", str(Path.cwd()))  # the C++ core writes its logs under $HOME
    proc = subprocess.Popen(
        [sys.executable, "-c", FIRST_SEND, addr, topic],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "polling"
    return proc


def _answer(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"client script failed:\n{out}\n{err}"
    return out.strip()


def _first_send_of_a_client_polling(srv: ServeProcess, addr: str, *settings: str) -> str:
    """Start a polling client, then the server; the client's one line of outcome."""
    client = _client(addr, "Ready")
    try:
        srv.launch(addr, *settings)
        return _answer(client)
    finally:
        if client.poll() is None:
            client.kill()
            client.communicate()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_first_send_as_soon_as_the_port_accepts(tmp_path: Path) -> None:
    srv = ServeProcess(tmp_path / "data")
    addr = f"127.0.0.1:{free_port()}"
    try:
        for _ in range(STARTS):
            assert _first_send_of_a_client_polling(srv, addr) == "status 0"  # SEND_OK
            assert srv.stop() == 0
        fill_and_kill(tmp_path / "data", BIG_STORE, "Big")
        assert _first_send_of_a_client_polling(srv, addr) == "status 0"
    finally:
        if srv.proc is not None:
            srv.stop()


def _send_to_a_new_topic(srv: ServeProcess, *settings: str) -> str:
    addr = srv.start(f"127.0.0.1:{free_port()}", *settings)
    try:
        client = _client(addr, "NobodyCreatedThis")
        return _answer(client)
    finally:
        srv.stop()


def _route_code(addr: str, topic: str) -> int:
    with RemotingClient() as client:
        cmd = RemotingCommand(RequestCode.GET_ROUTEINFO_BY_TOPIC, ext_fields={"topic": topic})
        return client.invoke(addr, cmd, 5).code


@pytest.mark.timeout(120)
def test_first_send_to_a_topic_nobody_created(tmp_path: Path) -> None:
    """Created on first use by default (RocketMQ's autoCreateTopicEnable); refused when off."""
    srv = ServeProcess(tmp_path / "on")
    assert _send_to_a_new_topic(srv) == "status 0"
    off = ServeProcess(tmp_path / "off")
    outcome = _send_to_a_new_topic(off, "auto_create_topic_enable=false")
    assert outcome.startswith("error") and "No route info" in outcome, outcome
    # What the client was told: TOPIC_NOT_EXIST (17), and the topic stays uncreated.
    addr = off.start(f"127.0.0.1:{free_port()}", "auto_create_topic_enable=false")
    try:
        assert _route_code(addr, "NobodyCreatedThis") == ResponseCode.TOPIC_NOT_EXIST
        assert _route_code(addr, "NobodyCreatedThis") == ResponseCode.TOPIC_NOT_EXIST
    finally:
        off.stop()


@pytest.mark.timeout(120)
def test_first_send_to_a_topic_nobody_created_through_a_name_server(tmp_path: Path) -> None:
    """Through a separate ``mqcore namesrv``: the client takes TBW102's route, as RocketMQ's."""
    from mqcore.server import NamesrvServer, Server

    with (
        NamesrvServer("127.0.0.1:0") as ns,
        Server(tmp_path, "127.0.0.1:0", settings={"namesrv_addr": ns.address}) as srv,
    ):
        assert _answer(_client(ns.address, "NobodyCreatedThis")) == "status 0"
        cfg = srv.broker.topics.get("NobodyCreatedThis")
        assert cfg is not None and cfg.write_queue_nums == 4
