"""Remote produce with replication: a single ``mqcore serve``, an ASYNC_MASTER with a slave,
and a SYNC_MASTER with a slave, side by side in one run.

Each server (and slave) runs as its own process on loopback, driven by mqcore's remote
Producer in this process: ``send_batch`` of 32 messages, and ``send`` one message at a time.
A SYNC_MASTER answers a send only once its slave reported the bytes, so its figures include
one replication round trip per send::

    python bench/ha.py --messages 100000 [--size 1024] [--json]

``bench/remote.py`` imports :func:`serve`, :func:`produce` and :func:`bench` to print the same
figures beside its single-server and Redis ones.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

BATCH = 32


def cpu_seconds(pid: int) -> float:
    """CPU seconds process ``pid`` has used so far, every thread, user and system (Linux)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(
    fn: Callable[[], int],
    name: str = "",
    server_pid: int | None = None,
    out: dict[str, float] | None = None,
) -> float:
    """``fn``'s messages per second (it returns how many it moved). With ``server_pid``,
    also each side's CPU per message, in microseconds, into ``out``: ``cpu_client_us_NAME``
    (this process, every thread) and ``cpu_server_us_NAME`` (the server process)."""
    server = cpu_seconds(server_pid) if server_pid else 0.0
    client = time.process_time()
    begin = time.perf_counter()
    n = fn()
    rate = n / (time.perf_counter() - begin)
    if server_pid and out is not None:
        out[f"cpu_client_us_{name}"] = (time.process_time() - client) / n * 1e6
        out[f"cpu_server_us_{name}"] = (cpu_seconds(server_pid) - server) / n * 1e6
    return rate


def serve(data: str, *args: str) -> tuple[subprocess.Popen[str], str, str]:
    """Start ``mqcore serve`` on a free loopback port with its store in ``data``; the process,
    its address and its replication address ("" when it has none)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from mqcore.cli import main; main()", "serve",
         "--listen", "127.0.0.1:0", "--data-dir", data, *args],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    addr = proc.stdout.readline().split("listening on ")[1].split()[0]
    second = proc.stdout.readline()
    ha = second.rsplit(" ", 1)[1].strip() if "replication port" in second else ""
    return proc, addr, ha


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM ``proc`` and wait for it."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


def produce(p: Any, n: int, body: bytes, server_pid: int | None = None) -> dict[str, float]:
    """Produce figures through the started Producer ``p`` to topic ``B``: ``n`` messages in
    batches of 32, then max(1000, n / 10) one at a time; every send must be SEND_OK. With
    ``server_pid``, each side's CPU per message too (see :func:`timed`)."""
    from mqcore import Message, SendStatus

    def batches() -> int:
        msgs = [Message(topic="B", body=body) for _ in range(BATCH)]
        for _ in range(n // BATCH):
            assert p.send_batch(msgs).send_status is SendStatus.SEND_OK
        return (n // BATCH) * BATCH

    def singles() -> int:
        m = Message(topic="B", body=body)
        k = max(1000, n // 10)
        for _ in range(k):
            assert p.send(m).send_status is SendStatus.SEND_OK
        return k

    out: dict[str, float] = {}
    out["produce_batch32_msgs_per_s"] = timed(batches, "produce_batch32", server_pid, out)
    out["produce_one_msgs_per_s"] = timed(singles, "produce_one", server_pid, out)
    return out


def bench(n: int, size: int, role: str | None) -> dict[str, float]:
    """Produce figures against a master of ``role`` with one slave (None: no slave)."""
    from mqcore import Message, Producer, SendStatus
    from mqcore.client.admin import MQAdmin

    root = tempfile.mkdtemp(prefix="mqcore-bench-ha-")
    procs = []
    try:
        args = ("--role", role, "--ha-listen", "0") if role else ()
        master, addr, ha = serve(os.path.join(root, "m"), *args)
        procs.append(master)
        if role:
            slave, _, _ = serve(
                os.path.join(root, "s"), "--role", "SLAVE", "--broker-id", "1", "--master-ha", ha
            )
            procs.append(slave)
        with MQAdmin(addr) as admin:
            admin.create_topic("B", 4)
        body = os.urandom(size)
        with Producer("bench-pg", namesrv_addr=addr) as p:
            deadline = time.monotonic() + 30
            while p.send(Message(topic="B", body=body)).send_status is not SendStatus.SEND_OK:
                if time.monotonic() > deadline:
                    raise RuntimeError("the slave did not connect within 30 s")
                time.sleep(0.1)
            return produce(p, n, body)
    finally:
        for proc in reversed(procs):
            stop(proc)
        shutil.rmtree(root, ignore_errors=True)


def table(single: dict[str, float], n: int, size: int) -> dict[str, dict[str, float]]:
    """The single server's produce figures (given) beside an ASYNC_MASTER's and a
    SYNC_MASTER's, each with one slave (measured now)."""
    return {
        "single": {k: single[k] for k in ("produce_batch32_msgs_per_s", "produce_one_msgs_per_s")},
        "async_master": bench(n, size, "ASYNC_MASTER"),
        "sync_master": bench(n, size, "SYNC_MASTER"),
    }


def print_table(columns: dict[str, dict[str, float]]) -> None:
    """The figures as rows, one column per setup."""
    cols = ("single", "async_master", "sync_master")
    print(f"{'figure':28}" + "".join(f"{c:>14}" for c in cols))
    for k in columns["single"]:
        print(f"{k:28}" + "".join(f"{columns[c][k]:14,.0f}" for c in cols))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores",
        "messages": args.messages,
        "size": args.size,
        **table(bench(args.messages, args.size, None), args.messages, args.size),
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print_table(results)


if __name__ == "__main__":
    main()
