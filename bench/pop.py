"""Receive+ack throughput of SimpleConsumers (pop) against the pull consumer, on the same data.

Run: ``python bench/pop.py --messages 20000 --size 256 --consumers 1,4``

One broker (in a temporary directory), one topic of 4 queues filled once; each phase reads
it all with a group of its own, so every phase sees the same records:

- ``pull``: one ``PullConsumer`` pulling 32 at a time over every queue, committing each
  queue's offset after each pull (what a classic consumer's ack amounts to);
- ``pop xN``: N ``SimpleConsumer`` threads of one group, each ``receive(32, 60 s)`` then
  ``ack`` of every message, until all are acked;
- ``pop xN ack_batch``: the same with the first N, acking each receive's messages with one
  ``ack_batch`` (BATCH_ACK_MESSAGE).

Both transports in one run: ``embedded`` (the broker in this process) and ``remote`` (the
same broker behind a remoting server on loopback, clients over TCP). Prints a Markdown table,
or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import Any

from mqcore import Broker, Message, MessageQueue, Producer, PullConsumer, SimpleConsumer

QUEUES = 4
TOPIC = "PopBench"


def _fill(broker: Broker, n: int, size: int) -> None:
    body = os.urandom(size)
    with Producer("bench-pg", broker=broker) as p:
        for i in range(0, n, 64):
            p.send_batch([Message(topic=TOPIC, body=body) for _ in range(min(64, n - i))])


def _pull(target: Any, group: str, n: int) -> int:
    got = 0
    with PullConsumer(group, broker=target) as c:
        for q in range(QUEUES):
            mq = MessageQueue(TOPIC, "broker-a", q)
            offset = 0
            while True:
                r = c.pull(mq, "*", offset, 32)
                msgs = r.messages
                if not msgs:
                    break
                got += sum(1 for m in msgs if m.body)
                offset = r.next_begin_offset
                c.update_consume_offset(mq, offset)
    return got


def _pop(target: Any, group: str, n: int, consumers: int, batch: bool = False) -> int:
    lock = threading.Lock()
    done = [0]
    errors: list[BaseException] = []

    def run() -> None:
        try:
            with SimpleConsumer(group, broker=target, subscriptions={TOPIC: "*"},
                                await_duration=0.2) as c:  # fmt: skip
                while True:
                    with lock:
                        if done[0] >= n:
                            return
                    msgs = c.receive(32, 60.0)
                    if batch:
                        c.ack_batch([m for m in msgs if m.body])
                    else:
                        for m in msgs:
                            if m.body:
                                c.ack(m)
                    with lock:
                        done[0] += len(msgs)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(consumers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return done[0]


def _timed(fn: Any, *args: Any) -> dict[str, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    count = fn(*args)
    seconds = time.perf_counter() - t0
    return {
        "messages": count,
        "msgs_per_s": round(count / seconds, 1),
        "seconds": round(seconds, 3),
        "cpu_us_per_msg": round((time.process_time() - c0) * 1e6 / max(count, 1), 1),
    }


def run(store: str, n: int, size: int, consumers: list[int]) -> dict[str, dict[str, Any]]:
    """Every phase on both transports; ``transport/phase`` -> figures."""
    from mqcore.remoting.server import RemotingServer
    from mqcore.server.processor import BrokerProcessor

    out: dict[str, dict[str, Any]] = {}
    tmp = tempfile.mkdtemp(prefix="mqcore-bench-pop-")
    try:
        with Broker(tmp, store=store) as broker:
            broker.create_topic(TOPIC, queue_nums=QUEUES)
            _fill(broker, n, size)
            processor = BrokerProcessor(broker, "")
            server = RemotingServer(processor, "127.0.0.1", 0)
            host, port = server.start()
            processor.address = addr = f"{host}:{port}"
            try:
                for transport, target in (("embedded", broker), ("remote", addr)):
                    out[f"{transport}/pull"] = _timed(_pull, target, f"pull-{transport}", n)
                    for k in consumers:
                        out[f"{transport}/pop x{k}"] = _timed(
                            _pop, target, f"pop-{transport}-{k}", n, k
                        )
                    k = consumers[0]
                    out[f"{transport}/pop x{k} ack_batch"] = _timed(
                        _pop, target, f"pop-{transport}-{k}-batch", n, k, True
                    )
            finally:
                server.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    """Parse the options, run, print."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="mmap")
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--consumers", default="1,4", help="SimpleConsumer counts, comma-separated")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    consumers = [int(c) for c in args.consumers.split(",") if c]
    result = run(args.store, args.messages, args.size, consumers)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    print(f"{args.messages} messages of {args.size} B, {QUEUES} queues, store {args.store}\n")
    print("| transport | phase | msgs/s | seconds | CPU µs/msg |")
    print("|---|---|---:|---:|---:|")
    for key, fig in result.items():
        transport, phase = key.split("/")
        print(
            f"| {transport} | {phase} | {fig['msgs_per_s']:,.0f} | {fig['seconds']} | "
            f"{fig['cpu_us_per_msg']} |"
        )


if __name__ == "__main__":
    main()
