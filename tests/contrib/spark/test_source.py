"""spark.read.format("mqcore") on every store, filters, partitioning, and replay to a broker."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mqcore import Broker, Kernel, Message, MessageQueue, PullConsumer
from mqcore.message import PullStatus

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

QUEUES = 4
PER_QUEUE = 25_000  # 100,000 messages per store


def _stores() -> list[str]:
    wanted = [s for s in os.environ.get("MQCORE_TEST_STORES", "").split(",") if s]
    return [s for s in Kernel(autoload=False).names("store") if not wanted or s in wanted]


@pytest.fixture(scope="module", params=_stores())
def big(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, helpers: Any
) -> Any:
    """(store name, store dir) holding topic T: 4 queues x 25,000 messages."""
    path = tmp_path_factory.mktemp(f"big-{request.param}")
    helpers.fill(request.param, path, "T", QUEUES, PER_QUEUE)
    return request.param, path


def _read(spark: Any, path: Path | str, topic: str = "T", **options: str) -> Any:
    reader = spark.read.format("mqcore").option("path", str(path)).option("topic", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def test_reads_100k_byte_for_byte(spark: Any, big: Any, helpers: Any) -> None:
    """Count, bodies, tags, keys and properties of 100,000 messages match what was stored."""
    _, path = big
    df = _read(spark, path)
    assert df.count() == QUEUES * PER_QUEUE
    table = df.select("queue_id", "queue_offset", "body", "tags", "keys", "properties").toArrow()
    cols = table.to_pydict()
    seen = set()
    for qid, off, body, tags, keys, props in zip(*cols.values(), strict=True):
        expected = helpers.message_of("T", qid, off)
        assert body == expected.body
        assert (tags, keys) == (expected.tags, expected.keys)
        assert dict(props) == expected.properties
        seen.add((qid, off))
    assert len(seen) == QUEUES * PER_QUEUE


def test_filters(spark: Any, big: Any, helpers: Any) -> None:
    """Pushed-down tags and ranges, and the TAG and SQL92 options, select the right rows."""
    _, path = big
    df = _read(spark, path)
    third = PER_QUEUE // 3 + (1 if PER_QUEUE % 3 > 1 else 0)
    assert df.where("tags = 'TagB'").count() == QUEUES * third
    assert df.where("queue_id = 99").count() == 0  # no slice at all
    ranged = df.where("queue_id IN (1, 3) AND queue_offset >= 100 AND queue_offset < 250")
    rows = ranged.select("queue_id", "queue_offset").collect()
    assert sorted((r.queue_id, r.queue_offset) for r in rows) == [
        (q, o) for q in (1, 3) for o in range(100, 250)
    ]
    if helpers.has_filter("TAG"):
        tagged = _read(spark, path, filter_type="TAG", filter="TagA || TagC")
        assert tagged.count() == QUEUES * PER_QUEUE - QUEUES * third
    if helpers.has_filter("SQL92"):
        even = _read(spark, path, filter_type="SQL92", filter="even = 'true' AND q = '2'")
        got = even.select("queue_id", "queue_offset").collect()
        assert {r.queue_id for r in got} == {2}
        assert sorted(r.queue_offset for r in got) == list(range(0, PER_QUEUE, 2))
    if not (helpers.has_filter("TAG") and helpers.has_filter("SQL92")):
        pytest.skip("TAG/SQL92 filter plugins are not registered yet: option filters untested")


def test_replay_to_a_broker_topic(spark: Any, big: Any, tmp_path: Path) -> None:
    """mqcore replay writes every message to a new topic a broker's pull consumer reads."""
    from mqcore.commands.replay import run_replay

    store_name, path = big
    source = _read(spark, path).select("commitlog_offset", "body").toArrow().to_pydict()
    by_offset = dict(zip(source["commitlog_offset"], source["body"], strict=True))
    summary = run_replay(
        source=str(path),
        topic="T",
        target=str(tmp_path / "broker"),
        to_topic="T2",
        store=store_name,
        spark=spark,
    )
    assert summary["read"] == summary["written"] == QUEUES * PER_QUEUE
    assert summary["filtered"] == 0
    seen = 0
    with Broker(tmp_path / "broker", store=store_name) as broker:
        assert broker.topics.get("T2") is not None
        with PullConsumer("replay-check", broker=broker) as consumer:
            queues = consumer.fetch_subscribe_message_queues("T2")
            assert queues == {MessageQueue("T2", broker.config.broker_name, q) for q in range(4)}
            for mq in sorted(queues, key=lambda m: m.queue_id):
                offset = 0
                while True:
                    result = consumer.pull(mq, "*", offset, 1024)
                    if result.pull_status is not PullStatus.FOUND:
                        break
                    for msg in result.msg_found_list:
                        replay_id = int(msg.get_property("REPLAY_ID"))
                        assert msg.body == by_offset.pop(replay_id)
                        seen += 1
                    offset = result.next_begin_offset
    assert seen == QUEUES * PER_QUEUE
    assert not by_offset


@pytest.fixture(scope="module", params=_stores()[:1])
def eight(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with topic E: 8 queues x 500 messages."""
    path = tmp_path_factory.mktemp("eight")
    with Kernel().open_store(request.param, path) as store:
        for qid in range(8):
            store.put("E", qid, [Message(topic="E", body=b"%d" % i) for i in range(500)])
    return path


@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(limit=st.integers(40, 700), start=st.integers(0, 200), length=st.integers(1, 400))
def test_partitions_by_queue_and_limit(
    spark: Any, eight: Path, limit: int, start: int, length: int
) -> None:
    """8 queues and a records-per-partition limit: the planned partitions, nothing twice."""
    end = start + length
    df = _read(
        spark,
        eight,
        topic="E",
        max_records_per_partition=str(limit),
        start_offset=str(start),
        end_offset=str(end),
    )
    n = min(end, 500) - start
    assert df.rdd.getNumPartitions() == 8 * -(-n // limit)
    got = df.select("queue_id", "queue_offset").toArrow().to_pydict()
    pairs = list(zip(got["queue_id"], got["queue_offset"], strict=True))
    assert len(pairs) == len(set(pairs)) == 8 * n
    assert set(pairs) == {(q, o) for q in range(8) for o in range(start, start + n)}


def test_column_subset_schema(spark: Any, eight: Path) -> None:
    """A user schema selects columns; unknown columns are refused."""
    df = (
        spark.read.format("mqcore")
        .schema("queue_id int, queue_offset bigint")
        .option("path", str(eight))
        .option("topic", "E")
        .option("queue_ids", "5")
        .load()
    )
    assert df.columns == ["queue_id", "queue_offset"]
    assert df.count() == 500
    bad = spark.read.format("mqcore").schema("nope string").option("path", str(eight))
    with pytest.raises(Exception, match="not one the mqcore source provides"):
        bad.option("topic", "E").load().count()


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"topic": "Missing"}, "not found in"),
        ({"topic": "E", "start_offset": "9", "end_offset": "2"}, "not before end_offset"),
        ({"topic": "E", "filter_type": "SQL92", "filter": "a >"}, "SQL92|filter"),
        ({"topic": "E", "path": "/"}, "is not an mqcore store"),
    ],
)
def test_bad_options_fail_on_the_driver(
    spark: Any, eight: Path, options: dict[str, str], match: str
) -> None:
    """Unknown topic, start after end, a bad filter, a path that is no store: clear errors."""
    options = {"path": str(eight), **options}
    reader = spark.read.format("mqcore")
    for key, value in options.items():
        reader = reader.option(key, value)
    with pytest.raises(Exception, match=match):
        reader.load().count()
