"""The remoting layer alone: round trips and pipelined throughput against a trivial processor.

Run: ``python bench/remoting_echo.py [--requests 20000] [--size 1024] [--json]``

For each server configuration (worker-thread or inline dispatch, asyncio's or uvloop's event
loop when uvloop is installed) a server process answers every request with its body. The
client measures, with RocketMQ's JSON and binary headers: the synchronous round trip of one
thread, pipelined throughput of ``invoke_async`` from one thread, and throughput of 8 threads
calling ``invoke`` on one shared connection, and the CPU time client and server spend per
request in the pipelined phase (steadier than rates on a busy machine). Server and client run
in separate processes, as they would in use; nothing else is in the path (no broker, no
store).
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import multiprocessing
import os
import resource
import signal
import statistics
import sys
import time
from typing import Any

from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand, SerializeType
from mqcore.remoting.server import RemotingServer

ECHO = 1000


class Echo:
    """Answers every request with its own body."""

    def __init__(self, inline: bool) -> None:
        self.inline_codes = (ECHO,) if inline else ()

    def process(self, cmd: RemotingCommand, conn: Any) -> RemotingCommand:
        return RemotingCommand.response(0, body=cmd.body)


def _serve(dispatch: str, uvloop: bool, port_out: Any) -> None:
    server = RemotingServer(Echo(dispatch == "inline"), use_uvloop=uvloop)

    async def main() -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, server.close)
        await server.serve(lambda addr: port_out.put(addr[1]))

    if uvloop:
        import uvloop as uv

        uv.run(main())
    else:
        asyncio.run(main())


def _cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU seconds of a process (this one by default), all threads."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _measure(
    addr: str, kind: SerializeType, requests: int, size: int, server_pid: int
) -> dict[str, float]:
    body = b"x" * size

    def cmd() -> RemotingCommand:
        return RemotingCommand(ECHO, body=body, serialize_type=kind)

    with RemotingClient() as cli:
        for _ in range(300):
            cli.invoke(addr, cmd(), 5)
        n = max(1000, requests // 10)
        times = []
        for _ in range(n):
            t = time.perf_counter()
            cli.invoke(addr, cmd(), 5)
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        cpu_client, cpu_server = _cpu_seconds(), _cpu_seconds(server_pid)
        futures = [cli.invoke_async(addr, cmd(), 60) for _ in range(requests)]
        for f in futures:
            f.result()
        pipelined = requests / (time.perf_counter() - t)
        cpu_client = (_cpu_seconds() - cpu_client) / requests
        cpu_server = (_cpu_seconds(server_pid) - cpu_server) / requests

        def worker(k: int) -> None:
            for _ in range(k):
                cli.invoke(addr, cmd(), 30)

        t = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            list(pool.map(worker, [requests // 8] * 8))
        threaded = (requests // 8 * 8) / (time.perf_counter() - t)
    return {
        "rtt_median_us": statistics.median(times) * 1e6,
        "rtt_p99_us": sorted(times)[int(len(times) * 0.99)] * 1e6,
        "pipelined_req_per_s": pipelined,
        "threads8_req_per_s": threaded,
        "client_cpu_us_per_req": cpu_client * 1e6,
        "server_cpu_us_per_req": cpu_server * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        import uvloop  # noqa: F401

        loops = [False, True]
    except ImportError:
        loops = [False]
    ctx = multiprocessing.get_context("spawn")
    results = []
    for dispatch in ("thread", "inline"):
        for uv in loops:
            q = ctx.Queue()
            proc = ctx.Process(target=_serve, args=(dispatch, uv, q))
            proc.start()
            try:
                addr = f"127.0.0.1:{q.get(timeout=30)}"
                for kind in SerializeType:
                    row = {"dispatch": dispatch, "loop": "uvloop" if uv else "asyncio"}
                    row["header"] = kind.name
                    assert proc.pid is not None
                    row.update(_measure(addr, kind, args.requests, args.size, proc.pid))
                    results.append(row)
                    if not args.json:
                        print(
                            f"{dispatch:6} {row['loop']:7} {kind.name:8} "
                            f"rtt median {row['rtt_median_us']:7.0f} us  "
                            f"p99 {row['rtt_p99_us']:7.0f} us  "
                            f"pipelined {row['pipelined_req_per_s']:8.0f}/s  "
                            f"8 threads {row['threads8_req_per_s']:8.0f}/s  "
                            f"CPU/req client {row['client_cpu_us_per_req']:4.0f} us "
                            f"server {row['server_cpu_us_per_req']:4.0f} us",
                            flush=True,
                        )
            finally:
                proc.terminate()
                proc.join(10)
    if args.json:
        json.dump(results, sys.stdout, indent=1)
        print()


if __name__ == "__main__":
    main()
