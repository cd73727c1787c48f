"""A store's write path for single sends: one put per message, a put of 32, and ``put_many``.

    python bench/put_many.py --store mmap --messages 20000 --runs 3
    python bench/put_many.py --store lmdb --flush sync --messages 2000

Each message is 1 KiB with a unique id (``UNIQ_KEY``, as a producer sets it, so it is
indexed). Three ways to store the same messages, each on a fresh store:

- ``single``: one ``put`` of one message at a time (the served broker's single send today);
- ``batch32``: one ``put`` of 32 messages into one queue;
- ``put_many32``: one ``put_many`` of 32 one-message requests spread over 4 queues (the
  group commit of the single sends one event-loop wake-up brings).

Prints, per way, microseconds of the calling thread's CPU per call (a message for
``single``, 32 messages for the other two) and of wall time, the best of ``--runs``.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from mqcore import Kernel
from mqcore.message import PROPERTY_UNIQ_KEY, Message, system_message
from mqcore.storecaps import MultiQueuePut, PutRequest

TOPIC = "PutMany"


def _messages(n: int, size: int) -> list[Message]:
    body = b"x" * size
    return [
        system_message(
            topic=TOPIC, body=body, tags="T", properties={PROPERTY_UNIQ_KEY: f"0A00{i:028X}"}
        )
        for i in range(n)
    ]


def timed(calls: list[Callable[[], Any]], per_call: int = 1) -> tuple[float, float]:
    """Run ``calls``; (CPU us, wall us) of the calling thread per item, each call storing
    ``per_call`` items."""
    cpu, wall = time.thread_time(), time.perf_counter()
    for call in calls:
        call()
    n = len(calls) * per_call
    return (time.thread_time() - cpu) / n * 1e6, (time.perf_counter() - wall) / n * 1e6


def best_of(
    runs: int, run_once: Callable[[], dict[str, tuple[float, float]]]
) -> dict[str, tuple[float, float]]:
    """Each way's lowest CPU and lowest wall time over ``runs`` runs (ways interleaved)."""
    best: dict[str, tuple[float, float]] = {}
    for _ in range(runs):
        for way, (cpu, wall) in run_once().items():
            old = best.get(way)
            best[way] = (min(cpu, old[0]), min(wall, old[1])) if old else (cpu, wall)
    return best


def run_once(args: argparse.Namespace) -> dict[str, tuple[float, float]]:
    """One fresh store per way; returns {way: (CPU us, wall us) per call}."""
    msgs = _messages(args.messages, args.size)
    warm = msgs[:500]
    msgs = msgs[500:]
    groups = [msgs[i : i + 32] for i in range(0, len(msgs) - 31, 32)]
    ways: dict[str, Callable[[Any], list[Callable[[], Any]]]] = {
        "single": lambda st: [lambda m=m: st.put(TOPIC, 0, [m]) for m in msgs],
        "batch32": lambda st: [lambda g=g: st.put(TOPIC, 0, g) for g in groups],
        "put_many32": lambda st: [
            lambda g=g: st.put_many([PutRequest(TOPIC, i % 4, [m]) for i, m in enumerate(g)])
            for g in groups
        ],
    }
    out = {}
    for way, make in ways.items():
        path = Path(tempfile.mkdtemp(prefix="mqcore-put-many-"))
        try:
            with Kernel().open_store(args.store, path, flush_mode=args.flush) as store:
                if way == "put_many32" and not isinstance(store, MultiQueuePut):
                    continue
                for m in warm:
                    store.put(TOPIC, 0, [m])
                out[way] = timed(make(store))
        finally:
            shutil.rmtree(path, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the three ways ``--runs`` times and print the best of each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default="mmap")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--flush", choices=["async", "sync"], default="async")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    best = best_of(args.runs, lambda: run_once(args))
    if args.json:
        print(json.dumps({w: {"cpu_us": c, "wall_us": t} for w, (c, t) in best.items()}))
        return 0
    print(f"{args.store}, {args.flush} flush, {args.size}-byte messages with unique ids")
    print(f"{'way':<12} {'CPU us/call':>12} {'wall us/call':>13}")
    for way, (cpu, wall) in best.items():
        print(f"{way:<12} {cpu:>12.1f} {wall:>13.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
