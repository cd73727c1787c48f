"""Streaming over the network: AvailableNow runs, a restart between offsets and commit, the
per-trigger cap, and messages retention removed under a stopped query."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mqcore import Message
from mqcore.server import Server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TOPIC = "Flow"
HOUR = 3600.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A served broker on small commit-log segments (so retention can drop some)."""
    settings = {"store_options": {"segment_size": 64 * 1024}}
    with Server(tmp_path / "data", "127.0.0.1:0", store="mmap", settings=settings) as srv:
        srv.broker.create_topic(TOPIC, queue_nums=2)
        yield srv


def send(srv: Server, first: int, count: int) -> None:
    """Messages ``first`` .. ``first + count - 1`` (their key is the number), both queues."""
    for qid in (0, 1):
        batch = [
            Message(topic=TOPIC, body=b"%08d" % n + b"." * 400, keys=str(n))
            for n in range(first, first + count)
            if n % 2 == qid
        ]
        srv.broker.send_message(TOPIC, qid, batch)


def run(spark: Any, srv: Server, out: Path, chk: Path, **options: str) -> Any:
    """One ``Trigger.AvailableNow`` query into parquet, to its end; the finished query."""
    reader = spark.readStream.format("mqcore").option("namesrv", srv.address)
    reader = reader.option("topic", TOPIC)
    for name, value in options.items():
        reader = reader.option(name, value)
    query = (
        reader.load()
        .select("keys")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(600)
    finally:
        query.stop()
    return query


def keys(spark: Any, out: Path) -> list[int]:
    """The sink's keys, sorted (duplicates kept)."""
    return sorted(int(r["keys"]) for r in spark.read.parquet(str(out)).collect())


def test_available_now_restarts_and_cap(spark: Any, server: Server, tmp_path: Path) -> None:
    """Criterion 5: each message once over two AvailableNow runs with sends between them and
    a run restarted between a batch's offsets and its commit; max_records_per_trigger holds."""
    out, chk = tmp_path / "out", tmp_path / "chk"
    send(server, 0, 300)
    first = run(spark, server, out, chk, max_records_per_trigger="100")
    assert keys(spark, out) == list(range(300))
    sizes = [p["numInputRows"] for p in first.recentProgress]
    assert sum(sizes) == 300 and max(sizes) <= 100, sizes

    send(server, 300, 200)
    run(spark, server, out, chk, max_records_per_trigger="100")
    assert keys(spark, out) == list(range(500))

    # Killed after batch N's offsets were logged, before its commit: without the commit (and
    # without the sink's record of it), the restart runs batch N again from the log.
    last = max(int(p.name) for p in (chk / "commits").iterdir() if p.name.isdigit())
    for log in (chk / "commits", out / "_spark_metadata"):
        (log / str(last)).unlink()
        (log / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum beside it
    send(server, 500, 100)
    run(spark, server, out, chk, max_records_per_trigger="100")
    assert keys(spark, out) == list(range(600))


def test_retention_under_a_stopped_query(spark: Any, server: Server, tmp_path: Path) -> None:
    """Criterion 5: messages retention removed before a restarted query read them fail it,
    naming the queue and the offsets; with fail_on_data_loss=false they are skipped (and
    commit_group commits the offsets read)."""
    out, chk = tmp_path / "out", tmp_path / "chk"
    send(server, 0, 100)
    run(spark, server, out, chk)
    assert keys(spark, out) == list(range(100))
    send(server, 100, 1000)  # several segments, then the older ones expire
    assert server.broker.store.delete_expired_files(now=time.time() + 1000 * HOUR) > 0
    low = server.broker.store.min_offset(TOPIC, 0)
    assert low > 50, "retention removed offsets the query has not read"
    with pytest.raises(Exception, match=rf"queue \d of topic '{TOPIC}' .*offsets \[50, \d+\)"):
        run(spark, server, out, chk)
    send(server, 1100, 1000)  # and more since, so that the next run has batches to commit
    lows = [server.broker.store.min_offset(TOPIC, qid) for qid in (0, 1)]
    run(
        spark, server, out, chk,
        fail_on_data_loss="false", commit_group="spark-flow", max_records_per_trigger="300",
    )  # fmt: skip
    got = keys(spark, out)
    # commit_group: a batch's end offsets are committed to the group when Spark tells the
    # source (as it plans the next batch), so the group trails the query by one batch.
    for qid in (0, 1):
        committed = server.broker.query_consumer_offset("spark-flow", TOPIC, qid)
        assert lows[qid] < committed < server.broker.store.max_offset(TOPIC, qid)
    assert got[:100] == list(range(100))
    kept = got[100:]
    assert kept == sorted(set(kept)) and set(range(1100, 2100)) <= set(kept)
    assert len(kept) < 2000  # the removed ones were skipped
