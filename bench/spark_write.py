"""Rows per second writing a DataFrame to a topic with Spark, against ``mqcore bench`` produce.

    python bench/spark_write.py                       # mmap, 1,000,000 rows of 100 bytes
    python bench/spark_write.py --store lmdb --partitions 1,2 --json
    python bench/spark_write.py --replay              # also time `mqcore replay` of the rows
    python bench/spark_write.py --target local,network --partitions 1,2

``--target local,network`` writes the same cached DataFrame both ways in interleaved rounds:
into a fresh store directory (``path``) and to a running ``mqcore serve`` started by the
bench (``namesrv``; each round appends to the server's topic, and the bench checks that the
server holds every row). For each it reports rows/s by the wall clock of the whole job and
CPU seconds per million rows of the Spark JVM, of its Python workers and of the server
(from ``/proc``), and the network write's rate as a share of the local one.

The DataFrame (a ``body`` column of ``--size`` random-looking bytes, as ``mqcore bench``
writes, or with ``--columns full`` also tags, keys and a property) is built, split into N
partitions and cached before timing, so that a write measures the sink: Spark hands each
task's rows to its Python worker as Arrow batches, and the worker stores them with
``df.write.format("mqcore")`` into a fresh store directory. ``--warmup`` untimed writes
start the Python workers and let the JVM compile its code first; the best of ``--runs``
writes of each partition count is kept.

A store directory has one writer at a time, so the tasks of a write take the writer lock in
turn: *per partition* is the rows of one partition over the time its task spent putting
them, the figure to set against one producer
thread of ``mqcore bench`` (``--rows`` messages of ``--size`` bytes, batches of
``--bench-batch``, run here in a subprocess). The sink reports nothing back to the driver,
so that time is read from the store: the span of the records' store timestamps less the
N - 1 longest pauses between consecutive records (the lock passing from one task to the
next: a flush, a close and an open). Overall rows/s, by the wall clock of the whole job,
are printed beside it. ``--replay`` writes the rows to a store first and
times ``mqcore replay`` of that topic into another directory, on the bench's session.
Needs ``mqcore[spark]`` and Java.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

import structlog

_TS = struct.Struct(">q")
_POS_TS = 56  # the store timestamp in a record's header


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
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def frame(spark: Any, rows: int, size: int, partitions: int, full: bool) -> Any:
    """A cached DataFrame of ``rows`` rows in ``partitions`` partitions."""
    from pyspark.sql import functions as F

    digest = F.unhex(F.sha2(F.col("id").cast("string"), 256))  # 32 bytes
    body = F.substring(F.concat(*([digest] * (size // 32 + 1))), 1, size)
    df = spark.range(rows, numPartitions=partitions).select(body.alias("body"), "id")
    if full:
        df = df.select(
            "body",
            F.lit("TagA").alias("tags"),
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("keys"),
            F.create_map(F.lit("i"), F.col("id").cast("string")).alias("properties"),
        )
    else:
        df = df.select("body")
    df = df.cache()
    assert df.count() == rows
    return df


def write(df: Any, path: str, store: str) -> float:
    """Seconds to append ``df`` to topic W in a new store at ``path``."""
    shutil.rmtree(path, ignore_errors=True)
    started = time.perf_counter()
    (
        df.write.format("mqcore")
        .mode("append")
        .option("path", path)
        .option("store", store)
        .option("topic", "W")
        .option("queue_nums", "4")
        .save()
    )
    return time.perf_counter() - started


def stored(path: str, store: str, tasks: int) -> tuple[int, float]:
    """Messages in topic W at ``path``, and the seconds the ``tasks`` write tasks spent
    putting them: the span of their store timestamps less the ``tasks - 1`` longest pauses
    between two consecutive records (the writer lock passing from one task to the next:
    the last task's flush and close, the next one's open)."""
    from mqcore import Kernel

    stamps: list[int] = []
    with Kernel().open_store(store, os.path.join(path, "store"), read_only=True) as st:
        for q in st.queue_ids("W"):
            offset, high = st.min_offset("W", q), st.max_offset("W", q)
            while offset < high:
                got = st.get_raw("W", q, offset, max_count=8192, max_bytes=1 << 30)
                stamps.extend(_TS.unpack_from(r, _POS_TS)[0] for r in got.records)
                offset = got.next_offset
    if not stamps:
        return 0, 0.0
    stamps.sort()
    gaps = sorted((b - a for a, b in itertools.pairwise(stamps)), reverse=True)
    return len(stamps), (stamps[-1] - stamps[0] - sum(gaps[: tasks - 1])) / 1000


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds(pid: int, children: bool = True) -> float:
    """CPU seconds of process ``pid`` (with its waited-for children), 0 when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])  # utime, stime
    if children:
        ticks += int(fields[13]) + int(fields[14])  # cutime, cstime
    return ticks / _TICK


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid``."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


class Meters:
    """CPU seconds of the Spark JVM, its Python workers and the server, between two reads."""

    def __init__(self, spark: Any, server_pid: int | None) -> None:
        self.jvm = int(spark.sparkContext._jvm.ProcessHandle.current().pid())
        self.server = server_pid

    def read(self) -> dict[str, float]:
        """Cumulative CPU seconds now."""
        workers = descendants(self.jvm)
        return {
            "jvm": cpu_seconds(self.jvm, children=False),
            # Workers are forked by a daemon (its children's time counts once they exit).
            "python": sum(cpu_seconds(p) for p in workers),
            "server": cpu_seconds(self.server) if self.server else 0.0,
        }


def start_server(tmp: str) -> tuple[subprocess.Popen[str], str]:
    """``mqcore serve`` on a free port with its data in ``tmp``; the process and address."""
    proc = subprocess.Popen(
        [
            *(sys.executable, "-c", "from mqcore.cli import main; main()", "serve"),
            *("--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmp, "server")),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert "listening on" in line, line
    return proc, line.split("listening on ")[1].split()[0]


def write_network(df: Any, namesrv: str) -> float:
    """Seconds to append ``df`` to topic W of the server at ``namesrv``."""
    started = time.perf_counter()
    (
        df.write.format("mqcore")
        .mode("append")
        .option("namesrv", namesrv)
        .option("topic", "W")
        .option("queue_nums", "4")
        .save()
    )
    return time.perf_counter() - started


def server_count(namesrv: str) -> int:
    """Messages topic W holds on the server."""
    from mqcore.client.admin import MQAdmin
    from mqcore.errors import TopicNotExistError

    with MQAdmin(namesrv) as admin:
        try:
            table = admin.topic_stats("W").offset_table
        except TopicNotExistError:
            return 0
    return sum(o.max_offset - o.min_offset for o in table.values())


def side_by_side(args: Any, spark: Any, frames: dict[int, Any], tmp: str) -> dict[str, Any]:
    """Local and network writes of the same frames in interleaved rounds."""
    proc, namesrv = start_server(tmp)
    try:
        meters = Meters(spark, proc.pid)
        path = os.path.join(tmp, "target")
        targets = [t for t in ("local", "network") if t in args.target.split(",")]

        def once(target: str, n: int) -> tuple[float, dict[str, float]]:
            before_cpu = meters.read()
            if target == "local":
                seconds = write(frames[n], path, args.store)
                count, _ = stored(path, args.store, n)
                assert count == args.rows, (count, args.rows)
            else:
                before = server_count(namesrv)
                seconds = write_network(frames[n], namesrv)
                assert server_count(namesrv) - before == args.rows
            after_cpu = meters.read()
            return seconds, {k: after_cpu[k] - before_cpu[k] for k in after_cpu}

        for _ in range(args.warmup):
            for n in frames:
                for target in targets:
                    once(target, n)
        runs: dict[str, dict[int, list[tuple[float, dict[str, float]]]]] = {
            t: {n: [] for n in frames} for t in targets
        }
        for _ in range(args.runs):
            for n in frames:
                for target in targets:
                    runs[target][n].append(once(target, n))
        out: dict[str, Any] = {}
        for target in targets:
            for n in frames:
                best_s, cpu = min(runs[target][n], key=lambda r: r[0])
                per_million = 1e6 / args.rows
                out.setdefault(target, {})[str(n)] = {
                    "rows_per_s": round(args.rows / best_s),
                    "all_runs_s": [round(r[0], 2) for r in runs[target][n]],
                    "cpu_s_per_million": {k: round(v * per_million, 2) for k, v in cpu.items()},
                }
        if "local" in out and "network" in out:
            out["network_vs_local"] = {
                n: round(out["network"][n]["rows_per_s"] / out["local"][n]["rows_per_s"], 2)
                for n in out["local"]
            }
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stdout is not None:
            proc.stdout.close()


def mqcore_bench(store: str, messages: int, size: int, batch: int) -> float:
    """``produce_msgs_per_s`` of ``mqcore bench`` (a subprocess, as a user runs it)."""
    out = subprocess.run(
        [
            *(sys.executable, "-c", "from mqcore.cli import main; main()", "bench"),
            *("--store", store, "-n", str(messages)),
            *("--size", str(size), "--batch", str(batch), "--no-raw", "--json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout)["produce_msgs_per_s"])


def replay(df: Any, tmp: str, store: str, rows: int) -> float:
    """Seconds ``mqcore replay`` takes to copy ``rows`` messages into a new directory."""
    from mqcore.commands.replay import run_replay

    source = os.path.join(tmp, "replay-source")
    write(df, source, store)
    target = os.path.join(tmp, "replay-target")
    shutil.rmtree(target, ignore_errors=True)
    started = time.perf_counter()
    summary = run_replay(
        source=source, topic="W", target=target, to_topic="R", spark=df.sparkSession
    )
    seconds = time.perf_counter() - started
    assert summary["written"] == rows, summary
    return seconds


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="mmap")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--partitions", default="1,2")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--columns", choices=("body", "full"), default="body")
    parser.add_argument("--bench-batch", type=int, default=32, help="mqcore bench --batch")
    parser.add_argument("--replay", action="store_true", help="also time mqcore replay")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--target",
        default=None,
        help="local,network: write both ways side by side (interleaved rounds)",
    )
    args = parser.parse_args()
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    counts = [int(p) for p in args.partitions.split(",")]
    tmp = tempfile.mkdtemp(prefix="mqcore-spark-write-")
    load_before = round(os.getloadavg()[0], 2)
    result: dict[str, Any] = {
        "store": args.store,
        "rows": args.rows,
        "size": args.size,
        "columns": args.columns,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }
    if args.target:
        try:
            spark = session(max(2, max(counts)))
            try:
                frames = {
                    n: frame(spark, args.rows, args.size, n, args.columns == "full") for n in counts
                }
                result["side_by_side"] = side_by_side(args, spark, frames, tmp)
            finally:
                spark.stop()
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        result["load_avg_1m"] = {"before": load_before, "after": round(os.getloadavg()[0], 2)}
        if args.json:
            print(json.dumps(result))
            return
        sides = result["side_by_side"]
        for target in ("local", "network"):
            for n, rate in sides.get(target, {}).items():
                print(
                    f"{target:>7} write, {n} partition(s): {rate['rows_per_s']:>10,} rows/s; "
                    f"CPU s per million rows {rate['cpu_s_per_million']}; "
                    f"runs {rate['all_runs_s']} s"
                )
        if "network_vs_local" in sides:
            print(f"network / local: {sides['network_vs_local']}")
        print(f"load average (1 min): {result['load_avg_1m']}")
        return
    try:
        result["mqcore_bench_produce_msgs_per_s"] = round(
            mqcore_bench(args.store, args.rows, args.size, args.bench_batch)
        )
        spark = session(max(2, max(counts)))
        try:
            rates: dict[str, Any] = {}
            frames = {
                n: frame(spark, args.rows, args.size, n, args.columns == "full") for n in counts
            }
            path = os.path.join(tmp, "target")
            for _ in range(args.warmup):
                for n in counts:
                    write(frames[n], path, args.store)
            times: dict[int, list[float]] = {n: [] for n in counts}
            spans: dict[int, list[float]] = {n: [] for n in counts}
            for _ in range(args.runs):
                for n in counts:
                    times[n].append(write(frames[n], path, args.store))
                    count, span = stored(path, args.store, n)
                    assert count == args.rows, (count, args.rows)
                    spans[n].append(span)
            for n in counts:
                best = min(times[n])
                rates[str(n)] = {
                    "rows_per_s": round(args.rows / best),
                    # One writer at a time: the tasks put one after the other, so a
                    # partition's rows over its own putting time is all rows over the
                    # tasks' putting times added up (lock hand-overs left out).
                    "rows_per_s_per_partition": round(args.rows / max(min(spans[n]), 1e-3)),
                    "all_runs_s": [round(t, 2) for t in times[n]],
                    "putting_s": [round(t, 2) for t in spans[n]],
                }
            result["spark_write"] = rates
            if args.replay:
                result["replay_s"] = round(
                    replay(frames[counts[-1]], tmp, args.store, args.rows), 2
                )
        finally:
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_avg_1m"] = {"before": load_before, "after": round(os.getloadavg()[0], 2)}
    produce = result["mqcore_bench_produce_msgs_per_s"]
    for rate in result["spark_write"].values():
        rate["vs_mqcore_bench"] = round(rate["rows_per_s_per_partition"] / produce, 2)
    if args.json:
        print(json.dumps(result))
        return
    print(f"mqcore bench produce (batch {args.bench_batch}): {produce:>12,} msgs/s")
    for n, rate in result["spark_write"].items():
        print(
            f"spark write, {n} partition(s): {rate['rows_per_s']:>10,} rows/s overall, "
            f"{rate['rows_per_s_per_partition']:>10,} rows/s per partition while putting "
            f"({rate['vs_mqcore_bench']}x of mqcore bench); runs {rate['all_runs_s']} s, "
            f"putting {rate['putting_s']} s"
        )
    if "replay_s" in result:
        print(f"mqcore replay of {args.rows:,} messages: {result['replay_s']} s")
    print(f"load average (1 min): {result['load_avg_1m']}")


if __name__ == "__main__":
    main()
