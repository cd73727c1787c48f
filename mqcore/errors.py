"""Every error mqcore raises, under one base class :class:`MQError`.

Messages say what was wrong, with the offending value, and what to do about it.
Errors caused by bad caller input are also :class:`ValueError` (or :class:`LookupError`
for unknown names) so that generic ``except`` clauses keep working.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AclConfigError",
    "BrokerClosedError",
    "BrokerError",
    "CodecError",
    "CorruptRecordError",
    "DataLossError",
    "DiskFullError",
    "DuplicateRegistrationError",
    "FilterEvaluationError",
    "FilterExpressionError",
    "InvalidArgumentError",
    "MQClientError",
    "MQError",
    "MessageFieldError",
    "MessageIllegalError",
    "NoPermissionError",
    "NoRouteInfoError",
    "NotRegisteredError",
    "PluginLoadError",
    "ProtocolError",
    "ReceiptHandleError",
    "RemotingConnectError",
    "RemotingError",
    "RemotingTimeoutError",
    "SendTimeoutError",
    "SlaveNotAcknowledgedError",
    "StoreClosedError",
    "StoreCorruptedError",
    "StoreError",
    "StoreLockedError",
    "TimerMessageError",
    "TopicNotExistError",
    "TruncatedRecordError",
]


class MQError(Exception):
    """Base class of every error raised by mqcore."""


class InvalidArgumentError(MQError, ValueError):
    """A caller passed a value mqcore cannot accept (empty consumer id, negative count...)."""


# --- plugins ---------------------------------------------------------------------------


class PluginLoadError(MQError, ImportError):
    """A plugin (entry point or named in config) could not be imported or registered.

    ``plugin`` is the entry-point or module name, ``distribution`` the installed
    distribution that declared it (``None`` for plugins named in config). The original
    exception is kept as ``__cause__``.
    """

    def __init__(self, message: str, *, plugin: str, distribution: str | None = None) -> None:
        super().__init__(message)
        self.plugin = plugin
        self.distribution = distribution


class NotRegisteredError(MQError, LookupError):
    """No implementation is registered under the requested name; the message lists the names."""

    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        listing = ", ".join(known) if known else "(none)"
        super().__init__(f"unknown {kind} {name!r}; registered {kind}s: {listing}")
        self.kind = kind
        self.name = name
        self.known = known


class DuplicateRegistrationError(MQError):
    """Two plugins registered the same name for the same kind."""


# --- codec ---------------------------------------------------------------------------


class CodecError(MQError, ValueError):
    """A commit-log record could not be encoded or decoded.

    ``offset`` is the position of the record (a commit-log offset where known, else the
    position in the buffer being decoded).
    """

    def __init__(self, message: str, *, offset: int | None = None) -> None:
        super().__init__(message)
        self.offset = offset


class CorruptRecordError(CodecError):
    """A record has a bad magic code, an impossible size or a body CRC mismatch."""


class TruncatedRecordError(CodecError):
    """A record extends past the end of the available bytes (a torn write)."""


# --- filters ---------------------------------------------------------------------------


class FilterExpressionError(MQError, ValueError):
    """A filter expression is invalid; raised when it is compiled, never when matching.

    ``column`` is 1-based (``None`` when the error is not tied to a position).
    """

    def __init__(
        self, message: str, *, expression: str | None = None, column: int | None = None
    ) -> None:
        super().__init__(message)
        self.expression = expression
        self.column = column


class FilterEvaluationError(MQError):
    """A compiled filter could not evaluate one message (a property that is not a number...).

    ``matches()`` never raises it: as on a RocketMQ broker, such a message does not match.
    Only the three-valued ``evaluate()`` of the SQL92 filter lets it through, for diagnosis.
    """


# --- storage ---------------------------------------------------------------------------


class StoreError(MQError):
    """Base class of storage errors."""


class StoreClosedError(StoreError):
    """The store (or broker) was used after ``close()``."""


class StoreCorruptedError(StoreError):
    """A store file is damaged in a place recovery may not silently cut (names file and offset)."""

    def __init__(self, message: str, *, path: str | None = None, offset: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.offset = offset


class StoreLockedError(StoreError):
    """Another live process holds the store directory's writer lock."""


class DiskFullError(StoreError, OSError):
    """The disk is full; nothing acknowledged was lost and the store stays readable."""


class FlushTimeoutError(StoreError, TimeoutError):
    """SYNC_FLUSH: the data was written but not confirmed on disk in time (FLUSH_DISK_TIMEOUT)."""


# --- broker ----------------------------------------------------------------------------


class BrokerError(MQError):
    """An operation was refused by the broker; ``code`` is RocketMQ's response code."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


class BrokerClosedError(BrokerError):
    """The broker was used after ``close()`` (RocketMQ's SERVICE_NOT_AVAILABLE)."""


class TopicNotExistError(BrokerError):
    """The topic does not exist on the broker and auto-creation is off (TOPIC_NOT_EXIST)."""


class MessageIllegalError(BrokerError, ValueError):
    """The message is invalid: bad topic name, empty or oversized body (MESSAGE_ILLEGAL)."""


class MessageFieldError(MessageIllegalError, InvalidArgumentError):
    """The broker refused a field of a message (a property separator inside it, a system
    property a client may not set...): MESSAGE_ILLEGAL to the sender, and the same
    :class:`InvalidArgumentError` the producer raises for it."""


class ReceiptHandleError(BrokerError):
    """A pop receipt handle the broker cannot act on: malformed or truncated
    (INVALID_PARAMETER), or naming no invisible message of the group: expired, already
    acked, replaced by a change of invisible time, of another group, forged (NO_MESSAGE)."""


class NoPermissionError(BrokerError):
    """The topic or broker does not permit the operation (NO_PERMISSION), or the server's
    ACL refused the request: no or a bad signature, an unknown access key, or an account
    without the permission the request needs."""


class AclConfigError(InvalidArgumentError):
    """An ACL file (RocketMQ's ``plain_acl.yml``) cannot be read or is not in its format; the
    message names the entry at fault, never a secret key."""


class SlaveNotAcknowledgedError(BrokerError):
    """A SYNC_MASTER stored the messages but cannot say a slave has them: no slave or one
    too far behind (SLAVE_NOT_AVAILABLE, 11), or none caught up in time
    (FLUSH_SLAVE_TIMEOUT, 12). ``results`` say where the messages are stored; a producer
    turns this into a send result of that status rather than an error, as RocketMQ's."""

    def __init__(self, message: str, *, code: int, results: Any) -> None:
        super().__init__(message, code=code)
        self.results = results


class TimerMessageError(MessageIllegalError, InvalidArgumentError):
    """A timer message the broker cannot hold: a delay level too, a deliver time beyond the
    maximum delay or not a number, or timers not enabled (MESSAGE_ILLEGAL)."""


class MQClientError(MQError):
    """A client-side failure (RocketMQ's MQClientException); ``code`` says which, if known."""

    def __init__(self, message: str, *, code: int = -1) -> None:
        super().__init__(message)
        self.code = code


class SendTimeoutError(MQClientError, TimeoutError):
    """A send did not complete within its timeout."""


class NoRouteInfoError(MQClientError):
    """No broker can take a send to ``topic`` (RocketMQ's "No route info of this topic",
    NOT_FOUND_TOPIC_EXCEPTION): the topic has no route, or no broker group serving it has a
    writable master now (every master is down, or the topic is read-only). A producer asks
    for the route again on its next send, so sends succeed again as soon as a master is back.
    """

    def __init__(self, message: str, *, topic: str, code: int = -1) -> None:
        super().__init__(message, code=code)
        self.topic = topic


class DataLossError(MQClientError):
    """A read cannot return every record it planned: offsets of a queue are no longer stored
    (retention removed them) or a broker group holds fewer than planned. The message names
    the queue and the offsets."""


# --- remoting --------------------------------------------------------------------------


class RemotingError(MQError):
    """A failure of the remoting layer (RocketMQ's RemotingException); ``addr`` names the peer."""

    def __init__(self, message: str, *, addr: str | None = None) -> None:
        super().__init__(message)
        self.addr = addr


class RemotingConnectError(RemotingError, ConnectionError):
    """The peer could not be reached, or the connection was lost before the answer came."""


class RemotingTimeoutError(RemotingError, TimeoutError):
    """No answer within the timeout; the message names the address and the request code."""

    def __init__(self, message: str, *, addr: str | None = None, code: int | None = None) -> None:
        super().__init__(message, addr=addr)
        self.code = code


class ProtocolError(RemotingError, ValueError):
    """Bytes or fields that do not follow the remoting protocol: a malformed frame or header,
    a frame over the size limit, or a custom header missing a required field or holding a
    value of the wrong type (``field`` names it, when known)."""

    def __init__(self, message: str, *, addr: str | None = None, field: str | None = None) -> None:
        super().__init__(message, addr=addr)
        self.field = field
