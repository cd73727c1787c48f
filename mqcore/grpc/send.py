"""SendMessage: a 5.x client's messages into the broker, as the Java proxy stores them.

- the client's message id is kept as ``UNIQ_KEY`` (the id every later call names);
- a delivery timestamp becomes ``TIMER_DELIVER_MS`` (at most the proxy's maximum delay,
  one day, ahead: ILLEGAL_DELIVERY_TIME past it);
- a message group becomes ``__SHARDINGKEY`` and picks the queue by Guava's consistent hash
  of the group's Java hash code, so a group stays on one queue, in order;
- the topic's ``message.type`` attribute is checked against the message's type
  (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE), except on retry and dead-letter topics;
- a transactional message is a half message of producer group = its topic, as the proxy
  registers it; its transaction id names the half (see :mod:`mqcore.grpc.transaction`).
"""

from __future__ import annotations

import gzip
import itertools
import time
import zlib
from collections.abc import Sequence
from typing import Any

from mqcore.broker import Broker
from mqcore.broker.topics import PERM_WRITE
from mqcore.grpc.checks import check_tag, check_topic, has_control_character
from mqcore.grpc.convert import (
    GrpcStatusError,
    consistent_hash,
    java_string_hash,
    message_type_of,
    status,
)
from mqcore.grpc.pb import definition, service
from mqcore.grpc.transaction import format_transaction_id
from mqcore.message import Message, format_properties
from mqcore.protocol.attributes import MESSAGE_TYPE
from mqcore.protocol.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from mqcore.protocol.send import message_from_wire
from mqcore.validation import SYSTEM_PROPERTY_NAMES

__all__ = ["MAX_DELAY_MS", "Sender", "topic_message_type"]

Code = definition.Code

#: The proxy's maxDelayTimeMills: a delivery time at most one day ahead.
MAX_DELAY_MS = 24 * 3600 * 1000
#: The proxy's userPropertyMaxNum, maxUserPropertySize and maxMessageGroupSize.
MAX_USER_PROPERTIES = 128
MAX_USER_PROPERTY_BYTES = 16 * 1024
MAX_MESSAGE_GROUP_BYTES = 64
#: The proxy's maxTransactionRecoverySecond (one hour).
MAX_TRANSACTION_RECOVERY_S = 3600
SHARDING_KEY = "__SHARDINGKEY"


def topic_message_type(broker: Broker, topic: str) -> str:
    """The topic's ``message.type`` attribute (NORMAL when it has none)."""
    cfg = broker.topics.get(topic)
    if cfg is None:
        return "NORMAL"
    return cfg.attributes.get(MESSAGE_TYPE, "NORMAL")


def _bad(code: int, text: str) -> GrpcStatusError:
    return GrpcStatusError(code, text)


class Sender:
    """Answers SendMessage for one broker."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._round_robin = itertools.count()

    def send(self, request: Any, peer_host: str) -> Any:
        """The ``SendMessageResponse`` to ``request`` (a ``SendMessageRequest``)."""
        protos = request.messages
        if not protos:
            raise _bad(Code.MESSAGE_CORRUPTED, "no message to send")
        topic = check_topic(protos[0].topic)
        first = protos[0].topic
        messages: list[Message] = []
        transactional = False
        for proto in protos:
            if proto.topic != first:
                raise _bad(Code.MESSAGE_CORRUPTED, "topic in message is not same")
            msg = self._message(topic, proto)
            transactional |= (
                proto.system_properties.message_type == definition.MessageType.TRANSACTION
            )
            messages.append(msg)
        self._check_type(topic, messages)
        queue_id = self._select_queue(topic, protos)
        born = protos[0].system_properties.born_timestamp
        born_ms = born.seconds * 1000 + born.nanos // 1_000_000 if born.seconds else None
        attempts = protos[0].system_properties.delivery_attempt
        if transactional and len(messages) != 1:
            raise _bad(Code.BAD_REQUEST, "a transactional message is sent alone, not in a batch")
        # A TRAN_MSG message is held by the broker as a half until EndTransaction decides.
        results = self.broker.send_message(
            topic,
            queue_id,
            messages,
            producer_group=topic,
            born_timestamp=born_ms,
            born_host=peer_host,
            reconsume_times=max(0, attempts),
        )
        entries = [
            service.SendResultEntry(
                status=status(Code.OK),
                message_id=proto.system_properties.message_id,
                transaction_id=(
                    format_transaction_id(result.commitlog_offset, result.queue_offset)
                    if transactional
                    else ""
                ),
                offset=result.queue_offset,
            )
            for proto, result in zip(protos, results, strict=True)
        ]
        return service.SendMessageResponse(status=status(Code.OK), entries=entries)

    # -- building a message ------------------------------------------------------------------

    def _message(self, topic: str, proto: Any) -> Message:
        sysp = proto.system_properties
        body = bytes(proto.body)
        if not body:
            raise _bad(Code.MESSAGE_BODY_EMPTY, "message body cannot be empty")
        if sysp.body_encoding == definition.Encoding.GZIP:
            try:
                body = gzip.decompress(body)
            except (OSError, EOFError, zlib.error) as exc:
                raise _bad(
                    Code.MESSAGE_CORRUPTED, f"the GZIP body does not inflate: {exc}"
                ) from None
        limit = self.broker.config.max_message_size
        if len(body) > limit:
            raise _bad(
                Code.MESSAGE_BODY_TOO_LARGE,
                f"message body of {len(body)} bytes cannot exceed the max {limit}",
            )
        user = dict(proto.user_properties)
        if len(user) > MAX_USER_PROPERTIES:
            raise _bad(
                Code.MESSAGE_PROPERTIES_TOO_LARGE,
                f"too many user properties ({len(user)}), max is {MAX_USER_PROPERTIES}",
            )
        size = 0
        for name, value in user.items():
            if name in SYSTEM_PROPERTY_NAMES or name == SHARDING_KEY:
                raise _bad(Code.ILLEGAL_MESSAGE_PROPERTY_KEY, f"property is used by system: {name}")
            if not name or has_control_character(name) or has_control_character(value):
                raise _bad(
                    Code.ILLEGAL_MESSAGE_PROPERTY_KEY,
                    f"property {name!r}: names and values cannot be empty or hold control "
                    "characters",
                )
            size += len(name.encode()) + len(value.encode())
        props = dict(user)
        tag = sysp.tag
        check_tag(tag)
        if tag:
            props["TAGS"] = tag
        size += len(tag.encode())
        for key in sysp.keys:
            if key and (not key.strip() or has_control_character(key)):
                raise _bad(
                    Code.ILLEGAL_MESSAGE_KEY,
                    f"key {key!r} cannot be whitespace or hold control characters",
                )
            size += len(key.encode())
        if sysp.keys:
            props["KEYS"] = " ".join(sysp.keys)
        if size > MAX_USER_PROPERTY_BYTES:
            raise _bad(
                Code.MESSAGE_PROPERTIES_TOO_LARGE,
                f"the total size of user property is too large, max is {MAX_USER_PROPERTY_BYTES}",
            )
        if not sysp.message_id.strip():
            raise _bad(Code.ILLEGAL_MESSAGE_ID, "message id cannot be empty")
        if has_control_character(sysp.message_id):
            raise _bad(Code.ILLEGAL_MESSAGE_ID, "message id cannot hold control characters")
        props["UNIQ_KEY"] = sysp.message_id
        # The proxy's producer group is the topic (a transaction check asks its producers).
        props["PGROUP"] = topic
        if sysp.message_type == definition.MessageType.TRANSACTION:
            props["TRAN_MSG"] = "true"
            if sysp.HasField("orphaned_transaction_recovery_duration"):
                seconds = sysp.orphaned_transaction_recovery_duration.seconds
                if seconds > MAX_TRANSACTION_RECOVERY_S:
                    raise _bad(
                        Code.BAD_REQUEST,
                        "the max transaction recovery time of message is too large, max is "
                        f"{MAX_TRANSACTION_RECOVERY_S}",
                    )
                props["CHECK_IMMUNITY_TIME_IN_SECONDS"] = str(seconds)
        if sysp.HasField("delivery_timestamp"):
            ts = sysp.delivery_timestamp
            deliver_ms = ts.seconds * 1000 + ts.nanos // 1_000_000
            if deliver_ms - int(time.time() * 1000) > MAX_DELAY_MS:
                raise _bad(
                    Code.ILLEGAL_DELIVERY_TIME,
                    f"the max delay time of message is too large, max is {MAX_DELAY_MS}",
                )
            props["TIMER_DELIVER_MS"] = str(deliver_ms)
        group = sysp.message_group
        if group:
            if not group.strip():
                raise _bad(
                    Code.ILLEGAL_MESSAGE_GROUP,
                    "message group cannot be the char sequence of whitespace",
                )
            if len(group.encode()) >= MAX_MESSAGE_GROUP_BYTES:
                raise _bad(
                    Code.ILLEGAL_MESSAGE_GROUP,
                    f"message group exceed the max size {MAX_MESSAGE_GROUP_BYTES}",
                )
            if has_control_character(group):
                raise _bad(
                    Code.ILLEGAL_MESSAGE_GROUP, "message group cannot contain control character"
                )
            props[SHARDING_KEY] = group
        if sysp.trace_context:
            props["TRACE_CONTEXT"] = sysp.trace_context
        return message_from_wire(topic, body, 0, format_properties(props))

    # -- where it goes -----------------------------------------------------------------------

    def _check_type(self, topic: str, messages: Sequence[Message]) -> None:
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            return
        expected = topic_message_type(self.broker, topic)
        props = messages[0].all_properties()
        actual = message_type_of(props)
        if expected != "MIXED" and (expected == "UNSPECIFIED" or actual != expected):
            raise _bad(
                Code.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                f"TopicMessageType validate failed, the expected type is {expected}, but actual "
                f"type is {actual}",
            )

    def _select_queue(self, topic: str, protos: Sequence[Any]) -> int:
        route = self.broker.get_route_info_by_topic(topic)
        writable = [
            i for q in route.queue_datas if q.perm & PERM_WRITE for i in range(q.write_queue_nums)
        ]
        if not writable:
            raise _bad(Code.FORBIDDEN, f"topic {topic!r} has no writable queue")
        group = protos[0].system_properties.message_group if len(protos) == 1 else ""
        if group:
            return writable[consistent_hash(java_string_hash(group), len(writable))]
        return writable[next(self._round_robin) % len(writable)]
