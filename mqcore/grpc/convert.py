"""Conversions between ``apache.rocketmq.v2`` and mqcore: statuses, errors, hashes, types.

Every response of the service carries a ``Status`` whose ``code`` is an
``apache.rocketmq.v2.Code``; :class:`GrpcStatusError` carries one through a handler, and
:func:`status_of` turns any exception into one, as the Java proxy's ``ResponseBuilder`` does.
"""

from __future__ import annotations

from typing import Any

from mqcore.errors import BrokerError, FilterExpressionError, InvalidArgumentError, MQError
from mqcore.grpc.pb import definition
from mqcore.protocol.codes import ResponseCode

__all__ = [
    "MESSAGE_TYPES",
    "TOPIC_MESSAGE_TYPE",
    "GrpcStatusError",
    "accepted_types",
    "consistent_hash",
    "java_string_hash",
    "message_type_of",
    "status",
    "status_of",
]

Code = definition.Code

#: The topic attribute RocketMQ 5 keeps a topic's message type in (``TopicAttributes``).
TOPIC_MESSAGE_TYPE = "message.type"
#: The values it takes (``TopicMessageType``); a topic without it is NORMAL.
MESSAGE_TYPES = ("UNSPECIFIED", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")


class GrpcStatusError(MQError):
    """A request refused with an ``apache.rocketmq.v2.Code`` (``code``, its number)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


# The broker's remoting codes as the proxy reports them (ResponseBuilder.buildCode).
_REMOTING_TO_CODE: dict[int, int] = {
    ResponseCode.TOPIC_NOT_EXIST: Code.TOPIC_NOT_FOUND,
    ResponseCode.NO_PERMISSION: Code.FORBIDDEN,
    ResponseCode.MESSAGE_ILLEGAL: Code.MESSAGE_CORRUPTED,
    ResponseCode.INVALID_PARAMETER: Code.BAD_REQUEST,
    ResponseCode.SYSTEM_BUSY: Code.TOO_MANY_REQUESTS,
    ResponseCode.FLOW_CONTROL: Code.TOO_MANY_REQUESTS,
    ResponseCode.REQUEST_CODE_NOT_SUPPORTED: Code.NOT_IMPLEMENTED,
    ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST: Code.CONSUMER_GROUP_NOT_FOUND,
    ResponseCode.SUBSCRIPTION_PARSE_FAILED: Code.ILLEGAL_FILTER_EXPRESSION,
    ResponseCode.VERSION_NOT_SUPPORTED: Code.VERSION_UNSUPPORTED,
    ResponseCode.FLUSH_DISK_TIMEOUT: Code.MASTER_PERSISTENCE_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: Code.SLAVE_PERSISTENCE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: Code.HA_NOT_AVAILABLE,
    ResponseCode.SERVICE_NOT_AVAILABLE: Code.INTERNAL_SERVER_ERROR,
}


def status(code: int = Code.OK, message: str | None = None) -> Any:
    """A ``Status`` with ``code`` and ``message`` (the code's name when none is given)."""
    return definition.Status(code=code, message=message or Code.Name(code))


def status_of(exc: BaseException) -> Any:
    """The ``Status`` a handler answers when ``exc`` stops it."""
    if isinstance(exc, GrpcStatusError):
        return status(exc.code, str(exc))
    if isinstance(exc, FilterExpressionError):
        return status(Code.ILLEGAL_FILTER_EXPRESSION, str(exc))
    if isinstance(exc, BrokerError):
        return status(_REMOTING_TO_CODE.get(exc.code, Code.INTERNAL_SERVER_ERROR), str(exc))
    if isinstance(exc, InvalidArgumentError):
        return status(Code.BAD_REQUEST, str(exc))
    if isinstance(exc, MQError):
        return status(Code.INTERNAL_SERVER_ERROR, str(exc))
    return status(Code.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}")


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode()`` (over UTF-16 code units), a signed 32-bit int."""
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


_MASK64 = (1 << 64) - 1
_INT_MAX = (1 << 31) - 1


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(long, int)``: the bucket of ``key`` among ``buckets``.

    The Java proxy picks a message group's queue this way (from the group's
    :func:`java_string_hash`), so a group lands on the queue the proxy would choose."""
    if buckets <= 0:
        raise InvalidArgumentError(f"buckets must be positive, got {buckets}")
    state = key & _MASK64
    candidate = 0
    while True:
        state = (2862933555777941757 * state + 1) & _MASK64
        double = ((state >> 33) + 1) / float(1 << 31)
        quotient = (candidate + 1) / double
        # Java's (int) cast of a double saturates.
        nxt = _INT_MAX if quotient >= _INT_MAX else int(quotient)
        if 0 <= nxt < buckets:
            candidate = nxt
        else:
            return candidate


def message_type_of(properties: dict[str, str]) -> str:
    """A message's type from its properties, as ``TopicMessageType.parseFromMessageProperty``."""
    if properties.get("TRAN_MSG") == "true":
        return "TRANSACTION"
    if (
        "DELAY" in properties
        or "TIMER_DELIVER_MS" in properties
        or "TIMER_DELAY_SEC" in properties
        or "TIMER_DELAY_MS" in properties
    ):
        return "DELAY"
    if "__SHARDINGKEY" in properties:
        return "FIFO"
    return "NORMAL"


def accepted_types(topic_type: str) -> list[int]:
    """The ``MessageType`` values a queue of a topic of ``topic_type`` accepts (the route's
    ``accept_message_types``, as ``RouteActivity.parseTopicMessageType``)."""
    if topic_type in ("NORMAL", "FIFO", "DELAY", "TRANSACTION"):
        return [definition.MessageType.Value(topic_type)]
    if topic_type == "MIXED":
        return [definition.MessageType.Value(t) for t in ("NORMAL", "FIFO", "DELAY", "TRANSACTION")]
    return [definition.MessageType.MESSAGE_TYPE_UNSPECIFIED]
