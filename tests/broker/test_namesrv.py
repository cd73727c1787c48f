"""The standalone name server: registration tables, and two broker groups behind one."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
)
from mqcore.broker.namesrv import NameServer, RegisterBrokerRequestHeader
from mqcore.broker.processor import BrokerProcessor
from mqcore.client.admin import MQAdmin
from mqcore.client.transport_remote import RemoteTransport
from mqcore.commands.namesrv import NamesrvServer
from mqcore.errors import RemotingConnectError
from mqcore.message import MessageExt
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.server import RemotingServer

pytestmark = pytest.mark.timeout(180)


def _header(name: str, addr: str, broker_id: int = 0) -> RegisterBrokerRequestHeader:
    return RegisterBrokerRequestHeader(
        broker_name=name, broker_addr=addr, cluster_name="C", broker_id=broker_id
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_routes_list_every_group_with_its_members_and_expire():
    clock = Clock()
    ns = NameServer(clock=clock)
    topics = {"T": {"topicName": "T", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6}}
    ns.register(_header("broker-a", "h:1"), topics)
    ns.register(_header("broker-a", "h:2", 1), {})
    ns.register(_header("broker-b", "h:3"), {**topics, "U": {**topics["T"], "topicName": "U"}})
    route = ns.route("T")
    assert route is not None
    assert [(b.broker_name, b.broker_addrs) for b in route.broker_datas] == [
        ("broker-a", ((0, "h:1"), (1, "h:2"))),
        ("broker-b", ((0, "h:3"),)),
    ]
    assert len(route.write_queues()) == 8
    assert [b.broker_name for b in ns.route("U").broker_datas] == ["broker-b"]
    assert ns.route("V") is None
    clock.now += 100
    ns.register(_header("broker-b", "h:3"), topics)  # U is gone from broker-b
    assert ns.route("U") is None
    clock.now += 30  # broker-a's members are 130 s old now: expired
    assert [b.broker_name for b in ns.route("T").broker_datas] == ["broker-b"]


def test_a_closed_connection_removes_its_broker():
    ns = NameServer()
    conn = object()
    ns.register(_header("broker-a", "h:1"), {"T": {"readQueueNums": 1, "writeQueueNums": 1}}, conn)
    assert ns.route("T") is not None
    ns.connection_closed(conn)
    assert ns.route("T") is None


def test_a_pull_refused_by_a_dead_master_asks_the_name_server_again(tmp_path):
    """A master that died after the client learnt its route refuses the next pull at once;
    the pull after it asks the name server again and reads from the slave (instead of
    trying the dead master until the cached route expires, 30 s later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"  # nothing listens there once closed
    with Broker(tmp_path / "slave") as slave, NamesrvServer("127.0.0.1:0") as ns:
        slave.create_topic("T", 1)
        slave.send_message("T", 0, [Message(topic="T", body=b"kept")])
        processor = BrokerProcessor(slave, "")
        server = RemotingServer(processor, "127.0.0.1", 0)
        host, port = server.start()
        processor.address = f"{host}:{port}"
        transport = RemoteTransport(ns.address)
        try:
            master_conn = object()
            topics = {"T": {"topicName": "T", "readQueueNums": 1, "writeQueueNums": 1, "perm": 6}}
            ns.tables.register(_header("broker-a", dead), topics, master_conn)
            ns.tables.register(_header("broker-a", processor.address, 1), {})
            transport.get_route_info_by_topic("T")  # cached: the master is at ``dead``
            ns.tables.connection_closed(master_conn)  # the master died
            mq = MessageQueue("T", "broker-a", 0)
            with pytest.raises(RemotingConnectError):
                transport.pull_message(mq, "cg", 0, 32)
            resp = transport.pull_message(mq, "cg", 0, 32)
            assert resp.code == ResponseCode.SUCCESS
            assert [bytes(MessageExt(bytes(r)).body) for r in resp.records] == [b"kept"]
        finally:
            transport.close()
            server.close()


class Serve:
    def __init__(self, data_dir: Path, *args: str, listen: str = "127.0.0.1:0") -> None:
        cmd = [
            sys.executable, "-c", "from mqcore.cli import main; main()", "serve",
            "--listen", listen, "--data-dir", str(data_dir),
            "--set", "register_name_server_period_ms=1000", *args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on" in line, line
        self.address = line.split("listening on ")[1].split()[0]
        second = self.proc.stdout.readline()
        self.ha = second.rsplit(" ", 1)[1].strip() if "replication port" in second else ""

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def test_two_broker_groups_behind_one_name_server(tmp_path):
    """A producer spreads over both masters; a group of three consumes everything once."""
    brokers: list[Serve] = []
    consumers: list[PushConsumer] = []
    with NamesrvServer("127.0.0.1:0") as ns:
        try:
            for name in ("broker-a", "broker-b"):
                b = Serve(tmp_path / name, "--broker-name", name, "--namesrv", ns.address)
                brokers.append(b)
                with MQAdmin(b.address) as admin:
                    admin.create_topic("T", 4)
            deadline = time.monotonic() + 30
            while True:
                route = ns.tables.route("T")
                if route is not None and len(route.broker_datas) == 2:
                    break
                assert time.monotonic() < deadline, "the brokers did not register"
                time.sleep(0.1)
            got: list[bytes] = []
            lock = threading.Lock()

            def listener(msgs, ctx):  # type: ignore[no-untyped-def]
                with lock:
                    got.extend(bytes(m.body) for m in msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            for i in range(3):
                c = PushConsumer(
                    "cg",
                    namesrv_addr=ns.address,
                    instance_name=f"c{i}",
                    consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                )
                c.subscribe("T", "*")
                c.register_message_listener(listener)
                c.start()
                consumers.append(c)
            with Producer("pg", namesrv_addr=ns.address) as p:
                results = [p.send(Message(topic="T", body=b"m%04d" % i)) for i in range(400)]
            per_group = {r.message_queue.broker_name for r in results}
            assert per_group == {"broker-a", "broker-b"}
            deadline = time.monotonic() + 90
            while len(got) < 400 and time.monotonic() < deadline:
                time.sleep(0.1)
            time.sleep(1.0)  # a duplicate, if any, would arrive now
            with lock:
                assert sorted(got) == [b"m%04d" % i for i in range(400)]
            owned = [c.assigned_queues("T") for c in consumers]
            assert sum(len(q) for q in owned) == 8
            assert {mq.broker_name for q in owned for mq in q} == {"broker-a", "broker-b"}
        finally:
            for c in consumers:
                c.shutdown()
            for b in brokers:
                b.stop()


def _max(addr: str, topic: str, queue_id: int) -> int:
    client = RemotingClient()
    try:
        h = headers.GetMaxOffsetRequestHeader(topic=topic, queue_id=queue_id)
        resp = client.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, h), 10)
        return int(resp.read_header(headers.GetMaxOffsetResponseHeader).offset)
    finally:
        client.close()


def _wait(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {check}"
        time.sleep(0.1)


def test_a_dead_master_its_slave_serves_reads_and_sends_go_to_the_other_group(tmp_path):
    """SIGKILL broker-a's master: its messages are read from its slave, sends go to
    broker-b; once it is restarted nothing acknowledged is missing."""
    common = ("--set", "slave_read_enable=true", "--set", "slave_synchronize_interval_ms=200")
    nodes: dict[str, Serve] = {}
    consumer = None
    with NamesrvServer("127.0.0.1:0") as ns:
        try:
            master_args = ("--broker-name", "broker-a", "--namesrv", ns.address, *common)
            nodes["a0"] = Serve(tmp_path / "a0", *master_args, "--ha-listen", "0")
            ha = nodes["a0"].ha
            nodes["a1"] = Serve(
                tmp_path / "a1", "--broker-name", "broker-a", "--namesrv", ns.address,
                "--role", "SLAVE", "--broker-id", "1", "--master-ha", ha, *common,
            )  # fmt: skip
            nodes["b0"] = Serve(
                tmp_path / "b0", "--broker-name", "broker-b", "--namesrv", ns.address
            )
            for key in ("a0", "b0"):
                with MQAdmin(nodes[key].address) as admin:
                    admin.create_topic("T", 2)

            def registered() -> bool:
                route = ns.tables.route("T")
                return route is not None and [len(b.broker_addrs) for b in route.broker_datas] == [
                    2,
                    1,
                ]

            _wait(registered)
            acked: list[bytes] = []
            with Producer("pg", namesrv_addr=ns.address) as p:
                for i in range(200):
                    p.send(Message(topic="T", body=b"one-%03d" % i))
                    acked.append(b"one-%03d" % i)

            def on_slave() -> bool:
                a0, a1 = nodes["a0"].address, nodes["a1"].address
                return all(_max(a1, "T", q) == _max(a0, "T", q) for q in (0, 1))

            _wait(on_slave)
            a_address = nodes["a0"].address
            nodes.pop("a0").kill()
            got: list[bytes] = []
            lock = threading.Lock()

            def listener(msgs, ctx):  # type: ignore[no-untyped-def]
                with lock:
                    got.extend(bytes(m.body) for m in msgs)
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            consumer = PushConsumer(
                "cg",
                namesrv_addr=ns.address,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
            )
            consumer.subscribe("T", "*")
            consumer.register_message_listener(listener)
            consumer.start()
            # broker-a's share comes from its slave.
            _wait(lambda: set(acked) <= set(got), 90)
            with Producer("pg2", namesrv_addr=ns.address) as p:
                for i in range(100):
                    r = p.send(Message(topic="T", body=b"two-%03d" % i))
                    assert r.message_queue.broker_name == "broker-b"
                    acked.append(b"two-%03d" % i)
            _wait(lambda: set(acked) <= set(got), 90)
            nodes["a0"] = Serve(
                tmp_path / "a0", *master_args, "--ha-listen", ha.rsplit(":", 1)[1], listen=a_address
            )
            _wait(registered)
            # Its data survived, and its slave holds the same.
            assert _max(nodes["a0"].address, "T", 0) + _max(nodes["a0"].address, "T", 1) > 0
            _wait(on_slave)
        finally:
            if consumer is not None:
                consumer.shutdown()
            for node in nodes.values():
                node.stop()
