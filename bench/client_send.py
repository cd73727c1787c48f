"""The client's own cost of one synchronous send: mqcore's ``Producer.send`` against redis-py.

Each client sends 1 KiB messages one at a time, waiting for each answer:

- mqcore's remote ``Producer.send`` against the ideal broker (``bench/ideal_broker.py``: a
  server that answers every send at once with a canned success, so what is measured is the
  client), and against a real ``mqcore serve`` (``--serve``);
- redis-py's ``XADD`` against ``redis-server``.

Each client runs in a process of its own (started per round, warmed up, then timed), which
reports its rate and its own CPU per send (every thread), and the server's CPU over the same
stretch. Rounds interleave the clients (alternating which goes first); the run prints, per
client, the median rate and CPU, and the median of each round's mqcore/redis ratio.
``--before PYTHON`` adds mqcore's client as another installation has it (a virtualenv of an
older checkout, say), against the same ideal broker in the same rounds::

    python bench/client_send.py [--messages 20000] [--rounds 5] [--serve] [--pin same|split]
        [--before PYTHON] [--json]

``--pin`` places the processes: ``same`` puts client and server on one vCPU, ``split`` on
two different ones (Linux); without it the scheduler decides. Needs ``redis-server`` on the
PATH and ``pip install redis`` (``--no-redis`` leaves Redis out).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ha  # bench/ha.py: serving mqcore, CPU of a process
import ideal_broker


def _pin(pid: int, cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(pid, {cpu})


def _placement(pin: str | None) -> tuple[int | None, int | None]:
    """(client vCPU, server vCPU) for ``--pin``."""
    if pin is None or not hasattr(os, "sched_getaffinity"):
        return None, None
    cpus = sorted(os.sched_getaffinity(0))
    if pin == "same" or len(cpus) < 2:
        return cpus[0], cpus[0]
    return cpus[0], cpus[1]


def _measure(send: Callable[[], object], n: int, server_pid: int) -> dict[str, float]:
    for _ in range(min(500, n)):  # warm up: connection, route, caches
        send()
    server = ha.cpu_seconds(server_pid)
    cpu = time.process_time()
    begin = time.perf_counter()
    for _ in range(n):
        send()
    wall = time.perf_counter() - begin
    return {
        "msgs_per_s": n / wall,
        "client_cpu_us": (time.process_time() - cpu) / n * 1e6,
        "server_cpu_us": (ha.cpu_seconds(server_pid) - server) / n * 1e6,
    }


def mqcore_round(addr: str, pid: int, n: int, body: bytes, topic: str) -> dict[str, float]:
    """``Producer.send`` one by one to ``addr``."""
    from mqcore import Message, Producer, SendStatus

    with Producer("bench-pg", namesrv_addr=addr) as p:
        msg = Message(topic=topic, body=body)

        def send() -> None:
            assert p.send(msg).send_status is SendStatus.SEND_OK
            msg.properties.pop("UNIQ_KEY", None)  # a fresh id per send, as for a new message

        return _measure(send, n, pid)


def redis_round(port: int, pid: int, n: int, body: bytes) -> dict[str, float]:
    """redis-py's ``XADD`` one by one."""
    import redis

    r = redis.Redis(port=port)
    try:
        return _measure(lambda: r.xadd("S", {"b": body}), n, pid)
    finally:
        r.close()


def _start_redis(workdir: str) -> tuple[subprocess.Popen[bytes], int]:
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not on the PATH (Debian: apt install redis-server)")
    port = ideal_broker_free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )
    r = redis.Redis(port=port)
    for _ in range(100):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.05)
    r.close()
    return proc, port


def ideal_broker_free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(
    python: str, kind: str, target: str, pid: int, n: int, size: int, cpu: int | None
) -> dict[str, float]:
    """One round of one client, in a process of its own run by ``python``."""
    cmd = [python, os.path.abspath(__file__), "--client", kind, "--target", target,
           "--server-pid", str(pid), "--messages", str(n), "--size", str(size)]  # fmt: skip
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    # Outside the checkout, so that ``python`` imports its own installation of mqcore.
    env = dict(os.environ, PYTHONSAFEPATH="1")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd="/")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def client_main(args: argparse.Namespace) -> None:
    """The client side of one round (``--client``): prints its figures as JSON."""
    body = os.urandom(args.size)
    if args.client == "redis":
        figures = redis_round(int(args.target), args.server_pid, args.messages, body)
    else:
        figures = mqcore_round(args.target, args.server_pid, args.messages, body, "B")
    print(json.dumps(figures))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every round; the medians."""
    client_cpu, server_cpu = _placement(args.pin)
    rounds: dict[str, list[dict[str, float]]] = {}
    work = tempfile.mkdtemp(prefix="mqcore-bench-client-send-")
    procs: list[subprocess.Popen[Any]] = []
    try:
        ideal, ideal_addr = ideal_broker.start()
        procs.append(ideal)
        _pin(ideal.pid, server_cpu)
        if not args.no_redis:
            rproc, rport = _start_redis(work)
            procs.append(rproc)
            _pin(rproc.pid, server_cpu)
        if args.serve:
            sproc, saddr, _ = ha.serve(os.path.join(work, "data"), "--store", args.store)
            procs.append(sproc)
            _pin(sproc.pid, server_cpu)
        clients: list[tuple[str, str, str, int]] = [
            ("ideal", sys.executable, "mqcore", 0),
        ]
        if args.before:
            clients.append(("ideal_before", args.before, "mqcore", 0))
        if not args.no_redis:
            clients.append(("redis", sys.executable, "redis", 0))
        if args.serve:
            clients.append(("serve", sys.executable, "mqcore", 1))
            if args.before:
                clients.append(("serve_before", args.before, "mqcore", 1))
        for i in range(args.rounds):
            for name, python, kind, which in clients[:: -1 if i % 2 else 1]:
                if kind == "redis":
                    target, pid = str(rport), rproc.pid
                elif which == 1:
                    target, pid = saddr, sproc.pid
                else:
                    target, pid = ideal_addr, ideal.pid
                figures = _client(python, kind, target, pid, args.messages, args.size, client_cpu)
                rounds.setdefault(name, []).append(figures)
    finally:
        for proc in procs:
            if proc.args[0] == sys.executable and "serve" in proc.args:
                ha.stop(proc)
            else:
                proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {"pin": args.pin or "none", "messages": args.messages, "size": args.size}
    for name, rs in rounds.items():
        if rs:
            out[name] = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            out[name + "_rounds"] = rs
    if "redis" in rounds:
        pairs = zip(rounds["ideal"], rounds["redis"], strict=True)
        ratios = [a["msgs_per_s"] / b["msgs_per_s"] for a, b in pairs]
        out["ideal_vs_redis"] = statistics.median(ratios)
        out["ideal_vs_redis_rounds"] = ratios
    return out


def main(argv: list[str] | None = None) -> None:
    """Parse the options, run, print."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--store", default="mmap")
    ap.add_argument("--serve", action="store_true", help="also against a real mqcore serve")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--pin", choices=["same", "split"])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--before", metavar="PYTHON", help="also mqcore's client as PYTHON has it")
    ap.add_argument("--client", choices=["mqcore", "redis"], help=argparse.SUPPRESS)
    ap.add_argument("--target", help=argparse.SUPPRESS)
    ap.add_argument("--server-pid", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.client:
        client_main(args)
        return
    out = run(args)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"placement: {out['pin']}; {args.messages} sends of {args.size} B per round")
    print(f"{'client':28} {'sends/s':>10} {'client CPU µs':>14} {'server CPU µs':>14}")
    labels = {
        "ideal": "mqcore -> ideal broker",
        "ideal_before": "mqcore (before) -> ideal",
        "redis": "redis-py -> redis-server",
        "serve": "mqcore -> mqcore serve",
        "serve_before": "mqcore (before) -> serve",
    }
    for name, label in labels.items():
        if name in out:
            r = out[name]
            print(
                f"{label:28} {r['msgs_per_s']:>10.0f} {r['client_cpu_us']:>14.1f} "
                f"{r['server_cpu_us']:>14.1f}"
            )
    if "ideal_vs_redis" in out:
        per_round = " ".join(f"{x:.2f}" for x in out["ideal_vs_redis_rounds"])
        print(f"mqcore (ideal broker) / redis-py: {out['ideal_vs_redis']:.2f}  ({per_round})")


if __name__ == "__main__":
    main()
