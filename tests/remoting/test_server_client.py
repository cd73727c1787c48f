"""The remoting server and client together: dispatch, answers out of order, timeouts, pushes
from server to client, and the server's manners with broken or idle peers."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import socket
import struct
import threading
import time

import pytest
from remotingtest import (
    AWAIT,
    BIND,
    ECHO,
    FAIL,
    PARK,
    SILENT,
    SLOW,
    ScriptedProcessor,
    wait_until,
)

from mqcore.errors import RemotingConnectError, RemotingTimeoutError
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.headers import NotifyConsumerIdsChangedRequestHeader
from mqcore.remoting.client import RemotingClient, parse_address
from mqcore.remoting.command import RemotingCommand, SerializeType
from mqcore.remoting.frame import FrameDecoder
from mqcore.remoting.server import RemotingServer

pytestmark = pytest.mark.timeout(60)


def _cmd(code: int, body: bytes | None = None, **ext: object) -> RemotingCommand:
    return RemotingCommand(code, body=body, ext_fields={k: str(v) for k, v in ext.items()} or None)


def _raw(addr: str) -> socket.socket:
    sock = socket.create_connection(parse_address(addr), timeout=5)
    return sock


def _read_answer(sock: socket.socket) -> RemotingCommand | None:
    """The next command from ``sock``, or None when the server closed it."""
    dec = FrameDecoder()
    while True:
        try:
            data = sock.recv(65536)
        except ConnectionResetError:
            return None
        if not data:
            return None
        frames = dec.feed(data)
        if frames:
            return RemotingCommand.decode(frames[0])


@pytest.mark.parametrize("kind", list(SerializeType))
def test_echo_in_both_serialisations(
    client: RemotingClient, addr: str, kind: SerializeType
) -> None:
    cmd = RemotingCommand(ECHO, body=b"\x00payload\xff", remark="hi", serialize_type=kind)
    answer = client.invoke(addr, cmd, 5)
    assert answer.is_response and answer.opaque == cmd.opaque
    assert answer.serialize_type is kind
    assert (answer.code, answer.body, answer.remark) == (0, b"\x00payload\xff", "hi")


def test_unknown_code_is_not_supported(client: RemotingClient, addr: str) -> None:
    answer = client.invoke(addr, _cmd(4242), 5)
    assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    assert "4242" in (answer.remark or "")
    assert client.invoke(addr, _cmd(ECHO, b"still"), 5).body == b"still"


def test_handler_exception_is_system_error_and_keeps_the_connection(
    client: RemotingClient, addr: str, server: RemotingServer
) -> None:
    answer = client.invoke(addr, _cmd(FAIL), 5)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "handler broke" in (answer.remark or "")
    assert len(server.connections()) == 1
    assert client.invoke(addr, _cmd(ECHO, b"x"), 5).body == b"x"
    assert len(server.connections()) == 1


def test_slow_handler_does_not_stall_other_connections(server: RemotingServer, addr: str) -> None:
    with RemotingClient() as slow_client, RemotingClient() as fast_client:
        slow = slow_client.invoke_async(addr, _cmd(SLOW, ms=1500), 10)
        time.sleep(0.1)  # the slow request is in its worker
        started = time.monotonic()
        for _ in range(5):
            assert fast_client.invoke(addr, _cmd(SLOW, ms=0), 5).code == 0
        assert time.monotonic() - started < 1.2
        assert not slow.done()
        assert slow.result(10).remark == "slept 1500"


def test_answers_leave_out_of_order_on_one_connection(client: RemotingClient, addr: str) -> None:
    order: list[str] = []
    slow = client.invoke_async(addr, _cmd(PARK, ms=400), 10)
    slow.add_done_callback(lambda f: order.append("park"))
    fast = client.invoke_async(addr, _cmd(ECHO, b"e"), 10)
    fast.add_done_callback(lambda f: order.append("echo"))
    assert fast.result(5).body == b"e"
    assert slow.result(5).remark == "parked"
    assert order == ["echo", "park"]


def test_parked_requests_hold_no_worker_thread(server: RemotingServer, addr: str) -> None:
    """40 long polls parked as futures on a server of 4 workers all finish in one wait."""
    with RemotingClient() as cli:
        started = time.monotonic()
        futures = [cli.invoke_async(addr, _cmd(PARK, ms=600), 10) for _ in range(40)]
        time.sleep(0.1)
        assert cli.invoke(addr, _cmd(SLOW, ms=0), 5).code == 0  # a worker is still free
        assert all(f.result(10).remark == "parked" for f in futures)
        assert time.monotonic() - started < 3.0
    workers = [t for t in threading.enumerate() if t.name.startswith("mqcore-remoting-worker")]
    assert len(workers) <= server.workers


def test_awaitable_answer(client: RemotingClient, addr: str) -> None:
    assert client.invoke(addr, _cmd(AWAIT, ms=50), 5).remark == "awaited"


def test_pipelined_answers_all_arrive(client: RemotingClient, addr: str) -> None:
    futures = [client.invoke_async(addr, _cmd(ECHO, str(i).encode()), 30) for i in range(2000)]
    assert [f.result(30).body for f in futures] == [str(i).encode() for i in range(2000)]


def test_many_threads_share_one_connection(client: RemotingClient, addr: str) -> None:
    def work(n: int) -> int:
        ok = 0
        for i in range(100):
            body = f"{n}-{i}".encode()
            ok += client.invoke(addr, _cmd(ECHO, body), 10).body == body
        return ok

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(work, range(8))) == 800


# --- client errors ------------------------------------------------------------------------


def test_invoke_timeout_names_address_and_code(client: RemotingClient, addr: str) -> None:
    started = time.monotonic()
    with pytest.raises(RemotingTimeoutError, match=f"{addr}.*code {SILENT}") as info:
        client.invoke(addr, _cmd(SILENT), 0.3)
    assert 0.25 <= time.monotonic() - started < 2
    assert info.value.addr == addr and info.value.code == SILENT
    assert client.invoke(addr, _cmd(ECHO, b"after"), 5).body == b"after"


def test_invoke_async_timeout(client: RemotingClient, addr: str) -> None:
    fut = client.invoke_async(addr, _cmd(SILENT), 0.3)
    with pytest.raises(RemotingTimeoutError, match=str(SILENT)):
        fut.result(5)


def test_connect_failure_names_the_address(leak_check: None) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connection refused
        with (
            RemotingClient(connect_timeout=1) as cli,
            pytest.raises(RemotingConnectError, match=f"127.0.0.1:{port}"),
        ):
            cli.invoke(f"127.0.0.1:{port}", _cmd(ECHO), 1)
    with pytest.raises(RemotingConnectError, match="'nohost' is not HOST:PORT"):
        parse_address("nohost")


def test_client_reconnects_after_the_server_drops_it(
    client: RemotingClient, addr: str, server: RemotingServer
) -> None:
    assert client.invoke(addr, _cmd(BIND, clientId="c1"), 5).code == 0
    conn = server.find_connection("c1")
    assert conn is not None
    pending = client.invoke_async(addr, _cmd(PARK, ms=5000), 10)
    conn.close()
    with pytest.raises(RemotingConnectError, match="lost before the answer"):
        pending.result(5)
    wait_until(lambda: server.find_connection("c1") is None)
    assert client.invoke(addr, _cmd(ECHO, b"again"), 5).body == b"again"


# --- server to client ---------------------------------------------------------------------


def test_server_pushes_to_a_client_found_by_id(server: RemotingServer, addr: str) -> None:
    seen: list[tuple[int, str | None]] = []

    def handler(cmd: RemotingCommand, peer: str) -> RemotingCommand | None:
        header = cmd.read_header(NotifyConsumerIdsChangedRequestHeader)
        seen.append((cmd.code, header.consumer_group))
        if cmd.is_oneway:
            return None
        return RemotingCommand.response(0, remark=f"rebalanced {header.consumer_group}")

    with RemotingClient(handler) as cli:
        for kind in SerializeType:
            bind = _cmd(BIND, clientId=f"cid-{kind.name}")
            bind.serialize_type = kind
            assert cli.invoke(addr, bind, 5).code == 0
            conn = server.find_connection(f"cid-{kind.name}")
            assert conn is not None and conn.serialize_type is kind
            header = NotifyConsumerIdsChangedRequestHeader(consumer_group="cg")
            conn.send_oneway(
                RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header)
            )
            answer = conn.request(
                RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, header), 5
            )
            assert (answer.code, answer.remark) == (0, "rebalanced cg")
        assert seen == [(40, "cg")] * 4


def test_server_request_to_a_client_without_handler(server: RemotingServer, addr: str) -> None:
    with RemotingClient() as cli:
        assert cli.invoke(addr, _cmd(BIND, clientId="plain"), 5).code == 0
        conn = server.find_connection("plain")
        assert conn is not None
        answer = conn.request(RemotingCommand.request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET), 5)
        assert answer.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


def test_server_request_times_out(server: RemotingServer, addr: str) -> None:
    def handler(cmd: RemotingCommand, peer: str) -> RemotingCommand | None:
        return None  # never answers

    with RemotingClient(handler) as cli:
        assert cli.invoke(addr, _cmd(BIND, clientId="mute"), 5).code == 0
        conn = server.find_connection("mute")
        assert conn is not None
        with pytest.raises(RemotingTimeoutError, match="code 40"):
            conn.request(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED), 0.3)


def test_connection_closed_hook(
    server: RemotingServer, addr: str, processor: ScriptedProcessor
) -> None:
    with RemotingClient() as cli:
        assert cli.invoke(addr, _cmd(BIND, clientId="gone"), 5).code == 0
    wait_until(lambda: any(c.client_id == "gone" for c in processor.closed))
    assert server.find_connection("gone") is None


# --- overload, lifecycle --------------------------------------------------------------------


def test_overload_answers_system_busy(leak_check: None, processor: ScriptedProcessor) -> None:
    with RemotingServer(processor, max_pending=1) as srv, RemotingClient() as cli:
        assert srv.address is not None
        addr = f"{srv.address[0]}:{srv.address[1]}"
        parked = cli.invoke_async(addr, _cmd(PARK, ms=500), 5)
        time.sleep(0.1)
        assert cli.invoke(addr, _cmd(ECHO), 5).code == ResponseCode.SYSTEM_BUSY
        assert parked.result(5).code == 0
        assert cli.invoke(addr, _cmd(ECHO), 5).code == 0


def test_busy_answers_are_sent_again_within_the_timeout(
    leak_check: None, processor: ScriptedProcessor
) -> None:
    """invoke_retry_busy: a busy server is asked again until it serves, or the time is up."""
    with RemotingServer(processor, max_pending=1) as srv, RemotingClient() as cli:
        assert srv.address is not None
        addr = f"{srv.address[0]}:{srv.address[1]}"
        parked = cli.invoke_async(addr, _cmd(PARK, ms=1500), 5)
        time.sleep(0.1)
        begin = time.monotonic()
        assert cli.invoke_retry_busy(addr, _cmd(ECHO), 0.3).code == ResponseCode.SYSTEM_BUSY
        assert 0.25 < time.monotonic() - begin < 1.0  # kept asking, then gave up in time
        assert cli.invoke_retry_busy(addr, _cmd(ECHO, x=1), 5).code == 0  # once the park ends
        assert time.monotonic() - begin > 1.0
        assert parked.result(5).code == 0


class _BusyThenSilent:
    """Answers the first request SYSTEM_BUSY and never answers the next ones."""

    inline_codes = frozenset({ECHO})

    def __init__(self) -> None:
        self.seen = 0

    def process(self, cmd: RemotingCommand, conn: object) -> RemotingCommand | None:
        self.seen += 1
        if self.seen == 1:
            return RemotingCommand.response(ResponseCode.SYSTEM_BUSY, remark="starting")
        return None

    def connection_closed(self, conn: object) -> None:
        pass


def test_a_retry_that_runs_out_of_time_reports_the_busy_answer(leak_check: None) -> None:
    """After a busy answer, a try that gets no answer in what is left of the time returns
    that busy answer (the server is there and not serving yet), not a bare timeout."""
    processor = _BusyThenSilent()
    with RemotingServer(processor) as srv, RemotingClient() as cli:
        assert srv.address is not None
        addr = f"{srv.address[0]}:{srv.address[1]}"
        resp = cli.invoke_retry_busy(addr, _cmd(ECHO), 0.4)
        assert resp.code == ResponseCode.SYSTEM_BUSY and resp.remark == "starting"
        assert processor.seen >= 2  # it did try again
        with pytest.raises(RemotingTimeoutError):  # no busy answer first: the timeout stands
            cli.invoke_retry_busy(addr, _cmd(ECHO), 0.3)


def test_a_bound_server_refuses_connections_until_it_starts(
    leak_check: None, processor: ScriptedProcessor
) -> None:
    """bind() takes the port without accepting; start() accepts on that very port."""
    srv = RemotingServer(processor)
    try:
        host, port = srv.bind()
        assert port != 0
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, port), timeout=2).close()
        assert srv.start() == (host, port)
        with RemotingClient() as cli:
            assert cli.invoke(f"{host}:{port}", _cmd(ECHO), 5).code == 0
    finally:
        srv.close()
    never = RemotingServer(processor)
    host, port = never.bind()
    never.close()  # bound, never started: the port is free again
    with RemotingServer(processor, host, port) as again:
        assert again.address == (host, port)


def test_serve_under_asyncio_run(leak_check: None, processor: ScriptedProcessor) -> None:
    srv = RemotingServer(processor)
    bound: list[tuple[str, int]] = []
    runner = threading.Thread(target=lambda: asyncio.run(srv.serve(bound.append)))
    runner.start()
    wait_until(lambda: bound)
    with RemotingClient() as cli:
        assert cli.invoke(f"{bound[0][0]}:{bound[0][1]}", _cmd(ECHO, b"a"), 5).body == b"a"
    srv.close()
    runner.join(5)
    assert not runner.is_alive()


def test_start_reports_a_port_in_use(leak_check: None, processor: ScriptedProcessor) -> None:
    with RemotingServer(processor) as first:
        assert first.address is not None
        second = RemotingServer(processor, port=first.address[1], host="127.0.0.1")
        with pytest.raises(RemotingConnectError, match="could not listen"):
            second.start()


# --- robustness ------------------------------------------------------------------------------


def _frame(header: bytes, kind: int = 0, body: bytes = b"") -> bytes:
    return (
        struct.pack(">ii", 4 + len(header) + len(body), (kind << 24) | len(header)) + header + body
    )


def test_bad_json_with_an_opaque_is_answered(
    client: RemotingClient, addr: str, server: RemotingServer
) -> None:
    with _raw(addr) as sock:
        sock.sendall(_frame(b'{"code":10,"opaque":77,"extFields":'))
        answer = _read_answer(sock)
        assert answer is not None and answer.opaque == 77 and answer.is_response
        assert answer.code == ResponseCode.SYSTEM_ERROR and "not JSON" in (answer.remark or "")
        sock.sendall(RemotingCommand(ECHO, body=b"ok").encode())  # the connection still serves
        answer = _read_answer(sock)
        assert answer is not None and answer.body == b"ok"


@pytest.mark.parametrize(
    "junk",
    [
        _frame(b"{not json at all"),  # no opaque to answer
        _frame(b"{}", kind=7),  # unknown serialisation
        struct.pack(">i", 2**31 - 1),  # absurd length
        struct.pack(">i", 16 * 1024 * 1024 - 3) + b"\0" * 100,  # 1 byte over 16 MiB
        struct.pack(">i", -5),
        struct.pack(">i", 2),  # shorter than the header-length word
    ],
    ids=["bad-json", "bad-kind", "absurd-length", "over-16MiB", "negative", "tiny"],
)
def test_unanswerable_frames_close_that_connection_only(
    client: RemotingClient, addr: str, server: RemotingServer, junk: bytes
) -> None:
    assert client.invoke(addr, _cmd(ECHO, b"before"), 5).body == b"before"
    with _raw(addr) as sock:
        sock.sendall(junk)
        assert _read_answer(sock) is None  # closed, without reading a 2 GiB body first
    assert client.invoke(addr, _cmd(ECHO, b"after"), 5).body == b"after"
    assert len(server.connections()) == 1


def test_fuzz_random_and_truncated_frames(
    client: RemotingClient, addr: str, server: RemotingServer
) -> None:
    """Random bytes, cut frames, flipped bits: each connection is answered or closed, and the
    server keeps serving a well-behaved client throughout."""
    rng = random.Random(2107)
    good = [
        RemotingCommand(c, body=b"b" * rng.randrange(50), ext_fields={"k": "v"}, serialize_type=k)
        for c in (ECHO, 4242, FAIL)
        for k in SerializeType
    ]
    for i in range(60):
        frame = bytearray(rng.choice(good).encode())
        case = i % 4
        if case == 0:
            payload = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        elif case == 1:
            payload = bytes(frame[: rng.randrange(1, len(frame))])  # truncated, then closed
        elif case == 2:
            for _ in range(3):
                pos = rng.randrange(4, len(frame))
                frame[pos] ^= 1 << rng.randrange(8)
            payload = bytes(frame)
        else:
            payload = bytes(frame) + bytes(rng.randrange(256) for _ in range(8))
        with _raw(addr) as sock:
            sock.settimeout(2)
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
            try:
                while sock.recv(65536):
                    pass
            except (TimeoutError, ConnectionResetError):
                pass
        assert client.invoke(addr, _cmd(ECHO, str(i).encode()), 5).body == str(i).encode()
    wait_until(lambda: len(server.connections()) == 1)


def test_idle_connections_close(leak_check: None, processor: ScriptedProcessor) -> None:
    with RemotingServer(processor, idle_timeout=0.3) as srv, RemotingClient() as cli:
        assert srv.address is not None
        addr = f"{srv.address[0]}:{srv.address[1]}"
        with _raw(addr) as idle:
            started = time.monotonic()
            assert _read_answer(idle) is None
            assert 0.25 <= time.monotonic() - started < 3
        # a connection in use stays open past the idle time
        for _ in range(8):
            assert cli.invoke(addr, _cmd(ECHO), 5).code == 0
            time.sleep(0.1)
        assert len(srv.connections()) == 1


def test_vanished_clients_leak_nothing(
    server: RemotingServer, addr: str, processor: ScriptedProcessor
) -> None:
    """Clients that disappear mid-poll: their connections and tasks go away."""
    for _ in range(10):
        cli = RemotingClient()
        cli.invoke_async(addr, _cmd(PARK, ms=300), 5)
        cli.invoke_async(addr, _cmd(AWAIT, ms=5000), 10)
        cli.close()
    wait_until(lambda: not server.connections())
    wait_until(lambda: len(processor.closed) == 10)
    # parked answers completed into closed connections, awaited ones were cancelled
    wait_until(lambda: server._in_flight == 0)
    assert all(not c._tasks for c in processor.closed)


def test_a_client_that_never_reads_stalls_nobody(
    client: RemotingClient, addr: str, server: RemotingServer
) -> None:
    """Its answers back up, the server stops reading from it; others are served meanwhile."""
    frame = RemotingCommand(ECHO, body=b"z" * 65536).encode()
    with _raw(addr) as hog:
        hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hog.settimeout(0.05)
        sent = 0
        try:
            for _ in range(2000):  # 128 MiB if the server kept reading: it will not
                hog.sendall(frame)
                sent += 1
        except TimeoutError:
            pass
        assert sent < 2000
        started = time.monotonic()
        for i in range(20):
            assert client.invoke(addr, _cmd(ECHO, str(i).encode()), 5).body == str(i).encode()
        assert time.monotonic() - started < 3


def test_a_handler_may_close_its_own_client(server: RemotingServer, addr: str) -> None:
    closed = threading.Event()
    holder: list[RemotingClient] = []

    def handler(cmd: RemotingCommand, peer: str) -> RemotingCommand | None:
        holder[0].close()
        closed.set()
        return None

    cli = RemotingClient(handler)
    holder.append(cli)
    assert cli.invoke(addr, _cmd(BIND, clientId="self-closing"), 5).code == 0
    conn = server.find_connection("self-closing")
    assert conn is not None
    conn.send_oneway(RemotingCommand.request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED))
    assert closed.wait(5)
    with pytest.raises(RemotingConnectError, match="closed"):
        cli.invoke(addr, _cmd(ECHO), 1)


def test_cancelled_futures_do_not_break_the_connection(
    client: RemotingClient, addr: str, server: RemotingServer
) -> None:
    """Callers give up on requests (cancel) while answers arrive: the reader carries on."""
    assert client.invoke(addr, _cmd(BIND, clientId="canceller"), 5).code == 0
    conn = server.find_connection("canceller")
    for round_ in range(5):
        futures = [client.invoke_async(addr, _cmd(AWAIT, ms=i % 3), 5) for i in range(200)]
        for i, f in enumerate(futures):
            if i % 2 == round_ % 2:
                f.cancel()
        assert client.invoke(addr, _cmd(ECHO, b"alive"), 5).body == b"alive"
        assert all(f.cancelled() or f.result(5).code == 0 for f in futures)
    assert server.find_connection("canceller") is conn  # the same connection throughout


def test_group_codes_of_a_processor_without_process_group_are_served_one_by_one(
    server: RemotingServer, client: RemotingClient, addr: str
) -> None:
    """A processor swapped in without ``process_group`` (or a code taken off the inline
    codes) is never handed a group: its requests are answered one by one as before."""
    server.inline_codes = frozenset({ECHO})
    server.group_codes = frozenset({ECHO})
    futures = [client.invoke_async(addr, _cmd(ECHO, b"%d" % i), 5) for i in range(20)]
    assert [f.result(10).body for f in futures] == [b"%d" % i for i in range(20)]
    server.inline_codes = frozenset()  # a processor that may block on it: not gathered
    assert client.invoke(addr, _cmd(ECHO, b"alone"), 5).body == b"alone"
