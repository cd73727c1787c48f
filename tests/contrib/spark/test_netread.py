"""Reading over the network (option ``namesrv``) gives the rows a ``path`` read gives.

One ``mqcore serve`` per broker setting (pulls uncapped, and capped at 32 messages as Apache
RocketMQ caps them) holds a topic of 20,000 messages in 4 queues (tags, keys, properties,
10 KiB bodies its producer sent compressed, and a message sent back to the dead-letter
queue). Spark reads it through the data directory and through the server, and the two
results must hold the same rows, body digests included.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mqserve import ServeProcess

from mqcore import Message, Producer
from mqcore.client.transport_remote import RemoteTransport
from mqcore.errors import InvalidArgumentError
from mqcore.message import MessageQueue
from mqcore.record.sysflag import COMPRESSED_FLAG

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TOPIC = "Net"
GROUP = "cg"
DLQ = f"%DLQ%{GROUP}"
#: A topic of 100,000 messages (tags, keys, properties, 10 KiB compressed bodies, a
#: dead-lettered one): many pulls per queue, many more on the server capped at 32 a pull.
MESSAGES = 100_000
BIG = 40  # 10 KiB bodies, each sent alone (compressed by the producer)


def big_body(i: int) -> bytes:
    """A compressible 10 KiB body, different for each ``i``."""
    return (f"big-{i:04d}-".encode() + bytes(range(256))) * 39


def fill(address: str) -> str:
    """The topic: batches of small messages, single 10 KiB ones, one dead-lettered (its
    key is returned)."""
    with Producer("pg", namesrv_addr=address) as producer:
        sent = 0
        while sent < MESSAGES - BIG:
            n = min(100, MESSAGES - BIG - sent)
            batch = [
                Message(
                    topic=TOPIC,
                    body=f"m{sent + i}".encode() * (1 + (sent + i) % 7),
                    tags=("TagA", "TagB", "TagC", "TagD", "TagE")[(sent + i) % 5],
                    keys=f"k{sent + i}",
                    properties={"n": str(sent + i), "pct": str((sent + i) % 100)},
                )
                for i in range(n)
            ]
            producer.send_batch(batch)
            sent += n
        for i in range(BIG):
            producer.send(
                Message(topic=TOPIC, body=big_body(i), tags="Big", keys=f"big{i}",
                        properties={"n": str(sent + i), "pct": "0"})
            )  # fmt: skip
    t = RemoteTransport(address)
    try:
        pulled = t.pull_message(MessageQueue(TOPIC, "broker-a", 0), GROUP, 0, 1)
        t.consumer_send_msg_back(GROUP, pulled.messages[0], -1, 16)
        return str(pulled.messages[0].keys)
    finally:
        t.close()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], ServeProcess]]:
    """``mqcore serve`` holding the topic, made on first use: ``uncapped``, or ``cap32``
    answering at most 32 messages a pull (as Apache RocketMQ does)."""
    made: dict[str, ServeProcess] = {}

    def get(kind: str) -> ServeProcess:
        if kind not in made:
            srv = ServeProcess(tmp_path_factory.mktemp("netread") / "data")
            settings = ["max_transfer_count_on_message_in_memory=32"] if kind == "cap32" else []
            srv.start("127.0.0.1:0", *settings)
            made[kind] = srv
            srv.retried_key = fill(srv.address)  # type: ignore[attr-defined]
        return made[kind]

    try:
        yield get
    finally:
        for srv in made.values():
            srv.stop()


@pytest.fixture(params=["uncapped", "cap32"])
def server(request: pytest.FixtureRequest, servers: Callable[[str], ServeProcess]) -> ServeProcess:
    """Each of the two servers (the tests that hold for both)."""
    return servers(request.param)


@pytest.fixture
def uncapped(servers: Callable[[str], ServeProcess]) -> ServeProcess:
    """The server that caps no pull."""
    return servers("uncapped")


def _comparable(df: Any) -> Any:
    """Every column, with the map as sorted entries (set operations cannot compare maps)
    and each body's digest beside it."""
    from pyspark.sql import functions as F

    return df.select(
        *[c for c in df.columns if c != "properties"],
        F.array_sort(F.map_entries("properties")).alias("properties"),
        F.sha2("body", 256).alias("digest"),
    )


def _read(spark: Any, **options: str) -> Any:
    reader = spark.read.format("mqcore")
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_same_rows_over_namesrv_as_over_path(spark: Any, server: ServeProcess) -> None:
    """Criterion 1: exceptAll both ways is empty; the 10 KiB bodies are what was sent."""
    topics = f"{TOPIC},{DLQ}"
    local = _comparable(_read(spark, path=str(server.data_dir), topic=topics)).cache()
    remote = _comparable(_read(spark, namesrv=server.address, topic=topics)).cache()
    try:
        assert local.count() == MESSAGES + 1
        assert remote.count() == MESSAGES + 1
        assert local.exceptAll(remote).count() == 0
        assert remote.exceptAll(local).count() == 0
        bigs = {
            r["keys"]: bytes(r["body"])
            for r in remote.where("tags = 'Big'").select("keys", "body").collect()
        }
        assert bigs == {f"big{i}": big_body(i) for i in range(BIG)}
        retried = remote.where(f"topic = '{DLQ}'").select("reconsume_times", "keys").collect()
        assert [(r["reconsume_times"], r["keys"]) for r in retried] == [(1, server.retried_key)]
    finally:
        local.unpersist()
        remote.unpersist()


def test_bodies_were_stored_compressed(uncapped: ServeProcess) -> None:
    """The 10 KiB bodies the comparison covers really are stored compressed."""
    t = RemoteTransport(uncapped.address)
    try:
        route = t.get_route_info_by_topic(TOPIC)
        flags = []
        for mq in route.read_queues():
            offset, end = 0, t.get_max_offset(mq)
            while offset < end:
                got = t.pull_message(mq, GROUP, offset, 32, sub_expression="Big")
                flags += [bool(m.sys_flag & COMPRESSED_FLAG) for m in got.messages]
                offset = got.next_begin_offset
        assert flags == [True] * BIG
    finally:
        t.close()


def test_digest_helper_matches_python(spark: Any, uncapped: ServeProcess) -> None:
    """The digest column is the SHA-256 of the body (so comparing digests compares bodies)."""
    row = _comparable(_read(spark, namesrv=uncapped.address, topic=TOPIC, queue_ids="1")).first()
    assert row["digest"] == hashlib.sha256(bytes(row["body"])).hexdigest()


def test_errors_before_any_task(spark: Any, uncapped: ServeProcess, tmp_path: Path) -> None:
    """Both locations, an unreachable name server, an unknown topic: one clear line each."""
    from mqserve import free_port

    with pytest.raises(Exception, match="both given"):
        _read(spark, path=str(uncapped.data_dir), namesrv=uncapped.address, topic=TOPIC).count()
    rows = spark.range(1).selectExpr("cast(id as string) as body")
    with pytest.raises(Exception, match="both given"):
        rows.write.format("mqcore").mode("append").option("path", str(tmp_path)).option(
            "namesrv", uncapped.address
        ).option("topic", TOPIC).save()
    dead = f"127.0.0.1:{free_port()}"
    with pytest.raises(Exception, match=f"no name server answered \\({dead}\\)"):
        _read(spark, namesrv=dead, topic=TOPIC).count()
    with pytest.raises(Exception, match="topic 'NoSuchTopic' not found"):
        _read(spark, namesrv=uncapped.address, topic="NoSuchTopic").count()
    with pytest.raises(Exception, match="are for reading from a server"):
        _read(spark, path=str(uncapped.data_dir), topic=TOPIC, pull_batch_size="8").count()
    with pytest.raises(InvalidArgumentError, match="both given"):
        from mqcore.contrib.spark.options import check_location

        check_location({"PATH": "d", "namesrv": "h:1"})


SQL = "pct < 10"  # keeps 10% of the messages
KEPT = sum(1 for n in range(MESSAGES - BIG) if n % 100 < 10) + BIG  # the big ones have pct 0


def test_sql92_filter_gives_the_rows_of_a_spark_where(spark: Any, server: ServeProcess) -> None:
    """Criterion 4, rows: the filter as the pulls' subscription equals Spark's own where."""
    pushed = _comparable(
        _read(spark, namesrv=server.address, topic=TOPIC, filter_type="SQL92", filter=SQL)
    ).cache()
    where = _comparable(
        _read(spark, namesrv=server.address, topic=TOPIC).where(
            "cast(properties['pct'] as int) < 10"
        )
    )
    try:
        assert pushed.count() == KEPT
        assert pushed.exceptAll(where).count() == 0
        assert where.exceptAll(pushed).count() == 0
    finally:
        pushed.unpersist()


def test_sql92_filter_moves_fewer_bytes(server: ServeProcess) -> None:
    """Criterion 4, bytes: the reader counts at least 5x fewer pulled bytes with the filter
    than without (the broker sends matching records only)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from mqcore.contrib.spark.netplan import plan_batch
    from mqcore.contrib.spark.netread import counters, read_range
    from mqcore.contrib.spark.options import ReadOptions
    from mqcore.contrib.spark.source import SCHEMA

    schema = to_arrow_schema(SCHEMA, timezone="UTC")
    moved = {}
    rows = {}
    t = RemoteTransport(server.address)
    try:
        for name, extra in (("all", {}), ("sql", {"filter_type": "SQL92", "filter": SQL})):
            opts = ReadOptions.parse({"namesrv": server.address, "topic": TOPIC, **extra})
            counters().reset()
            rows[name] = sum(
                b.num_rows
                for part in plan_batch(t, opts)
                for b in read_range(t, part, schema, opts)
            )
            moved[name] = counters().body_bytes
    finally:
        t.close()
    assert rows == {"all": MESSAGES, "sql": KEPT}
    assert moved["all"] >= 5 * moved["sql"], moved


WRAPPER = """#!/bin/sh
# A Spark Python worker that cannot see the server's data directory: a mount namespace of
# its own, with an empty tmpfs mounted over that directory.
exec unshare --mount sh -c 'mount -t tmpfs hidden "$1" && shift && exec "$@"' \\
    hide {hidden} {python} "$@"
"""


def test_executors_that_cannot_see_the_data_directory(
    spark: Any, uncapped: ServeProcess, tmp_path: Path
) -> None:
    """Criterion 2: every Python worker runs where the data directory is an empty tmpfs; a
    path read fails there (the negative control), the namesrv read gives criterion 1's rows."""
    import os
    import shlex
    import sys

    from mqcore.contrib.spark import register

    if os.geteuid() != 0 and os.environ.get("CI") != "true":  # CI runs it, as root
        pytest.skip("mounting a tmpfs in a mount namespace of its own needs root here")

    topics = f"{TOPIC},{DLQ}"
    expected = _comparable(_read(spark, path=str(uncapped.data_dir), topic=topics)).collect()
    wrapper = tmp_path / "hidden-python"
    wrapper.write_text(
        WRAPPER.format(
            hidden=shlex.quote(str(uncapped.data_dir)), python=shlex.quote(sys.executable)
        )
    )
    wrapper.chmod(0o755)
    context = spark.sparkContext
    saved = context.pythonExec
    context.pythonExec = str(wrapper)  # the workers of the source registered from now on
    try:
        register(spark)
        with pytest.raises(Exception, match="is not an mqcore store"):
            _read(spark, path=str(uncapped.data_dir), topic=topics).count()
        got = _comparable(_read(spark, namesrv=uncapped.address, topic=topics)).collect()
    finally:
        context.pythonExec = saved
        register(spark)
    assert sorted(map(repr, got)) == sorted(map(repr, expected))
    assert len(got) == MESSAGES + 1
