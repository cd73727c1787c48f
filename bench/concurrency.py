"""Placement and concurrency for ``bench/remote.py``: pinning the processes to vCPUs, and
driving a server from 1 to 64 connections at once.

Placement: on a VM a wake-up on the other vCPU costs tens of µs of latency and CPU on each
side, so where the scheduler puts a client and its server moves a one-by-one figure by 2x.
:data:`PLACEMENTS` names the two placements measured: ``same`` (client and server pinned to
one vCPU) and ``split`` (each to its own). A server is pinned by starting it from this thread
while this thread is pinned to the server's vCPU (a child inherits its parent's affinity, and
its threads their creator's), then pinning every thread of it again; the client is this
process, every thread of it pinned.

Concurrency: N connections each with one request in flight (a closed loop), three ways:

- ``mqcore``: N threads, each with its own remote ``Producer`` (its own connection) sending
  one message at a time: what an application with N producers gets, the client's cost
  included;
- ``raw``: one thread, N plain sockets, each sending a pre-encoded SEND_MESSAGE_V2 frame (a
  1 KiB body and the properties a Java client writes) and reading its answer, which must be
  SUCCESS: the server's capacity without the client's cost;
- ``redis``: the same with a pre-encoded RESP ``XADD`` and its answer (a stream id).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import ha  # bench/ha.py: CPU seconds of a process

#: placement name -> (the client's vCPU index, the server's vCPU index) in the allowed set.
PLACEMENTS = {"same": (0, 0), "split": (0, 1)}
CONNECTIONS = (1, 4, 16, 64)


def allowed_cpus() -> list[int]:
    """The vCPUs this process may run on when the bench starts (before any pinning)."""
    return sorted(_ALLOWED)


_ALLOWED = frozenset(os.sched_getaffinity(0))


def placements() -> dict[str, tuple[int, int]]:
    """The placements this machine allows, as real vCPU numbers (client, server)."""
    cpus = allowed_cpus()
    out = {}
    for name, (c, s) in PLACEMENTS.items():
        if max(c, s) < len(cpus):
            out[name] = (cpus[c], cpus[s])
    return out


def pin_process(pid: int, cpu: int) -> None:
    """Pin every thread of process ``pid`` (0: this one) to ``cpu``."""
    base = f"/proc/{pid or 'self'}/task"
    for tid in os.listdir(base):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), {cpu})


def unpin() -> None:
    """Every thread of this process back on the vCPUs it had when the bench started."""
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(tid), _ALLOWED)


@contextlib.contextmanager
def spawning_on(cpu: int | None) -> Iterator[None]:
    """Children started inside inherit ``cpu`` as their only vCPU (None: no pinning)."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# -- frames -------------------------------------------------------------------------------------


def send_frame(topic: str, queue_id: int, body: bytes, uniq: str) -> bytes:
    """A SEND_MESSAGE_V2 request as a Java client writes it (every header value a string)."""
    from mqcore.protocol.codes import RequestCode
    from mqcore.remoting.command import LanguageCode, RemotingCommand

    ext = {
        "a": "bench-raw", "b": topic, "c": "TBW102", "d": "4", "e": str(queue_id), "f": "0",
        "g": str(int(time.time() * 1000)), "h": "0",
        "i": f"UNIQ_KEY\x01{uniq}\x02WAIT\x01true\x02", "j": "0", "k": "false", "m": "false",
    }  # fmt: skip
    return RemotingCommand(
        RequestCode.SEND_MESSAGE_V2, language=LanguageCode.JAVA, version=453, opaque=1,
        ext_fields=ext, body=body,
    ).encode()  # fmt: skip


def _mqcore_answer(buf: bytearray) -> int:
    """Bytes of the first whole answer frame in ``buf`` (0: not whole yet); it must be SUCCESS."""
    from mqcore.remoting.command import RemotingCommand

    if len(buf) < 4:
        return 0
    end = 4 + int.from_bytes(buf[:4], "big")
    if len(buf) < end:
        return 0
    answer = RemotingCommand.decode(bytes(buf[4:end]))
    if answer.code != 0:
        raise RuntimeError(f"send answered {answer.code}: {answer.remark}")
    return end


def xadd_frame(key: str, body: bytes) -> bytes:
    """A RESP ``XADD key * b body``."""
    parts = [b"XADD", key.encode(), b"*", b"b", body]
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        out.append(b"$%d\r\n%s\r\n" % (len(p), p))
    return b"".join(out)


def _redis_answer(buf: bytearray) -> int:
    """Bytes of the first whole reply in ``buf`` (0: not whole yet); it must be a stream id."""
    head = buf.find(b"\r\n")
    if head < 0:
        return 0
    if buf[:1] != b"$":
        raise RuntimeError(f"XADD answered {bytes(buf[:head])!r}")
    end = head + 2 + int(buf[1:head]) + 2
    return end if len(buf) >= end else 0


# -- loads --------------------------------------------------------------------------------------


def raw_load(port: int, frames: list[bytes], total: int, answer: Callable[[bytearray], int]) -> int:
    """``total`` requests over ``len(frames)`` connections to loopback ``port``, each
    connection sending its frame again as soon as its answer is whole; returns ``total``."""
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in frames]
    sel = selectors.DefaultSelector()
    try:
        bufs = [bytearray() for _ in frames]
        sent = done = 0
        for i, s in enumerate(socks):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sel.register(s, selectors.EVENT_READ, i)
            if sent < total:
                s.sendall(frames[i])
                sent += 1
        while done < total:
            for key, _ in sel.select():
                i = key.data
                chunk = socks[i].recv(1 << 16)
                if not chunk:
                    raise RuntimeError("the server closed a connection")
                buf = bufs[i]
                buf += chunk
                while (used := answer(buf)) > 0:
                    del buf[:used]
                    done += 1
                    if sent < total:
                        socks[i].sendall(frames[i])
                        sent += 1
        return total
    finally:
        sel.close()
        for s in socks:
            s.close()


def timed_load(fn: Callable[[], int], server_pid: int) -> dict[str, float]:
    """msgs/s, and CPU µs per message of this process (every thread) and of the server."""
    server = ha.cpu_seconds(server_pid)
    client = time.process_time()
    begin = time.perf_counter()
    n = fn()
    wall = time.perf_counter() - begin
    return {
        "msgs_per_s": n / wall,
        "cpu_client_us": (time.process_time() - client) / n * 1e6,
        "cpu_server_us": (ha.cpu_seconds(server_pid) - server) / n * 1e6,
    }


def mqcore_clients(addr: str, topic: str, body: bytes, n: int, total: int) -> Callable[[], int]:
    """A load of ``n`` threads, each with a started ``Producer`` of its own, sending
    ``total`` messages one at a time between them; the producers start before the load does
    (call the result to run it; it shuts them down)."""
    from mqcore import Message, Producer, SendStatus

    producers = [Producer(f"bench-conc-{i}", namesrv_addr=addr) for i in range(n)]
    for p in producers:
        p.start()
        p.send(Message(topic=topic, body=body))  # connect and route before the clock
    each = max(1, total // n)
    errors: list[BaseException] = []

    def worker(p: Any) -> None:
        m = Message(topic=topic, body=body)
        try:
            for _ in range(each):
                if p.send(m).send_status is not SendStatus.SEND_OK:
                    raise RuntimeError("a send was not SEND_OK")
        except BaseException as exc:  # reported by the load
            errors.append(exc)

    def load() -> int:
        threads = [threading.Thread(target=worker, args=(p,)) for p in producers]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            for p in producers:
                p.shutdown()
        if errors:
            raise errors[0]
        return each * n

    return load
