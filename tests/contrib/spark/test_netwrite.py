"""df.write and df.writeStream to a running ``mqcore serve`` (option namesrv).

The CI test writes 20,000 rows while a PushConsumer consumes (the issue's 1,000,000 rows run
in ``bench/spark_write.py --target network``, which checks the count the server holds).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mqserve import ServeProcess
from pyspark.sql.types import BinaryType, StructField, StructType

from mqcore import ConsumeConcurrentlyStatus, ConsumeFromWhere, Kernel, PushConsumer
from mqcore.client.admin import MQAdmin
from mqcore.contrib.spark.netwrite import NetWriter, stream_write_id
from mqcore.errors import InvalidArgumentError, MQClientError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROWS = 20_000


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeProcess]:
    """One ``mqcore serve`` for the module's writes."""
    serve = ServeProcess(tmp_path_factory.mktemp("netwrite") / "data")
    serve.start()
    yield serve
    serve.stop()


def _stored(serve: ServeProcess, topic: str) -> list[Any]:
    """Every message of ``topic`` the server holds (its store, opened read-only)."""
    with Kernel().open_store(serve.store, serve.data_dir / "store", read_only=True) as store:
        out = []
        for qid in store.queue_ids(topic):
            offset = 0
            while True:
                got = store.get(topic, qid, offset, max_count=5000).messages
                if not got:
                    break
                out.extend(got)
                offset = got[-1].queue_offset + 1
        return out


def _wait_for(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_rows_written_to_a_server_reach_a_push_consumer(spark: Any, server: ServeProcess) -> None:
    """Every row arrives once, with its tags, keys and properties and a UNIQ_KEY of its own."""
    from pyspark.sql import functions as F

    got: dict[bytes, Any] = {}
    lock = threading.Lock()

    def listener(msgs: list[Any], ctx: Any) -> ConsumeConcurrentlyStatus:
        with lock:
            for m in msgs:
                got.setdefault(bytes(m.body), []).append(m)
        return ConsumeConcurrentlyStatus.CONSUME_SUCCESS

    with MQAdmin(server.address) as admin:
        admin.create_topic("NW", 4)
    consumer = PushConsumer(
        "netwrite-cg",
        broker=server.address,
        consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET,
        consume_message_batch_max_size=32,
    )
    consumer.subscribe("NW", "*")
    consumer.register_message_listener(listener)
    consumer.start()
    try:
        df = spark.range(ROWS, numPartitions=2).select(
            F.col("id").cast("string").cast("binary").alias("body"),
            F.when(F.col("id") % 2 == 0, F.lit("even")).alias("tags"),
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("keys"),
            F.create_map(F.lit("n"), F.col("id").cast("string")).alias("properties"),
        )
        df.write.format("mqcore").mode("append").option("namesrv", server.address).option(
            "topic", "NW"
        ).save()
        _wait_for(lambda: len(got) >= ROWS, 300, f"only {len(got)} of {ROWS} rows consumed")
    finally:
        consumer.shutdown()
    assert set(got) == {str(i).encode() for i in range(ROWS)}
    first = {body: msgs[0] for body, msgs in got.items()}
    assert all(len(msgs) == 1 for msgs in got.values())  # no retried task here: no duplicate
    m = first[b"42"]
    assert (m.tags, m.keys, m.properties["n"]) == ("even", "k42", "42")
    assert first[b"43"].tags is None
    uniq = {m.properties["UNIQ_KEY"] for m in first.values()}
    assert len(uniq) == ROWS and all(len(u) == 32 for u in uniq)
    # Rows went round-robin over the topic's four queues.
    per_queue = [sum(1 for m in first.values() if m.queue_id == q) for q in range(4)]
    assert per_queue == [ROWS // 4] * 4


_FAILING_WRITE = """
import os, sys
os.environ["PYSPARK_PYTHON"] = sys.executable
from pyspark import TaskContext
from pyspark.sql import SparkSession, functions as F
from mqcore.contrib.spark import register

spark = (
    SparkSession.builder.master("local[2,3]")  # three attempts per task
    .config("spark.ui.enabled", "false")
    .config("spark.sql.execution.arrow.maxRecordsPerBatch", "500")
    .getOrCreate()
)
spark.sparkContext.setLogLevel("OFF")
register(spark)


MARKER = sys.argv[3]


def body(i):
    ctx = TaskContext.get()
    if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and i == 3000:
        open(MARKER, "w").close()  # the test checks the failure happened
        raise RuntimeError("injected failure")
    # 200 bytes of padding: the JVM buffers 64 KiB for the writer, and the attempt must
    # have sent rows before it fails.
    return str(i).encode() + b"-" + b"x" * 200


rows = int(sys.argv[2])
df = spark.range(rows, numPartitions=2).select(F.udf(body, "binary")("id").alias("body"))
df.write.format("mqcore").mode("append").option("namesrv", sys.argv[1]).option(
    "topic", "NF"
).option("batch_size", "100").save()
spark.stop()
"""


def test_a_retried_task_duplicates_rows_only_with_identical_uniq_keys(
    server: ServeProcess, tmp_path: Path
) -> None:
    """A task failing mid-write is retried by Spark: every row arrives, and each duplicate
    carries the UNIQ_KEY of its first copy (its own Spark session: retries need local[N,F])."""
    rows = 8_000
    script = tmp_path / "failing_write.py"
    script.write_text(textwrap.dedent(_FAILING_WRITE))
    env = dict(os.environ, PYTHONSAFEPATH="1")
    done = subprocess.run(
        [sys.executable, str(script), server.address, str(rows), str(tmp_path / "failed")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "failed").exists()  # the first attempt did fail
    copies: dict[bytes, set[str]] = {}
    count: dict[bytes, int] = {}
    for m in _stored(server, "NF"):
        copies.setdefault(bytes(m.body), set()).add(m.properties["UNIQ_KEY"])
        count[bytes(m.body)] = count.get(bytes(m.body), 0) + 1
    assert set(copies) == {str(i).encode() + b"-" + b"x" * 200 for i in range(rows)}
    assert all(len(keys) == 1 for keys in copies.values())
    duplicated = sum(1 for n in count.values() if n > 1)
    assert duplicated > 0, "the failed attempt sent nothing: the test injected too early"
    assert len({k for keys in copies.values() for k in keys}) == rows


def test_write_stream_sends_each_micro_batch(
    spark: Any, server: ServeProcess, tmp_path: Path
) -> None:
    """writeStream with Trigger.AvailableNow, twice with new input between: each row once,
    keys of the second micro-batch apart from the first's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    source = tmp_path / "in"
    source.mkdir()
    schema = StructType([StructField("body", BinaryType())])

    def run() -> None:
        query = (
            spark.readStream.schema(schema)
            .parquet(str(source))
            .writeStream.format("mqcore")
            .option("namesrv", server.address)
            .option("topic", "NS")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(300)
        assert query.exception() is None

    pq.write_table(pa.table({"body": [b"a%d" % i for i in range(300)]}), source / "1.parquet")
    run()
    pq.write_table(pa.table({"body": [b"b%d" % i for i in range(200)]}), source / "2.parquet")
    run()
    stored = _stored(server, "NS")
    bodies = sorted(bytes(m.body) for m in stored)
    assert bodies == sorted([b"a%d" % i for i in range(300)] + [b"b%d" % i for i in range(200)])
    assert len({m.properties["UNIQ_KEY"] for m in stored}) == 500


def test_stream_write_ids_depend_on_query_and_batch_only() -> None:
    """A micro-batch written again after a restart gets the same write id, others not."""
    assert stream_write_id("q1", "3") == stream_write_id("q1", "3")
    assert len({stream_write_id(q, b) for q in ("q1", "q2") for b in ("0", "1")}) == 4


_SCHEMA = StructType([StructField("body", BinaryType())])


def test_path_and_namesrv_together_are_refused() -> None:
    """One target per write: both given, one clear error."""
    with pytest.raises(InvalidArgumentError, match="'path' .* 'namesrv'"):
        NetWriter({"namesrv": "127.0.0.1:1", "path": "/x", "topic": "T"}, _SCHEMA, False)


def test_network_options_without_namesrv_are_refused(spark: Any, tmp_path: Path) -> None:
    """sends_in_flight on a write to a directory names the option and what it is for."""
    df = spark.createDataFrame([(b"x",)], "body binary")
    with pytest.raises(Exception, match="sends_in_flight.*namesrv"):
        df.write.format("mqcore").mode("append").option("path", str(tmp_path / "d")).option(
            "topic", "T"
        ).option("sends_in_flight", "2").save()


def test_an_unreachable_name_server_fails_on_the_driver_naming_it() -> None:
    """Before any task runs: the address that did not answer, in the error."""
    from mqserve import free_port

    addr = f"127.0.0.1:{free_port()}"
    with pytest.raises(MQClientError, match=addr):
        NetWriter({"namesrv": addr, "topic": "T"}, _SCHEMA, False)


def test_replay_copies_a_directory_topic_to_a_server(
    spark: Any, server: ServeProcess, tmp_path: Path, helpers: Any
) -> None:
    """mqcore replay --to-namesrv: every message of the source topic, on the server."""
    from mqcore.commands.replay import run_replay

    helpers.fill("mmap", tmp_path / "src", "R", 2, 150)
    summary = run_replay(
        source=str(tmp_path / "src"), topic="R", to_namesrv=server.address, to_topic="R2",
        spark=spark,
    )  # fmt: skip
    assert (summary["read"], summary["written"]) == (300, 300)
    stored = _stored(server, "R2")
    want = {helpers.body_of(q, o) for q in range(2) for o in range(150)}
    assert {bytes(m.body) for m in stored} == want
    assert all("REPLAY_ID" in m.properties for m in stored)


@pytest.mark.skipif(
    importlib.util.find_spec("mqcore.contrib.spark.netsource") is None,
    reason="reading over the network (option namesrv of spark.read) is not in this build",
)
def test_replay_copies_a_topic_between_two_servers(
    spark: Any, server: ServeProcess, tmp_path: Path
) -> None:
    """mqcore replay --from-namesrv --to-namesrv: the second server holds the first's topic."""
    from mqcore import Message, Producer
    from mqcore.commands.replay import run_replay

    with Producer("replay-pg", broker=server.address) as producer:
        for i in range(0, 400, 100):
            producer.send_batch([Message(topic="RS", body=b"s%d" % j) for j in range(i, i + 100)])
    other = ServeProcess(tmp_path / "other")
    other.start()
    try:
        summary = run_replay(
            from_namesrv=server.address, topic="RS", to_namesrv=other.address, to_topic="RS",
            spark=spark,
        )  # fmt: skip
        assert summary["written"] == 400
        assert sorted(bytes(m.body) for m in _stored(other, "RS")) == sorted(
            b"s%d" % j for j in range(400)
        )
    finally:
        other.stop()
