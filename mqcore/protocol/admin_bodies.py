"""RocketMQ's JSON bodies of the admin requests: topic and consume statistics, a group's
connections and subscription groups, a consumer's running information.

Each class mirrors a RocketMQ ``RemotingSerializable`` class (RocketMQ's JSON keys, snake
case in Python) with ``encode() -> bytes`` and ``decode(bytes)``. The maps keyed by message
queue (``TopicStatsTable.offsetTable``, ``ConsumeStats.offsetTable``,
``ConsumerRunningInfo.mqTable``) are written as fastjson writes them, with queue objects as
keys, so RocketMQ's own admin tools read them; the decoders take that shape and a list of
``{"mq": ..., "value": ...}`` rows alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import attrs

from mqcore.errors import ProtocolError
from mqcore.message import MessageQueue
from mqcore.protocol.bodies import (
    CONSUME_FROM_WHERE,
    CONSUME_TYPES,
    MESSAGE_MODELS,
    SubscriptionData,
    _bool,
    _enum,
    _int,
    _items,
    _mq,
    _mq_json,
    _object,
    _str,
)
from mqcore.protocol.fastjson import dumps, loads

__all__ = [
    "TIMER_RUNTIME_KEYS",
    "Connection",
    "ConsumeStats",
    "ConsumerConnection",
    "ConsumerRunningInfo",
    "OffsetWrapper",
    "ProcessQueueInfo",
    "SubscriptionGroupWrapper",
    "TopicOffset",
    "TopicStatsTable",
]

V = TypeVar("V")

#: A timer scheduler's stats (``TimerStats`` fields) under the keys a broker's runtime info
#: (GET_BROKER_RUNTIME_INFO) gives them.
TIMER_RUNTIME_KEYS = {
    "pending": "timerPending",
    "in_wheel": "timerInWheel",
    "enqueue_backlog": "timerEnqueueBacklog",
    "next_due_ms": "timerNextDueMs",
    "lag_ms": "timerLagMs",
    "read_ms": "timerReadMs",
}


def _body(body: bytes | bytearray | memoryview | str, what: str) -> Mapping[str, Any]:
    """A body's top-level JSON object. :raises ProtocolError: not JSON, or not an object."""
    return _object(loads(body), what)


def _mq_map(table: Mapping[MessageQueue, Any], value: Callable[[Any], Any]) -> str:
    # fastjson's Map<MessageQueue, V>: queue objects as keys (not standard JSON, see fastjson).
    entries = ",".join(
        f"{dumps(_mq_json(mq)).decode()}:{dumps(value(v)).decode()}"
        for mq, v in sorted(table.items())
    )
    return "{" + entries + "}"


def _read_mq_map(
    obj: Mapping[str, Any], key: str, what: str, read: Callable[[Any], V]
) -> dict[MessageQueue, V]:
    table = obj.get(key) or {}
    out: dict[MessageQueue, V] = {}
    if isinstance(table, list):
        for row in table:
            row = _object(row, what)
            out[_mq(row.get("mq"), what)] = read(row.get("value"))
    elif isinstance(table, Mapping):
        for mq, value in table.items():
            out[_mq(mq, what)] = read(value)
    else:
        raise ProtocolError(f"{what}: {key!r} must be a map keyed by message queue")
    return out


def _float(obj: Mapping[str, Any], key: str, what: str) -> float:
    value = obj.get(key, 0)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ProtocolError(f"{what}: {key!r} must be a number, got {value!r:.80}") from None


def _topic_offsets(value: Mapping[MessageQueue, TopicOffset]) -> dict[MessageQueue, TopicOffset]:
    return dict(value)


def _offset_wrappers(
    value: Mapping[MessageQueue, OffsetWrapper],
) -> dict[MessageQueue, OffsetWrapper]:
    return dict(value)


def _queue_infos(
    value: Mapping[MessageQueue, ProcessQueueInfo],
) -> dict[MessageQueue, ProcessQueueInfo]:
    return dict(value)


# --- GET_TOPIC_STATS_INFO (202) ------------------------------------------------------------


@attrs.frozen(kw_only=True)
class TopicOffset:
    """One queue of a topic: offsets stored and the store time of its last message."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON object."""
        return {
            "minOffset": self.min_offset,
            "maxOffset": self.max_offset,
            "lastUpdateTimestamp": self.last_update_timestamp,
        }

    @classmethod
    def from_json(cls, obj: Any) -> TopicOffset:
        """Read one queue's offsets."""
        what = cls.__name__
        obj = _object(obj, what)
        return cls(
            min_offset=_int(obj, "minOffset", what, 0),
            max_offset=_int(obj, "maxOffset", what, 0),
            last_update_timestamp=_int(obj, "lastUpdateTimestamp", what, 0),
        )


@attrs.frozen(kw_only=True)
class TopicStatsTable:
    """The body of a GET_TOPIC_STATS_INFO response: every queue of the topic."""

    offset_table: dict[MessageQueue, TopicOffset] = attrs.field(
        factory=dict, converter=_topic_offsets
    )
    topic_put_tps: float = 0.0

    def encode(self) -> bytes:
        """fastjson's shape (queue objects as map keys)."""
        table = _mq_map(self.offset_table, TopicOffset.to_json)
        return f'{{"offsetTable":{table},"topicPutTps":{self.topic_put_tps!r}}}'.encode()

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> TopicStatsTable:
        """Read the body. :raises ProtocolError: malformed."""
        what = cls.__name__
        obj = _body(body, what)
        return cls(
            offset_table=_read_mq_map(obj, "offsetTable", what, TopicOffset.from_json),
            topic_put_tps=_float(obj, "topicPutTps", what),
        )


# --- GET_CONSUME_STATS (208) ---------------------------------------------------------------


@attrs.frozen(kw_only=True)
class OffsetWrapper:
    """One queue of a group's progress: the queue's end, the group's committed offset."""

    broker_offset: int = 0
    consumer_offset: int = 0
    pull_offset: int = 0
    last_timestamp: int = 0

    @property
    def lag(self) -> int:
        """Messages stored and not yet consumed (RocketMQ's diff)."""
        return max(0, self.broker_offset - self.consumer_offset)

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON object."""
        return {
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "pullOffset": self.pull_offset,
            "lastTimestamp": self.last_timestamp,
        }

    @classmethod
    def from_json(cls, obj: Any) -> OffsetWrapper:
        """Read one queue's progress."""
        what = cls.__name__
        obj = _object(obj, what)
        return cls(
            broker_offset=_int(obj, "brokerOffset", what, 0),
            consumer_offset=_int(obj, "consumerOffset", what, 0),
            pull_offset=_int(obj, "pullOffset", what, 0),
            last_timestamp=_int(obj, "lastTimestamp", what, 0),
        )


@attrs.frozen(kw_only=True)
class ConsumeStats:
    """The body of a GET_CONSUME_STATS response: a group's progress in every queue."""

    offset_table: dict[MessageQueue, OffsetWrapper] = attrs.field(
        factory=dict, converter=_offset_wrappers
    )
    consume_tps: float = 0.0

    def total_lag(self) -> int:
        """The sum of every queue's lag (RocketMQ's ``computeTotalDiff``)."""
        return sum(w.lag for w in self.offset_table.values())

    def encode(self) -> bytes:
        """fastjson's shape (queue objects as map keys)."""
        table = _mq_map(self.offset_table, OffsetWrapper.to_json)
        return f'{{"consumeTps":{self.consume_tps!r},"offsetTable":{table}}}'.encode()

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> ConsumeStats:
        """Read the body. :raises ProtocolError: malformed."""
        what = cls.__name__
        obj = _body(body, what)
        return cls(
            offset_table=_read_mq_map(obj, "offsetTable", what, OffsetWrapper.from_json),
            consume_tps=_float(obj, "consumeTps", what),
        )


# --- GET_CONSUMER_CONNECTION_LIST (203) ----------------------------------------------------


@attrs.frozen(kw_only=True)
class Connection:
    """One client of a group: its id, address, language and version."""

    client_id: str
    client_addr: str = ""
    language: str = "JAVA"
    version: int = 0

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON object."""
        return {
            "clientId": self.client_id,
            "clientAddr": self.client_addr,
            "language": self.language,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, obj: Any) -> Connection:
        """Read one connection."""
        what = cls.__name__
        obj = _object(obj, what)
        return cls(
            client_id=_str(obj, "clientId", what),
            client_addr=_str(obj, "clientAddr", what, ""),
            language=str(obj.get("language") or "JAVA"),
            version=_int(obj, "version", what, 0),
        )


def _connections(items: Iterable[Connection]) -> tuple[Connection, ...]:
    return tuple(sorted(items, key=lambda c: c.client_id))


def _subscriptions(value: Mapping[str, SubscriptionData]) -> dict[str, SubscriptionData]:
    return dict(value)


@attrs.frozen(kw_only=True)
class ConsumerConnection:
    """The body of a GET_CONSUMER_CONNECTION_LIST response: a group's live clients and what
    the group subscribes to."""

    connection_set: tuple[Connection, ...] = attrs.field(default=(), converter=_connections)
    subscription_table: dict[str, SubscriptionData] = attrs.field(
        factory=dict, converter=_subscriptions
    )
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"

    def encode(self) -> bytes:
        """The JSON body."""
        return dumps(
            {
                "connectionSet": [c.to_json() for c in self.connection_set],
                "subscriptionTable": {
                    t: s.to_json() for t, s in sorted(self.subscription_table.items())
                },
                "consumeType": self.consume_type,
                "messageModel": self.message_model,
                "consumeFromWhere": self.consume_from_where,
            }
        )

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> ConsumerConnection:
        """Read the body. :raises ProtocolError: malformed."""
        what = cls.__name__
        obj = _body(body, what)
        subs = obj.get("subscriptionTable") or {}
        if not isinstance(subs, Mapping):
            raise ProtocolError(f"{what}: 'subscriptionTable' must be a map")
        return cls(
            connection_set=(Connection.from_json(c) for c in _items(obj, "connectionSet", what)),
            subscription_table={str(t): SubscriptionData.from_json(s) for t, s in subs.items()},
            consume_type=_enum(obj, "consumeType", CONSUME_TYPES, "CONSUME_PASSIVELY", what),
            message_model=_enum(obj, "messageModel", MESSAGE_MODELS, "CLUSTERING", what),
            consume_from_where=_enum(
                obj, "consumeFromWhere", CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET", what
            ),
        )


# --- GET_CONSUMER_RUNNING_INFO (307) -------------------------------------------------------


@attrs.frozen(kw_only=True)
class ProcessQueueInfo:
    """What a consumer holds of one queue it owns (RocketMQ's ``ProcessQueueInfo``)."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    locked: bool = False
    droped: bool = False  # RocketMQ's spelling, kept on the wire
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def to_json(self) -> dict[str, Any]:
        """RocketMQ's JSON object (its transaction and lock-try fields as zeros)."""
        return {
            "commitOffset": self.commit_offset,
            "cachedMsgMinOffset": self.cached_msg_min_offset,
            "cachedMsgMaxOffset": self.cached_msg_max_offset,
            "cachedMsgCount": self.cached_msg_count,
            "cachedMsgSizeInMiB": self.cached_msg_size_in_mib,
            "transactionMsgMinOffset": 0,
            "transactionMsgMaxOffset": 0,
            "transactionMsgCount": 0,
            "locked": self.locked,
            "tryUnlockTimes": 0,
            "lastLockTimestamp": 0,
            "droped": self.droped,
            "lastPullTimestamp": self.last_pull_timestamp,
            "lastConsumeTimestamp": self.last_consume_timestamp,
        }

    @classmethod
    def from_json(cls, obj: Any) -> ProcessQueueInfo:
        """Read one queue's state."""
        what = cls.__name__
        obj = _object(obj, what)
        return cls(
            commit_offset=_int(obj, "commitOffset", what, 0),
            cached_msg_min_offset=_int(obj, "cachedMsgMinOffset", what, 0),
            cached_msg_max_offset=_int(obj, "cachedMsgMaxOffset", what, 0),
            cached_msg_count=_int(obj, "cachedMsgCount", what, 0),
            cached_msg_size_in_mib=_int(obj, "cachedMsgSizeInMiB", what, 0),
            locked=_bool(obj, "locked"),
            droped=_bool(obj, "droped"),
            last_pull_timestamp=_int(obj, "lastPullTimestamp", what, 0),
            last_consume_timestamp=_int(obj, "lastConsumeTimestamp", what, 0),
        )


def _str_dict(value: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in value.items()}


def _sub_tuple(items: Iterable[SubscriptionData]) -> tuple[SubscriptionData, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class ConsumerRunningInfo:
    """A consumer's answer to GET_CONSUMER_RUNNING_INFO: its settings (``properties``), its
    subscriptions and the queues it owns right now (``mq_table``)."""

    properties: dict[str, str] = attrs.field(factory=dict, converter=_str_dict)
    subscription_set: tuple[SubscriptionData, ...] = attrs.field(default=(), converter=_sub_tuple)
    mq_table: dict[MessageQueue, ProcessQueueInfo] = attrs.field(
        factory=dict, converter=_queue_infos
    )

    def encode(self) -> bytes:
        """fastjson's shape (queue objects as keys of ``mqTable``)."""
        head = dumps(
            {
                "properties": dict(sorted(self.properties.items())),
                "subscriptionSet": [s.to_json() for s in self.subscription_set],
                "statusTable": {},
            }
        ).decode()
        table = _mq_map(self.mq_table, ProcessQueueInfo.to_json)
        return (head[:-1] + f',"mqTable":{table}}}').encode()

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> ConsumerRunningInfo:
        """Read the body. :raises ProtocolError: malformed."""
        what = cls.__name__
        obj = _body(body, what)
        props = obj.get("properties") or {}
        if not isinstance(props, Mapping):
            raise ProtocolError(f"{what}: 'properties' must be a map")
        return cls(
            properties=props,
            subscription_set=(
                SubscriptionData.from_json(s) for s in _items(obj, "subscriptionSet", what)
            ),
            mq_table=_read_mq_map(obj, "mqTable", what, ProcessQueueInfo.from_json),
        )


# --- GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) ------------------------------------------------


def _names(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(items)))


@attrs.frozen(kw_only=True)
class SubscriptionGroupWrapper:
    """The body of a GET_ALL_SUBSCRIPTIONGROUP_CONFIG response: the consumer groups the
    broker knows, each as a ``SubscriptionGroupConfig`` with RocketMQ's defaults."""

    groups: tuple[str, ...] = attrs.field(default=(), converter=_names)

    def encode(self) -> bytes:
        """The JSON body (``subscriptionGroupTable``, ``dataVersion``)."""
        table = {
            g: {
                "groupName": g,
                "consumeEnable": True,
                "consumeFromMinEnable": True,
                "consumeBroadcastEnable": True,
                "retryQueueNums": 1,
                "retryMaxTimes": 16,
                "brokerId": 0,
                "whichBrokerWhenConsumeSlowly": 1,
                "notifyConsumerIdsChangedEnable": True,
            }
            for g in self.groups
        }
        return dumps({"subscriptionGroupTable": table, "dataVersion": {"timestamp": 0}})

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> SubscriptionGroupWrapper:
        """Read the body. :raises ProtocolError: malformed."""
        what = cls.__name__
        obj = _body(body, what)
        table = obj.get("subscriptionGroupTable") or {}
        if not isinstance(table, Mapping):
            raise ProtocolError(f"{what}: 'subscriptionGroupTable' must be a map")
        return cls(groups=(str(g) for g in table))
