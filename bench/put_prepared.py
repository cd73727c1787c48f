"""A store's write path for the served broker's plain single sends: records prepared ahead.

    python bench/put_prepared.py --store mmap --messages 32000 --runs 3
    python bench/put_prepared.py --profile group16

Each message is 1 KiB with a unique id, prepared once ahead as the server prepares a plain
single send (one record, its ``UNIQ_KEY`` beside it, the client's address as born host).
Two ways to store them, each on a fresh store:

- ``alone``: one ``put_prepared`` of one record at a time (a send that came alone);
- ``group16``: one ``put_many_prepared`` of 16 one-record requests over 4 queues (the group
  commit of 16 connections' sends, one event-loop wake-up).

Prints, per way, microseconds of the calling thread's CPU per record (and of wall time), the
best of ``--runs``; ``--profile WAY`` prints a cProfile of one run of that way instead.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import logging
import os
import pstats
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from put_many import best_of, timed  # bench/put_many.py: timing and best of runs

from mqcore import Kernel, codec
from mqcore.message import Message
from mqcore.storecaps import PreparedMultiPut, PreparedPutRequest

TOPIC = "PutPrepared"
GROUP = 16
QUEUES = 4


def _records(n: int, size: int) -> list[tuple[Any, str, str]]:
    """``n`` sends as the server has them: (prepared record, unique id, born host)."""
    body = b"x" * size
    now = time.time_ns() // 1_000_000
    out = []
    for i in range(n):
        record = codec.prepare([Message(topic=TOPIC, body=body, tags="T")], now, topic=TOPIC)[0]
        out.append((record, f"0A000001{i:024X}", f"10.1.2.{i % GROUP}:4567"))
    return out


def _ways(sends: list[tuple[Any, str, str]]) -> dict[str, Callable[[Any], list[Callable[[], Any]]]]:
    groups = [
        [
            PreparedPutRequest(TOPIC, i % QUEUES, [rec], [uniq], host)
            for i, (rec, uniq, host) in enumerate(sends[g : g + GROUP])
        ]
        for g in range(0, len(sends) - GROUP + 1, GROUP)
    ]
    return {
        "alone": lambda st: [
            lambda r=r, u=u, h=h, q=i % QUEUES: st.put_prepared(TOPIC, q, [r], [u], born_host=h)
            for i, (r, u, h) in enumerate(sends)
        ],
        "group16": lambda st: [lambda g=g: st.put_many_prepared(g) for g in groups],
    }


def run_once(args: argparse.Namespace, only: str | None = None) -> dict[str, tuple[float, float]]:
    """One fresh store per way; returns {way: (CPU us, wall us) per record}."""
    sends = _records(args.messages + 512, args.size)
    warm, sends = sends[:512], sends[512:]
    out = {}
    for way, make in _ways(sends).items():
        if only is not None and way != only:
            continue
        path = Path(tempfile.mkdtemp(prefix="mqcore-put-prepared-"))
        try:
            with Kernel().open_store(args.store, path, flush_mode=args.flush) as store:
                if way == "group16" and not isinstance(store, PreparedMultiPut):
                    continue
                for i, (r, u, h) in enumerate(warm):
                    store.put_prepared(TOPIC, i % QUEUES, [r], [u], born_host=h)
                calls = make(store)
                if only is not None:
                    prof = cProfile.Profile()
                    prof.runcall(timed, calls, 1)
                    pstats.Stats(prof).sort_stats("tottime").print_stats(20)
                    continue
                out[way] = timed(calls, GROUP if way == "group16" else 1)
        finally:
            shutil.rmtree(path, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """Run both ways ``--runs`` times, interleaved, and print the best of each."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", default="mmap")
    parser.add_argument("--messages", type=int, default=32_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--flush", choices=["async", "sync"], default="async")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", choices=["alone", "group16"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    if args.profile:
        run_once(args, args.profile)
        return 0
    best = best_of(args.runs, lambda: run_once(args))
    if args.json:
        print(json.dumps({w: {"cpu_us": c, "wall_us": t} for w, (c, t) in best.items()}))
        return 0
    print(f"{args.store}, {args.flush} flush, {args.size}-byte records with unique ids")
    print(f"{'way':<10} {'CPU us/record':>14} {'wall us/record':>15}")
    for way, (cpu, wall) in best.items():
        print(f"{way:<10} {cpu:>14.1f} {wall:>15.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
