"""``mqcore serve`` is ready when it listens: a client that connects the instant the port
accepts succeeds at its first call, on a fresh start and after a crash with a large store to
recover; and remote clients wait out a server that answers "busy" at start-up."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from mqserve import ServeProcess, fill_and_kill, free_port, wait_until_accepting

from mqcore import Message, MessageQueue, Producer, SendStatus
from mqcore.client.transport_remote import RemoteTransport
from mqcore.errors import BrokerError
from mqcore.protocol.codes import ResponseCode
from mqcore.remoting.command import RemotingCommand
from mqcore.server import Server

STARTS = 20
BIG_STORE = (1 << 30) + (1 << 24)  # a little over 1 GiB of bodies


def _first_send(addr: str, topic: str) -> None:
    """A new producer's start and first send, at once (no retry of our own)."""
    with Producer("PID_ready", namesrv_addr=addr) as p:
        r = p.send(Message(topic=topic, body=b"first"))
    assert r.send_status is SendStatus.SEND_OK


def _started_and_sent(srv: ServeProcess, addr: str, topic: str) -> None:
    proc = srv.launch(addr)
    wait_until_accepting(addr, proc)
    _first_send(addr, topic)
    # The "listening on" line comes only once the port accepts: it was already written.
    assert proc.stdout is not None
    assert f"listening on {addr}" in proc.stdout.readline()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_first_send_as_soon_as_the_port_accepts(tmp_path: Path) -> None:
    """20 fresh starts, then a restart after SIGKILL with over 1 GiB to recover."""
    srv = ServeProcess(tmp_path / "data")
    addr = f"127.0.0.1:{free_port()}"
    try:
        for _ in range(STARTS):
            _started_and_sent(srv, addr, "Ready")
            assert srv.stop() == 0
        stored = fill_and_kill(tmp_path / "data", BIG_STORE, "Big")
        _started_and_sent(srv, addr, "Ready")
        # Recovered before the port opened: every stored message is counted at once.
        transport = RemoteTransport(addr)
        try:
            queues = [MessageQueue("Big", "broker-a", q) for q in range(4)]
            assert sum(transport.get_max_offset(mq) for mq in queues) == stored
        finally:
            transport.close()
    finally:
        if srv.proc is not None:
            srv.stop()
    sizes = sum(f.stat().st_size for f in (tmp_path / "data" / "store" / "commitlog").iterdir())
    assert sizes >= 1 << 30


class _StartingFor:
    """Wraps a server's processor: answers SYSTEM_BUSY ("starting") until released."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.busy = threading.Event()
        self.busy.set()
        self.refused: list[int] = []

    def process(self, cmd: RemotingCommand, connection: Any) -> Any:
        if self.busy.is_set():
            self.refused.append(cmd.code)
            return RemotingCommand.response(
                ResponseCode.SYSTEM_BUSY, "the broker is starting; try again"
            )
        return self.inner.process(cmd, connection)

    def connection_closed(self, connection: Any) -> None:
        self.inner.connection_closed(connection)


@pytest.mark.timeout(60)
def test_busy_answers_at_start_up_are_waited_out(tmp_path: Path) -> None:
    """Producer.start() and its first send retry a busy server within their timeout."""
    with Server(tmp_path, "127.0.0.1:0") as server:
        starting = _StartingFor(server.processor)
        server.remoting.processor = starting
        server.remoting.inline_codes = frozenset()
        timer = threading.Timer(0.4, starting.busy.clear)
        timer.start()
        try:
            begin = time.monotonic()
            _first_send(server.address, "Starting")
            assert time.monotonic() - begin >= 0.35
        finally:
            timer.cancel()
        assert starting.refused  # it was told to wait, and waited
        # A server that stays busy past the call's timeout is reported, not waited on forever.
        starting.busy.set()
        transport = RemoteTransport(server.address, timeout=0.5)
        try:
            begin = time.monotonic()
            with pytest.raises(BrokerError, match="starting") as info:
                transport.get_route_info_by_topic("Starting")
            assert info.value.code == ResponseCode.SYSTEM_BUSY
            assert 0.4 < time.monotonic() - begin < 2.0
        finally:
            transport.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("auto_create", [True, False])
def test_first_send_to_a_new_topic_through_a_name_server(tmp_path: Path, auto_create: bool) -> None:
    """Through a separate name server, which knows only registered topics: the producer takes
    the template topic TBW102's route and its send creates the topic (RocketMQ's way); with
    auto-creation off there is no template, and the send fails with "No route info"."""
    from structlog.testing import capture_logs

    from mqcore.errors import MQClientError
    from mqcore.protocol.codes import NOT_FOUND_TOPIC_EXCEPTION
    from mqcore.server import NamesrvServer

    settings = {"auto_create_topic_enable": auto_create}
    with (
        NamesrvServer("127.0.0.1:0") as ns,
        Server(tmp_path, "127.0.0.1:0", settings={**settings, "namesrv_addr": ns.address}) as srv,
        capture_logs() as logs,
    ):
        if not auto_create:
            with (
                Producer("PID_new", namesrv_addr=ns.address) as p,
                pytest.raises(MQClientError, match="No route info of this topic: Fresh") as info,
            ):
                p.send(Message(topic="Fresh", body=b"x"))
            assert info.value.code == NOT_FOUND_TOPIC_EXCEPTION
            assert srv.broker.topics.get("Fresh") is None
            return
        with Producer("PID_new", namesrv_addr=ns.address) as p:
            sent = [p.send(Message(topic="Fresh", body=b"%d" % i)) for i in range(8)]
        assert all(r.send_status is SendStatus.SEND_OK for r in sent)
        assert {r.message_queue.queue_id for r in sent} == {0, 1, 2, 3}
        cfg = srv.broker.topics.get("Fresh")
        assert cfg is not None and cfg.write_queue_nums == 4
        # The broker registers the new topic: the name server routes it within a moment.
        transport = RemoteTransport(ns.address)
        try:
            deadline = time.monotonic() + 10
            while True:
                try:
                    route = transport.get_route_info_by_topic("Fresh")
                    break
                except Exception:
                    assert time.monotonic() < deadline, "the name server never learnt Fresh"
                    time.sleep(0.05)
            assert len(route.write_queues()) == 4
        finally:
            transport.close()
    created = [e["topic"] for e in logs if e["event"] == "topic_auto_created"]
    assert created == ["Fresh"]
