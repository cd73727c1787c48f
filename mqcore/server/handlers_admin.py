"""The broker's admin requests: what ``mqcore topic|group|lag|offset`` (and RocketMQ's own
admin tools) ask over the remoting protocol.

Handlers registered in the server's request table
(:data:`~mqcore.server.operations.OPERATION_TABLE`) by request code, with RocketMQ's numbers
and body shapes:

- 201 GET_ALL_SUBSCRIPTIONGROUP_CONFIG: the consumer groups the broker knows of (a member
  online, a committed offset, or a retry or dead-letter topic of theirs);
- 351 GET_TOPIC_CONFIG: one topic's config (RocketMQ 5.x's admin asks before its stats);
- 202 GET_TOPIC_STATS_INFO: each queue's min and max offset and last store time;
- 203 GET_CONSUMER_CONNECTION_LIST: a group's live clients and subscriptions;
- 206 GET_ALL_TOPIC_LIST_FROM_NAMESERVER: topic names (the name server's role);
- 208 GET_CONSUME_STATS: a group's broker offset and committed offset per queue;
- 307 GET_CONSUMER_RUNNING_INFO: passed on to one client over its channel, which answers
  with the queues it owns now (only clients know their allocation).
"""

from __future__ import annotations

from typing import Any

from mqcore.broker.topics import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from mqcore.errors import BrokerError, RemotingError
from mqcore.logs import get_logger
from mqcore.message import MessageQueue
from mqcore.protocol import admin_bodies
from mqcore.protocol.bodies import SubscriptionData
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.fastjson import dumps
from mqcore.remoting.command import RemotingCommand
from mqcore.server.operations import Serving, error, ok, operation

__all__ = ["known_groups"]

log = get_logger(__name__)

Reply = RemotingCommand  # these handlers answer at once


def known_groups(processor: Serving) -> set[str]:
    """Consumer groups with a member online, a committed offset, or a retry or dead-letter
    topic (mqcore keeps no separate subscription-group configs)."""
    broker = processor.broker
    groups = set(broker.consumers.groups())
    groups.update(broker.offsets.group_topic_map())
    for cfg in broker.list_topics():
        for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
            if cfg.topic_name.startswith(prefix):
                groups.add(cfg.topic_name[len(prefix) :])
    return groups


def _unknown_group(req: RemotingCommand, group: str) -> RemotingCommand:
    return error(
        req,
        ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
        f"consumer group {group!r} is unknown to this broker (no member online, no offset "
        f"committed); `mqcore group list` shows the groups it knows",
    )


def _no_topic(req: RemotingCommand, topic: str) -> RemotingCommand:
    return error(
        req,
        ResponseCode.TOPIC_NOT_EXIST,
        f"topic {topic!r} does not exist; `mqcore topic list` shows the topics",
    )


def _queue_count(processor: Serving, topic: str) -> int | None:
    cfg = processor.broker.topics.get(topic)
    return None if cfg is None else max(cfg.read_queue_nums, cfg.write_queue_nums)


def _store_time(processor: Serving, topic: str, queue_id: int, offset: int) -> int:
    if offset < 0:
        return 0
    got = processor.broker.store.get(topic, queue_id, offset, max_count=1)
    return int(got.messages[0].store_timestamp) if got.messages else 0


@operation(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
def _all_groups(self: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    body = admin_bodies.SubscriptionGroupWrapper(groups=known_groups(self)).encode()
    return ok(req, body=body)


@operation(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
def _topic_names(self: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    names = sorted(t.topic_name for t in self.broker.list_topics())
    return ok(req, body=dumps({"topicList": names}))


@operation(RequestCode.GET_TOPIC_CONFIG)
def _topic_config(self: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    cfg = self.broker.topics.get(h.topic)
    if cfg is None:
        return _no_topic(req, h.topic)
    # RocketMQ 5.x answers a TopicConfigAndQueueMapping: the config, and the static-topic
    # mapping, which mqcore has none of (absent reads as a plain topic).
    return ok(req, body=dumps(cfg.to_json()))


@operation(RequestCode.GET_TOPIC_STATS_INFO)
def _topic_stats(self: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    count = _queue_count(self, h.topic)
    if count is None:
        return _no_topic(req, h.topic)
    store, name = self.broker.store, self.broker.config.broker_name
    table: dict[MessageQueue, admin_bodies.TopicOffset] = {}
    for queue_id in range(count):
        low = max(0, int(store.min_offset(h.topic, queue_id)))
        high = max(0, int(store.max_offset(h.topic, queue_id)))
        table[MessageQueue(h.topic, name, queue_id)] = admin_bodies.TopicOffset(
            min_offset=low,
            max_offset=high,
            last_update_timestamp=_store_time(self, h.topic, queue_id, high - 1),
        )
    return ok(req, body=admin_bodies.TopicStatsTable(offset_table=table).encode())


def _group_topics(self: Serving, group: str) -> set[str]:
    # As RocketMQ: the topics the group has offsets in, kept to those it subscribes to when
    # its members are online (a topic it left no longer counts).
    topics = set(self.broker.offsets.topics_by_group(group))
    data = self.broker.consumers.group_data(group)
    if data is not None and data.subscriptions:
        subscribed = {s.topic for s in data.subscriptions}
        topics = (topics & subscribed) | subscribed
    return {t for t in topics if self.broker.topics.get(t) is not None}


@operation(RequestCode.GET_CONSUME_STATS)
def _consume_stats(self: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    group = h.consumer_group
    if group not in known_groups(self):
        return _unknown_group(req, group)
    if h.topic:
        if self.broker.topics.get(h.topic) is None:
            return _no_topic(req, h.topic)
        topics = {h.topic}
    else:
        topics = _group_topics(self, group)
    broker, name = self.broker, self.broker.config.broker_name
    table: dict[MessageQueue, admin_bodies.OffsetWrapper] = {}
    for topic in sorted(topics):
        cfg = broker.topics.get(topic)
        if cfg is None:
            continue
        for queue_id in range(cfg.read_queue_nums):
            consumer = max(0, broker.offsets.query_offset(group, topic, queue_id))
            table[MessageQueue(topic, name, queue_id)] = admin_bodies.OffsetWrapper(
                broker_offset=max(0, int(broker.store.max_offset(topic, queue_id))),
                consumer_offset=consumer,
                pull_offset=consumer,
                last_timestamp=_store_time(self, topic, queue_id, consumer - 1),
            )
    return ok(req, body=admin_bodies.ConsumeStats(offset_table=table).encode())


def _connection(client_id: str, channel: Any) -> admin_bodies.Connection:
    connection = getattr(channel, "connection", None)
    if connection is None:  # a client in the broker's own process
        return admin_bodies.Connection(client_id=client_id, client_addr="", language="PYTHON")
    language = getattr(getattr(channel, "language", None), "name", None) or "OTHER"
    return admin_bodies.Connection(
        client_id=client_id,
        client_addr=str(getattr(connection, "remote_address", "") or ""),
        language=language,
    )


@operation(RequestCode.GET_CONSUMER_CONNECTION_LIST)
def _connections(self: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    group = h.consumer_group
    data = self.broker.consumers.group_data(group)
    members = self.broker.consumers.client_ids(group)
    if data is None or not members:
        return error(
            req, ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group {group!r} is not online"
        )
    channels = dict(self.broker.consumers.channels(group))
    body = admin_bodies.ConsumerConnection(
        connection_set=[_connection(cid, channels.get(cid)) for cid in members],
        subscription_table={
            s.topic: SubscriptionData(
                topic=s.topic, sub_string=s.sub_string, expression_type=s.expression_type
            )
            for s in data.subscriptions
        },
        consume_type=data.consume_type,
        message_model=data.message_model.name,
        consume_from_where=data.consume_from_where.name,
    ).encode()
    return ok(req, body=body)


@operation(RequestCode.GET_CONSUMER_RUNNING_INFO)
def _running_info(self: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    group, client_id = h.consumer_group, h.client_id
    channel = dict(self.broker.consumers.channels(group)).get(client_id)
    ask = getattr(channel, "consumer_running_info", None)
    if ask is None:
        return error(
            req,
            ResponseCode.SYSTEM_ERROR,
            f"The Consumer <{group}> <{client_id}> not online",
        )
    try:
        info = ask(group)
    except RemotingError as exc:  # RocketMQ answers a silent client's timeout this way
        return error(
            req, ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client_id}>: {exc}"
        )
    except BrokerError as exc:
        return error(req, exc.code if exc.code > 0 else ResponseCode.SYSTEM_ERROR, str(exc))
    return ok(req, body=info.encode())
