"""df.write.format("mqcore"): appending, the writer lock, and the missing-extra message."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mqcore import Kernel, Message
from mqcore.contrib.spark.layout import resolve_read
from mqcore.errors import StoreLockedError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _stores() -> list[str]:
    wanted = [s for s in os.environ.get("MQCORE_TEST_STORES", "").split(",") if s]
    return [s for s in Kernel(autoload=False).names("store") if not wanted or s in wanted]


@pytest.mark.parametrize("store_name", _stores()[:1])
def test_write_rows_with_properties(spark: Any, tmp_path: Path, store_name: str) -> None:
    """Rows become messages: body, tags, keys, properties; queue_id picks the queue."""
    rows = [
        (b"a", "TagA", "k1", {"x": "1"}, 0),
        (b"b", None, None, {}, 1),
        (b"c", "TagC", "k3 k4", {"y": "2"}, 5),
    ]
    df = spark.createDataFrame(
        rows, "body binary, tags string, keys string, properties map<string,string>, queue_id int"
    )
    target = tmp_path / "store"
    Kernel().open_store(store_name, target).close()  # a store directory no broker holds
    (
        df.coalesce(1)
        .write.format("mqcore")
        .mode("append")
        .option("path", str(target))
        .option("topic", "W")
        .option("queue_nums", "2")
        .save()
    )
    with Kernel().open_store(store_name, target, read_only=True) as store:
        assert store.queue_ids("W") == [0, 1]
        got = {m.body: m for q in (0, 1) for m in store.get("W", q, 0, max_count=10).messages}
    assert set(got) == {b"a", b"b", b"c"}
    assert (got[b"a"].tags, got[b"a"].keys, got[b"a"].properties) == ("TagA", "k1", {"x": "1"})
    assert (got[b"c"].queue_id, got[b"c"].key_list) == (1, ["k3", "k4"])
    assert got[b"b"].tags is None


@pytest.mark.parametrize("store_name", _stores()[:1])
def test_rows_copied_from_records_keep_their_system_properties(
    spark: Any, tmp_path: Path, store_name: str
) -> None:
    """A replay copies records whose properties hold UNIQ_KEY (every produced message) or
    REAL_TOPIC (a delivered delayed one): stored as they were, as a message sent again keeps
    its id."""
    rows = [(b"a", {"UNIQ_KEY": "7F00000100002A9F0000000000000001", "REAL_TOPIC": "T"})]
    df = spark.createDataFrame(rows, "body binary, properties map<string,string>")
    target = tmp_path / "store"
    Kernel().open_store(store_name, target).close()
    df.write.format("mqcore").mode("append").option("path", str(target)).option(
        "topic", "W"
    ).option("queue_nums", "1").save()
    with Kernel().open_store(store_name, target, read_only=True) as store:
        (got,) = store.get("W", 0, 0, max_count=10).messages
    assert got.properties == {"UNIQ_KEY": "7F00000100002A9F0000000000000001", "REAL_TOPIC": "T"}


@pytest.mark.parametrize("store_name", _stores())
def test_second_writer_gets_the_documented_error(
    spark: Any, tmp_path: Path, store_name: str
) -> None:
    """A directory held by a writer: the store and the Spark sink both say who holds it."""
    path = tmp_path / "store"
    with Kernel().open_store(store_name, path) as holder:
        holder.put("H", 0, [Message(topic="H", body=b"%d" % i) for i in range(10)])
        with pytest.raises(StoreLockedError, match=f"process {os.getpid()}"):
            Kernel().open_store(store_name, path)
        df = spark.createDataFrame([(b"x",)], "body binary")
        writer = df.write.format("mqcore").mode("append").option("path", str(path))
        with pytest.raises(Exception, match=rf"locked by process {os.getpid()}.*option namesrv"):
            writer.option("topic", "H").save()
        holder.put("H", 0, [Message(topic="H", body=b"after")])
    with Kernel().open_store(store_name, path, read_only=True) as store:
        bodies = [m.body for m in store.get("H", 0, 0, max_count=100).messages]
    assert bodies == [b"%d" % i for i in range(10)] + [b"after"]


def test_import_without_pyspark_names_the_extra() -> None:
    """Without pyspark, importing the package says which extra to install."""
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "try:\n    import mqcore.contrib.spark\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "pip install 'mqcore[spark]'" in out.stdout


def test_existing_topic_keeps_its_queues(spark: Any, tmp_path: Path) -> None:
    """In a broker data dir, rows go to the queues the topic table gives the topic."""
    from mqcore.broker.topics import TopicManager

    data_dir = tmp_path / "broker"
    TopicManager(data_dir / "config" / "topics.json").ensure("K", 2)
    df = spark.createDataFrame([(b"%d" % i, i) for i in range(6)], "body binary, queue_id int")
    writer = df.write.format("mqcore").mode("append").option("path", str(data_dir))
    writer.option("topic", "K").option("queue_nums", "8").save()
    location = resolve_read(data_dir)
    with Kernel().open_store(location.store, location.store_dir, read_only=True) as store:
        assert store.queue_ids("K") == [0, 1]
        assert store.max_offset("K", 0) + store.max_offset("K", 1) == 6
