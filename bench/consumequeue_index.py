"""Rates of the mmap store's ConsumeQueue and IndexService on their own, and the peak RSS.

    python bench/consumequeue_index.py                      # 1,000,000 units, 200,000 keys
    python bench/consumequeue_index.py --units 4000000 --json

ConsumeQueue: pack and append batches of 32 units, then read the whole queue back in batches of
32 (decoding each unit), with RocketMQ's 300,000 units per file and at most 4 files mapped.
A queue of 4,000,000 units indexes about 4 GiB of 1 KiB messages, so its peak RSS shows
whether reading a long backlog keeps memory flat. IndexService: index one key per record
(a 32-digit message id, as UNIQ_KEY looks) in batches of 32, then query a sample of them.
Runs in a temporary directory removed afterwards.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import struct
import sys
import tempfile
import time

import structlog

from mqcore.plugins.store_mmap.consumequeue import UNIT, ConsumeQueue
from mqcore.plugins.store_mmap.indexfile import IndexService

BATCH = 32


def _rss_mib() -> float:
    # ru_maxrss is in KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_consume_queue(root: str, count: int) -> dict[str, float]:
    """Append then read ``count`` units; returns units/s for each phase and peak RSS."""
    queue = ConsumeQueue(root, "BenchTopic", 0)
    pack_batch = struct.Struct(">" + "qiq" * BATCH).pack  # the store packs a batch at once
    started = time.perf_counter()
    at = 0
    while at < count:
        flat = []
        for i in range(at, at + BATCH):
            flat += (i * 1024, 1024, 7)
        at = queue.append_units(at, pack_batch(*flat))
    queue.flush()
    append_s = time.perf_counter() - started
    started = time.perf_counter()
    seen = 0
    offset = 0
    while offset < queue.max_offset:
        view = queue.read_units(offset, BATCH)
        for _ in UNIT.iter_unpack(view):
            seen += 1
        offset += len(view) // 20
        del view
    read_s = time.perf_counter() - started
    queue.close()
    assert seen == at
    return {
        "cq_units": at,
        "cq_append_units_per_s": at / append_s,
        "cq_read_units_per_s": seen / read_s,
        "cq_peak_rss_mib": _rss_mib(),
    }


def bench_index(root: str, count: int) -> dict[str, float]:
    """Index ``count`` keys, then query every 97th; returns keys/s and queries/s."""
    index = IndexService(root, max_hash_slots=count, max_index_count=count * 4)
    started = time.perf_counter()
    for first in range(0, count, BATCH):
        index.put_keys(
            ("BenchTopic", (f"7F00000100002A9F{i:016X}",), i * 1024 + 1, 1_700_000_000_000 + i)
            for i in range(first, min(count, first + BATCH))
        )
    index.flush()
    put_s = time.perf_counter() - started
    sample = range(0, count, 97)
    started = time.perf_counter()
    for i in sample:
        found = index.query("BenchTopic", f"7F00000100002A9F{i:016X}", 32)
        assert i * 1024 + 1 in found
    query_s = time.perf_counter() - started
    index.close()
    return {
        "index_keys": count,
        "index_put_keys_per_s": count / put_s,
        "index_queries_per_s": len(sample) / query_s,
    }


def main(argv: list[str] | None = None) -> None:
    """Parse options, run both benchmarks, print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="mqcore-bench-") as root:
        results = bench_consume_queue(root, args.units)
        results.update(bench_index(root, args.keys))
    if args.json:
        json.dump(results, sys.stdout)
        print()
        return
    for name, value in results.items():
        print(f"{name:28} {value:>14,.0f}")


if __name__ == "__main__":
    main()
