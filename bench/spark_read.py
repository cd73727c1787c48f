"""Records per second reading a topic with Spark (1, 2, 4 partitions) against a plain loop.

    python bench/spark_read.py                          # lmdb, 400,000 messages of 100 bytes
    python bench/spark_read.py --store mmap --messages 1000000 --markdown

One topic with one queue is written, then read:

- *plain loop*: one Python process calls the public store API (``get`` in batches of 1024)
  and reads each message's header fields, tags, keys, properties and body, as the Spark
  source does for each row;
- *spark, N partitions*: ``spark.read.format("mqcore")`` with ``max_records_per_partition``
  set so that the queue is read as N slices, every column materialised by Spark's ``noop``
  sink, on a ``local[N]`` session (at least 2 threads).

A first Spark job warms the Python workers up; the best of ``--runs`` is kept. Needs
``mqcore[spark]`` and Java; the figures depend on the cores this machine really has free.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import time
from typing import Any

import structlog

from mqcore import Kernel, Message


def write_store(store: str, path: str, count: int, size: int) -> None:
    """``count`` messages with ``size``-byte bodies, tags, keys and one property, in queue 0."""
    body = os.urandom(size)
    with Kernel().open_store(store, path) as st:
        for start in range(0, count, 1000):
            n = min(1000, count - start)
            st.put(
                "B",
                0,
                [
                    Message(
                        topic="B",
                        body=body,
                        tags="TagA",
                        keys=f"k{start + i}",
                        properties={"i": str(start + i)},
                    )
                    for i in range(n)
                ],
            )


def plain_loop(store: str, path: str) -> tuple[int, float]:
    """Read everything through the public API; returns (records, seconds)."""
    started = time.perf_counter()
    seen = 0
    with Kernel().open_store(store, path, read_only=True) as st:
        offset, end = st.min_offset("B", 0), st.max_offset("B", 0)
        while offset < end:
            got = st.get("B", 0, offset, max_count=1024, max_bytes=64 * 1024 * 1024)
            # The fields a Spark row holds.
            rows = [
                (
                    m.queue_offset,
                    m.commitlog_offset,
                    m.msg_id,
                    m.store_timestamp,
                    m.tags,
                    m.keys,
                    m.properties,
                    m.body,
                )
                for m in got.messages
            ]
            seen += len(rows)
            offset = got.next_offset
    return seen, time.perf_counter() - started


def spark_read(spark: Any, path: str, count: int, partitions: int) -> float:
    """Seconds to read every column of every record as ``partitions`` slices."""
    per = -(-count // partitions)
    df = (
        spark.read.format("mqcore")
        .option("path", path)
        .option("topic", "B")
        .option("max_records_per_partition", str(per))
        .load()
    )
    assert df.rdd.getNumPartitions() == partitions
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def session(threads: int) -> Any:
    """A local SparkSession with the mqcore source registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from mqcore.contrib.spark import register

    spark = (
        SparkSession.builder.master(f"local[{threads}]")
        .config("spark.ui.enabled", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="lmdb")
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--partitions", default="1,2,4")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    # A script, not the library: it may decide that logs go to stderr, warnings only.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    counts = [int(p) for p in args.partitions.split(",")]
    tmp = tempfile.mkdtemp(prefix="mqcore-spark-bench-")
    path = os.path.join(tmp, "store")
    try:
        write_store(args.store, path, args.messages, args.size)
        loop = min(plain_loop(args.store, path)[1] for _ in range(args.runs))
        spark = session(max(2, max(counts)))
        try:
            spark_read(spark, path, args.messages, 2)  # warm the Python workers up
            times = {
                n: min(spark_read(spark, path, args.messages, n) for _ in range(args.runs))
                for n in counts
            }
        finally:
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rates = {"plain loop": args.messages / loop}
    rates.update(
        {f"spark, {n} partition{'s' * (n > 1)}": args.messages / t for n, t in times.items()}
    )
    result = {
        "store": args.store,
        "messages": args.messages,
        "size": args.size,
        "cpus": os.cpu_count(),
        # Other work on the machine skews a parallel speed-up: report how busy it was.
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "records_per_s": {k: round(v) for k, v in rates.items()},
    }
    if 1 in times and 2 in times:
        result["speedup_2_vs_1"] = round(times[1] / times[2], 2)
        result["spark2_vs_loop"] = round(rates["spark, 2 partitions"] / rates["plain loop"], 2)
    if args.json:
        print(json.dumps(result))
        return
    if args.markdown:
        print(
            f"{args.messages:,} messages of {args.size} bytes, {args.store} store, "
            f"{os.cpu_count()} CPUs, load average {result['load_avg_1m']}\n"
        )
        print("| reader | records/s |\n|---|---:|")
        for name, rate in rates.items():
            print(f"| {name} | {rate:,.0f} |")
    else:
        for name, rate in rates.items():
            print(f"{name:>22}: {rate:>12,.0f} records/s")
    for key in ("speedup_2_vs_1", "spark2_vs_loop"):
        if key in result:
            print(f"{key}: {result[key]}")


if __name__ == "__main__":
    main()
