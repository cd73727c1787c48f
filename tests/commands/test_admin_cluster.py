"""Every admin command starts from a name server: ``mqcore namesrv`` with two broker groups
behind it, and a single ``mqcore serve`` (its own name server), walked the same way."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
)
from mqcore.cli import main
from mqcore.server import NamesrvServer, Server
from mqcore.server.namesrv import RegisterBrokerRequestHeader

pytestmark = pytest.mark.timeout(240)

FAST = {"register_name_server_period_ms": 300}
Cluster = Any  # the `cluster` fixture's (tests/commands/conftest.py)


def wait_for(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def run(cluster: Cluster, *args: str) -> Result:
    return CliRunner().invoke(main, [*args, "--server", cluster.address])


def ok_json(cluster: Cluster, *args: str) -> Any:
    result = run(cluster, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def consume(
    cluster: Cluster, group: str, fail: bool = False, **options: Any
) -> tuple[PushConsumer, list[bytes]]:
    got: list[bytes] = []

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        if fail:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        got.extend(bytes(m.body) for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    c = PushConsumer(
        group,
        namesrv_addr=cluster.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        persist_consumer_offset_interval=0.2,
        **options,
    )
    c.subscribe("T", "*")
    c.register_message_listener(listener)
    c.start()
    return c, got


def test_every_admin_command(cluster: Cluster) -> None:
    names = sorted(cluster.brokers)
    n = len(names)

    # topic create / list: every broker group gets the queues.
    created = ok_json(cluster, "topic", "create", "T", "--queues", "2")
    assert created["brokers"] == names and created["write_queue_nums"] == 2 * n
    assert run(cluster, "topic", "create", "T", "--queues", "2").stdout.endswith(
        f"on {', '.join(names)}\n"
    )
    cluster.wait_routed("T")
    listed = {t["topic"]: t for t in ok_json(cluster, "topic", "list")}
    assert listed["T"]["brokers"] == names and listed["T"]["read_queue_nums"] == 2 * n

    with Producer("pg", namesrv_addr=cluster.address) as p:
        sent = [p.send(Message(topic="T", body=b"m%d" % i, keys=f"k{i}")) for i in range(8)]
        due = int(time.time() * 1000) + 600_000
        timer = p.send(Message(topic="T", body=b"later", deliver_time_ms=due))
    assert {s.message_queue.broker_name for s in sent} == set(names)

    # topic stats: every group's queues.
    stats = ok_json(cluster, "topic", "stats", "T")
    assert sorted({r["broker_name"] for r in stats}) == names
    assert sum(r["messages"] for r in stats) == 8
    for r in stats:
        mine = [s for s in sent if (s.message_queue.broker_name, s.message_queue.queue_id)
                == (r["broker_name"], r["queue_id"])]  # fmt: skip
        assert r["max_offset"] == len(mine)

    # message by key, unique id and offset id, found on whichever group stored it.
    last = sent[-1]
    assert [m["body"] for m in ok_json(cluster, "message", "--key", "k7", "--topic", "T")] == ["m7"]
    by_id = ok_json(cluster, "message", "--id", last.msg_id)
    assert [(m["topic"], m["body"]) for m in by_id] == [("T", "m7")]
    assert ok_json(cluster, "message", "--id", by_id[0]["offset_msg_id"]) == by_id

    # timer stats over the network: the held message, on the group that holds it.
    timers = ok_json(cluster, "timer", "stats")
    assert sorted(timers["brokers"]) == names
    assert timers["pending"] == 1
    assert timers["brokers"][timer.message_queue.broker_name]["pending"] == 1

    # group list / lag with owners from every group.
    c, got = consume(cluster, "cg", instance_name="c1")
    try:
        wait_for(lambda: len(got) == 8)
        wait_for(lambda: ok_json(cluster, "lag", "--group", "cg", "--topic", "T")["total_lag"] == 0)
        lag = ok_json(cluster, "lag", "--group", "cg", "--topic", "T")
        assert sorted({r["broker_name"] for r in lag["queues"]}) == names
        assert len(lag["queues"]) == 2 * n
        wait_for(
            lambda: (
                {
                    r["owner"]
                    for r in ok_json(cluster, "lag", "--group", "cg", "--topic", "T")["queues"]
                }
                == {c.client_id}
            )
        )
        groups = {g["group"]: g for g in ok_json(cluster, "group", "list")}
        assert groups["cg"]["clients"] == [c.client_id]
        assert groups["cg"]["subscriptions"] == ["%RETRY%cg", "T"]
    finally:
        c.shutdown()

    # offset reset on every group of the topic.
    reset = ok_json(cluster, "offset", "reset", "--group", "cg", "--topic", "T", "--timestamp", "0")
    assert sorted({r["broker_name"] for r in reset["queues"]}) == names
    assert {r["offset"] for r in reset["queues"]} == {0}
    assert ok_json(cluster, "lag", "--group", "cg", "--topic", "T")["total_lag"] == 8

    # dlq list / resend: the dead letters of every group.
    d, _ = consume(cluster, "dg", fail=True, max_reconsume_times=0)
    try:
        wait_for(lambda: len(ok_json(cluster, "dlq", "list", "--group", "dg")) == 8)
    finally:
        d.shutdown()
    resent = ok_json(cluster, "dlq", "resend", "--group", "dg")
    assert resent["resent"] == 8 and resent["by_topic"] == {"T": 8}
    assert ok_json(cluster, "dlq", "list", "--group", "dg") == []
    fixed, again = consume(cluster, "dg")
    try:
        wait_for(lambda: len(again) >= 8)  # more than 8 is a redelivery: the assert says so
    finally:
        fixed.shutdown()
    assert sorted(again) == sorted(b"m%d" % i for i in range(8))

    # cluster status: every group's member.
    status = ok_json(cluster, "cluster", "status")
    assert sorted(r["broker_name"] for r in status) == names
    assert {r["role"] for r in status} == {"ASYNC_MASTER"}

    # topic delete: from every group.
    assert ok_json(cluster, "topic", "delete", "T") == {"topic": "T", "deleted": True}
    assert "T" not in {t["topic"] for t in ok_json(cluster, "topic", "list")}


def test_a_name_server_without_brokers_is_one_line() -> None:
    with NamesrvServer("127.0.0.1:0") as ns:
        for args in (["topic", "list"], ["group", "list"], ["timer", "stats"]):
            result = CliRunner().invoke(main, [*args, "--server", ns.address])
            assert result.exit_code == 1, result.output
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1 and "Traceback" not in result.stderr
            assert f"the name server at {ns.address} knows no broker yet" in lines[0]


def test_a_broker_group_down_is_left_out(tmp_path: Path) -> None:
    """A group the name server still lists but whose broker is gone: the commands answer
    from the others and say on stderr which one did not answer."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with NamesrvServer("127.0.0.1:0") as ns:
        settings = {**FAST, "namesrv_addr": ns.address, "broker_name": "broker-a"}
        with Server(tmp_path / "a", "127.0.0.1:0", settings=settings) as a:
            a.broker.create_topic("A", queue_nums=1)
            header = RegisterBrokerRequestHeader(
                broker_name="broker-z", broker_addr=dead, cluster_name="C", broker_id=0
            )
            ns.tables.register(header, {})
            result = CliRunner().invoke(main, ["topic", "list", "--json", "--server", ns.address])
    assert result.exit_code == 0, result.output
    assert [t["brokers"] for t in json.loads(result.stdout) if t["topic"] == "A"] == [["broker-a"]]
    assert "admin_broker_unreachable" in result.stderr and dead in result.stderr


def test_a_slave_server_is_asked_itself(tmp_path: Path) -> None:
    """--server naming a slave's own address: its own topics, not its master's; a write is
    refused in one line that says to ask the master."""
    slow_sync = {"slave_synchronize_interval_ms": 600_000}
    with Server(tmp_path / "m", "127.0.0.1:0") as master:
        slave_settings = {
            **slow_sync,
            "broker_role": "SLAVE",
            "broker_id": 1,
            "ha_master_address": master.ha_address,
        }
        with Server(tmp_path / "s", "127.0.0.1:0", settings=slave_settings) as slave:
            wait_for(lambda: len(master.broker.cluster_info()["brokerAddrTable"]["broker-a"]
                                 ["brokerAddrs"]) == 2)  # fmt: skip
            master.broker.create_topic("OnlyOnMaster", queue_nums=1)

            def names(server: Server) -> list[str]:
                result = CliRunner().invoke(
                    main, ["topic", "list", "--json", "--server", server.address]
                )
                assert result.exit_code == 0, result.output
                return [t["topic"] for t in json.loads(result.stdout)]

            assert "OnlyOnMaster" in names(master)
            assert "OnlyOnMaster" not in names(slave)  # not synchronised yet
            refused = CliRunner().invoke(main, ["topic", "create", "X", "--server", slave.address])
            assert refused.exit_code == 1
            assert f"the server at {slave.address} is a slave" in refused.stderr
