"""The admin CLI against an in-process ``mqcore serve``: every command through click, --json
and tables, one-line errors; owners from the members' running info on both transports."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
)
from mqcore.cli import main
from mqcore.commands.admin import parse_timestamp
from mqcore.server import Server

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path / "data", "127.0.0.1:0") as srv:
        yield srv


def run(server: Server | str, *args: str) -> Result:
    address = server if isinstance(server, str) else server.address
    return CliRunner().invoke(main, [*args, "--server", address])


def ok_json(server: Server, *args: str) -> Any:
    result = run(server, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def one_line_error(result: Result) -> str:
    """The error a failed command printed: exit code 1, one line on stderr, no traceback."""
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def wait_for(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def send(server: Server, topic: str, n: int, **fields: Any) -> list[Any]:
    with Producer("pg", namesrv_addr=server.address) as p:
        return [
            p.send(Message(topic=topic, body=b"m%d" % i, keys=f"k{i}", **fields)) for i in range(n)
        ]


class Recorder:
    """A listener recording bodies; fails (RECONSUME_LATER) while ``fail`` is set."""

    def __init__(self, fail: bool = False) -> None:
        self.bodies: list[bytes] = []
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        if self.fail:
            return ConsumeConcurrentlyStatus.RECONSUME_LATER
        with self.lock:
            self.bodies.extend(m.body for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS


def consumer(group: str, broker: Any, listener: Recorder, **options: Any) -> PushConsumer:
    target = {"broker": broker} if not isinstance(broker, str) else {"namesrv_addr": broker}
    c = PushConsumer(
        group,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        persist_consumer_offset_interval=0.2,
        consume_thread_min=2,
        consume_thread_max=2,
        **target,
        **options,
    )
    c.subscribe("T", "*")
    c.register_message_listener(listener)
    return c


# -- topics -----------------------------------------------------------------------------------


def test_topic_create_list_stats_delete(server: Server) -> None:
    created = ok_json(server, "topic", "create", "T", "--queues", "4")
    assert created == {"topic": "T", "read_queue_nums": 4, "write_queue_nums": 4, "perm": 6,
                       "order": False, "brokers": ["broker-a"]}  # fmt: skip
    listed = {t["topic"]: t for t in ok_json(server, "topic", "list")}
    assert listed["T"]["write_queue_nums"] == 4
    sent = send(server, "T", 7)
    stats = ok_json(server, "topic", "stats", "T")
    assert [r["queue_id"] for r in stats] == [0, 1, 2, 3]
    assert sum(r["messages"] for r in stats) == 7
    for r in stats:
        mine = [s for s in sent if s.message_queue.queue_id == r["queue_id"]]
        assert r["max_offset"] == len(mine)
        assert (r["last_update_timestamp"] > 0) == bool(mine)
    table = run(server, "topic", "stats", "T")
    assert table.exit_code == 0
    assert "total" in table.stdout and " 7 " in table.stdout
    assert "│ T " in run(server, "topic", "list").stdout

    assert ok_json(server, "topic", "delete", "T") == {"topic": "T", "deleted": True}
    assert "T" not in {t["topic"] for t in ok_json(server, "topic", "list")}
    assert "topic 'T' does not exist" in one_line_error(run(server, "topic", "delete", "T"))
    assert "topic 'T' does not exist" in one_line_error(run(server, "topic", "stats", "T"))


def test_topic_create_refuses_fewer_queues_without_force(server: Server) -> None:
    """Shrinking an existing topic hides messages: refused, naming what the topic has and
    what would be hidden, unless --force; an update says what was there before."""
    ok_json(server, "topic", "create", "T", "--queues", "4")
    sent = send(server, "T", 8)
    behind = sum(1 for s in sent if s.message_queue.queue_id >= 2)
    line = one_line_error(run(server, "topic", "create", "T", "--queues", "2"))
    assert "topic T exists with 4 read / 4 write queues" in line
    assert f"queues 2..3, which hold {behind} message(s)" in line and "--force" in line
    assert "write is fewer" in one_line_error(
        run(server, "topic", "create", "T", "--read-queues", "4", "--write-queues", "3")
    )
    listed = {t["topic"]: t for t in ok_json(server, "topic", "list")}
    assert (listed["T"]["read_queue_nums"], listed["T"]["write_queue_nums"]) == (4, 4)
    grown = ok_json(server, "topic", "create", "T", "--queues", "6")
    assert grown["read_queue_nums"] == 6
    assert grown["before"] == {"read_queue_nums": 4, "write_queue_nums": 4, "perm": 6,
                               "order": False}  # fmt: skip
    with capture_logs() as logs:
        shrunk = run(server, "topic", "create", "T", "--queues", "2", "--force")
    assert shrunk.exit_code == 0, shrunk.output
    assert "topic T: 2 read / 2 write queues (was 6 read / 6 write)" in shrunk.stdout
    [warned] = [e for e in logs if e["event"] == "topic_read_queues_shrunk"]
    assert (warned["log_level"], warned["read_queue_nums"], warned["previous"]) == ("warning", 2, 6)


def test_unreachable_server_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    for args in (["topic", "list"], ["lag", "--group", "g"], ["dlq", "list", "--group", "g"]):
        line = one_line_error(run(address, *args))
        assert f"cannot reach the mqcore server at {address}" in line
    monkeypatch.setenv("MQCORE_SERVER", address)
    line = one_line_error(CliRunner().invoke(main, ["group", "list", "--json"]))
    assert address in line
    assert "HOST:PORT" in one_line_error(run("nowhere", "topic", "list"))


def test_unreachable_server_from_a_shell(tmp_path: Path) -> None:
    """The installed command, as a shell runs it: exit code 1, one line on stderr."""
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    script = Path(sys.executable).with_name("mqcore")
    if not script.exists():
        pytest.skip("the mqcore console script is not installed beside this Python")
    done = subprocess.run(
        [str(script), "lag", "--group", "g", "--json"],
        env={"MQCORE_SERVER": address, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"cannot reach the mqcore server at {address}" in done.stderr


# -- groups, lag and owners ---------------------------------------------------------------------


def test_unknown_group_is_one_line(server: Server) -> None:
    server.broker.create_topic("T", queue_nums=2)
    for args in (["lag", "--group", "nope"], ["dlq", "list", "--group", "nope"]):
        assert "'nope' is unknown" in one_line_error(run(server, *args))
    server.broker.offsets.commit_offset("", "known", "T", 0, 0)  # a group the broker knows
    assert "topic 'U' does not exist" in one_line_error(
        run(server, "lag", "--group", "known", "--topic", "U")
    )
    assert "topic 'U' does not exist" in one_line_error(
        run(server, "offset", "reset", "--group", "g", "--topic", "U", "--timestamp", "now")
    )
    assert "'nope' is unknown" in one_line_error(
        run(server, "offset", "reset", "--group", "nope", "--topic", "T", "--timestamp", "now")
    )
    assert (
        "is not a time"
        in run(
            server, "offset", "reset", "--group", "g", "--topic", "T", "--timestamp", "soon"
        ).stderr
    )


def test_lag_names_the_owner_of_every_queue(server: Server) -> None:
    """Two remote members share the queues; each queue's owner is the member that holds it."""
    server.broker.create_topic("T", queue_nums=4)
    send(server, "T", 20)
    listener = Recorder()
    a = consumer("cg", server.address, listener, instance_name="a")
    b = consumer("cg", server.address, listener, instance_name="b")
    a.start()
    b.start()
    try:
        wait_for(lambda: len(a.assigned_queues("T")) == 2 and len(b.assigned_queues("T")) == 2)
        wait_for(lambda: len(set(listener.bodies)) == 20)
        wait_for(lambda: ok_json(server, "lag", "--group", "cg", "--topic", "T")["total_lag"] == 0)
        lag = ok_json(server, "lag", "--group", "cg", "--topic", "T")
        owners = {r["queue_id"]: r["owner"] for r in lag["queues"]}
        assert {q for q, o in owners.items() if o == a.client_id} == {
            mq.queue_id for mq in a.assigned_queues("T")
        }
        assert {q for q, o in owners.items() if o == b.client_id} == {
            mq.queue_id for mq in b.assigned_queues("T")
        }
        for r in lag["queues"]:
            assert r["broker_offset"] == r["consumer_offset"] == 5
            assert r["lag"] == 0 and r["last_timestamp"] > 0
        table = run(server, "lag", "--group", "cg").stdout
        assert a.client_id in table and b.client_id in table and "%RETRY%cg" in table

        groups = {g["group"]: g for g in ok_json(server, "group", "list")}
        assert sorted(groups["cg"]["clients"]) == sorted([a.client_id, b.client_id])
        assert groups["cg"]["subscriptions"] == ["%RETRY%cg", "T"]
        assert groups["cg"]["lag"] == 0
    finally:
        a.shutdown()
        b.shutdown()
    send(server, "T", 8)  # 2 per queue, nobody online to consume them
    lag = ok_json(server, "lag", "--group", "cg", "--topic", "T")
    assert lag["total_lag"] == 8
    assert {r["owner"] for r in lag["queues"]} == {None}
    assert {r["lag"] for r in lag["queues"]} == {2}
    assert {g["group"]: g["lag"] for g in ok_json(server, "group", "list")}["cg"] == 8


def test_owner_of_an_in_process_member(server: Server) -> None:
    """A consumer embedded beside the server answers through its in-process channel."""
    server.broker.create_topic("T", queue_nums=2)
    listener = Recorder()
    c = consumer("eg", server.broker, listener, instance_name="embedded")
    c.start()
    try:
        wait_for(lambda: len(c.assigned_queues("T")) == 2)
        lag = ok_json(server, "lag", "--group", "eg", "--topic", "T")
        assert {r["owner"] for r in lag["queues"]} == {c.client_id}
    finally:
        c.shutdown()


def test_broadcasting_members_all_own_every_queue(server: Server, tmp_path: Path) -> None:
    from mqcore import MessageModel

    server.broker.create_topic("T", queue_nums=2)
    members = [
        consumer(
            "bg",
            server.address,
            Recorder(),
            instance_name=name,
            message_model=MessageModel.BROADCASTING,
            offset_store_options={"store_dir": str(tmp_path / name)},
        )
        for name in ("x", "y")
    ]
    for c in members:
        c.start()
    try:
        wait_for(lambda: all(len(c.assigned_queues("T")) == 2 for c in members))
        lag = ok_json(server, "lag", "--group", "bg", "--topic", "T")
        expected = ", ".join(sorted(c.client_id for c in members))
        assert [r["owner"] for r in lag["queues"]] == [expected, expected]
    finally:
        for c in members:
            c.shutdown()


# -- messages -----------------------------------------------------------------------------------


def test_message_by_key_by_unique_id_and_by_offset_id(server: Server) -> None:
    server.broker.create_topic("T", queue_nums=2)
    sent = send(server, "T", 5, tags="TagA")
    by_key = ok_json(server, "message", "--key", "k3", "--topic", "T")
    assert [m["body"] for m in by_key] == ["m3"]
    assert by_key[0]["tags"] == "TagA" and by_key[0]["msg_id"] == sent[3].msg_id

    by_uniq = ok_json(server, "message", "--id", sent[1].msg_id)
    assert [(m["topic"], m["body"]) for m in by_uniq] == [("T", "m1")]
    offset_id = by_uniq[0]["offset_msg_id"]
    by_offset = ok_json(server, "message", "--id", offset_id)
    assert by_offset == by_uniq
    table = run(server, "message", "--id", sent[1].msg_id, "--topic", "T")
    assert table.exit_code == 0 and "m1" in table.stdout and "TagA" in table.stdout

    assert "no message with key 'nope'" in one_line_error(
        run(server, "message", "--key", "nope", "--topic", "T")
    )
    assert "no message with id 0123" in one_line_error(run(server, "message", "--id", "0123"))
    assert "topic 'U' does not exist" in one_line_error(
        run(server, "message", "--key", "k1", "--topic", "U")
    )
    usage = run(server, "message", "--key", "k1")
    assert usage.exit_code == 2 and "--key needs --topic" in usage.stderr


# -- dead letters -------------------------------------------------------------------------------


def test_dlq_list_and_resend(server: Server) -> None:
    """Failed messages land in %DLQ%dg; resend puts them back in T, where the group gets them
    again; a second resend sends nothing."""
    server.broker.create_topic("T", queue_nums=2)
    sent = send(server, "T", 4)
    failing = Recorder(fail=True)
    c = consumer("dg", server.address, failing, max_reconsume_times=0)
    c.start()
    try:
        wait_for(lambda: len(ok_json(server, "dlq", "list", "--group", "dg")) == 4)
    finally:
        c.shutdown()
    dead = ok_json(server, "dlq", "list", "--group", "dg")
    assert sorted(m["body"] for m in dead) == ["m0", "m1", "m2", "m3"]
    assert {m["original_topic"] for m in dead} == {"T"}
    assert sorted(m["msg_id"] for m in dead) == sorted(s.msg_id for s in sent)
    assert "m2" in run(server, "dlq", "list", "--group", "dg").stdout
    # Reading the DLQ leaves no trace of the reader's group.
    assert [g["group"] for g in ok_json(server, "group", "list")] == ["dg"]

    resent = ok_json(server, "dlq", "resend", "--group", "dg")
    assert resent == {"group": "dg", "resent": 4, "by_topic": {"T": 4}, "skipped": 0}
    assert ok_json(server, "dlq", "list", "--group", "dg") == []
    assert len(ok_json(server, "dlq", "list", "--group", "dg", "--all")) == 4
    again = run(server, "dlq", "resend", "--group", "dg")
    assert again.exit_code == 0 and "resent 0 dead letters of group dg" in again.stdout

    fixed = Recorder()
    c = consumer("dg", server.address, fixed)
    c.start()
    try:
        wait_for(lambda: len(fixed.bodies) == 4)
    finally:
        c.shutdown()
    assert sorted(fixed.bodies) == [b"m0", b"m1", b"m2", b"m3"]
    copies = ok_json(server, "message", "--id", sent[0].msg_id)
    # The original, its dead letter, and the copy resent through the group's retry topic.
    assert sorted(m["topic"] for m in copies) == ["%DLQ%dg", "%RETRY%dg", "T"]


def test_dlq_resend_reaches_the_group_alone(server: Server) -> None:
    """Two groups consume T; dg dead-letters what hg consumed. The resend goes through
    %RETRY%dg: dg gets the messages again (under topic T), hg gets nothing, T is unchanged."""
    server.broker.create_topic("T", queue_nums=2)
    send(server, "T", 3)
    healthy = Recorder()
    h = consumer("hg", server.address, healthy)
    h.start()
    try:
        _dead_letter_and_resend(server, healthy)
    finally:
        h.shutdown()
    assert sorted(healthy.bodies) == [b"m0", b"m1", b"m2"]  # hg never got them again
    assert ok_json(server, "lag", "--group", "hg", "--topic", "T")["total_lag"] == 0


def _dead_letter_and_resend(server: Server, healthy: Recorder) -> None:
    failing = Recorder(fail=True)
    d = consumer("dg", server.address, failing, max_reconsume_times=0)
    d.start()
    try:
        wait_for(lambda: len(ok_json(server, "dlq", "list", "--group", "dg")) == 3)
        wait_for(lambda: sorted(healthy.bodies) == [b"m0", b"m1", b"m2"])
    finally:
        d.shutdown()
    stored = sum(r["messages"] for r in ok_json(server, "topic", "stats", "T"))

    resent = ok_json(server, "dlq", "resend", "--group", "dg")
    assert resent == {"group": "dg", "resent": 3, "by_topic": {"T": 3}, "skipped": 0}
    assert sum(r["messages"] for r in ok_json(server, "topic", "stats", "T")) == stored
    again = run(server, "dlq", "resend", "--group", "dg")
    assert again.stdout.startswith("resent 0 dead letters of group dg")

    seen: list[tuple[str, bytes, int]] = []

    def record(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        seen.extend((m.topic, m.body, m.reconsume_times) for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    fixed = PushConsumer(
        "dg",
        namesrv_addr=server.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
    )
    fixed.subscribe("T", "*")
    fixed.register_message_listener(record)
    fixed.start()
    try:
        wait_for(lambda: len(seen) == 3)
        # Each shows under its original topic, with its retries counted afresh.
        assert sorted(seen) == [("T", b"m0", 0), ("T", b"m1", 0), ("T", b"m2", 0)]
        wait_for(lambda: ok_json(server, "lag", "--group", "dg")["total_lag"] == 0)
    finally:
        fixed.shutdown()


# -- time arguments -------------------------------------------------------------------------------


def test_parse_timestamp_forms() -> None:
    now = 1_700_000_000_000
    assert parse_timestamp("now", now) == now
    assert parse_timestamp("-10m", now) == now - 600_000
    assert parse_timestamp("-2h", now) == now - 7_200_000
    assert parse_timestamp("1690000000123", now) == 1_690_000_000_123
    iso = parse_timestamp("2024-01-31T12:00:00+00:00")
    assert iso == 1_706_702_400_000
    assert parse_timestamp("2024-01-31#12:00:00:250") == parse_timestamp("2024-01-31T12:00:00.250")
    with pytest.raises(Exception, match="is not a time"):
        parse_timestamp("yesterday")


# -- offset reset -------------------------------------------------------------------------------


def test_offset_reset_moves_a_running_consumer(server: Server) -> None:
    """A running remote consumer drops its place and consumes again from the reset time."""
    server.broker.create_topic("T", queue_nums=2)
    first = send(server, "T", 6)
    time.sleep(0.05)
    middle = int(time.time() * 1000)
    time.sleep(0.05)
    with Producer("pg", namesrv_addr=server.address) as p:
        for i in range(4):
            p.send(Message(topic="T", body=b"late%d" % i))
    listener = Recorder()
    c = consumer("rg", server.address, listener)
    c.start()
    try:
        wait_for(lambda: len(set(listener.bodies)) == 10)
        wait_for(lambda: ok_json(server, "lag", "--group", "rg", "--topic", "T")["total_lag"] == 0)
        before = len(listener.bodies)
        reset = ok_json(
            server, "offset", "reset", "--group", "rg", "--topic", "T", "--timestamp", str(middle)
        )
        # Each queue moves to its first late message: just past its early ones.
        assert {r["queue_id"]: r["offset"] for r in reset["queues"]} == {
            q: sum(1 for s in first if s.message_queue.queue_id == q) for q in (0, 1)
        }
        wait_for(lambda: len(listener.bodies) >= before + 4)
        time.sleep(0.5)  # nothing else comes back
        again = listener.bodies[before:]
        assert sorted(again) == [b"late0", b"late1", b"late2", b"late3"]
        # Back to the start: everything again.
        ok_json(server, "offset", "reset", "--group", "rg", "--topic", "T", "--timestamp", "0")
        wait_for(lambda: len(listener.bodies) >= before + 14)
        assert sorted(set(listener.bodies[before + 4 :])) == sorted(
            [b"m%d" % i for i in range(6)] + [b"late%d" % i for i in range(4)]
        )
    finally:
        c.shutdown()


def test_offset_reset_without_members_is_committed(server: Server) -> None:
    server.broker.create_topic("T", queue_nums=2)
    send(server, "T", 6)
    listener = Recorder()
    c = consumer("og", server.address, listener)
    c.start()
    try:
        wait_for(lambda: ok_json(server, "lag", "--group", "og", "--topic", "T")["total_lag"] == 0)
    finally:
        c.shutdown()
    table = run(server, "offset", "reset", "--group", "og", "--topic", "T", "--timestamp", "0")
    assert table.exit_code == 0 and "new offset" in table.stdout
    assert ok_json(server, "lag", "--group", "og", "--topic", "T")["total_lag"] == 6
    later = Recorder()
    c = consumer("og", server.address, later)
    c.start()
    try:
        wait_for(lambda: len(set(later.bodies)) == 6)
    finally:
        c.shutdown()


def test_undecided_transactions_are_no_topic_of_the_admin(server: Server) -> None:
    """Halves wait in system topics no listing shows: `topic list` and `topic stats` of the
    real topic count only what was committed."""
    from mqcore import LocalTransactionState, TransactionProducer

    class Undecided:
        def execute_local_transaction(self, msg: Message, arg: Any) -> LocalTransactionState:
            return arg  # type: ignore[no-any-return]

        def check_local_transaction(self, msg: Any) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

    ok_json(server, "topic", "create", "T", "--queues", "2")
    with TransactionProducer("txp", namesrv_addr=server.address, listener=Undecided()) as p:
        for state in [LocalTransactionState.UNKNOW] * 3 + [LocalTransactionState.COMMIT_MESSAGE]:
            p.send_message_in_transaction(Message(topic="T", body=b"tx"), state)
    wait_for(lambda: server.broker.transactions.pending_count() == 3)
    listed = {t["topic"] for t in ok_json(server, "topic", "list")}
    assert "T" in listed
    assert not {n for n in listed if n.startswith("RMQ_SYS_TRANS")}
    assert sum(r["messages"] for r in ok_json(server, "topic", "stats", "T")) == 1
    error = one_line_error(run(server, "topic", "stats", "RMQ_SYS_TRANS_HALF_TOPIC"))
    assert "does not exist" in error
