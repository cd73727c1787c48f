"""docs/ha.md's layouts, run as written: every ``$ mqcore ...`` line of each layout's console
block, read from the document itself, with each port shifted by one free offset (so the
layouts run beside anything else on the machine, and a master's default replication port is
still its port + 1) and the data directories in a fresh directory.

With the master killed (SIGKILL), a consumer that starts then reads the group's messages from
the slave, and so does a new consumer after the slave is restarted too; a producer sending in
a loop meanwhile gets mqcore's own errors and recovers by itself once the master is back.
"""

from __future__ import annotations

import json
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import attrs
import pytest
from click.testing import CliRunner

from mqcore import (
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PushConsumer,
    SendResult,
)
from mqcore.cli import main
from mqcore.client import transport_remote
from mqcore.client.admin import MQAdmin
from mqcore.commands.cluster import cluster_status
from mqcore.errors import MQError, NoRouteInfoError
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand

pytestmark = pytest.mark.timeout(300)

DOC = Path(__file__).resolve().parents[2] / "docs" / "ha.md"
_ADDRESS = re.compile(r"127\.0\.0\.1:(\d+)")
_CLIENT = re.compile(r'namesrv_addr="([^"]+)"')


@attrs.frozen
class Layout:
    """One layout of docs/ha.md: its section, its commands and the clients' address."""

    section: str
    commands: tuple[tuple[str, ...], ...]
    client: str

    def ports(self) -> set[int]:
        text = " ".join(" ".join(c) for c in self.commands) + " " + self.client
        return {int(p) for p in _ADDRESS.findall(text)}


def _commands(block: str) -> list[tuple[str, ...]]:
    """The ``$ `` lines of a console block, continuation lines joined, split as a shell would."""
    out: list[tuple[str, ...]] = []
    line = ""
    for raw in block.splitlines():
        if not line and not raw.startswith("$ "):
            continue  # output shown in the block
        line += raw[2:] if not line else " " + raw.strip()
        if line.endswith("\\"):
            line = line[:-1].rstrip()
            continue
        out.append(tuple(shlex.split(line)))
        line = ""
    return out


def documented_layouts() -> list[Layout]:
    """Each section of docs/ha.md whose console block starts brokers."""
    layouts = []
    for section in DOC.read_text(encoding="utf-8").split("\n## ")[1:]:
        title = section.splitlines()[0].strip()
        blocks = re.findall(r"```console\n(.*?)```", section, flags=re.S)
        commands = [c for b in blocks for c in _commands(b)]
        if not any(c[:2] == ("mqcore", "serve") for c in commands):
            continue
        client = _CLIENT.search(section)
        assert client is not None, f"docs/ha.md, {title!r}: say which address clients use"
        layouts.append(Layout(title, tuple(commands), client.group(1)))
    return layouts


LAYOUTS = documented_layouts()


def test_the_document_has_the_layouts_this_file_runs() -> None:
    """A layout renamed or dropped from docs/ha.md is noticed here, not silently untested."""
    assert [layout.section for layout in LAYOUTS] == [
        "Running a master and a slave",
        "Several broker groups behind a name server",
    ]
    one, several = LAYOUTS
    assert sum(c[:2] == ("mqcore", "serve") for c in one.commands) == 2
    assert [c[1] for c in several.commands][:4] == ["namesrv", "serve", "serve", "serve"]


def _free(port: int) -> bool:
    try:
        with socket.create_server(("127.0.0.1", port)):
            return True
    except OSError:
        return False


def _shift(ports: set[int]) -> int:
    """An offset that makes every port (and each port + 1: a master's replication port) free."""
    wanted = ports | {p + 1 for p in ports}
    for _ in range(200):
        delta = random.randrange(1000, 20000)
        if all(_free(p + delta) for p in wanted):
            return delta
    raise AssertionError("no free range of ports for the layout")


class Running:
    """A layout's processes, started from its commands in ``cwd``."""

    def __init__(self, layout: Layout, cwd: Path) -> None:
        self.layout = layout
        self.cwd = cwd
        self.delta = _shift(layout.ports())
        self.procs: dict[tuple[str, ...], subprocess.Popen[str]] = {}
        self.logs: dict[tuple[str, ...], Path] = {}

    def address(self, text: str) -> str:
        """``text`` with each documented port shifted."""
        return _ADDRESS.sub(lambda m: f"127.0.0.1:{int(m.group(1)) + self.delta}", text)

    @property
    def client(self) -> str:
        return self.address(self.layout.client)

    def argv(self, command: tuple[str, ...]) -> list[str]:
        assert command[0] == "mqcore", command
        args = [self.address(a) for a in command[1:]]
        return [sys.executable, "-c", "from mqcore.cli import main; main()", *args]

    def start_all(self) -> None:
        for command in self.layout.commands:
            if command[1] in ("serve", "namesrv"):
                self.start(command)
            else:
                self.run(command)

    def start(self, command: tuple[str, ...]) -> None:
        log = self.cwd / f"{len(self.logs)}.log"
        self.logs[command] = log
        with log.open("ab") as err:
            proc = subprocess.Popen(
                self.argv(command), cwd=self.cwd, stdout=subprocess.PIPE, stderr=err, text=True
            )
        self.procs[command] = proc
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "listening on" in line, f"{shlex.join(command)} did not start: {line!r}"

    def run(self, command: tuple[str, ...]) -> None:
        # The name server may not have the brokers' registrations yet: retry a little.
        deadline = time.monotonic() + 30
        while True:
            done = subprocess.run(self.argv(command), cwd=self.cwd, capture_output=True, text=True)
            if done.returncode == 0:
                return
            assert time.monotonic() < deadline, f"{shlex.join(command)}: {done.stderr}"
            time.sleep(0.2)

    def serve(self, role: str) -> tuple[str, ...]:
        """The master whose replication port a slave names, or that slave."""
        slave = next(c for c in self.layout.commands if "SLAVE" in c)
        if role == "slave":
            return slave
        ha_port = int(slave[slave.index("--master-ha") + 1].rsplit(":", 1)[1])
        return next(c for c in self.layout.commands if f"127.0.0.1:{ha_port - 1}" in c)

    def listen(self, command: tuple[str, ...]) -> str:
        return self.address(command[command.index("--listen") + 1])

    def kill(self, command: tuple[str, ...], sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(command)
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()

    def stop(self) -> None:
        for command in reversed(list(self.procs)):
            self.kill(command, signal.SIGTERM)


@pytest.fixture
def running(tmp_path):
    """Yields a starter: ``start(layout)`` runs its commands; everything stops afterwards."""
    started: list[Running] = []

    def start(layout: Layout) -> Running:
        r = Running(layout, tmp_path)
        started.append(r)
        r.start_all()
        return r

    yield start
    for r in started:
        r.stop()


def wait_until(check, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {check}"
        time.sleep(0.1)


def _max_offsets(addr: str, topic: str, queues: int) -> list[int]:
    client = RemotingClient()
    try:
        out = []
        for q in range(queues):
            h = headers.GetMaxOffsetRequestHeader(topic=topic, queue_id=q)
            resp = client.invoke(addr, RemotingCommand.request(RequestCode.GET_MAX_OFFSET, h), 10)
            if resp.code != ResponseCode.SUCCESS:
                return []
            out.append(int(resp.read_header(headers.GetMaxOffsetResponseHeader).offset))
        return out
    finally:
        client.close()


def _slave_has_everything(master: str, slave: str, topic: str) -> bool:
    """The slave holds the topic's config (synchronised) and every message of the master."""
    with MQAdmin(slave) as admin:
        if topic not in [t.topic for t in admin.topics()]:
            return False
    want = _max_offsets(master, topic, 4)
    return bool(want) and sum(want) > 0 and _max_offsets(slave, topic, 4) == want


def _send_until_accepted(client: str, bodies: list[bytes]) -> list[SendResult]:
    """Send each body (the name server may not route the topic yet: the first sends wait)."""
    with Producer("pg", namesrv_addr=client) as producer:
        wait_until(lambda: _try_send(producer), 30)
        return [producer.send(Message(topic="Orders", body=b)) for b in bodies]


def _try_send(producer: Producer) -> bool:
    try:
        producer.send(Message(topic="Orders", body=b"probe"))
    except NoRouteInfoError:
        return False
    return True


def _consume(client: str, group: str, want: set[bytes]) -> None:
    """A consumer of ``group`` started now gets every body of ``want``."""
    got: set[bytes] = set()
    lock = threading.Lock()

    def listener(msgs, ctx):  # type: ignore[no-untyped-def]
        with lock:
            got.update(bytes(m.body) for m in msgs)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group, namesrv_addr=client, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    consumer.subscribe("Orders", "*")
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        wait_until(lambda: want <= got, 90)
    finally:
        consumer.shutdown()


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.section)
def test_a_consumer_started_while_the_master_is_down_reads_from_the_slave(running, layout):
    """Messages acknowledged before the master's SIGKILL reach a consumer that starts after
    it, from the slave; after the slave's restart (the master still down) a new group's
    consumer gets them too (the slave registers its topics, or answers routes itself)."""
    r = running(layout)
    master, slave = r.serve("master"), r.serve("slave")
    bodies = [b"order-%03d" % i for i in range(60)]
    results = _send_until_accepted(r.client, bodies)
    assert len(results) == len(bodies)
    wait_until(lambda: _slave_has_everything(r.listen(master), r.listen(slave), "Orders"), 60)
    r.kill(master)
    _consume(r.client, "cg-during-outage", set(bodies))
    r.kill(slave, signal.SIGTERM)
    r.start(slave)
    _consume(r.client, "cg-after-slave-restart", set(bodies))


def test_one_group_master_killed_while_a_producer_sends(running):
    """docs/ha.md's one-group layout: the master is SIGKILLed while a producer sends in a
    loop. Every failed send raises mqcore's error (NoRouteInfoError once the route names no
    master), never a built-in one; once the master is started again, sends succeed by
    themselves within one route refresh."""
    layout = LAYOUTS[0]
    r = running(layout)
    master = r.serve("master")
    with Producer("pg", namesrv_addr=r.client) as producer:
        wait_until(lambda: _try_send(producer), 30)
        outcomes: list[tuple[float, object]] = []  # (when the send began, result or error)
        stop = threading.Event()

        def produce() -> None:
            i = 0
            while not stop.is_set():
                began = time.monotonic()
                try:
                    outcome: object = producer.send(Message(topic="Orders", body=b"m%d" % i))
                except BaseException as exc:  # every kind is recorded and checked below
                    outcome = exc
                outcomes.append((began, outcome))
                i += 1
                time.sleep(0.01)

        sender = threading.Thread(target=produce, name="test-producer")
        sender.start()
        try:
            wait_until(lambda: sum(isinstance(o, SendResult) for _, o in outcomes) >= 50)
            r.kill(master)
            killed = time.monotonic()
            wait_until(
                lambda: (
                    sum(isinstance(o, NoRouteInfoError) for t, o in outcomes if t > killed) >= 20
                )
            )
            r.start(master)
            back = time.monotonic()
            wait_until(
                lambda: any(isinstance(o, SendResult) for t, o in outcomes if t > back),
                transport_remote.ROUTE_TTL_S,
            )
        finally:
            stop.set()
            sender.join(timeout=30)
    errors = [o for _, o in outcomes if isinstance(o, BaseException)]
    assert errors, "the outage failed no send"
    assert all(isinstance(e, MQError) for e in errors), {type(e) for e in errors}
    failed_during = [o for t, o in outcomes if killed < t < back and not isinstance(o, SendResult)]
    assert all(isinstance(e, MQError) for e in failed_during)
    assert "No route info of this topic" in str(
        next(e for e in errors if isinstance(e, NoRouteInfoError))
    )
    # After the first success past the return, every send succeeds.
    first_ok = min(t for t, o in outcomes if t > back and isinstance(o, SendResult))
    assert all(isinstance(o, SendResult) for t, o in outcomes if t > first_ok + 1.0)


def test_cluster_status_shows_the_master_gone_and_the_slave_disconnected(running):
    """One-group layout, master killed: `cluster status` asked of the slave shows a group
    without a master and the slave's replication down; the slave logged the loss."""
    layout = LAYOUTS[0]
    r = running(layout)
    master, slave = r.serve("master"), r.serve("slave")
    address = r.listen(slave)

    def connected() -> bool:
        rows = cluster_status(address)
        return [(x["broker_id"], x["ha_connected"], x["replication_lag_bytes"]) for x in rows] == [
            (0, None, None),
            (1, True, 0),
        ]

    wait_until(connected)
    rows = cluster_status(address)
    assert rows[0]["role"] == "SYNC_MASTER" and rows[0]["ha_slaves_connected"] == 1
    r.kill(master)

    def gone() -> bool:
        return cluster_status(address)[0]["address"] is None

    wait_until(gone)
    rows = cluster_status(address)
    assert [(x["broker_id"], x["role"], x["ha_connected"]) for x in rows] == [
        (0, None, None),
        (1, "SLAVE", False),
    ]
    assert "no master" in rows[0]["error"] and rows[1]["ha_error"]
    as_json = CliRunner().invoke(main, ["cluster", "status", "--server", address, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert [(x["broker_id"], x["ha_connected"]) for x in json.loads(as_json.output)] == [
        (0, None),
        (1, False),
    ]
    table = CliRunner().invoke(main, ["cluster", "status", "--server", address])
    assert table.exit_code == 0, table.output
    assert "no master" in table.output and "disconnected" in table.output
    log = r.logs[slave].read_text()
    assert log.count("ha_master_connection_lost") == 1, log
