"""Remote produce and consume: ``mqcore serve`` against Redis Streams, side by side in one run.

Both servers run as their own process on loopback, each driven by one Python client process
(this one): mqcore's remote Producer and PullConsumer, and redis-py. Messages are 1 KiB.

- mqcore: ``send_batch`` of 32 messages, ``send`` one message at a time, and pulling with
  ``PullConsumer.pull`` 32 at a time;
- Redis: ``XADD`` pipelined 32 at a time and one at a time, ``XREADGROUP`` with ``COUNT 32``.

Goals (issue 21): batch produce and consume at least 1.5x Redis's pipelined figures; one by
one at least Redis's. Needs ``redis-server`` on the PATH (Debian: ``apt install
redis-server``) and ``pip install redis`` (the ``bench`` dependency group)::

    python bench/remote.py --messages 100000 [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

BATCH = 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _timed(fn: Callable[[], int]) -> float:
    begin = time.perf_counter()
    n = fn()
    return n / (time.perf_counter() - begin)


# -- mqcore ------------------------------------------------------------------------------------


def bench_mqcore(n: int, size: int, store: str) -> dict[str, float]:
    from mqcore import Message, MessageQueue, Producer, PullConsumer, PullStatus

    data = tempfile.mkdtemp(prefix="mqcore-bench-")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from mqcore.cli import main; main()", "serve",
         "--listen", "127.0.0.1:0", "--data-dir", data, "--store", store],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        addr = proc.stdout.readline().split("listening on ")[1].split()[0]
        body = os.urandom(size)
        out: dict[str, float] = {}
        with Producer("bench-pg", namesrv_addr=addr) as p:
            from mqcore.client.transport_remote import RemoteTransport
            from mqcore.protocol import headers
            from mqcore.protocol.codes import RequestCode

            assert isinstance(p.broker, RemoteTransport)
            p.broker._call(
                addr, RequestCode.UPDATE_AND_CREATE_TOPIC,
                headers.CreateTopicRequestHeader(
                    topic="B", default_topic="TBW102", read_queue_nums=4, write_queue_nums=4,
                    perm=6, topic_filter_type="SINGLE_TAG"),
            )  # fmt: skip
            p.send(Message(topic="B", body=body))  # connect, route

            def batches() -> int:
                msgs = [Message(topic="B", body=body) for _ in range(BATCH)]
                for _ in range(n // BATCH):
                    p.send_batch(msgs)
                return (n // BATCH) * BATCH

            def singles() -> int:
                m = Message(topic="B", body=body)
                k = max(1000, n // 10)
                for _ in range(k):
                    p.send(m)
                return k

            out["produce_batch32_msgs_per_s"] = _timed(batches)
            out["produce_one_msgs_per_s"] = _timed(singles)
        with PullConsumer("bench-cg", namesrv_addr=addr) as c:
            mqs = sorted(c.fetch_subscribe_message_queues("B"))

            def consume() -> int:
                total = 0
                for mq in mqs:
                    offset = 0
                    while True:
                        res = c.pull(mq, "*", offset, BATCH)
                        if res.pull_status is not PullStatus.FOUND:
                            break
                        for m in res.msg_found_list:
                            m.body  # noqa: B018  (read each body, as a consumer would)
                        total += len(res.msg_found_list)
                        offset = res.next_begin_offset
                return total

            out["consume_msgs_per_s"] = _timed(consume)
            assert isinstance(mqs[0], MessageQueue)
        return out
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)


# -- Redis ------------------------------------------------------------------------------------


def bench_redis(n: int, size: int) -> dict[str, float]:
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        raise SystemExit("redis-server is not on the PATH (Debian: apt install redis-server)")
    port = _free_port()
    workdir = tempfile.mkdtemp(prefix="redis-bench-")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir],
        stdout=subprocess.DEVNULL,
    )
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        body = os.urandom(size)
        out: dict[str, float] = {}

        def pipelined() -> int:
            for _ in range(n // BATCH):
                pipe = r.pipeline(transaction=False)
                for _ in range(BATCH):
                    pipe.xadd("B", {"b": body})
                pipe.execute()
            return (n // BATCH) * BATCH

        def singles() -> int:
            k = max(1000, n // 10)
            for _ in range(k):
                r.xadd("S", {"b": body})
            return k

        out["produce_batch32_msgs_per_s"] = _timed(pipelined)
        out["produce_one_msgs_per_s"] = _timed(singles)
        r.xgroup_create("B", "g", id="0")

        def consume() -> int:
            total = 0
            while True:
                got = r.xreadgroup("g", "c", {"B": ">"}, count=BATCH)
                if not got:
                    return total
                for _, entries in got:
                    for _, fields in entries:
                        fields[b"b"]
                    total += len(entries)

        out["consume_msgs_per_s"] = _timed(consume)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--store", default="mmap")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {
        "machine": f"{os.cpu_count()} cores",
        "messages": args.messages,
        "size": args.size,
        "mqcore": bench_mqcore(args.messages, args.size, args.store),
        "redis": bench_redis(args.messages, args.size),
    }
    m, r = results["mqcore"], results["redis"]
    results["ratios"] = {k: m[k] / r[k] for k in m}
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{'figure':32} {'mqcore':>12} {'redis':>12} {'ratio':>7}")
    for k in m:
        print(f"{k:32} {m[k]:12,.0f} {r[k]:12,.0f} {m[k] / r[k]:7.2f}")


if __name__ == "__main__":
    main()
