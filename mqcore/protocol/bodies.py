"""RocketMQ's JSON command bodies: heartbeat, lock/unlock batch, reset offset, consumer list.

Each class mirrors a RocketMQ ``RemotingSerializable`` class (field names as RocketMQ's JSON
keys, snake case in Python) with ``encode() -> bytes`` and ``decode(bytes)``. Decoders accept
what the Java client (fastjson: enum names, object map keys) and the C++ core (enum ordinals,
numbers as strings) send. The topic route body is :class:`mqcore.protocol.route.TopicRoute`;
read a name server's route with :func:`mqcore.protocol.fastjson.loads`, which takes
fastjson's unquoted ``brokerAddrs`` keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from mqcore.errors import ProtocolError
from mqcore.message import MessageQueue
from mqcore.protocol.fastjson import dumps, loads

__all__ = [
    "CONSUME_FROM_WHERE",
    "CONSUME_TYPES",
    "MESSAGE_MODELS",
    "CheckClientRequestBody",
    "ConsumerData",
    "GetConsumerListByGroupResponseBody",
    "HeartbeatData",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "ProducerData",
    "ResetOffsetBody",
    "SubscriptionData",
    "UnlockBatchRequestBody",
]

# Java enum constants in ordinal order: fastjson writes the name, the C++ core the ordinal.
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


def _parse(body: bytes | bytearray | memoryview | str, what: str) -> Mapping[str, Any]:
    """A body's top-level JSON object."""
    return _object(loads(body), what)


def _object(obj: Any, what: str) -> Mapping[str, Any]:
    if not isinstance(obj, Mapping):
        raise ProtocolError(f"{what} body must be a JSON object, got {type(obj).__name__}")
    return obj


def _items(obj: Mapping[str, Any], key: str, what: str) -> list[Any]:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProtocolError(f"{what}: {key!r} must be a JSON array, got {value!r:.80}")
    return value


def _str(obj: Mapping[str, Any], key: str, what: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ProtocolError(f"{what}: {key!r} must be a string, got {value!r:.80}")


def _int(obj: Mapping[str, Any], key: str, what: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if value.__class__ is int:
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
    raise ProtocolError(f"{what}: {key!r} must be an integer, got {value!r:.80}")


def _bool(obj: Mapping[str, Any], key: str) -> bool:
    value = obj.get(key, False)
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1")
    return bool(value)


def _enum(obj: Mapping[str, Any], key: str, names: tuple[str, ...], default: str, what: str) -> str:
    value = obj.get(key, default)
    if isinstance(value, str) and value in names:
        return value
    if value.__class__ is int and 0 <= value < len(names):
        return names[value]
    raise ProtocolError(f"{what}: {key!r} must be one of {', '.join(names)}, got {value!r:.80}")


def _mq_json(mq: MessageQueue) -> dict[str, Any]:
    return {"topic": mq.topic, "brokerName": mq.broker_name, "queueId": mq.queue_id}


def _mq(obj: Any, what: str) -> MessageQueue:
    if isinstance(obj, tuple):  # an object used as a map key (see fastjson.loads)
        obj = dict(obj)
    if not isinstance(obj, Mapping):
        raise ProtocolError(f"{what}: a message queue must be a JSON object, got {obj!r:.80}")
    return MessageQueue(
        _str(obj, "topic", what), _str(obj, "brokerName", what), _int(obj, "queueId", what)
    )


def _str_set(items: Iterable[str]) -> frozenset[str]:
    return frozenset(items)


def _int_set(items: Iterable[int]) -> frozenset[int]:
    return frozenset(items)


def _str_tuple(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


def _mq_set(items: Iterable[MessageQueue]) -> frozenset[MessageQueue]:
    return frozenset(items)


# --- heartbeat (HEART_BEAT, 34) -------------------------------------------------------------


@attrs.frozen(kw_only=True)
class SubscriptionData:
    """One subscription of a consumer group (RocketMQ's ``SubscriptionData``)."""

    topic: str
    sub_string: str = "*"
    expression_type: str = "TAG"
    tags_set: frozenset[str] = attrs.field(default=frozenset(), converter=_str_set)
    code_set: frozenset[int] = attrs.field(default=frozenset(), converter=_int_set)
    sub_version: int = 0
    class_filter_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON object RocketMQ's Java client writes."""
        return {
            "classFilterMode": self.class_filter_mode,
            "topic": self.topic,
            "subString": self.sub_string,
            "tagsSet": sorted(self.tags_set),
            "codeSet": sorted(self.code_set),
            "subVersion": self.sub_version,
            "expressionType": self.expression_type,
        }

    @classmethod
    def from_json(cls, obj: Any) -> SubscriptionData:
        """Read one subscription (``expressionType`` absent, as from the C++ core: TAG)."""
        what = "SubscriptionData"
        obj = _object(obj, what)
        expression_type = obj.get("expressionType") or "TAG"
        return cls(
            topic=_str(obj, "topic", what),
            sub_string=_str(obj, "subString", what, "*"),
            expression_type=str(expression_type),
            tags_set=(str(t) for t in _items(obj, "tagsSet", what)),
            code_set=(_int({"c": c}, "c", what) for c in _items(obj, "codeSet", what)),
            sub_version=_int(obj, "subVersion", what, 0),
            class_filter_mode=_bool(obj, "classFilterMode"),
        )


def _subs(items: Iterable[SubscriptionData]) -> tuple[SubscriptionData, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class ConsumerData:
    """One consumer group of a client (RocketMQ's ``ConsumerData``); enums by Java name."""

    group_name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    subscription_data_set: tuple[SubscriptionData, ...] = attrs.field(default=(), converter=_subs)
    unit_mode: bool = False

    def to_json(self) -> dict[str, Any]:
        """The JSON object RocketMQ's Java client writes."""
        return {
            "groupName": self.group_name,
            "consumeType": self.consume_type,
            "messageModel": self.message_model,
            "consumeFromWhere": self.consume_from_where,
            "subscriptionDataSet": [s.to_json() for s in self.subscription_data_set],
            "unitMode": self.unit_mode,
        }

    @classmethod
    def from_json(cls, obj: Any) -> ConsumerData:
        """Read one group: enums as Java names or (C++ core) as ordinals."""
        what = "ConsumerData"
        obj = _object(obj, what)
        return cls(
            group_name=_str(obj, "groupName", what),
            consume_type=_enum(obj, "consumeType", CONSUME_TYPES, "CONSUME_PASSIVELY", what),
            message_model=_enum(obj, "messageModel", MESSAGE_MODELS, "CLUSTERING", what),
            consume_from_where=_enum(
                obj, "consumeFromWhere", CONSUME_FROM_WHERE, "CONSUME_FROM_LAST_OFFSET", what
            ),
            subscription_data_set=(
                SubscriptionData.from_json(s) for s in _items(obj, "subscriptionDataSet", what)
            ),
            unit_mode=_bool(obj, "unitMode"),
        )


@attrs.frozen(kw_only=True)
class ProducerData:
    """One producer group of a client (RocketMQ's ``ProducerData``)."""

    group_name: str


def _producers(items: Iterable[ProducerData]) -> tuple[ProducerData, ...]:
    return tuple(items)


def _consumers(items: Iterable[ConsumerData]) -> tuple[ConsumerData, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class HeartbeatData:
    """The body of HEART_BEAT (34): a client's id and its producer and consumer groups."""

    client_id: str
    producer_data_set: tuple[ProducerData, ...] = attrs.field(default=(), converter=_producers)
    consumer_data_set: tuple[ConsumerData, ...] = attrs.field(default=(), converter=_consumers)

    def encode(self) -> bytes:
        """The JSON body (``clientID``, ``producerDataSet``, ``consumerDataSet``)."""
        return dumps(
            {
                "clientID": self.client_id,
                "producerDataSet": [{"groupName": p.group_name} for p in self.producer_data_set],
                "consumerDataSet": [c.to_json() for c in self.consumer_data_set],
            }
        )

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> HeartbeatData:
        """Read a heartbeat body. :raises ProtocolError: not a heartbeat."""
        what = "HeartbeatData"
        obj = _parse(body, what)
        return cls(
            client_id=_str(obj, "clientID", what),
            producer_data_set=(
                ProducerData(group_name=_str(_object(p, what), "groupName", what))
                for p in _items(obj, "producerDataSet", what)
            ),
            consumer_data_set=(
                ConsumerData.from_json(c) for c in _items(obj, "consumerDataSet", what)
            ),
        )


# --- orderly consumption locks (LOCK_BATCH_MQ 41, UNLOCK_BATCH_MQ 42) ------------------------


@attrs.frozen(kw_only=True)
class CheckClientRequestBody:
    """The body of CHECK_CLIENT_CONFIG (46): a subscription a consumer asks the broker to
    compile before it starts (the Java client sends it for every non-TAG subscription)."""

    client_id: str = ""
    group: str = ""
    subscription_data: SubscriptionData | None = None

    def encode(self) -> bytes:
        """The JSON body (``clientId``, ``group``, ``subscriptionData``)."""
        obj: dict[str, Any] = {"clientId": self.client_id, "group": self.group}
        if self.subscription_data is not None:
            obj["subscriptionData"] = self.subscription_data.to_json()
        return dumps(obj)

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> CheckClientRequestBody:
        """Read the body. :raises ProtocolError: not a check-client body."""
        what = "CheckClientRequestBody"
        obj = _parse(body, what)
        sub = obj.get("subscriptionData")
        return cls(
            client_id=_str(obj, "clientId", what, ""),
            group=_str(obj, "group", what, ""),
            subscription_data=None if sub is None else SubscriptionData.from_json(sub),
        )


@attrs.frozen(kw_only=True)
class LockBatchRequestBody:
    """The body of LOCK_BATCH_MQ (41): the queues ``client_id`` wants for ``consumer_group``."""

    consumer_group: str
    client_id: str
    mq_set: frozenset[MessageQueue] = attrs.field(default=frozenset(), converter=_mq_set)
    only_this_broker: bool = False

    def encode(self) -> bytes:
        """The JSON body (``consumerGroup``, ``clientId``, ``onlyThisBroker``, ``mqSet``)."""
        return dumps(
            {
                "consumerGroup": self.consumer_group,
                "clientId": self.client_id,
                "onlyThisBroker": self.only_this_broker,
                "mqSet": [_mq_json(mq) for mq in sorted(self.mq_set)],
            }
        )

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> LockBatchRequestBody:
        """Read the body. :raises ProtocolError: malformed."""
        what = cls.__name__
        obj = _parse(body, what)
        return cls(
            consumer_group=_str(obj, "consumerGroup", what),
            client_id=_str(obj, "clientId", what),
            mq_set=(_mq(m, what) for m in _items(obj, "mqSet", what)),
            only_this_broker=_bool(obj, "onlyThisBroker"),
        )


@attrs.frozen(kw_only=True)
class UnlockBatchRequestBody(LockBatchRequestBody):
    """The body of UNLOCK_BATCH_MQ (42): the queues ``client_id`` releases (same shape)."""


@attrs.frozen(kw_only=True)
class LockBatchResponseBody:
    """The body of a LOCK_BATCH_MQ response: the queues now locked by the requester."""

    lock_ok_mq_set: frozenset[MessageQueue] = attrs.field(default=frozenset(), converter=_mq_set)

    def encode(self) -> bytes:
        """The JSON body (``lockOKMQSet``)."""
        return dumps({"lockOKMQSet": [_mq_json(mq) for mq in sorted(self.lock_ok_mq_set)]})

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> LockBatchResponseBody:
        """Read the body. :raises ProtocolError: malformed."""
        what = cls.__name__
        obj = _parse(body, what)
        return cls(lock_ok_mq_set=(_mq(m, what) for m in _items(obj, "lockOKMQSet", what)))


# --- offset reset (RESET_CONSUMER_CLIENT_OFFSET 220) --------------------------------------


def _offsets(value: Mapping[MessageQueue, int]) -> dict[MessageQueue, int]:
    return dict(value)


@attrs.frozen(kw_only=True)
class ResetOffsetBody:
    """The body of RESET_CONSUMER_CLIENT_OFFSET (220): the new offset of each queue.

    RocketMQ sends two shapes: ``ResetOffsetBody`` to Java clients (fastjson, a map keyed by
    message-queue objects) and ``ResetOffsetBodyForC`` to the C++ core (a list of objects
    with ``topic``, ``brokerName``, ``queueId``, ``offset``). :meth:`encode` writes either;
    :meth:`decode` reads both.
    """

    offset_table: dict[MessageQueue, int] = attrs.field(factory=dict, converter=_offsets)

    def encode(self, *, for_cpp: bool = False) -> bytes:
        """The JSON body: the C++ core's list shape if ``for_cpp``, else fastjson's map."""
        rows = sorted(self.offset_table.items())
        if for_cpp:
            return dumps({"offsetTable": [{**_mq_json(mq), "offset": off} for mq, off in rows]})
        # fastjson's Map<MessageQueue, Long>: object keys, which standard JSON has no form for.
        entries = ",".join(f"{dumps(_mq_json(mq)).decode()}:{int(off)}" for mq, off in rows)
        return f'{{"offsetTable":{{{entries}}}}}'.encode()

    @classmethod
    def decode(cls, body: bytes | bytearray | memoryview | str) -> ResetOffsetBody:
        """Read either shape. :raises ProtocolError: malformed."""
        what = cls.__name__
        obj = _parse(body, what)
        table = obj.get("offsetTable") or {}
        out: dict[MessageQueue, int] = {}
        if isinstance(table, list):
            for row in table:
                out[_mq(row, what)] = _int(row, "offset", what)
        elif isinstance(table, Mapping):
            for key, offset in table.items():
                out[_mq(key, what)] = _int({"o": offset}, "o", what)
        else:
            raise ProtocolError(f"{what}: 'offsetTable' must be a map or a list")
        return cls(offset_table=out)


# --- consumer list (GET_CONSUMER_LIST_BY_GROUP 38) -----------------------------------------


@attrs.frozen(kw_only=True)
class GetConsumerListByGroupResponseBody:
    """The body of a GET_CONSUMER_LIST_BY_GROUP response: the group's client ids."""

    consumer_id_list: tuple[str, ...] = attrs.field(default=(), converter=_str_tuple)

    def encode(self) -> bytes:
        """The JSON body (``consumerIdList``)."""
        return dumps({"consumerIdList": list(self.consumer_id_list)})

    @classmethod
    def decode(
        cls, body: bytes | bytearray | memoryview | str
    ) -> GetConsumerListByGroupResponseBody:
        """Read the body. :raises ProtocolError: malformed."""
        what = cls.__name__
        obj = _parse(body, what)
        return cls(consumer_id_list=(str(c) for c in _items(obj, "consumerIdList", what)))
