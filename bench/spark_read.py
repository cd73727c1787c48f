"""Records per second reading a topic with Spark (1, 2, 4 partitions) against a plain loop.

    python bench/spark_read.py                          # lmdb, 2,000,000 messages of 100 bytes
    python bench/spark_read.py --store mmap --markdown
    python bench/spark_read.py --store mmap --source local,network --partitions 1
    python bench/spark_read.py --store mmap --source local,network --pull-cap 32

With ``--source local,network`` the topic is written into a broker data directory that a
``mqcore serve`` child process then serves: every round reads it through ``path`` (the
files) and through ``namesrv`` (pulls from the server), one after the other, and the CPU
seconds of the server are reported beside the JVM's and the Python workers'.
``--pull-cap 32`` makes the server answer at most 32 messages a pull, as Apache RocketMQ
does (``max_transfer_count_on_message_in_memory``).

One topic with one queue is written, then read:

- *plain loop*: one Python process calls the public store API (``get`` in batches of 1024)
  and reads each message's header fields, tags, keys, properties and body, as the Spark
  source does for each row;
- *spark, N partitions*: ``spark.read.format("mqcore")`` with ``max_records_per_partition``
  set so that the queue is read as N slices, every column materialised by Spark's ``noop``
  sink, on a ``local[N]`` session (at least 2 threads).

Before timing, ``--warmup`` rounds read the whole topic once per partition count, then run
ten one-record queries: they start the (reused) Python workers and let the JVM compile the
code every query runs, which otherwise keeps a second core busy during the timed reads. The
timed reads then go round-robin over the partition counts (``--runs`` rounds, best kept), so
that a change in the machine's load hits every count alike. A read of one record gives the
fixed cost of a query, and the CPU time of other processes during the reads is reported.

On Linux the CPU time of each read is split between the JVM's task threads (Arrow batches to
rows), the rest of the JVM (JIT compiler, GC, scheduling) and the Python workers (reading the
store, building Arrow batches): the parallel speed-up of N partitions is bounded by how much
of that CPU time one partition needs beyond its Python worker. Needs ``mqcore[spark]`` and
Java; the figures depend on the cores this machine really has free.
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


def write_broker(store: str, data_dir: str, count: int, size: int) -> None:
    """The same messages as :func:`write_store`, into a broker data directory (``store/``
    and the topic table), so that ``mqcore serve`` can serve them."""
    from mqcore import Broker

    with Broker(data_dir, store=store) as broker:
        broker.create_topic("B", queue_nums=1)
    write_store(store, os.path.join(data_dir, "store"), count, size)


class Server:
    """``mqcore serve`` on a data directory, in a child process (its CPU time is measured)."""

    def __init__(self, data_dir: str, store: str, pull_cap: int) -> None:
        import subprocess

        cmd = [
            sys.executable, "-c", "from mqcore.cli import main; main()", "serve",
            "--listen", "127.0.0.1:0", "--data-dir", data_dir, "--store", store,
        ]  # fmt: skip
        if pull_cap:
            cmd += ["--set", f"max_transfer_count_on_message_in_memory={pull_cap}"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert "listening on" in line, f"mqcore serve did not start: {line!r}"
        self.address = line.split("listening on ")[1].split()[0]

    def cpu_seconds(self) -> float:
        """CPU seconds the server has used so far."""
        info = _cpu_ticks(self.proc.pid)
        return 0.0 if info is None else info[1] / (os.sysconf("SC_CLK_TCK") or 100)

    def stop(self) -> None:
        """SIGTERM, and wait."""
        self.proc.terminate()
        self.proc.wait(timeout=60)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


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


def _cpu_ticks(pid: int) -> tuple[int, int] | None:
    """(parent pid, CPU ticks of the process and its reaped children), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[1]), sum(int(x) for x in fields[11:15])


class CpuMeter:
    """CPU seconds of the Spark JVM (task threads apart) and of its Python workers (Linux).

    Reads ``/proc``: the JVM is this process's ``java`` child, the Python workers are the
    JVM's descendants. Elsewhere :meth:`snapshot` returns ``None`` and nothing is reported.
    """

    def __init__(self) -> None:
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self.jvm = self._find_jvm()

    def _find_jvm(self) -> int | None:
        if not os.path.isdir("/proc"):
            return None
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            info = _cpu_ticks(int(entry))
            try:
                with open(f"/proc/{entry}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if info is not None and info[0] == os.getpid() and comm == "java":
                return int(entry)
        return None

    def _jvm_threads(self, jvm: int) -> tuple[int, int]:
        task = other = 0
        for tid in os.listdir(f"/proc/{jvm}/task"):
            try:
                with open(f"/proc/{jvm}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            ticks = int(fields[11]) + int(fields[12])
            # Spark names the threads running tasks "Executor task launch worker ...".
            if stat[stat.index("(") + 1 :].startswith("Executor task"):
                task += ticks
            else:
                other += ticks
        return task, other

    def _python(self, jvm: int) -> int:
        parents: dict[int, tuple[int, int]] = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit() and (info := _cpu_ticks(int(entry))) is not None:
                parents[int(entry)] = info
        family, total, grew = {jvm}, 0, True
        while grew:
            grew = False
            for pid, (ppid, ticks) in parents.items():
                if ppid in family and pid not in family:
                    family.add(pid)
                    total += ticks
                    grew = True
        return total

    @staticmethod
    def _machine() -> int:
        """Busy CPU ticks of the whole machine (steal included: a VM's host took them)."""
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
        return sum(fields) - fields[3] - fields[4]  # all but idle and iowait

    def snapshot(self) -> tuple[float, ...] | None:
        """CPU seconds so far: JVM task threads, rest of the JVM, Python workers, others.

        *Others* is every other process on the machine (this one, the driver, aside).
        """
        if self.jvm is None or not os.path.isdir(f"/proc/{self.jvm}"):
            return None
        machine = self._machine()
        task, other = self._jvm_threads(self.jvm)
        python = self._python(self.jvm)
        driver = _cpu_ticks(os.getpid())
        mine = task + other + python + (driver[1] if driver else 0)
        return tuple(t / self.tick for t in (task, other, python, machine - mine))


def spark_read(spark: Any, path: str, count: int, partitions: int, **options: str) -> float:
    """Seconds to read every column of every record as ``partitions`` slices (``path``: a
    directory, or ``namesrv=HOST:PORT`` to read from a server)."""
    per = -(-count // partitions)
    where = ("namesrv", path[8:]) if path.startswith("namesrv=") else ("path", path)
    reader = spark.read.format("mqcore").option(*where).option("topic", "B")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.option("max_records_per_partition", str(per)).load()
    assert df.rdd.getNumPartitions() == partitions
    started = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - started


def session(threads: int, conf: dict[str, str] | None = None) -> Any:
    """A local SparkSession with the mqcore source registered (``conf``: extra settings)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from mqcore.contrib.spark import register

    builder = (
        SparkSession.builder.master(f"local[{threads}]")
        .config("spark.ui.enabled", "false")
        .config("spark.python.worker.reuse", "true")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def measure(
    spark: Any, path: str, count: int, counts: list[int], runs: int, warmup: int
) -> dict[str, Any]:
    """Warm up, then time ``runs`` round-robin rounds over ``counts``; the best of each."""
    for _ in range(warmup):
        for n in counts:
            spark_read(spark, path, count, n)
        # Short queries run the per-query code (planning, scheduling, task serialisation)
        # often enough for the JIT compiler to finish with it before the timed reads.
        for _ in range(10):
            spark_read(spark, path, count, 1, end_offset="1")
    meter = CpuMeter()
    times: dict[int, list[float]] = {n: [] for n in counts}
    cpu: dict[int, list[tuple[float, ...]]] = {n: [] for n in counts}
    for _ in range(runs):
        for n in counts:
            before = meter.snapshot()
            times[n].append(spark_read(spark, path, count, n))
            after = meter.snapshot()
            if before is not None and after is not None:
                spent = [b - a for a, b in zip(before, after, strict=True)]
                # A worker that ended brings all its CPU time into its parent's count at
                # once, some of it from before the read: never report less than nothing.
                spent[3] = max(0.0, spent[3])
                cpu[n].append(tuple(spent))
    # The fixed cost of a query: the same read, cut to one record.
    overhead = min(spark_read(spark, path, count, 1, end_offset="1") for _ in range(runs))
    return {"times": times, "cpu": cpu, "overhead": overhead}


def compare_sources(args: argparse.Namespace, counts: list[int], sources: list[str]) -> None:
    """``--source local,network``: the same topic through ``path`` and through ``namesrv``,
    interleaved rounds; records/s and CPU seconds per million records of each."""
    tmp = tempfile.mkdtemp(prefix="mqcore-spark-bench-")
    data_dir = os.path.join(tmp, "data")
    load_before = round(os.getloadavg()[0], 2)
    server: Server | None = None
    try:
        write_broker(args.store, data_dir, args.messages, args.size)
        server = Server(data_dir, args.store, args.pull_cap)
        paths = {"local": data_dir, "network": f"namesrv={server.address}"}
        spark = session(max(2, max(counts)), dict(c.split("=", 1) for c in args.conf))
        try:
            for _ in range(args.warmup):
                for source in sources:
                    for n in counts:
                        spark_read(spark, paths[source], args.messages, n)
                    for _ in range(5):
                        spark_read(spark, paths[source], args.messages, 1, end_offset="1")
            meter = CpuMeter()
            times: dict[str, list[float]] = {}
            cpu: dict[str, list[tuple[float, ...]]] = {}
            for _ in range(args.runs):
                for source in sources:
                    for n in counts:
                        key = f"{source}, {n} partition{'s' * (n > 1)}"
                        before, served = meter.snapshot(), server.cpu_seconds()
                        times.setdefault(key, []).append(
                            spark_read(spark, paths[source], args.messages, n)
                        )
                        after, served = meter.snapshot(), server.cpu_seconds() - served
                        if before is not None and after is not None:
                            spent = [b - a for a, b in zip(before, after, strict=True)]
                            cpu.setdefault(key, []).append((*spent[:3], served))
        finally:
            spark.stop()
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    rates = {k: args.messages / min(t) for k, t in times.items()}
    per_m = 1e6 / args.messages
    result: dict[str, Any] = {
        "store": args.store,
        "messages": args.messages,
        "size": args.size,
        "pull_cap": args.pull_cap,
        "cpus": os.cpu_count(),
        "load_avg_1m": {"before": load_before, "after": round(os.getloadavg()[0], 2)},
        "records_per_s": {k: round(v) for k, v in rates.items()},
        "all_runs_records_per_s": {
            k: [round(args.messages / t) for t in ts] for k, ts in times.items()
        },
        "cpu_s_per_million": {
            k: {
                name: round(sum(c[i] for c in rows) / len(rows) * per_m, 2)
                for i, name in enumerate(("jvm_tasks", "jvm_other", "python", "server"))
            }
            for k, rows in cpu.items()
        },
    }
    for n in counts:
        local = f"local, {n} partition{'s' * (n > 1)}"
        network = f"network, {n} partition{'s' * (n > 1)}"
        if local in rates and network in rates:
            result[f"network_vs_local_{n}"] = round(rates[network] / rates[local], 2)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{args.messages:,} messages of {args.size} bytes, {args.store} store, pull cap "
        f"{args.pull_cap or 'none'}, {os.cpu_count()} CPUs, load average {load_before} before, "
        f"{result['load_avg_1m']['after']} after\n"
    )
    print("| reader | records/s | CPU s per million: JVM tasks / JVM other / Python / server |")
    print("|---|---:|---|")
    for key, rate in rates.items():
        split = result["cpu_s_per_million"].get(key, {})
        print(f"| {key} | {rate:,.0f} | {' / '.join(str(v) for v in split.values())} |")
    for key, value in result.items():
        if key.startswith("network_vs_local"):
            print(f"{key}: {value}")
    print(f"every run (records/s): {result['all_runs_records_per_s']}")


def main() -> None:
    """Run the benchmark and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="lmdb")
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds of reads")
    parser.add_argument("--partitions", default="1,2,4")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )
    parser.add_argument(
        "--builder",
        choices=("c", "python"),
        default="c",
        help="column builder of the Spark workers: C, or its pure-Python reference "
        "(MQCORE_NO_SPEEDUPS=1 in the workers)",
    )
    parser.add_argument(
        "--source",
        default="local",
        help="local, network or local,network: read through path, from mqcore serve, or both",
    )
    parser.add_argument(
        "--pull-cap", type=int, default=0, help="the server's cap on messages per pull (network)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = parser.parse_args()
    # A script, not the library: it may decide that logs go to stderr, warnings only.
    structlog.configure(
        wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )
    counts = [int(p) for p in args.partitions.split(",")]
    if args.builder == "python":
        os.environ["MQCORE_NO_SPEEDUPS"] = "1"  # inherited by the JVM and its Python workers
    sources = [s.strip() for s in args.source.split(",") if s.strip()]
    if sources != ["local"]:
        unknown = set(sources) - {"local", "network"}
        if unknown:
            parser.error(f"--source takes local and network, not {', '.join(sorted(unknown))}")
        compare_sources(args, counts, sources)
        return
    tmp = tempfile.mkdtemp(prefix="mqcore-spark-bench-")
    path = os.path.join(tmp, "store")
    # Other work on the machine skews a parallel speed-up: report how busy it was.
    load_before = round(os.getloadavg()[0], 2)
    try:
        write_store(args.store, path, args.messages, args.size)
        loop = min(plain_loop(args.store, path)[1] for _ in range(args.runs))
        spark = session(max(2, max(counts)), dict(c.split("=", 1) for c in args.conf))
        try:
            found = measure(spark, path, args.messages, counts, args.runs, args.warmup)
        finally:
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    times = {n: min(t) for n, t in found["times"].items()}
    rates = {"plain loop": args.messages / loop}
    rates.update(
        {f"spark, {n} partition{'s' * (n > 1)}": args.messages / t for n, t in times.items()}
    )
    result: dict[str, Any] = {
        "store": args.store,
        "messages": args.messages,
        "size": args.size,
        "cpus": os.cpu_count(),
        "load_avg_1m": {"before": load_before, "after": round(os.getloadavg()[0], 2)},
        "python": platform.python_version(),
        "spark_conf": args.conf,
        "builder": args.builder,
        "records_per_s": {k: round(v) for k, v in rates.items()},
        "all_runs_records_per_s": {
            n: [round(args.messages / t) for t in ts] for n, ts in found["times"].items()
        },
        "query_overhead_s": round(found["overhead"], 3),
    }
    if any(found["cpu"].values()):
        # Mean CPU seconds of one read, per million records; and how many cores the rest of
        # the machine kept busy meanwhile (what a parallel speed-up could not use).
        per_m = 1e6 / args.messages
        result["cpu_s_per_million"] = {
            n: {
                key: round(sum(c[i] for c in rows) / len(rows) * per_m, 2)
                for i, key in enumerate(("jvm_tasks", "jvm_other", "python"))
            }
            for n, rows in found["cpu"].items()
            if rows
        }
        result["other_processes_cores"] = {
            n: round(sum(c[3] for c in rows) / sum(found["times"][n]), 2)
            for n, rows in found["cpu"].items()
            if rows
        }
    if 1 in times and 2 in times:
        result["speedup_2_vs_1"] = round(times[1] / times[2], 2)
        result["spark2_vs_loop"] = round(rates["spark, 2 partitions"] / rates["plain loop"], 2)
        split = result.get("cpu_s_per_million", {})
        if 1 in split and 2 in split and os.cpu_count():
            # One partition takes about its Python worker's CPU time (the JVM's share runs
            # alongside on another core); two need all their CPU time spread over the free
            # cores, and each worker's half on one core. Their ratio bounds the speed-up.
            total = sum(split[2].values())
            need = max(total / os.cpu_count(), split[2]["python"] / 2)
            result["speedup_bound_idle"] = round(split[1]["python"] / need, 2)
    if args.json:
        print(json.dumps(result))
        return
    if args.markdown:
        print(
            f"{args.messages:,} messages of {args.size} bytes, {args.store} store, "
            f"{os.cpu_count()} CPUs, load average {load_before} before, "
            f"{result['load_avg_1m']['after']} after\n"
        )
        print("| reader | records/s |\n|---|---:|")
        for name, rate in rates.items():
            print(f"| {name} | {rate:,.0f} |")
        print()
    else:
        for name, rate in rates.items():
            print(f"{name:>22}: {rate:>12,.0f} records/s")
    print(f"load average (1 min): {load_before} before, {result['load_avg_1m']['after']} after")
    print(f"every run (records/s): {result['all_runs_records_per_s']}")
    print(f"one-record query: {result['query_overhead_s']} s")
    if args.conf:
        print(f"spark settings: {' '.join(args.conf)}")
    for n, split in result.get("cpu_s_per_million", {}).items():
        others = result["other_processes_cores"][n]
        print(f"CPU s per million records, {n} partition(s): {split}; others: {others} cores")
    for key in ("speedup_2_vs_1", "spark2_vs_loop", "speedup_bound_idle"):
        if key in result:
            print(f"{key}: {result[key]}")


if __name__ == "__main__":
    main()
