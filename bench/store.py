"""Quick throughput figures of the mmap store through its public API (not a unit test).

    python bench/store.py                          # 100,000 x 1 KiB, batches of 32, async
    python bench/store.py --messages 200000 --size 100 --batch 1
    python bench/store.py --sync-threads 8         # also SYNC_FLUSH group commit, 8 producers

Phases: produce (``put``), consume as ``MessageExt`` (``get``, reading every body), consume
raw records (``get_raw``). Each line gives messages/s by wall clock and by the CPU time of
the thread doing the work: on a machine shared with other jobs, the second is the steadier.
The best of ``--runs`` runs (each on a fresh directory) is printed.
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from mqcore import Kernel
from mqcore.message import Message

TOPIC = "BenchTopic"


def _quiet() -> None:
    # A benchmark script may configure logging for itself (the library never does).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def _timed(fn: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - wall, time.thread_time() - cpu


def run_once(args: argparse.Namespace, directory: Path) -> dict[str, tuple[float, float]]:
    """One produce/consume round; returns {phase: (wall msgs/s, cpu msgs/s)}."""
    rng = random.Random(5)
    pool = [Message(topic=TOPIC, body=rng.randbytes(args.size)) for _ in range(1024)]
    batches = [pool[i : i + args.batch] for i in range(0, len(pool) - args.batch + 1, args.batch)]
    n = args.messages // args.batch * args.batch
    out: dict[str, tuple[float, float]] = {}
    with Kernel(autoload=False).open_store("mmap", directory, flush_mode=args.flush) as store:
        put = store.put

        def produce() -> None:
            for i in range(n // args.batch):
                put(TOPIC, 0, batches[i % len(batches)])

        wall, cpu = _timed(produce)
        out["produce"] = (n / wall, n / cpu)

        def consume(fetch: Any, raw: bool) -> None:
            offset = 0
            while offset < n:
                result = fetch(TOPIC, 0, offset, max_count=32, max_bytes=32 * (args.size + 512))
                if raw:
                    for record in result.records:
                        len(record)
                else:
                    for message in result.messages:
                        message.body  # noqa: B018 - a consumer reads each body
                offset = result.next_offset

        wall, cpu = _timed(lambda: consume(store.get, False))
        out["consume MessageExt"] = (n / wall, n / cpu)
        wall, cpu = _timed(lambda: consume(store.get_raw, True))
        out["consume raw"] = (n / wall, n / cpu)
    return out


def group_commit(args: argparse.Namespace, directory: Path) -> tuple[float, float]:
    """SYNC_FLUSH with ``--sync-threads`` producers putting one message each: (puts/s, fsyncs/s)."""
    threads = args.sync_threads
    per_thread = max(1, args.sync_puts // threads)
    body = b"x" * args.size
    with Kernel(autoload=False).open_store("mmap", directory, flush_mode="sync") as store:

        def producer(qid: int) -> None:
            msg = [Message(topic=TOPIC, body=body)]
            for _ in range(per_thread):
                store.put(TOPIC, qid, msg)

        workers = [threading.Thread(target=producer, args=(q,)) for q in range(threads)]
        start = time.perf_counter()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        seconds = time.perf_counter() - start
        fsyncs = store._flusher.group_commits
    return threads * per_thread / seconds, fsyncs / seconds


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print one line per phase."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--flush", choices=["async", "sync"], default="async")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sync-threads", type=int, default=0)
    parser.add_argument("--sync-puts", type=int, default=4000)
    args = parser.parse_args(argv)
    _quiet()
    best: dict[str, tuple[float, float]] = {}
    for _ in range(args.runs):
        directory = Path(tempfile.mkdtemp(prefix="mqcore-bench-store-"))
        try:
            for phase, (wall, cpu) in run_once(args, directory / "store").items():
                old = best.get(phase, (0.0, 0.0))
                best[phase] = (max(old[0], wall), max(old[1], cpu))
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    print(
        f"mmap store: {args.messages} x {args.size} B, batch {args.batch}, {args.flush} flush, "
        f"best of {args.runs}"
    )
    for phase, (wall, cpu) in best.items():
        print(f"  {phase:<20} {wall:>12,.0f} msgs/s   ({cpu:,.0f} msgs/s of thread CPU time)")
    if args.sync_threads:
        directory = Path(tempfile.mkdtemp(prefix="mqcore-bench-store-"))
        try:
            puts, fsyncs = group_commit(args, directory / "store")
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        print(
            f"  SYNC_FLUSH, {args.sync_threads} threads x 1 message per put: "
            f"{puts:,.0f} puts/s, {fsyncs:,.0f} fsyncs/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
