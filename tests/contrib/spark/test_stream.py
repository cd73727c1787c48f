"""Reading a store another process writes: consistent prefixes, and exactly-once streaming."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mqcore import Kernel

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

QUEUES = 4
BATCHES = 40
BATCH = 50  # 4 queues x 40 batches x 50 = 8,000 messages

# The writer process: the same bodies as conftest.body_of, written a batch at a time.
WRITER = """
import select, sys, time
from mqcore import Kernel, Message

def body_of(q, o):
    seed = (q * 1_000_003 + o) & 0xFFFFFFFF
    return seed.to_bytes(4, "big") + bytes((seed + i) & 0xFF for i in range(seed % 97))

store_name, path, queues, batches, size, pause = sys.argv[1:]
queues, batches, size, pause = int(queues), int(batches), int(size), float(pause)
# batches == 0: write until a line arrives on stdin (at most 2000 batches).
until_told = batches == 0
with Kernel().open_store(store_name, path) as store:
    for b in range(batches or 2000):
        if until_told and b and select.select([sys.stdin], [], [], 0)[0]:
            break
        for q in range(queues):
            msgs = [Message(topic="S", body=body_of(q, b * size + i)) for i in range(size)]
            store.put("S", q, msgs)
        if b == 0:
            print("started", flush=True)
        time.sleep(pause)
"""


def _stores() -> list[str]:
    wanted = [s for s in os.environ.get("MQCORE_TEST_STORES", "").split(",") if s]
    return [s for s in Kernel(autoload=False).names("store") if not wanted or s in wanted]


def _start_writer(
    store_name: str, path: Path, pause: float, batches: int = BATCHES
) -> subprocess.Popen[str]:
    """Start the writer process; returns once it has stored its first batch."""
    args = [store_name, str(path), str(QUEUES), str(batches), str(BATCH), str(pause)]
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    # Library logs go to stdout too (structlog's default): wait for our own line.
    for line in proc.stdout:
        if line.strip() == "started":
            return proc
    proc.communicate(timeout=60)
    raise AssertionError(f"the writer process exited with {proc.returncode} before writing")


def _finish(writer: subprocess.Popen[str]) -> None:
    """Tell the writer to stop, and wait for it (reading its output, so it never blocks)."""
    writer.communicate("stop\n", timeout=120)
    assert writer.returncode == 0


def _check_rows(rows: dict[str, list[Any]], helpers: Any) -> dict[int, list[int]]:
    """Bodies are right; returns the offsets seen per queue (sorted)."""
    per_queue: dict[int, list[int]] = {}
    for qid, off, body in zip(rows["queue_id"], rows["queue_offset"], rows["body"], strict=True):
        assert body == helpers.body_of(qid, off)
        per_queue.setdefault(qid, []).append(off)
    return {q: sorted(offs) for q, offs in per_queue.items()}


@pytest.mark.parametrize("store_name", _stores())
def test_batch_reads_see_a_consistent_prefix(
    spark: Any, tmp_path: Path, store_name: str, helpers: Any
) -> None:
    """While another process writes, each read returns whole queues' prefixes, no torn record."""
    path = tmp_path / "store"
    writer = _start_writer(store_name, path, pause=0.02, batches=0)
    try:
        sizes = []
        for _ in range(3):
            df = spark.read.format("mqcore").option("path", str(path)).option("topic", "S").load()
            rows = df.select("queue_id", "queue_offset", "body").toArrow().to_pydict()
            for offsets in _check_rows(rows, helpers).values():
                assert offsets == list(range(len(offsets)))
            sizes.append(len(rows["body"]))
    finally:
        _finish(writer)
    assert sizes == sorted(sizes)
    assert sizes[0] < sizes[-1]  # the reads ran while the writer wrote


def _start_query(spark: Any, path: Path, out: Path, checkpoint: Path) -> Any:
    from pyspark.sql import functions as F

    # A slow identity on the body keeps each micro-batch running for a while, so that the
    # test can stop the query in the middle of one. (A lambda is pickled by value.)
    slow = F.udf(lambda body: (time.sleep(0.0005), body)[1], "binary", useArrow=False)
    stream = (
        spark.readStream.format("mqcore")
        .option("path", str(path))
        .option("topic", "S")
        .option("max_records_per_trigger", "1500")
        .option("max_records_per_partition", "500")
        .load()
        .select("queue_id", "queue_offset", slow("body").alias("body"))
    )
    return (
        stream.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


@pytest.mark.parametrize("store_name", _stores())
def test_stream_exactly_once_across_restart(
    spark: Any, tmp_path: Path, store_name: str, helpers: Any
) -> None:
    """A query stopped mid-way and restarted from its checkpoint sinks every message once."""
    path, out, checkpoint = tmp_path / "store", tmp_path / "out", tmp_path / "checkpoint"
    writer = _start_writer(store_name, path, pause=0.1)
    try:
        query = _start_query(spark, path, out, checkpoint)
        try:
            deadline = time.monotonic() + 120
            # Let micro-batches run while the writer writes, then stop during one.
            while time.monotonic() < deadline and not (
                len(query.recentProgress) >= 2 and query.status["isTriggerActive"]
            ):
                time.sleep(0.05)
            assert query.exception() is None
            assert query.status["isTriggerActive"]
        finally:
            query.stop()
    finally:
        _finish(writer)
    first = spark.read.parquet(str(out)).count() if out.exists() else 0
    query = _start_query(spark, path, out, checkpoint)
    try:
        query.processAllAvailable()
        assert query.exception() is None
    finally:
        query.stop()
    rows = spark.read.parquet(str(out)).toArrow().to_pydict()
    per_queue = _check_rows(rows, helpers)
    total = BATCHES * BATCH
    assert per_queue == {q: list(range(total)) for q in range(QUEUES)}
    assert first > 0  # the first query did sink messages before it was stopped
