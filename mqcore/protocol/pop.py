"""Pop consumption on the wire: RocketMQ 5's headers, the receipt handle and the revive names.

Both sides import this module: the broker (:mod:`mqcore.broker.pop`) answers POP_MESSAGE
(200050), ACK_MESSAGE (200051), CHANGE_MESSAGE_INVISIBLETIME (200053), NOTIFICATION (200054)
and BATCH_ACK_MESSAGE (200151); the clients build and read the receipt handle.

A receipt handle is RocketMQ's ``POP_CK`` extra info (``ExtraInfoUtil``): eight fields
separated by a space, ``ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId
queueOffset``. ``retry`` is ``0`` for the topic itself, ``1`` for the group's pop retry topic
``%RETRY%<group>_<topic>``; ``reviveQid`` 999 marks an orderly pop.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from mqcore.errors import BrokerError, ReceiptHandleError
from mqcore.protocol.codes import ResponseCode
from mqcore.protocol.fields import CommandHeader, Kind, wire_field
from mqcore.protocol.names import RETRY_GROUP_TOPIC_PREFIX

__all__ = [
    "ACK_TAG",
    "BATCH_ACK_TAG",
    "CK_TAG",
    "INIT_MODE_MAX",
    "INIT_MODE_MIN",
    "KEY_SEPARATOR",
    "MAX_INVISIBLE_TIME_MS",
    "MIN_INVISIBLE_TIME_MS",
    "POP_ORDER_REVIVE_QUEUE",
    "PROPERTY_POP_CK",
    "REVIVE_GROUP",
    "REVIVE_TOPIC_PREFIX",
    "AckMessageRequestHeader",
    "BatchAck",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "ExtraInfo",
    "NotificationRequestHeader",
    "NotificationResponseHeader",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "PopResult",
    "ReceiptHandleError",
    "decode_batch_ack_body",
    "encode_batch_ack_body",
    "format_offset_info",
    "parse_offset_info",
    "pop_retry_topic",
    "revive_topic",
]

KEY_SEPARATOR = " "  # MessageConst.KEY_SEPARATOR
PROPERTY_POP_CK = "POP_CK"
POP_ORDER_REVIVE_QUEUE = 999  # KeyBuilder.POP_ORDER_REVIVE_QUEUE
REVIVE_TOPIC_PREFIX = "rmq_sys_REVIVE_LOG_"  # PopAckConstants.REVIVE_TOPIC
REVIVE_GROUP = "CID_RMQ_SYS_REVIVE_GROUP"  # PopAckConstants.REVIVE_GROUP
CK_TAG, ACK_TAG, BATCH_ACK_TAG = "ck", "ack", "bAck"  # PopAckConstants
INIT_MODE_MIN, INIT_MODE_MAX = 0, 1  # ConsumeInitMode
# RocketMQ 5's proxy bounds an invisible time to at most 12 h (maxInvisibleTimeMills); below a
# second the revive service (reviveInterval 1 s) could not keep it.
MIN_INVISIBLE_TIME_MS = 1_000
MAX_INVISIBLE_TIME_MS = 12 * 3600 * 1000


def revive_topic(cluster: str) -> str:
    """The cluster's revive topic, where checkpoints and acks are kept."""
    return REVIVE_TOPIC_PREFIX + cluster


def pop_retry_topic(topic: str, group: str) -> str:
    """The group's pop retry topic for ``topic`` (KeyBuilder.buildPopRetryTopicV1)."""
    return f"{RETRY_GROUP_TOPIC_PREFIX}{group}_{topic}"


def _retry_mark(topic: str) -> str:
    return "1" if topic.startswith(RETRY_GROUP_TOPIC_PREFIX) else "0"


@attrs.frozen
class ExtraInfo:
    """A parsed receipt handle (the ``POP_CK`` property)."""

    ck_queue_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    queue_offset: int

    @property
    def order(self) -> bool:
        """True for a handle of an orderly pop."""
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    def real_topic(self, topic: str, group: str) -> str:
        """The topic the message is stored in: ``topic`` or the group's pop retry topic."""
        return pop_retry_topic(topic, group) if self.retry == "1" else topic

    def __str__(self) -> str:
        return KEY_SEPARATOR.join(
            str(v)
            for v in (
                self.ck_queue_offset,
                self.pop_time,
                self.invisible_time,
                self.revive_qid,
                self.retry,
                self.broker_name,
                self.queue_id,
                self.queue_offset,
            )
        )

    @classmethod
    def build(
        cls,
        ck_queue_offset: int,
        pop_time: int,
        invisible_time: int,
        revive_qid: int,
        topic: str,
        broker_name: str,
        queue_id: int,
        queue_offset: int,
    ) -> ExtraInfo:
        """The handle of one message (``topic``: the topic it is stored in)."""
        return cls(
            ck_queue_offset,
            pop_time,
            invisible_time,
            revive_qid,
            _retry_mark(topic),
            broker_name,
            queue_id,
            queue_offset,
        )

    @classmethod
    def parse(cls, text: str | None) -> ExtraInfo:
        """Read a receipt handle.

        :raises ReceiptHandleError: INVALID_PARAMETER, naming what is wrong, when it is not
            eight well-formed fields.
        """
        if not isinstance(text, str) or not text.strip():
            raise ReceiptHandleError(
                "the receipt handle is empty; pass the handle of a received message",
                code=ResponseCode.INVALID_PARAMETER,
            )
        parts = text.split(KEY_SEPARATOR)
        if len(parts) != 8:
            raise ReceiptHandleError(
                f"receipt handle {text[:120]!r} has {len(parts)} fields, a POP_CK handle has 8 "
                "(ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId "
                "queueOffset): it is truncated or not a receipt handle",
                code=ResponseCode.INVALID_PARAMETER,
            )
        try:
            numbers = [int(parts[i]) for i in (0, 1, 2, 3, 6, 7)]
        except ValueError:
            raise ReceiptHandleError(
                f"receipt handle {text[:120]!r} has a field that is not a number",
                code=ResponseCode.INVALID_PARAMETER,
            ) from None
        if parts[4] not in ("0", "1") or not parts[5] or min(numbers) < 0:
            raise ReceiptHandleError(
                f"receipt handle {text[:120]!r} is malformed (retry mark {parts[4]!r}, broker "
                f"{parts[5]!r}, negative numbers are refused)",
                code=ResponseCode.INVALID_PARAMETER,
            )
        so, pt, it, rq, qid, qo = numbers
        return cls(so, pt, it, rq, parts[4], parts[5], qid, qo)


def format_offset_info(entries: Iterable[tuple[str, object, Any]]) -> str:
    """``startOffsetInfo`` / ``msgOffsetInfo`` / ``orderCountInfo``: ``retry queueId value``
    per queue, ``;``-separated (a list value is ``,``-joined)."""
    out = []
    for topic, queue_id, value in entries:
        if isinstance(value, list | tuple):
            value = ",".join(str(v) for v in value)
        out.append(f"{_retry_mark(topic)}{KEY_SEPARATOR}{queue_id}{KEY_SEPARATOR}{value}")
    return ";".join(out)


def parse_offset_info(text: str | None) -> dict[str, list[int]]:
    """The inverse of :func:`format_offset_info`: ``"retry@queueId"`` -> values."""
    table: dict[str, list[int]] = {}
    if not text:
        return table
    for one in text.split(";"):
        parts = one.split(KEY_SEPARATOR)
        if len(parts) != 3:
            raise BrokerError(
                f"malformed offset info {one!r} in a pop answer",
                code=ResponseCode.SYSTEM_ERROR,
            )
        table[f"{parts[0]}@{parts[1]}"] = [int(v) for v in parts[2].split(",") if v]
    return table


@attrs.frozen
class PopResult:
    """A pop's answer as both sides see it: RocketMQ's PopMessageResponseHeader and the
    stored records (the receipt handles are built from the offset infos)."""

    code: ResponseCode
    pop_time: int
    invisible_time: int
    revive_qid: int
    rest_num: int
    start_offset_info: str = ""
    msg_offset_info: str = ""
    order_count_info: str = ""
    records: Sequence[bytes | bytearray | memoryview] = attrs.field(factory=list)


# -- headers ------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PopMessageRequestHeader(CommandHeader):
    """POP_MESSAGE (200050) request. ``queue_id`` -1 pops from every queue of the topic."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)
    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)
    max_msg_nums: int = wire_field("maxMsgNums", Kind.INT, required=True)
    invisible_time: int = wire_field("invisibleTime", Kind.LONG, required=True)
    poll_time: int = wire_field("pollTime", Kind.LONG, required=True)
    born_time: int = wire_field("bornTime", Kind.LONG, required=True)
    init_mode: int = wire_field("initMode", Kind.INT, required=True)
    exp_type: str | None = wire_field("expType", Kind.STRING)
    exp: str | None = wire_field("exp", Kind.STRING)
    order: bool = wire_field("order", Kind.BOOLEAN, default=False)
    attempt_id: str | None = wire_field("attemptId", Kind.STRING)


@attrs.frozen(kw_only=True)
class PopMessageResponseHeader(CommandHeader):
    """POP_MESSAGE response (SUCCESS with the records as body, or POLLING_TIMEOUT)."""

    pop_time: int = wire_field("popTime", Kind.LONG, required=True)
    invisible_time: int = wire_field("invisibleTime", Kind.LONG, required=True)
    revive_qid: int = wire_field("reviveQid", Kind.INT, required=True)
    rest_num: int = wire_field("restNum", Kind.LONG, required=True)
    start_offset_info: str | None = wire_field("startOffsetInfo", Kind.STRING)
    msg_offset_info: str | None = wire_field("msgOffsetInfo", Kind.STRING)
    order_count_info: str | None = wire_field("orderCountInfo", Kind.STRING)


@attrs.frozen(kw_only=True)
class AckMessageRequestHeader(CommandHeader):
    """ACK_MESSAGE (200051) request: ``extra_info`` is the receipt handle."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)
    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)
    extra_info: str = wire_field("extraInfo", Kind.STRING, required=True)
    offset: int = wire_field("offset", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class ChangeInvisibleTimeRequestHeader(CommandHeader):
    """CHANGE_MESSAGE_INVISIBLETIME (200053) request."""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)
    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)
    extra_info: str = wire_field("extraInfo", Kind.STRING, required=True)
    offset: int = wire_field("offset", Kind.LONG, required=True)
    invisible_time: int = wire_field("invisibleTime", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class ChangeInvisibleTimeResponseHeader(CommandHeader):
    """CHANGE_MESSAGE_INVISIBLETIME response: the new handle's pop and invisible times."""

    pop_time: int = wire_field("popTime", Kind.LONG, required=True)
    invisible_time: int = wire_field("invisibleTime", Kind.LONG, required=True)
    revive_qid: int = wire_field("reviveQid", Kind.INT, required=True)


@attrs.frozen(kw_only=True)
class NotificationRequestHeader(CommandHeader):
    """NOTIFICATION (200054) request: is there something to pop (held up to ``pollTime``)?"""

    consumer_group: str = wire_field("consumerGroup", Kind.STRING, required=True)
    topic: str = wire_field("topic", Kind.STRING, required=True)
    queue_id: int = wire_field("queueId", Kind.INT, required=True)
    poll_time: int = wire_field("pollTime", Kind.LONG, required=True)
    born_time: int = wire_field("bornTime", Kind.LONG, required=True)
    order: bool = wire_field("order", Kind.BOOLEAN, default=False)
    attempt_id: str | None = wire_field("attemptId", Kind.STRING)


@attrs.frozen(kw_only=True)
class NotificationResponseHeader(CommandHeader):
    """NOTIFICATION response."""

    has_msg: bool = wire_field("hasMsg", Kind.BOOLEAN, required=True)
    polling_full: bool = wire_field("pollingFull", Kind.BOOLEAN, default=False)


# -- BATCH_ACK_MESSAGE body ---------------------------------------------------------------------


@attrs.frozen
class BatchAck:
    """One checkpoint's acks in a BATCH_ACK_MESSAGE body (RocketMQ's ``BatchAck``): the
    offsets acked are ``start_offset + i`` for each bit ``i`` set in ``bit_set``."""

    consumer_group: str
    topic: str
    retry: str
    start_offset: int
    queue_id: int
    revive_queue_id: int
    pop_time: int
    invisible_time: int
    bit_set: int

    def offsets(self) -> list[int]:
        """The queue offsets acked."""
        bits, out, i = self.bit_set, [], 0
        while bits:
            if bits & 1:
                out.append(self.start_offset + i)
            bits >>= 1
            i += 1
        return out


def _bits_to_longs(bits: int) -> list[int]:
    # java.util.BitSet.toLongArray, as RocketMQ's BitSetSerializerDeserializer writes it.
    out = []
    while bits:
        word = bits & (2**64 - 1)
        out.append(word - 2**64 if word >= 2**63 else word)
        bits >>= 64
    return out


def _longs_to_bits(words: Iterable[Any]) -> int:
    bits = 0
    for i, w in enumerate(words):
        bits |= (int(w) & (2**64 - 1)) << (64 * i)
    return bits


def encode_batch_ack_body(acks: Iterable[BatchAck]) -> bytes:
    """A ``BatchAckMessageRequestBody`` (``{"brokerName":..., "acks": [...]}``) as JSON."""
    return json.dumps(
        {
            "acks": [
                {
                    "c": a.consumer_group,
                    "t": a.topic,
                    "r": a.retry,
                    "so": a.start_offset,
                    "q": a.queue_id,
                    "rq": a.revive_queue_id,
                    "pt": a.pop_time,
                    "it": a.invisible_time,
                    "b": _bits_to_longs(a.bit_set),
                }
                for a in acks
            ]
        }
    ).encode()


def decode_batch_ack_body(body: bytes | bytearray | memoryview | None) -> list[BatchAck]:
    """The acks of a BATCH_ACK_MESSAGE body (short or long field names).

    :raises BrokerError: INVALID_PARAMETER when the body is not such a JSON object.
    """
    try:
        data = json.loads(bytes(body or b"{}"))
        acks = data.get("acks") or []

        def pick(d: Mapping[str, Any], short: str, long: str) -> Any:
            return d[short] if short in d else d[long]

        return [
            BatchAck(
                str(pick(a, "c", "consumerGroup")),
                str(pick(a, "t", "topic")),
                str(pick(a, "r", "retry")),
                int(pick(a, "so", "startOffset")),
                int(pick(a, "q", "queueId")),
                int(pick(a, "rq", "reviveQueueId")),
                int(pick(a, "pt", "popTime")),
                int(pick(a, "it", "invisibleTime")),
                _longs_to_bits(pick(a, "b", "bitSet") or []),
            )
            for a in acks
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise BrokerError(
            f"the BATCH_ACK_MESSAGE body is not a BatchAckMessageRequestBody: {exc}",
            code=ResponseCode.INVALID_PARAMETER,
        ) from None
