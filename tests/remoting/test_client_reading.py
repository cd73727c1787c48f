"""Who reads a client connection: a synchronous caller reads its own answer when nobody else
is reading, reads others' answers while it does, and hands over to the connection's reader
thread when it leaves with somebody still waiting (see mqcore.remoting.client)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from remotingtest import ECHO, PARK, wait_until

from mqcore.errors import RemotingConnectError, RemotingTimeoutError
from mqcore.remoting import client as client_module
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand
from mqcore.remoting.server import RemotingServer

pytestmark = pytest.mark.timeout(60)


def _cmd(code: int, body: bytes | None = None, **ext: object) -> RemotingCommand:
    return RemotingCommand(code, body=body, ext_fields={k: str(v) for k, v in ext.items()} or None)


@pytest.fixture(autouse=True)
def _patient_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The reader thread stands aside for 0.5 s after a call began (not 2 ms), so that which
    thread leads does not depend on how busy the machine running the tests is."""
    monkeypatch.setattr(client_module, "_LINGER", 0.5)


@pytest.fixture
def readers(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, str]]:
    """opaque -> name of the thread that read the answer with that opaque."""
    seen: dict[int, str] = {}
    frame = client_module._Connection._frame

    def recording(conn: client_module._Connection, data: bytes) -> None:
        seen[RemotingCommand.decode(data).opaque] = threading.current_thread().name
        frame(conn, data)

    monkeypatch.setattr(client_module._Connection, "_frame", recording)
    yield seen


def test_a_caller_reads_its_own_answers(
    client: RemotingClient, addr: str, readers: dict[int, str]
) -> None:
    me = threading.current_thread().name
    cmds = [_cmd(ECHO, str(i).encode()) for i in range(50)]
    for i, cmd in enumerate(cmds):
        assert client.invoke(addr, cmd, 5).body == str(i).encode()
    mine = sum(readers[c.opaque] == me for c in cmds)
    # The first answer may still be read by the reader thread (it was reading when the call
    # began); the rest are read by the caller. (Before callers read their own, none were.)
    assert mine >= 49, readers


def test_answers_to_async_requests_arrive_after_synchronous_calls(
    client: RemotingClient, addr: str
) -> None:
    assert client.invoke(addr, _cmd(ECHO, b"sync"), 5).body == b"sync"
    # Nobody calls now: the reader thread must take over and read this answer.
    fut = client.invoke_async(addr, _cmd(ECHO, b"async"), 5)
    assert fut.result(2).body == b"async"
    late = client.invoke_async(addr, _cmd(PARK, b"parked", ms=200), 5)
    assert late.result(3).code == 0


def test_a_leading_caller_reads_other_callers_answers(
    client: RemotingClient, addr: str, readers: dict[int, str]
) -> None:
    assert client.invoke(addr, _cmd(ECHO, b"warm"), 5).body == b"warm"
    slow = _cmd(PARK, b"slow", ms=700)
    slow_done = threading.Event()

    def lead() -> None:
        assert client.invoke(addr, slow, 5).code == 0
        slow_done.set()

    conn = client._conns[addr]
    wait_until(lambda: not conn._leading)  # the reader thread read "warm" and stands aside
    leader = threading.Thread(target=lead, name="leader")
    leader.start()
    try:
        # Once the leader is waiting for its answer, a second caller follows it.
        wait_until(lambda: conn._leading and conn._own == slow.opaque)
        fast = _cmd(ECHO, b"fast")
        began = time.monotonic()
        assert client.invoke(addr, fast, 5).body == b"fast"
        assert time.monotonic() - began < 0.6  # not held until the leader's own answer
        assert not slow_done.is_set()
        assert readers[fast.opaque] == "leader"
    finally:
        leader.join(10)
    assert slow_done.is_set() and readers[slow.opaque] == "leader"


def test_a_caller_left_waiting_by_the_leader_gets_its_answer(
    client: RemotingClient, addr: str
) -> None:
    assert client.invoke(addr, _cmd(ECHO, b"warm"), 5).body == b"warm"
    answers: list[tuple[str, float]] = []

    def call(name: str, ms: int) -> None:
        began = time.monotonic()
        answer = client.invoke(addr, _cmd(PARK, name.encode(), ms=ms), 10)
        answers.append((name, time.monotonic() - began))
        assert answer.code == 0

    conn = client._conns[addr]
    wait_until(lambda: not conn._leading)
    first = threading.Thread(target=call, args=("short", 100))
    first.start()
    wait_until(lambda: conn._leading)
    second = threading.Thread(target=call, args=("long", 600))
    second.start()
    first.join(10)
    second.join(10)
    # The leader leaves after 0.1 s; the reader thread reads the other answer at 0.6 s.
    assert sorted(name for name, _ in answers) == ["long", "short"]
    assert all(took < 3 for _, took in answers), answers


def test_a_connection_closed_under_a_reading_caller_fails_its_call(
    client: RemotingClient, addr: str, server: RemotingServer
) -> None:
    assert client.invoke(addr, _cmd(ECHO, b"warm"), 5).body == b"warm"
    conn = client._conns[addr]
    closer = threading.Timer(0.3, lambda: server.connections()[0].close())
    closer.start()
    began = time.monotonic()
    try:
        with pytest.raises(RemotingConnectError, match="lost before the answer"):
            client.invoke(addr, _cmd(PARK, ms=5000), 10)
    finally:
        closer.join(5)
    assert time.monotonic() - began < 3
    assert conn.closed
    wait_until(lambda: not conn.reader.is_alive())
    assert client.invoke(addr, _cmd(ECHO, b"again"), 5).body == b"again"


def test_close_ends_a_reader_thread_standing_aside(server: RemotingServer, addr: str) -> None:
    cli = RemotingClient()
    assert cli.invoke(addr, _cmd(ECHO, b"x"), 5).body == b"x"
    reader = cli._conns[addr].reader
    cli.close()  # right after a call: the reader thread is standing aside
    reader.join(2)
    assert not reader.is_alive()


def test_a_write_the_server_does_not_read_times_out(leak_check: None) -> None:
    """A server that accepts and never reads: the write gives up at the call's deadline with
    an error naming the address and code, and the connection is closed."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    addr = f"127.0.0.1:{listener.getsockname()[1]}"
    cli = RemotingClient()
    try:
        began = time.monotonic()
        with pytest.raises(RemotingTimeoutError, match=f"{addr}.*not reading"):
            cli.invoke(addr, _cmd(ECHO, b"x" * (16 << 20)), 0.5)
        assert time.monotonic() - began < 5
        assert addr not in cli._conns or cli._conns[addr].closed
    finally:
        cli.close()
        listener.close()
