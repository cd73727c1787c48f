"""The admin bodies: round trips, and the shapes RocketMQ's Java side writes (fastjson)."""

from __future__ import annotations

import pytest

from mqcore.errors import ProtocolError
from mqcore.message import MessageQueue
from mqcore.protocol.admin_bodies import (
    Connection,
    ConsumerConnection,
    ConsumerRunningInfo,
    ConsumeStats,
    OffsetWrapper,
    ProcessQueueInfo,
    SubscriptionGroupWrapper,
    TopicOffset,
    TopicStatsTable,
)
from mqcore.protocol.bodies import SubscriptionData

Q0 = MessageQueue("T", "broker-a", 0)
Q1 = MessageQueue("T", "broker-a", 1)


def test_topic_stats_round_trip_with_queue_objects_as_keys() -> None:
    table = TopicStatsTable(
        offset_table={
            Q1: TopicOffset(min_offset=2, max_offset=9, last_update_timestamp=1700),
            Q0: TopicOffset(),
        },
        topic_put_tps=1.5,
    )
    body = table.encode()
    assert body.startswith(b'{"offsetTable":{{"topic":"T","brokerName":"broker-a","queueId":0}:')
    assert TopicStatsTable.decode(body) == table


def test_consume_stats_as_the_java_broker_writes_it() -> None:
    """fastjson: queue keys with fields in alphabetical order, numbers unquoted."""
    body = (
        b'{"consumeTps":0.0,"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:'
        b'{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":1700000000000,"pullOffset":4}}}'
    )
    stats = ConsumeStats.decode(body)
    assert stats.offset_table == {
        Q1: OffsetWrapper(
            broker_offset=10, consumer_offset=4, pull_offset=4, last_timestamp=1700000000000
        )
    }
    assert stats.total_lag() == 6
    assert ConsumeStats.decode(stats.encode()) == stats


def test_rows_of_queue_and_value_are_read_too() -> None:
    body = (
        b'{"offsetTable":[{"mq":{"topic":"T","brokerName":"broker-a","queueId":0},'
        b'"value":{"brokerOffset":"3","consumerOffset":1}}]}'
    )
    assert ConsumeStats.decode(body).offset_table[Q0].lag == 2


def test_running_info_round_trip() -> None:
    info = ConsumerRunningInfo(
        properties={"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "threads": 20},
        subscription_set=[SubscriptionData(topic="T", sub_string="A || B")],
        mq_table={Q0: ProcessQueueInfo(commit_offset=7, cached_msg_count=3, locked=True)},
    )
    back = ConsumerRunningInfo.decode(info.encode())
    assert back == info
    assert back.properties["threads"] == "20"


def test_connections_and_groups_round_trip() -> None:
    conn = ConsumerConnection(
        connection_set=[Connection(client_id="b"), Connection(client_id="a", language="PYTHON")],
        subscription_table={"T": SubscriptionData(topic="T")},
        message_model="BROADCASTING",
    )
    back = ConsumerConnection.decode(conn.encode())
    assert [c.client_id for c in back.connection_set] == ["a", "b"]
    assert back == conn
    groups = SubscriptionGroupWrapper(groups=["g2", "g1", "g2"])
    assert SubscriptionGroupWrapper.decode(groups.encode()).groups == ("g1", "g2")


@pytest.mark.parametrize(
    "body",
    [b"[]", b'{"offsetTable":7}', b'{"offsetTable":{"x":{}}}', b'{"consumeTps":"fast"}'],
)
def test_malformed_bodies_are_protocol_errors(body: bytes) -> None:
    with pytest.raises(ProtocolError):
        ConsumeStats.decode(body)
