"""Send and pull throughput through the public client API, beside the store-level figures.

Run: ``python bench/client.py --store mmap --messages 50000 --size 1024``

Phases (1 KiB bodies by default): synchronous ``Producer.send``, ``Producer.send_batch`` of 32,
``Producer.send_async`` (all futures awaited), then ``PullConsumer.pull`` of 32 over every
queue, and a ``PushConsumer`` draining the topic with a no-op listener. Each phase uses a fresh
topic on one embedded broker in a temporary directory. Prints one line per phase, or JSON.
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
from pathlib import Path

from mqcore import (
    Broker,
    ConsumeConcurrentlyStatus,
    ConsumeFromWhere,
    Message,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
)

QUEUES = 8


def _messages(topic: str, n: int, size: int) -> list[Message]:
    body = os.urandom(size)
    return [Message(topic=topic, body=body, tags="bench", keys=f"k{i}") for i in range(n)]


def _rate(n: int, size: int, since: float, cpu_since: float) -> dict[str, float]:
    """Wall-clock rate since ``since`` (``perf_counter``), and CPU time per message since
    ``cpu_since`` (``process_time``: every thread of the process), which a loaded, shared
    machine distorts far less."""
    seconds = time.perf_counter() - since
    cpu = time.process_time() - cpu_since
    return {
        "msgs_per_s": round(n / seconds, 1),
        "mb_per_s": round(n * size / seconds / 1e6, 2),
        "seconds": round(seconds, 3),
        "cpu_us_per_msg": round(cpu * 1e6 / max(n, 1), 2),
    }


def run(store: str, n: int, size: int) -> dict[str, dict[str, float]]:
    """All phases on one broker; returns phase -> figures."""
    out: dict[str, dict[str, float]] = {}
    tmp = tempfile.mkdtemp(prefix="mqcore-bench-client-")
    try:
        with Broker(Path(tmp), store=store) as broker:
            for topic in ("Sync", "Batch", "Async"):
                broker.create_topic(topic, queue_nums=QUEUES)
            with Producer("bench", broker=broker) as p:
                msgs = _messages("Sync", n, size)
                t, cpu = time.perf_counter(), time.process_time()
                for m in msgs:
                    p.send(m)
                out["send_sync"] = _rate(n, size, t, cpu)

                msgs = _messages("Batch", n, size)
                t, cpu = time.perf_counter(), time.process_time()
                for i in range(0, n, 32):
                    p.send_batch(msgs[i : i + 32])
                out["send_batch32"] = _rate(n, size, t, cpu)

                msgs = _messages("Async", n, size)
                t, cpu = time.perf_counter(), time.process_time()
                futures = [p.send_async(m) for m in msgs]
                for f in futures:
                    f.result(timeout=60)
                out["send_async"] = _rate(n, size, t, cpu)

            with PullConsumer("bench-pull", broker=broker) as c:
                t, cpu = time.perf_counter(), time.process_time()
                got = 0
                for mq in sorted(c.fetch_subscribe_message_queues("Batch")):
                    offset = 0
                    while True:
                        r = c.pull(mq, "*", offset, 32)
                        if r.pull_status is not PullStatus.FOUND:
                            break
                        for m in r.msg_found_list:
                            got += len(m.body_view) > 0
                        offset = r.next_begin_offset
                out["pull32"] = _rate(got, size, t, cpu)

            done = threading.Event()
            count = [0]
            lock = threading.Lock()

            def listener(msgs: list, ctx: object) -> ConsumeConcurrentlyStatus:  # type: ignore[type-arg]
                with lock:
                    count[0] += len(msgs)
                    if count[0] >= n:
                        done.set()
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

            push = PushConsumer(
                "bench-push",
                broker=broker,
                consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
                consume_message_batch_max_size=32,
            )
            push.subscribe("Async")
            push.register_message_listener(listener)
            t, cpu = time.perf_counter(), time.process_time()
            push.start()
            done.wait(timeout=300)
            out["push_consume"] = _rate(count[0], size, t, cpu)
            push.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> None:
    """Command-line entry point."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="mmap")
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import logging

    import structlog

    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    figures = run(args.store, args.messages, args.size)
    if args.json:
        print(json.dumps({"store": args.store, "messages": args.messages, **figures}))
        return
    print(f"store={args.store} messages={args.messages} size={args.size}")
    for phase, f in figures.items():
        print(
            f"{phase:14s} {f['msgs_per_s']:>12,.0f} msgs/s {f['mb_per_s']:>9.1f} MB/s "
            f"{f['cpu_us_per_msg']:>8.1f} us CPU/msg"
        )


if __name__ == "__main__":
    main()
