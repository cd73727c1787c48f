"""Timer messages: enqueue rate beside plain produce, memory with many pending, precision.

Run from the repository root::

    python bench/timer.py --store mmap --messages 200000            # rates
    python bench/timer.py --store mmap --pending 1000000 --span 3600  # memory and precision

*Rates* (per store, through the embedded broker's ``send_message``, batches of ``--batch``):

- ``store put``: the store alone (``store.put`` of plain messages, as ``mqcore bench``);
- ``plain``: messages without a timer, stored in their topic;
- ``plain + 1 property``: the same with one property each (a timer message carries one);
- ``timer send``: the same messages with ``deliver_time_ms`` (spread over ``--span`` s), which
  the broker stores in the timer topic;
- ``timer wheel``: the timer scheduler taking those held messages into its timer log and
  wheel (``run_due`` with a clock that stands still, so nothing is delivered);
- ``timer enqueue``: both, end to end (messages / (send time + wheel time)).

Each rate is printed twice: by wall time (``*_msgs_per_s``) and by CPU time of the process,
every thread (``*_cpu_msgs_per_s``), which other load on the machine distorts far less.

*Pending* (``--pending N``): N timers spread over ``--span`` s are enqueued; the process's
anonymous memory (``RssAnon``, what Python objects take; file pages of the store and the
wheel are ``RssFile``) is shown before, after enqueueing and during delivery. The clock is
then moved across the whole span in steps of ``--step-ms``, delivering everything; each
delivered message carries ``TIMER_OUT_MS`` (its time) and ``TIMER_DEQUEUE_MS`` (the clock when
it was delivered), so earliness and lateness are measured exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from mqcore import Broker, Kernel, Message
from mqcore.store import TIMER_TOPIC


class Clock:
    """A settable clock in ms."""

    def __init__(self) -> None:
        self.now = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return self.now


def _rss() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon", "RssFile", "VmRSS")):
                name, value, _ = line.split()
                out[name.rstrip(":")] = int(value) * 1024
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _broker(path: Path, store: str, clock: Clock, **kw: Any) -> Broker:
    b = Broker(
        path, store=store, timer_scheduler_options={"clock": clock},
        flush_delay_offset_interval_ms=3_600_000, **kw,
    )  # fmt: skip
    b.create_topic("T", queue_nums=4)
    return b


class _Timed:
    """Wall and CPU time (all threads of the process) of a ``with`` block."""

    def __enter__(self) -> _Timed:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def _send(b: Broker, msgs: list[Message], batch: int) -> _Timed:
    with _Timed() as t:
        for i in range(0, len(msgs), batch):
            b.send_message("T", (i // batch) % 4, msgs[i : i + batch])
    return t


def rates(store: str, n: int, size: int, batch: int, span: int, root: Path) -> dict[str, Any]:
    """Plain produce and timer enqueue rates on one store."""
    body = os.urandom(size)
    clock = Clock()
    # The timer thread is paused (its clock stands still and the wheel is taken in below).
    plain = [Message(topic="T", body=body) for _ in range(n)]
    with Kernel().open_store(store, root / f"store-{store}") as s, _Timed() as t_store:
        for i in range(0, n, batch):
            s.put("T", 0, plain[i : i + batch])
    with _broker(root / f"plain-{store}", store, clock) as b:
        t_plain = _send(b, plain, batch)
    with _broker(root / f"prop-{store}", store, clock) as b:
        props = [Message(topic="T", body=body, properties={"p": str(i)}) for i in range(n)]
        t_prop = _send(b, props, batch)
    with _broker(root / f"timer-{store}", store, clock) as b:
        base = clock.now + 60_000
        timers = [
            Message(topic="T", body=body, deliver_time_ms=base + (i * 7919) % (span * 1000))
            for i in range(n)
        ]
        sched = b.timer_scheduler
        lock = sched._lock  # keep the timer thread from taking the held messages meanwhile
        with lock:
            t_send = _send(b, timers, batch)
            with _Timed() as t_wheel:
                while sched._enqueue(clock.now):
                    pass
        assert b.timer_stats().in_wheel == n
    out: dict[str, Any] = {"store": store, "messages": n, "size": size, "batch": batch}
    phases = {
        "store_put": (t_store.wall, t_store.cpu),
        "plain": (t_plain.wall, t_plain.cpu),
        "plain_1_property": (t_prop.wall, t_prop.cpu),
        "timer_send": (t_send.wall, t_send.cpu),
        "timer_wheel": (t_wheel.wall, t_wheel.cpu),
        "timer_enqueue": (t_send.wall + t_wheel.wall, t_send.cpu + t_wheel.cpu),
    }
    # Wall-time rates, then CPU-time rates (process time, every thread: what a loaded
    # machine distorts least).
    for name, (wall, _) in phases.items():
        out[f"{name}_msgs_per_s"] = round(n / wall)
    for name, (_, cpu) in phases.items():
        out[f"{name}_cpu_msgs_per_s"] = round(n / cpu)
    for name in ("timer_send", "timer_wheel", "timer_enqueue"):
        out[f"{name}_vs_plain"] = round(out[f"{name}_msgs_per_s"] / out["plain_msgs_per_s"], 2)
        out[f"{name}_cpu_vs_plain"] = round(
            out[f"{name}_cpu_msgs_per_s"] / out["plain_cpu_msgs_per_s"], 2
        )
    return out


def pending(store: str, n: int, size: int, batch: int, span: int, step_ms: int,
            root: Path) -> dict[str, Any]:  # fmt: skip
    """Memory with ``n`` pending timers over ``span`` s, then precision of every delivery."""
    body = os.urandom(size)
    clock = Clock()
    out: dict[str, Any] = {"store": store, "pending": n, "span_s": span, "step_ms": step_ms}
    with _broker(root / f"pending-{store}", store, clock) as b:
        start = clock.now - clock.now % 1000 + 1000
        before = _rss()
        sched = b.timer_scheduler
        began = time.perf_counter()
        chunk = [None] * batch
        for i in range(0, n, batch):
            for j in range(batch):
                k = i + j
                chunk[j] = Message(
                    topic="T", body=body, deliver_time_ms=start + (k * 7919) % (span * 1000)
                )
            b.send_message("T", (i // batch) % 4, chunk)
        while sched.stats().enqueue_backlog:
            time.sleep(0.05)
        out["enqueue_s"] = round(time.perf_counter() - began, 1)
        enqueued = _rss()
        stats = b.timer_stats()
        assert stats.in_wheel == n, stats
        out["rss_before"] = before
        out["rss_enqueued"] = enqueued
        out["timer_files_bytes"] = (
            sum(f.stat().st_size for f in (root / f"pending-{store}" / "timerlog").iterdir())
            + (root / f"pending-{store}" / "timerwheel").stat().st_size
        )
        # Deliver: move the clock across the span.
        early = late_max = delivered = 0
        peak_anon = 0
        offsets = [0, 0, 0, 0]
        began = time.perf_counter()
        end = start + span * 1000 + 2000
        while clock.now < end:
            clock.now += step_ms
            with sched._lock:
                sched.run_due()
            for q in range(4):
                while True:
                    got = b.pull_message("g", "T", q, offsets[q], 256)
                    if not got.messages:
                        break
                    for m in got.messages:
                        due = int(m.get_property("TIMER_OUT_MS"))
                        at = int(m.get_property("TIMER_DEQUEUE_MS"))
                        early += at < due
                        late_max = max(late_max, at - due)
                        delivered += 1
                    offsets[q] = got.next_begin_offset
            if delivered and delivered % 50_000 < 400:
                peak_anon = max(peak_anon, _rss()["RssAnon"])
        peak_anon = max(peak_anon, _rss()["RssAnon"])
        out["deliver_s"] = round(time.perf_counter() - began, 1)
        out["delivered"] = delivered
        out["early"] = early
        out["late_max_ms"] = late_max
        out["rss_anon_peak_delivering"] = peak_anon
        out["left_in_timer_topic"] = b.get_max_offset(TIMER_TOPIC, 0)
        out["stats_after"] = b.timer_stats().as_dict()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", action="append", help="mmap, lmdb (repeat; default both)")
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--span", type=int, default=3600, help="timers spread over this many s")
    ap.add_argument("--pending", type=int, default=0, help="run the memory/precision part")
    ap.add_argument("--step-ms", type=int, default=200)
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args()
    stores = args.store or ["mmap", "lmdb"]
    root = Path(tempfile.mkdtemp(prefix="mqcore-timer-bench-"))
    print(json.dumps({"python": platform.python_version(), "cpus": os.cpu_count(),
                      "load": os.getloadavg()}))  # fmt: skip
    try:
        for store in stores:
            for run in range(args.runs):
                if args.pending:
                    res = pending(store, args.pending, args.size, args.batch, args.span,
                                  args.step_ms, root / str(run))  # fmt: skip
                else:
                    res = rates(store, args.messages, args.size, args.batch, args.span,
                                root / str(run))  # fmt: skip
                print(json.dumps(res), flush=True)
                shutil.rmtree(root / str(run), ignore_errors=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
