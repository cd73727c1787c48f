"""RocketMQ's custom headers: the typed arguments a command carries in its extFields.

One attrs class per RocketMQ ``*RequestHeader`` / ``*ResponseHeader`` class (RocketMQ 4.x), with
snake-case attributes and RocketMQ's names on the wire. ``from_ext_fields`` reads a command's
extFields (numbers or strings, unknown and ACL fields ignored; see :mod:`mqcore.protocol.fields`)
and ``to_ext_fields`` writes them back as strings. Codes that carry no header (34 heartbeat,
41/42 lock/unlock) send a JSON body instead: see :mod:`mqcore.protocol.bodies`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import ClassVar

import attrs

from mqcore.protocol.codes import RequestCode
from mqcore.protocol.fields import CommandHeader, Kind, wire_field
from mqcore.protocol.transaction import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)

__all__ = [
    "PULL_FLAG_COMMIT_OFFSET",
    "PULL_FLAG_SUBSCRIPTION",
    "PULL_FLAG_SUSPEND",
    "REQUEST_HEADERS",
    "CommandHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteTopicRequestHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerListByGroupResponseHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicConfigRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "NotifyConsumerIdsChangedRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PullSysFlag",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageRequestHeaderV2",
    "SendMessageResponseHeader",
    "UnregisterClientRequestHeader",
    "UnregisterClientResponseHeader",
    "UpdateConsumerOffsetRequestHeader",
    "UpdateConsumerOffsetResponseHeader",
    "ViewMessageRequestHeader",
    "ViewMessageResponseHeader",
]


@attrs.frozen(kw_only=True)
class SendMessageRequestHeader(CommandHeader):
    """SEND_MESSAGE (10) request; also the decoded form of 310 and 320."""

    producer_group: str = wire_field("producerGroup", Kind.STRING, required=True)
    topic: str = wire_field("topic", Kind.STRING, required=True)
    default_topic: str = wire_field("defaultTopic", Kind.STRING, required=True)
    default_topic_queue_nums: int = wire_field("defaultTopicQueueNums", Kind.INT, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)
    sys_flag: int = wire_field("sysFlag", Kind.INT, required=True)
    born_timestamp: int = wire_field("bornTimestamp", Kind.LONG, required=True)
    flag: int = wire_field("flag", Kind.INT, required=True)
    properties: str | None = wire_field("properties", Kind.STRING)
    reconsume_times: int | None = wire_field("reconsumeTimes", Kind.INT)
    unit_mode: bool = wire_field("unitMode", Kind.BOOLEAN, default=False)
    batch: bool = wire_field("batch", Kind.BOOLEAN, default=False)
    max_reconsume_times: int | None = wire_field("maxReconsumeTimes", Kind.INT)


@attrs.frozen(kw_only=True)
class SendMessageResponseHeader(CommandHeader):
    """SEND_MESSAGE / SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE response.

    ``msg_region`` and ``trace_on`` are the ``MSG_REGION`` and ``TRACE_ON`` extFields a RocketMQ
    broker adds to every send response (not fields of the Java class)."""

    msg_id: str = wire_field("msgId", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)
    queue_offset: int = wire_field("queueOffset", Kind.LONG, required=True)
    transaction_id: str | None = wire_field("transactionId", Kind.STRING)
    msg_region: str | None = wire_field("MSG_REGION", Kind.STRING)
    trace_on: str | None = wire_field("TRACE_ON", Kind.STRING)


@attrs.frozen(kw_only=True)
class PullMessageRequestHeader(CommandHeader):
    """PULL_MESSAGE (11) request. ``sys_flag`` bits: see :class:`PullSysFlag`."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)
    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)
    queue_offset: int = wire_field("queueOffset", Kind.LONG, required=True)
    max_msg_nums: int = wire_field("maxMsgNums", Kind.INT, required=True)
    sys_flag: int = wire_field("sysFlag", Kind.INT, required=True)
    commit_offset: int = wire_field("commitOffset", Kind.LONG, required=True)
    suspend_timeout_millis: int = wire_field("suspendTimeoutMillis", Kind.LONG, required=True)
    subscription: str | None = wire_field("subscription", Kind.STRING)
    sub_version: int = wire_field("subVersion", Kind.LONG, required=True)
    expression_type: str | None = wire_field("expressionType", Kind.STRING)


@attrs.frozen(kw_only=True)
class PullMessageResponseHeader(CommandHeader):
    """PULL_MESSAGE response (FOUND, PULL_NOT_FOUND, PULL_RETRY_IMMEDIATELY, PULL_OFFSET_MOVED)."""

    suggest_which_broker_id: int = wire_field("suggestWhichBrokerId", Kind.LONG, required=True)
    next_begin_offset: int = wire_field("nextBeginOffset", Kind.LONG, required=True)
    min_offset: int = wire_field("minOffset", Kind.LONG, required=True)
    max_offset: int = wire_field("maxOffset", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class QueryConsumerOffsetRequestHeader(CommandHeader):
    """QUERY_CONSUMER_OFFSET (14) request."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)
    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)


@attrs.frozen(kw_only=True)
class QueryConsumerOffsetResponseHeader(CommandHeader):
    """QUERY_CONSUMER_OFFSET response."""

    offset: int = wire_field("offset", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class UpdateConsumerOffsetRequestHeader(CommandHeader):
    """UPDATE_CONSUMER_OFFSET (15) request (often sent oneway)."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)
    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)
    commit_offset: int = wire_field("commitOffset", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class UpdateConsumerOffsetResponseHeader(CommandHeader):
    """UPDATE_CONSUMER_OFFSET response (no fields)."""


@attrs.frozen(kw_only=True)
class SearchOffsetRequestHeader(CommandHeader):
    """SEARCH_OFFSET_BY_TIMESTAMP (29) request."""

    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)
    timestamp: int = wire_field("timestamp", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class SearchOffsetResponseHeader(CommandHeader):
    """SEARCH_OFFSET_BY_TIMESTAMP response."""

    offset: int = wire_field("offset", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class GetMaxOffsetRequestHeader(CommandHeader):
    """GET_MAX_OFFSET (30) request."""

    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)


@attrs.frozen(kw_only=True)
class GetMaxOffsetResponseHeader(CommandHeader):
    """GET_MAX_OFFSET response."""

    offset: int = wire_field("offset", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class GetMinOffsetRequestHeader(CommandHeader):
    """GET_MIN_OFFSET (31) request."""

    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)


@attrs.frozen(kw_only=True)
class GetMinOffsetResponseHeader(CommandHeader):
    """GET_MIN_OFFSET response."""

    offset: int = wire_field("offset", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class GetEarliestMsgStoretimeRequestHeader(CommandHeader):
    """GET_EARLIEST_MSG_STORETIME (32) request."""

    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)


@attrs.frozen(kw_only=True)
class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    """GET_EARLIEST_MSG_STORETIME response."""

    timestamp: int = wire_field("timestamp", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class ViewMessageRequestHeader(CommandHeader):
    """VIEW_MESSAGE_BY_ID (33) request: ``offset`` is the commit-log offset decoded from the id."""

    offset: int = wire_field("offset", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class ViewMessageResponseHeader(CommandHeader):
    """VIEW_MESSAGE_BY_ID response (no fields; the record is the body)."""


@attrs.frozen(kw_only=True)
class QueryMessageRequestHeader(CommandHeader):
    """QUERY_MESSAGE (12) request: messages by key in a time range."""

    topic: str = wire_field("topic", Kind.STRING, required=True)
    key: str = wire_field("key", Kind.STRING, required=True)
    max_num: int = wire_field("maxNum", Kind.INT, required=True)
    begin_timestamp: int = wire_field("beginTimestamp", Kind.LONG, required=True)
    end_timestamp: int = wire_field("endTimestamp", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class QueryMessageResponseHeader(CommandHeader):
    """QUERY_MESSAGE response."""

    index_last_update_timestamp: int = wire_field(
        "indexLastUpdateTimestamp", Kind.LONG, required=True
    )
    index_last_update_phyoffset: int = wire_field(
        "indexLastUpdatePhyoffset", Kind.LONG, required=True
    )


@attrs.frozen(kw_only=True)
class ConsumerSendMsgBackRequestHeader(CommandHeader):
    """CONSUMER_SEND_MSG_BACK (36) request: ``offset`` is the message's commit-log offset."""

    offset: int = wire_field("offset", Kind.LONG, required=True)
    group: str = wire_field("group", Kind.STRING, required=True)
    delay_level: int = wire_field("delayLevel", Kind.INT, required=True)
    origin_msg_id: str | None = wire_field("originMsgId", Kind.STRING)
    origin_topic: str | None = wire_field("originTopic", Kind.STRING)
    unit_mode: bool = wire_field("unitMode", Kind.BOOLEAN, default=False)
    max_reconsume_times: int | None = wire_field("maxReconsumeTimes", Kind.INT)


@attrs.frozen(kw_only=True)
class GetConsumerListByGroupRequestHeader(CommandHeader):
    """GET_CONSUMER_LIST_BY_GROUP (38) request."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)


@attrs.frozen(kw_only=True)
class GetConsumerListByGroupResponseHeader(CommandHeader):
    """GET_CONSUMER_LIST_BY_GROUP response (no fields).

    The body is a :class:`~mqcore.protocol.bodies.GetConsumerListByGroupResponseBody`.
    """


@attrs.frozen(kw_only=True)
class UnregisterClientRequestHeader(CommandHeader):
    """UNREGISTER_CLIENT (35) request."""

    client_id: str = wire_field("clientID", Kind.STRING, required=True)
    producer_group: str | None = wire_field("producerGroup", Kind.STRING)
    consumer_group: str | None = wire_field("consumerGroup", Kind.STRING)


@attrs.frozen(kw_only=True)
class UnregisterClientResponseHeader(CommandHeader):
    """UNREGISTER_CLIENT response (no fields)."""


@attrs.frozen(kw_only=True)
class GetRouteInfoRequestHeader(CommandHeader):
    """GET_ROUTEINFO_BY_TOPIC (105) request."""

    topic: str = wire_field("topic", Kind.STRING, required=True)
    accept_standard_json_only: bool | None = wire_field("acceptStandardJsonOnly", Kind.BOOLEAN)


@attrs.frozen(kw_only=True)
class CreateTopicRequestHeader(CommandHeader):
    """UPDATE_AND_CREATE_TOPIC (17) request."""

    topic: str = wire_field("topic", Kind.STRING, required=True)
    default_topic: str = wire_field("defaultTopic", Kind.STRING, required=True)
    read_queue_nums: int = wire_field("readQueueNums", Kind.INT, required=True)
    write_queue_nums: int = wire_field("writeQueueNums", Kind.INT, required=True)
    perm: int = wire_field("perm", Kind.INT, required=True)
    topic_filter_type: str = wire_field("topicFilterType", Kind.STRING, required=True)
    topic_sys_flag: int | None = wire_field("topicSysFlag", Kind.INT)
    order: bool = wire_field("order", Kind.BOOLEAN, default=False)
    #: RocketMQ 5's topic attributes, ``+name=value`` joined by commas (``AttributeParser``)
    attributes: str | None = wire_field("attributes", Kind.STRING)


@attrs.frozen(kw_only=True)
class DeleteTopicRequestHeader(CommandHeader):
    """DELETE_TOPIC_IN_BROKER (215) request."""

    topic: str = wire_field("topic", Kind.STRING, required=True)


@attrs.frozen(kw_only=True)
class ResetOffsetRequestHeader(CommandHeader):
    """INVOKE_BROKER_TO_RESET_OFFSET (222, admin to broker) and RESET_CONSUMER_CLIENT_OFFSET
    (220, broker to client, oneway, with a :class:`~mqcore.protocol.bodies.ResetOffsetBody`)."""

    topic: str = wire_field("topic", Kind.STRING, required=True)
    group: str = wire_field("group", Kind.STRING, required=True)
    timestamp: int = wire_field("timestamp", Kind.LONG, required=True)
    is_force: bool = wire_field("isForce", Kind.BOOLEAN, default=False)


@attrs.frozen(kw_only=True)
class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    """NOTIFY_CONSUMER_IDS_CHANGED (40) request, broker to client (oneway)."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)


@attrs.frozen(kw_only=True)
class SendMessageRequestHeaderV2(SendMessageRequestHeader):
    """SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320) request: the send header with
    one-letter wire names ``a``..``m`` (RocketMQ's ``SendMessageRequestHeaderV2``).

    It is a :class:`SendMessageRequestHeader` with the same attributes, so a handler serves
    10, 310 and 320 alike; ``l`` is ``maxReconsumeTimes``.
    """

    WIRE_RENAME: ClassVar[Mapping[str, str]] = {
        "producerGroup": "a",
        "topic": "b",
        "defaultTopic": "c",
        "defaultTopicQueueNums": "d",
        "queueId": "e",
        "sysFlag": "f",
        "bornTimestamp": "g",
        "flag": "h",
        "properties": "i",
        "reconsumeTimes": "j",
        "unitMode": "k",
        "maxReconsumeTimes": "l",
        "batch": "m",
    }

    @classmethod
    def from_v1(cls, header: SendMessageRequestHeader) -> SendMessageRequestHeaderV2:
        """The V2 form of a send header (what RocketMQ's clients send on the wire)."""
        return cls(**attrs.asdict(header, recurse=False))

    def to_v1(self) -> SendMessageRequestHeader:
        """The same header with RocketMQ's long field names."""
        return SendMessageRequestHeader(**attrs.asdict(self, recurse=False))


@attrs.frozen(kw_only=True)
class GetTopicStatsInfoRequestHeader(CommandHeader):
    """GET_TOPIC_STATS_INFO (202) request: every queue's offsets of ``topic``."""

    topic: str = wire_field("topic", Kind.STRING, required=True)


@attrs.frozen(kw_only=True)
class GetTopicConfigRequestHeader(CommandHeader):
    """GET_TOPIC_CONFIG (351) request: one topic's config."""

    topic: str = wire_field("topic", Kind.STRING, required=True)


@attrs.frozen(kw_only=True)
class GetConsumeStatsRequestHeader(CommandHeader):
    """GET_CONSUME_STATS (208) request: a group's progress, in ``topic`` or (absent) in every
    topic it subscribes to or has offsets in."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)
    topic: str | None = wire_field("topic", Kind.STRING)


@attrs.frozen(kw_only=True)
class GetConsumerConnectionListRequestHeader(CommandHeader):
    """GET_CONSUMER_CONNECTION_LIST (203) request: a group's live clients."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)


@attrs.frozen(kw_only=True)
class GetConsumerRunningInfoRequestHeader(CommandHeader):
    """GET_CONSUMER_RUNNING_INFO (307): admin to broker, and the broker passes it on to the
    client ``client_id`` over that client's connection; the answer is the client's
    :class:`~mqcore.protocol.admin_bodies.ConsumerRunningInfo`."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)
    client_id: str = wire_field("clientId", Kind.STRING, required=True)
    jstack_enable: bool = wire_field("jstackEnable", Kind.BOOLEAN, default=False)


class PullSysFlag(enum.IntFlag):
    """Bits of ``PullMessageRequestHeader.sys_flag`` (RocketMQ's ``PullSysFlag``)."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL_MESSAGE = 0x10


# The same bits as plain ints, for the pull paths: IntFlag arithmetic (construction, & and |
# make new members) costs microseconds a pull on each side.
PULL_FLAG_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
PULL_FLAG_SUSPEND = int(PullSysFlag.SUSPEND)
PULL_FLAG_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)


REQUEST_HEADERS: dict[int, type[CommandHeader]] = {
    RequestCode.SEND_MESSAGE: SendMessageRequestHeader,
    RequestCode.SEND_MESSAGE_V2: SendMessageRequestHeaderV2,
    RequestCode.SEND_BATCH_MESSAGE: SendMessageRequestHeaderV2,
    RequestCode.PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.LITE_PULL_MESSAGE: PullMessageRequestHeader,
    RequestCode.QUERY_MESSAGE: QueryMessageRequestHeader,
    RequestCode.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
    RequestCode.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
    RequestCode.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
    RequestCode.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
    RequestCode.QUERY_BROKER_OFFSET: GetMaxOffsetRequestHeader,  # served as GET_MAX_OFFSET
    RequestCode.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
    RequestCode.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
    RequestCode.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
    RequestCode.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
    RequestCode.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
    RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
    RequestCode.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
    RequestCode.DELETE_TOPIC_IN_BROKER: DeleteTopicRequestHeader,
    RequestCode.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetRequestHeader,
    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader,
    RequestCode.GET_TOPIC_STATS_INFO: GetTopicStatsInfoRequestHeader,
    RequestCode.GET_TOPIC_CONFIG: GetTopicConfigRequestHeader,
    RequestCode.GET_CONSUME_STATS: GetConsumeStatsRequestHeader,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: GetConsumerConnectionListRequestHeader,
    RequestCode.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader,
    RequestCode.END_TRANSACTION: EndTransactionRequestHeader,
    RequestCode.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
}
"""The request header class of each request code that has one."""

# Pop consumption's headers live beside its receipt handle (mqcore.protocol.pop).
from mqcore.protocol import pop as _pop  # noqa: E402

REQUEST_HEADERS.update(
    {
        RequestCode.POP_MESSAGE: _pop.PopMessageRequestHeader,
        RequestCode.ACK_MESSAGE: _pop.AckMessageRequestHeader,
        RequestCode.CHANGE_MESSAGE_INVISIBLETIME: _pop.ChangeInvisibleTimeRequestHeader,
        RequestCode.NOTIFICATION: _pop.NotificationRequestHeader,
    }
)
