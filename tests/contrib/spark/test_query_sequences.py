"""Several queries on one DataFrame give each its own right answer (batch and streaming).

PySpark 4.3 keeps the read planned for one query's pushed filters on the DataFrame and runs it
again for the DataFrame's later queries; the source must be right whatever it reuses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mqcore import Kernel, Message

pytestmark = [pytest.mark.timeout(600)]

TOTAL = 2001
TAGS = ("paid", "refunded", "paid", "cancelled")  # 1501 paid or refunded of 2001
WHERE = "tags IN ('paid','refunded')"
BY_TAG = {"paid": 1001, "refunded": 500, "cancelled": 500}
PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


@pytest.fixture(scope="module")
def orders(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store holding topic orders: 2001 messages in 2 queues, tagged as TAGS cycles."""
    path = tmp_path_factory.mktemp("orders")
    msgs = [Message(topic="orders", body=b"%d" % i, tags=TAGS[i % 4]) for i in range(TOTAL)]
    with Kernel().open_store("mmap", path) as store:
        store.put("orders", 0, msgs[:1000])
        store.put("orders", 1, msgs[1000:])
    return path


def _load(spark: Any, path: Path) -> Any:
    return spark.read.format("mqcore").option("path", str(path)).option("topic", "orders").load()


def _by_tag(df: Any) -> dict[str, int]:
    return {r["tags"]: r["count"] for r in df.groupBy("tags").count().collect()}


def _spark_filters(df: Any) -> bool:
    """Whether Spark filters ``df``'s rows after the scan (it does not for pushed filters)."""
    plan = df._jdf.queryExecution().optimizedPlan().toString()
    return any(line.lstrip("+- :").startswith("Filter") for line in plan.splitlines())


def test_the_issue_sequence_counts_right(spark: Any, orders: Path) -> None:
    """groupBy, then a where count, then a plain count: 2001, not the filtered 1501."""
    df = _load(spark, orders)
    assert _by_tag(df) == BY_TAG
    assert df.where(WHERE).count() == 1501
    assert df.count() == TOTAL


def test_every_order_of_queries_is_right(spark: Any, orders: Path) -> None:
    """where first, then groupBy, collect, count, and another where, on one DataFrame."""
    df = _load(spark, orders)
    assert df.where(WHERE).count() == 1501
    assert _by_tag(df) == BY_TAG
    assert len(df.collect()) == TOTAL
    assert df.where("tags = 'cancelled'").count() == 500
    assert df.where(WHERE).groupBy("tags").count().count() == 2
    assert df.count() == TOTAL
    assert {r["tags"] for r in df.where(WHERE).select("tags").collect()} == {"paid", "refunded"}


def test_pushdown_is_off_by_default(spark: Any, orders: Path) -> None:
    """register(spark) leaves filters to Spark, also when the session enables pushdown."""
    spark.conf.set(PUSHDOWN_CONF, "true")
    try:
        df = _load(spark, orders)
        assert _spark_filters(df.where(WHERE))
        assert df.where(WHERE).count() == 1501
        assert df.count() == TOTAL
    finally:
        spark.conf.unset(PUSHDOWN_CONF)


def test_pushdown_on_request_with_a_dataframe_per_query(spark: Any, orders: Path) -> None:
    """filter_pushdown=True pushes the tags filter, and a new load per query is right."""
    from mqcore.contrib.spark import register

    register(spark, filter_pushdown=True)
    try:
        assert spark.conf.get(PUSHDOWN_CONF) == "true"
        assert not _spark_filters(_load(spark, orders).where(WHERE))
        assert _by_tag(_load(spark, orders)) == BY_TAG
        assert _load(spark, orders).where(WHERE).count() == 1501
        assert _load(spark, orders).count() == TOTAL
    finally:
        register(spark)
        spark.conf.unset(PUSHDOWN_CONF)


def _run_stream(frame: Any, name: str, mode: str, checkpoint: Path) -> None:
    query = (
        frame.writeStream.format("memory")
        .queryName(name)
        .outputMode(mode)
        .option("checkpointLocation", str(checkpoint / name))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(300)
        assert query.exception() is None
    finally:
        query.stop()


def test_the_issue_sequence_on_a_stream(spark: Any, orders: Path, tmp_path: Path) -> None:
    """The same three queries, each a streaming query over one streaming DataFrame."""
    stream = (
        spark.readStream.format("mqcore")
        .option("path", str(orders))
        .option("topic", "orders")
        .load()
    )
    _run_stream(stream.groupBy("tags").count(), "by_tag", "complete", tmp_path)
    _run_stream(stream.where(WHERE), "paid_or_refunded", "append", tmp_path)
    _run_stream(stream, "everything", "append", tmp_path)
    assert _by_tag_table(spark.table("by_tag")) == BY_TAG
    assert spark.table("paid_or_refunded").count() == 1501
    assert spark.table("everything").count() == TOTAL


def _by_tag_table(df: Any) -> dict[str, int]:
    return {r["tags"]: r["count"] for r in df.collect()}
