"""RocketMQ 5 clients over gRPC against RocketMQ 4.x remoting, on one ``mqcore serve``.

One server process (``mqcore serve --grpc-listen``) is driven from this process, first by the
official ``rocketmq-python-client`` 5.x over gRPC, then by mqcore's own remote clients over
the remoting port, with the same messages (``--size`` bytes):

- send one at a time: the 5.x ``Producer.send`` / mqcore's ``Producer.send``;
- send with many in flight: ``Producer.send_async`` of both, ``--window`` futures at once;
- receive + ack: the 5.x ``SimpleConsumer`` (``receive`` 32 at a time, ``ack`` each) / mqcore's
  ``SimpleConsumer`` over remoting (pop 32 at a time, ack each), and mqcore's
  ``PullConsumer`` (pull 32 at a time, no ack: the 4.x way) for scale.

Needs the ``mqcore[grpc]`` extra::

    python bench/grpc.py --messages N [--size BYTES] [--window W] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from pathlib import Path
from typing import Any

# This file is named grpc.py: run as a script, its folder would shadow the grpc package.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]


def _serve(data_dir: Path) -> tuple[subprocess.Popen[str], str, str]:
    cmd = [
        sys.executable, "-c", "from mqcore.cli import main; main()", "serve",
        "--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0", "--data-dir", str(data_dir),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    remoting = grpc = ""
    while not grpc:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit("mqcore serve did not start")
        if "listening on" in line:
            remoting = line.split("listening on ")[1].split()[0]
        if "gRPC" in line:
            grpc = line.rsplit(" on ", 1)[1].strip()
    for topic in ("G5", "R4"):
        subprocess.run(
            [sys.executable, "-c", "from mqcore.cli import main; main()", "topic", "create",
             topic, "--queues", "8", "--server", remoting],
            check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    return proc, remoting, grpc


#: The server's pid (its CPU is read from /proc around each figure) and, per figure, the CPU
#: seconds the server and this process spent.
SERVER_PID = 0
CPU: dict[str, tuple[float, float]] = {}


def _server_cpu() -> float:
    try:
        fields = Path(f"/proc/{SERVER_PID}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rate(n: int, fn: Callable[[], None], name: str = "") -> float:
    server, client = _server_cpu(), time.process_time()
    start = time.perf_counter()
    fn()
    elapsed = time.perf_counter() - start
    if name:
        CPU[name] = (_server_cpu() - server, time.process_time() - client)
    return n / elapsed


def grpc_figures(addr: str, n: int, body: bytes, window: int) -> dict[str, float]:
    """The 5.x client's send (one at a time, many in flight) and receive + ack."""
    from rocketmq import (
        ClientConfiguration,
        Credentials,
        FilterExpression,
        Message,
        Producer,
        SimpleConsumer,
    )

    config = ClientConfiguration(addr, Credentials("ak", "sk"))
    consumer = SimpleConsumer(config, "bench5", {"G5": FilterExpression("*")}, await_duration=2)
    consumer.startup()
    consumer.receive(1, 30)  # the group starts here
    producer = Producer(config, ("G5",))
    producer.startup()

    def msg() -> Any:
        m = Message()
        m.topic, m.body = "G5", body
        return m

    out: dict[str, float] = {}
    try:
        out["send_one"] = _rate(
            n, lambda: [producer.send(msg()) for _ in range(n)] and None, "g.send_one"
        )

        def in_flight() -> None:
            pending: list[Future[Any]] = []
            for _ in range(n):
                pending.append(producer.send_async(msg()))
                if len(pending) >= window:
                    wait(pending)
                    pending = []
            wait(pending)

        out["send_in_flight"] = _rate(n, in_flight, "g.send_in_flight")

        def receive_ack() -> None:
            left = 2 * n
            while left > 0:
                got = consumer.receive(32, 30)
                for m in got:
                    consumer.ack(m)
                left -= len(got)

        out["receive_ack"] = _rate(2 * n, receive_ack, "g.receive_ack")
    finally:
        producer.shutdown()
        consumer.shutdown()
    return out


def remoting_figures(addr: str, n: int, body: bytes, window: int) -> dict[str, float]:
    """mqcore's remote Producer, SimpleConsumer (pop) and PullConsumer on the same server."""
    from mqcore import Message, MessageQueue, Producer, PullConsumer, PullStatus, SimpleConsumer

    out: dict[str, float] = {}
    with SimpleConsumer("bench4", broker=addr, subscriptions={"R4": "*"}, await_duration=2) as c:
        c.receive(1, 30)
        with Producer("bench-pg", broker=addr) as p:
            msg = Message(topic="R4", body=body)
            out["send_one"] = _rate(
                n, lambda: [p.send(msg) for _ in range(n)] and None, "r.send_one"
            )

            def in_flight() -> None:
                pending: list[Future[Any]] = []
                for _ in range(n):
                    pending.append(p.send_async(msg))
                    if len(pending) >= window:
                        wait(pending)
                        pending = []
                wait(pending)

            out["send_in_flight"] = _rate(n, in_flight, "r.send_in_flight")

        def receive_ack() -> None:
            left = 2 * n
            while left > 0:
                got = c.receive(32, 30)
                for m in got:
                    c.ack(m)
                left -= len(got)

        out["receive_ack"] = _rate(2 * n, receive_ack, "r.receive_ack")

    def pull_all() -> None:
        with PullConsumer("bench-pull", broker=addr) as pc:
            left = 2 * n
            for q in sorted(pc.fetch_subscribe_message_queues("R4"), key=lambda m: m.queue_id):
                offset = 0
                while True:
                    r = pc.pull(MessageQueue("R4", q.broker_name, q.queue_id), "*", offset, 32)
                    if r.pull_status is not PullStatus.FOUND:
                        break
                    left -= len(r.msg_found_list)
                    offset = r.next_begin_offset

    out["pull"] = _rate(2 * n, pull_all, "r.pull")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=2000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    body = os.urandom(args.size)
    with tempfile.TemporaryDirectory() as tmp:
        proc, remoting, grpc_addr = _serve(Path(tmp) / "data")
        global SERVER_PID
        SERVER_PID = proc.pid
        try:
            g = grpc_figures(grpc_addr, args.messages, body, args.window)
            r = remoting_figures(remoting, args.messages, body, args.window)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    if args.json:
        cpu = {k: {"server_s": v[0], "client_s": v[1]} for k, v in CPU.items()}
        print(json.dumps({"grpc": g, "remoting": r, "cpu": cpu, "messages": args.messages,
                          "size": args.size}))  # fmt: skip
        return
    print(f"{args.messages} messages of {args.size} bytes, one mqcore serve (msgs/s)")
    print(f"{'':24}{'5.x gRPC':>12}{'4.x remoting':>14}{'ratio':>8}")
    for key, name in (
        ("send_one", "send, one at a time"),
        ("send_in_flight", f"send, {args.window} in flight"),
        ("receive_ack", "receive + ack"),
    ):
        print(f"{name:24}{g[key]:12.0f}{r[key]:14.0f}{g[key] / r[key]:8.2f}")
    print(f"{'pull (4.x, no ack)':24}{'':12}{r['pull']:14.0f}")
    print("\nCPU per message, server / client (us)")
    for key, name, count in (
        ("send_one", "send, one at a time", args.messages),
        ("send_in_flight", "send, in flight", args.messages),
        ("receive_ack", "receive + ack", 2 * args.messages),
    ):
        cells = []
        for side in ("g", "r"):
            server, client = CPU.get(f"{side}.{key}", (0.0, 0.0))
            cells.append(f"{server / count * 1e6:7.0f} / {client / count * 1e6:<7.0f}")
        print(f"{name:24}{cells[0]:>18}{cells[1]:>18}")


if __name__ == "__main__":
    main()
