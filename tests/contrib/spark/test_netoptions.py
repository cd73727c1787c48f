"""Options and planning rules of reading over the network (no Spark, no server)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from mqcore import Message, codec
from mqcore.contrib.spark.netplan import NetSlice, split_for_partitions
from mqcore.contrib.spark.netread import _cut, subscription
from mqcore.contrib.spark.options import ReadOptions, check_location, parse_positions
from mqcore.errors import InvalidArgumentError


def test_positions_per_broker_and_flat() -> None:
    """JSON per topic, broker group and queue; the flat form leaves the broker out."""
    assert parse_positions("starting_offsets", None, ["T"], "earliest") == "earliest"
    assert parse_positions("ending_offsets", "LATEST", ["T"], "earliest") == "latest"
    nested = parse_positions("s", '{"T": {"broker-a": {"0": 12, "1": -2}}}', ["T"], "earliest")
    assert nested == {"T": {"broker-a": {0: 12, 1: -2}}}
    assert parse_positions("s", '{"T": {"3": -1}}', ["T"], "earliest") == {"T": {None: {3: -1}}}


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ('{"U": {"0": 1}}', "names topic.s. U the query does not read"),
        ('{"T": {"0": -3}}', "queue 0 of 'T' has offset -3"),
        ("soon", "must be earliest, latest or JSON"),
    ],
)
def test_bad_positions(text: str, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        parse_positions("starting_offsets", text, ["T"], "earliest")


def test_network_options_and_their_defaults() -> None:
    opts = ReadOptions.parse({"NameSrv": "h:1;h:2", "topic": "T", "fail_on_data_loss": "false"})
    net = opts.network
    assert net is not None and net.namesrv == "h:1;h:2"
    assert (net.pull_batch_size, net.pulls_in_flight, net.fail_on_data_loss) == (1024, 4, False)
    assert net.ending == "latest" and net.min_partitions is None
    stream = ReadOptions.parse(
        {"namesrv": "h:1", "topic": "T", "commit_group": "g"}, streaming=True
    )
    assert stream.network is not None and stream.network.commit_group == "g"
    with pytest.raises(InvalidArgumentError, match="unknown option.*ending_offsets"):
        ReadOptions.parse({"namesrv": "h:1", "topic": "T", "ending_offsets": "1"}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="fail_on_data_loss='maybe' must be true or"):
        ReadOptions.parse({"namesrv": "h:1", "topic": "T", "fail_on_data_loss": "maybe"})


def test_path_and_namesrv_are_exclusive_in_every_direction() -> None:
    with pytest.raises(InvalidArgumentError, match="path='d' and namesrv='h:1' are both given"):
        ReadOptions.parse({"path": "d", "namesrv": "h:1", "topic": "T"}, streaming=True)
    with pytest.raises(InvalidArgumentError, match="both given"):
        check_location({"Path": "d", "NAMESRV": "h:1", "topic": "T"})
    check_location({"path": "d"})
    with pytest.raises(InvalidArgumentError, match="ending_offsets are for reading from a server"):
        ReadOptions.parse({"path": "d", "topic": "T", "ending_offsets": "latest"})


def test_split_for_partitions() -> None:
    """max_records_per_partition cuts every range; min_partitions halves the largest."""
    ranges = [NetSlice("T", "a", 0, 0, 100), NetSlice("T", "b", 0, 10, 20)]
    cut = split_for_partitions(ranges, 40, None)
    assert [(s.broker, s.start, s.end) for s in cut] == [
        ("a", 0, 40), ("a", 40, 80), ("a", 80, 100), ("b", 10, 20)
    ]  # fmt: skip
    more = split_for_partitions(ranges, None, 4)
    assert sorted((s.broker, s.start, s.end) for s in more) == [
        ("a", 0, 25), ("a", 25, 50), ("a", 50, 100), ("b", 10, 20)
    ]  # fmt: skip


def test_subscription_of_filters() -> None:
    """SQL92 goes as it is; tags (the filter's and Spark's pushed ones) as a TAG
    subscription that the builder re-checks by string."""
    sql = ReadOptions.parse(
        {"namesrv": "h:1", "topic": "T", "filter_type": "SQL92", "filter": "a>1"}
    )
    assert subscription(sql) == ("a>1", "SQL92", None)
    tag = ReadOptions.parse({"namesrv": "h:1", "topic": "T", "filter": "B || A"})
    expression, kind, tags = subscription(tag)
    assert (expression, kind) == ("A || B", "TAG")
    assert tags == (
        tuple(sorted({codec.tags_hash_code("A"), codec.tags_hash_code("B")})),
        (b"A", b"B"),
    )
    assert subscription(ReadOptions.parse({"namesrv": "h:1", "topic": "T"})) == ("*", "TAG", None)


def test_cut_keeps_the_records_before_the_end() -> None:
    """A filtered scan that ran past its segment: the records from the end offset on go."""
    records = [
        codec.encode(Message(topic="T", body=b"x" * i), queue_id=0, queue_offset=10 + i)
        for i in range(5)
    ]
    body = b"".join(records)
    assert _cut(body, 12) == records[0] + records[1]
    assert _cut(body, 10) == b""
    assert _cut(body, 99) == body
