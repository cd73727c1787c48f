"""mqcore's stores side by side with what a Python user would pick instead, in one run.

Every system stores the same bodies (random, ``--size`` bytes, cycled from a pool of 1024)
and reads them back. Each run uses fresh files in a new temporary directory, and the rounds
are interleaved (every system once, then every system again...) so a noisy neighbour hits
everyone alike. Every run is kept and printed; the median of ``--runs`` is compared.

    python bench/peers.py                       # 100,000 x 1 KiB, median of 3
    python bench/peers.py --json > results.json
    python bench/peers.py --plot docs/benchmarks.png --save results.json --markdown

Peers: SQLite in WAL mode (``synchronous=NORMAL``: no fsync per commit, like async flush)
with one row or 1000 rows per transaction, consumed by ``SELECT`` of id ranges of 1000; raw
LMDB (``putmulti`` append, 1000 per transaction, no sync; consumed by cursor iteration);
persist-queue's ``SQLiteQueue``; diskcache's ``Deque``; and the floor: length-prefixed records
written with ``os.write`` or copied into a preallocated ``mmap``, parsed back.
mqcore is measured by :func:`mqcore.benchmark.run_bench`, the code of ``mqcore bench``.
"""

from __future__ import annotations

import argparse
import json
import logging
import mmap
import os
import platform
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from mqcore.benchmark import BenchConfig, message_pool, run_bench

Rates = dict[str, float]  # phase ("produce", "consume", ...) -> messages per second
_LEN = struct.Struct(">I")

# --- peers -------------------------------------------------------------------------------


def _rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def _now() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(start: tuple[float, float]) -> tuple[float, float]:
    # Wall-clock seconds, and CPU seconds of the whole process (steadier on a shared machine;
    # a store's background threads, such as mqcore's page warmer, are counted too).
    return time.perf_counter() - start[0], time.process_time() - start[1]


def _rates(n: int, **phases: tuple[float, float]) -> Rates:
    """``{phase: wall-clock rate, phase + "_cpu": rate per CPU second of the process}``."""
    out: Rates = {}
    for name, (wall, cpu) in phases.items():
        out[name] = _rate(n, wall)
        out[f"{name}_cpu"] = _rate(n, cpu)
    return out


def _cycle(bodies: list[bytes], n: int) -> list[bytes]:
    # The list of references costs 8 bytes a message, not a copy of the bodies.
    k = len(bodies)
    return [bodies[i % k] for i in range(n)]


def sqlite_queue(rows_per_tx: int) -> Callable[[Path, list[bytes], int], Rates]:
    """A WAL-mode queue table; produce = INSERT, ``rows_per_tx`` rows per transaction."""

    def run(path: Path, bodies: list[bytes], n: int) -> Rates:
        db = sqlite3.connect(path / "queue.db", isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("CREATE TABLE queue (id INTEGER PRIMARY KEY, body BLOB NOT NULL)")
        data = _cycle(bodies, n)
        t0 = _now()
        if rows_per_tx == 1:
            for body in data:
                db.execute("BEGIN")
                db.execute("INSERT INTO queue (body) VALUES (?)", (body,))
                db.execute("COMMIT")
        else:
            for i in range(0, n, rows_per_tx):
                db.execute("BEGIN")
                db.executemany(
                    "INSERT INTO queue (body) VALUES (?)",
                    [(b,) for b in data[i : i + rows_per_tx]],
                )
                db.execute("COMMIT")
        produce = _since(t0)
        del data
        got = 0
        t0 = _now()
        for start in range(1, n + 1, 1000):
            rows = db.execute(
                "SELECT id, body FROM queue WHERE id >= ? AND id < ?", (start, start + 1000)
            ).fetchall()
            for _id, body in rows:
                got += len(body) > 0
        consume = _since(t0)
        db.close()
        assert got == n, f"sqlite read {got} of {n}"
        return _rates(n, produce=produce, consume=consume)

    return run


def raw_lmdb(path: Path, bodies: list[bytes], n: int) -> Rates:
    """LMDB without mqcore: 8-byte big-endian keys, ``putmulti`` append, 1000 per txn."""
    import lmdb

    env = lmdb.open(
        str(path / "lmdb"),
        map_size=4 * n * (len(bodies[0]) + 64) + (64 << 20),
        sync=False,
        metasync=False,
    )
    keys = struct.Struct(">Q").pack
    k = len(bodies)
    t0 = _now()
    for i in range(0, n, 1000):
        with env.begin(write=True) as txn:
            txn.cursor().putmulti(
                [(keys(j), bodies[j % k]) for j in range(i, min(n, i + 1000))], append=True
            )
    produce = _since(t0)
    got = 0
    t0 = _now()
    with env.begin() as txn:
        for _key, value in txn.cursor():
            got += len(value) > 0
    consume = _since(t0)
    env.close()
    assert got == n, f"lmdb read {got} of {n}"
    return _rates(n, produce=produce, consume=consume)


def persist_queue(path: Path, bodies: list[bytes], n: int) -> Rates:
    """persist-queue's ``SQLiteQueue`` with its defaults (a commit per ``put``)."""
    import persistqueue

    q = persistqueue.SQLiteQueue(str(path / "pq"), auto_commit=True)
    k = len(bodies)
    t0 = _now()
    for i in range(n):
        q.put(bodies[i % k])
    produce = _since(t0)
    got = 0
    t0 = _now()
    for _ in range(n):
        got += len(q.get(block=False)) > 0
    consume = _since(t0)
    del q
    assert got == n, f"persist-queue read {got} of {n}"
    return _rates(n, produce=produce, consume=consume)


def diskcache_deque(path: Path, bodies: list[bytes], n: int) -> Rates:
    """diskcache's ``Deque``: ``append`` then ``popleft``."""
    import diskcache

    dq = diskcache.Deque(directory=str(path / "dq"))
    k = len(bodies)
    t0 = _now()
    for i in range(n):
        dq.append(bodies[i % k])
    produce = _since(t0)
    got = 0
    t0 = _now()
    popleft = dq.popleft
    for _ in range(n):
        got += len(popleft()) > 0
    consume = _since(t0)
    dq.cache.close()
    assert got == n, f"diskcache read {got} of {n}"
    return _rates(n, produce=produce, consume=consume)


def _parse(buf: Any, n: int) -> int:
    # Length-prefixed records back to bytes objects: what a consumer of the floor gets.
    unpack = _LEN.unpack_from
    pos = got = 0
    for _ in range(n):
        (size,) = unpack(buf, pos)
        body = bytes(buf[pos + 4 : pos + 4 + size])
        got += len(body) > 0
        pos += 4 + size
    return got


def floor_write(path: Path, bodies: list[bytes], n: int) -> Rates:
    """The floor: one ``os.write`` of length prefix + body per message; parse them back."""
    fd = os.open(path / "log", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    k = len(bodies)
    records = [_LEN.pack(len(b)) + b for b in bodies]
    write = os.write
    t0 = _now()
    for i in range(n):
        write(fd, records[i % k])
    produce = _since(t0)
    t0 = _now()
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 24):
        chunks.append(chunk)
    data = b"".join(chunks)
    del chunks
    got = _parse(memoryview(data), n)
    consume = _since(t0)
    os.close(fd)
    assert got == n, f"floor read {got} of {n}"
    return _rates(n, produce=produce, consume=consume)


def floor_mmap(path: Path, bodies: list[bytes], n: int) -> Rates:
    """The floor: records copied into a ``posix_fallocate``-d file's ``mmap``; parse them back."""
    size = len(bodies[0])
    total = n * (size + 4)
    fd = os.open(path / "mlog", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
    os.ftruncate(fd, total)
    if hasattr(os, "posix_fallocate"):
        # Preallocated means the blocks exist: a sparse file would time block allocation.
        os.posix_fallocate(fd, 0, total)
    mm = mmap.mmap(fd, total)
    k = len(bodies)
    pack_into = _LEN.pack_into
    t0 = _now()
    pos = 0
    for i in range(n):
        body = bodies[i % k]
        pack_into(mm, pos, len(body))
        mm[pos + 4 : pos + 4 + len(body)] = body
        pos += 4 + len(body)
    produce = _since(t0)
    t0 = _now()
    view = memoryview(mm)
    got = _parse(view, n)
    consume = _since(t0)
    view.release()
    mm.close()
    os.close(fd)
    assert got == n, f"floor mmap read {got} of {n}"
    return _rates(n, produce=produce, consume=consume)


# --- mqcore, through the code of `mqcore bench` -----------------------------------------


def mqcore_store(store: str, batch: int, consume: bool = True) -> Callable[..., Rates]:
    """``mqcore bench --store STORE --batch BATCH`` in this process."""

    def run(path: Path, bodies: list[bytes], n: int) -> Rates:
        config = BenchConfig(
            store=store,
            messages=n,
            size=len(bodies[0]),
            batch=batch,
            consume=consume,
            data_dir=str(path / store),
        )
        result = run_bench(config)
        out: Rates = {}
        for name, phase in result.phases.items():
            out[name] = phase.msgs_per_s
            if phase.cpu_seconds:
                out[f"{name}_cpu"] = phase.messages / phase.cpu_seconds
        return out

    return run


SYSTEMS: dict[str, Callable[[Path, list[bytes], int], Rates]] = {
    "mqcore mmap batch 32": mqcore_store("mmap", 32),
    "mqcore mmap batch 1": mqcore_store("mmap", 1, consume=False),
    "mqcore lmdb batch 32": mqcore_store("lmdb", 32),
    "sqlite wal tx1000": sqlite_queue(1000),
    "sqlite wal tx1": sqlite_queue(1),
    "raw lmdb putmulti": raw_lmdb,
    "persist-queue sqlite": persist_queue,
    "diskcache deque": diskcache_deque,
    "floor os.write": floor_write,
    "floor mmap": floor_mmap,
}

#: Peers that manage a few thousand messages per second: they store ``--slow-messages``
#: messages (their rate hardly depends on the volume) so a run takes seconds, not minutes.
SLOW = {"persist-queue sqlite", "diskcache deque"}

#: (mqcore system, phase, peer system, phase, target ratio): the issue's acceptance table
TARGETS = [
    ("mqcore mmap batch 32", "produce", "sqlite wal tx1000", "produce", 3.0),
    ("mqcore mmap batch 32", "produce", "floor mmap", "produce", 0.30),
    ("mqcore mmap batch 1", "produce", "sqlite wal tx1", "produce", 4.0),
    ("mqcore mmap batch 32", "consume", "sqlite wal tx1000", "consume", 0.5),
    ("mqcore mmap batch 32", "consume_raw", "sqlite wal tx1000", "consume", 1.0),
    ("mqcore lmdb batch 32", "produce", "raw lmdb putmulti", "produce", 0.4),
    ("mqcore lmdb batch 32", "consume", "raw lmdb putmulti", "consume", 0.4),
]


# --- running and reporting ---------------------------------------------------------------


def _os_name() -> str:
    # Distribution and kernel version (without the kernel's local build suffix).
    name = platform.system()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                name = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return f"{name}, {platform.system()} {platform.release().split('-')[0]}"


def machine() -> dict[str, Any]:
    """CPU model, cores, RAM, Python and OS of this machine."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram = int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "ram_gib": round(ram, 1),
        "python": platform.python_version(),
        "os": _os_name(),
        "sqlite": sqlite3.sqlite_version,
    }


def run_all(
    n: int,
    size: int,
    runs: int,
    only: list[str] | None,
    log: Callable[[str], None],
    slow_n: int,
) -> tuple[dict[str, dict[str, list[float]]], dict[str, int]]:
    """Every system ``runs`` times, interleaved.

    Returns ``{system: {phase: [rate per run]}}`` and the message count each system stored.
    """
    bodies = [m.body for m in message_pool(size, 1)]
    chosen = {k: v for k, v in SYSTEMS.items() if not only or any(o in k for o in only)}
    results: dict[str, dict[str, list[float]]] = {k: {} for k in chosen}
    counts = {k: min(n, slow_n) if k in SLOW else n for k in chosen}
    for r in range(runs):
        for name, fn in chosen.items():
            path = Path(tempfile.mkdtemp(prefix="mqcore-peers-"))
            try:
                t0 = time.perf_counter()
                rates = fn(path, bodies, counts[name])
            except Exception as exc:  # a missing package or store: report it, carry on
                log(f"run {r + 1}/{runs} {name}: FAILED {type(exc).__name__}: {exc}")
                rates = {}
            finally:
                shutil.rmtree(path, ignore_errors=True)
            for phase, rate in rates.items():
                results[name].setdefault(phase, []).append(rate)
            shown = "  ".join(f"{p} {v:,.0f}/s" for p, v in rates.items())
            took = time.perf_counter() - t0
            log(f"run {r + 1}/{runs} {name:<22} {shown}  ({counts[name]:,} msgs, {took:.1f}s)")
    return results, counts


def medians(results: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    """The median rate of each system and phase."""
    return {
        name: {phase: statistics.median(v) for phase, v in phases.items() if v}
        for name, phases in results.items()
    }


def ratios(med: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """The acceptance table: each target ratio, the ratio reached, and pass or fail.

    ``reached`` compares wall-clock medians (what the targets are about); ``reached_cpu``
    compares rates per CPU second of the process, which a busy machine disturbs less.
    """
    out = []
    for ours, our_phase, peer, peer_phase, target in TARGETS:
        a = med.get(ours, {}).get(our_phase)
        b = med.get(peer, {}).get(peer_phase)
        a_cpu = med.get(ours, {}).get(f"{our_phase}_cpu")
        b_cpu = med.get(peer, {}).get(f"{peer_phase}_cpu")
        reached = a / b if a is not None and b else None
        out.append(
            {
                "figure": f"{ours} {our_phase}",
                "against": f"{peer} {peer_phase}",
                "mqcore_msgs_per_s": a,
                "peer_msgs_per_s": b,
                "target": target,
                "reached": reached,
                "reached_cpu": a_cpu / b_cpu if a_cpu is not None and b_cpu else None,
                "pass": reached is not None and reached >= target,
            }
        )
    return out


def _rows(report: dict[str, Any]) -> list[tuple[str, str, int, float, float | None, str]]:
    # (system, phase, messages, wall median, CPU median, wall-clock runs) per measured phase
    rows = []
    for name, phases in report["results"].items():
        med = report["medians"][name]
        for phase, values in phases.items():
            if phase.endswith("_cpu"):
                continue
            runs = ", ".join(f"{v:,.0f}" for v in values)
            count = report["messages_per_system"][name]
            rows.append((name, phase, count, med[phase], med.get(f"{phase}_cpu"), runs))
    return rows


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def print_tables(report: dict[str, Any]) -> None:
    """Rates per system and phase (every run and the median), then the ratio table."""
    print(f"\n{report['messages']:,} messages x {report['size']} B, median of {report['runs']}")
    print(f"{'system':<24}{'phase':<13}{'msgs':>9}{'msgs/s':>12}{'per CPU s':>12}  runs (msgs/s)")
    for name, phase, count, wall, cpu, runs in _rows(report):
        cpu_text = "n/a" if cpu is None else f"{cpu:,.0f}"
        print(f"{name:<24}{phase:<13}{count:>9,}{wall:>12,.0f}{cpu_text:>12}  [{runs}]")
    print(f"\n{'mqcore figure':<34}{'against':<30}{'target':>8}{'reached':>9}{'CPU':>8}  result")
    for row in report["ratios"]:
        verdict = "PASS" if row["pass"] else "FAIL" if row["reached"] is not None else "n/a"
        print(
            f"{row['figure']:<34}{row['against']:<30}{row['target']:>7.2f}x"
            f"{_x(row['reached']):>9}{_x(row['reached_cpu']):>8}  {verdict}"
        )


def markdown(report: dict[str, Any]) -> str:
    """The two tables of :func:`print_tables` in Markdown, for docs/benchmarks.md."""
    out = [
        "| system | phase | messages | median msgs/s | MB/s | per CPU second | runs (msgs/s) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for name, phase, count, wall, cpu, runs in _rows(report):
        mb = wall * report["size"] / 1e6
        cpu_text = "n/a" if cpu is None else f"{cpu:,.0f}"
        out.append(
            f"| {name} | {phase} | {count:,} | {wall:,.0f} | {mb:,.1f} | {cpu_text} | {runs} |"
        )
    out += [
        "",
        "| mqcore figure | against | mqcore msgs/s | peer msgs/s | target | reached "
        "| reached (CPU) | result |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in report["ratios"]:
        if row["reached"] is None:
            cells = ["n/a", "n/a", f"{row['target']:.2f}x", "n/a", "n/a", "not measured"]
        else:
            cells = [
                f"{row['mqcore_msgs_per_s']:,.0f}",
                f"{row['peer_msgs_per_s']:,.0f}",
                f"{row['target']:.2f}x",
                _x(row["reached"]),
                _x(row["reached_cpu"]),
                "pass" if row["pass"] else "**fail**",
            ]
        out.append(f"| {row['figure']} | {row['against']} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Parse options, run everything, print tables or JSON, optionally plot."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--slow-messages",
        type=int,
        default=10_000,
        help="message count for the slow peers (persist-queue, diskcache)",
    )
    parser.add_argument("--only", action="append", help="run systems whose name contains this")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--plot", metavar="PNG", help="save a bar chart of the medians")
    parser.add_argument("--save", metavar="JSON", help="also write the JSON report to a file")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    args = parser.parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    load_before = os.getloadavg()
    t0 = time.time()
    # The stores log at debug level; a benchmark run only wants warnings and errors.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    results, counts = run_all(
        args.messages, args.size, args.runs, args.only, log, args.slow_messages
    )
    med = medians(results)
    report = {
        "messages": args.messages,
        "size": args.size,
        "runs": args.runs,
        "machine": machine(),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t0)),
        "wall_seconds": round(time.time() - t0, 1),
        "messages_per_system": counts,
        "results": results,
        "medians": med,
        "ratios": ratios(med),
    }
    if args.plot:
        from plot import plot_medians  # bench/plot.py, beside this script

        plot_medians(report, args.plot)
        log(f"plot saved to {args.plot}")
    if args.save:
        Path(args.save).write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    elif args.markdown:
        print(markdown(report))
    else:
        print_tables(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
