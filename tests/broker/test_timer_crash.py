"""SIGKILL a broker while thousands of timers are pending and some are being delivered.

Each run starts a broker process (``timer_worker.py``) on the same data directory; it sends
timers due 0.5-8 s ahead and delivers what falls due until it is killed at a random moment
1-2 s in. After the last kill a broker in this process recovers and delivers the rest.
Then every acknowledged timer must have arrived in its topic at least once, none before its
deliver time, and duplicates are bounded by the deliveries in flight at the kills (the
scheduler commits each delivery: at most one per kill). ``MQCORE_TIMER_CRASH_RUNS`` sets
the number of kills (default 3).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from mqtest import wait_until

from mqcore import Broker

pytestmark = pytest.mark.timeout(180)

RUNS = int(os.environ.get("MQCORE_TIMER_CRASH_RUNS", "3"))
WORKER = Path(__file__).with_name("timer_worker.py")


def _run_and_kill(
    path: Path, store: str, run: int, rnd: random.Random
) -> tuple[dict[str, int], int]:
    """One worker run; the acknowledged keys with their deliver times, and the kill time."""
    spec = {
        "path": str(path), "store": store, "run": run, "count": 3000, "batch": 50,
        "seed": rnd.randrange(1 << 30), "min_ms": 500, "max_ms": 8000, "precision_ms": 100,
    }  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline()) == {"ready": True}, proc.stderr.read()
        time.sleep(rnd.uniform(1.0, 2.0))
        killed_at = time.time_ns() // 1_000_000
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"worker died on its own:\n{err}"
    acked: dict[str, int] = {}
    for line in out.splitlines(keepends=True):
        if line.endswith("\n") and line.startswith('{"keys"'):
            batch = json.loads(line)
            acked.update(zip(batch["keys"], batch["due"], strict=True))
    return acked, killed_at


def _delivered(b: Broker) -> list[Any]:
    out = []
    for q in range(4):
        offset = 0
        while True:
            got = b.pull_message("check", "T", q, offset, 512)
            if not got.messages:
                break
            out += got.messages
            offset = got.next_begin_offset
    return out


def test_every_timer_arrives_none_early_duplicates_bounded(tmp_path: Path, store_name: str) -> None:
    rnd = random.Random(int(os.environ.get("MQCORE_CRASH_SEED", "22")))
    acked: dict[str, int] = {}
    kills: list[int] = []
    for run in range(RUNS):
        got, killed_at = _run_and_kill(tmp_path, store_name, run, rnd)
        assert len(got) >= 1000, "the worker should have sent thousands before the kill"
        acked.update(got)
        kills.append(killed_at)
    with Broker(tmp_path, store=store_name, timer_precision_ms=100) as b:
        pending_at_restart = b.timer_stats().pending
        before = {m.keys for m in _delivered(b)}
        assert wait_until(lambda: b.timer_stats().pending == 0, timeout=30)
        assert wait_until(lambda: set(acked) <= {m.keys for m in _delivered(b)}, timeout=30)
        delivered = _delivered(b)
    counts = Counter(m.keys for m in delivered)
    missing = set(acked) - set(counts)
    assert not missing, f"{len(missing)} acknowledged timers never arrived"
    early = [
        (m.keys, m.store_timestamp, int(m.get_property("TIMER_DELIVER_MS")))
        for m in delivered
        if m.store_timestamp < int(m.get_property("TIMER_DELIVER_MS"))
    ]
    assert not early, f"delivered before their time: {early[:5]}"
    duplicates = sum(n - 1 for n in counts.values())
    # Thousands pending and some delivered when the last kill came.
    assert pending_at_restart >= 1000 and before
    # At most the delivery in flight at each kill (each delivery is committed on its own).
    assert duplicates <= RUNS, f"{duplicates} duplicates after {RUNS} kills"
    print(
        f"\n{store_name}: {len(acked)} acknowledged timers, {RUNS} kills, "
        f"{pending_at_restart} pending at the last restart, {duplicates} duplicates"
    )
