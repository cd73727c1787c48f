"""Message value types and the enums of RocketMQ's client API.

:class:`Message` is what a producer sends; :class:`MessageExt` is what a consumer receives:
a read-only view over one stored commit-log record (see :mod:`mqcore.codec`) that decodes
fields only when they are read, so consuming a message never re-encodes it and never copies
a body nobody looks at.
"""

from __future__ import annotations

import enum
import operator
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import attrs

from mqcore.errors import InvalidArgumentError
from mqcore.record.layout import (
    H_BODY_CRC,
    H_BODY_LENGTH,
    H_BORN_IP,
    H_BORN_PORT,
    H_BORN_TIMESTAMP,
    H_FLAG,
    H_PHYSICAL_OFFSET,
    H_PREPARED_TRANSACTION_OFFSET,
    H_QUEUE_ID,
    H_QUEUE_OFFSET,
    H_RECONSUME_TIMES,
    H_STORE_IP,
    H_STORE_PORT,
    H_STORE_TIMESTAMP,
    H_SYS_FLAG,
    H_TOTAL_SIZE,
    HEADER,
    HEADER_SIZE,
    POS_BODY_LENGTH,
    POS_SYS_FLAG,
)
from mqcore.record.sysflag import COMPRESSED_FLAG
from mqcore.validation import check_text, check_user_properties

__all__ = [
    "PROPERTY_DELAY",
    "PROPERTY_KEYS",
    "PROPERTY_TAGS",
    "ConsumeConcurrentlyStatus",
    "ConsumeFromWhere",
    "ConsumeOrderlyStatus",
    "Message",
    "MessageExt",
    "MessageModel",
    "MessageQueue",
    "PullResult",
    "PullStatus",
    "SendResult",
    "SendStatus",
    "format_properties",
    "parse_properties",
    "system_message",
]

# Property names RocketMQ reserves (MessageConst); the codec stores tags, keys and the delay
# level as properties, exactly as RocketMQ does, so records stay readable by its tools.
PROPERTY_TAGS = "TAGS"
PROPERTY_KEYS = "KEYS"
PROPERTY_DELAY = "DELAY"
PROPERTY_WAIT_STORE_MSG_OK = "WAIT"
PROPERTY_UNIQ_KEY = "UNIQ_KEY"  # MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
PROPERTY_RETRY_TOPIC = "RETRY_TOPIC"
PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QUEUE_ID = "REAL_QID"
PROPERTY_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
PROPERTY_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
PROPERTY_RECONSUME_TIME = "RECONSUME_TIME"
# Timer messages (RocketMQ 5's MessageConst): the producer sets one of the first three;
# the broker adds the rest while it holds the message and when it delivers it.
PROPERTY_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROPERTY_TIMER_DELAY_MS = "TIMER_DELAY_MS"
PROPERTY_TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
PROPERTY_TIMER_OUT_MS = "TIMER_OUT_MS"
PROPERTY_TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
PROPERTY_TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
#: The properties that make a message a timer message (when it has no ``TIMER_OUT_MS``).
TIMER_REQUEST_PROPERTIES = frozenset(
    {PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC}
)
KEY_SEPARATOR = " "
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
_FIELD_PROPERTIES = frozenset({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_DELAY})


def format_properties(properties: Mapping[str, str]) -> str:
    """Encode properties as RocketMQ does: ``name\\x01value\\x02`` for each pair."""
    if not properties:
        return ""
    return "".join(f"{k}\x01{v}\x02" for k, v in properties.items())


def parse_properties(text: str) -> dict[str, str]:
    """Decode a RocketMQ property string (the inverse of :func:`format_properties`).

    Pairs without a name/value separator are skipped, as RocketMQ's decoder skips them.
    """
    out: dict[str, str] = {}
    if not text:
        return out
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            out[name] = value
    return out


# --- enums (RocketMQ member names) -------------------------------------------------------


class SendStatus(enum.Enum):
    """Outcome of a successful send (errors raise instead)."""

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


class PullStatus(enum.Enum):
    """Outcome of a pull."""

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


class MessageModel(enum.Enum):
    """How a consumer group shares a topic."""

    BROADCASTING = "BROADCASTING"
    CLUSTERING = "CLUSTERING"


class ConsumeFromWhere(enum.Enum):
    """Where a group with no committed offset starts."""

    CONSUME_FROM_LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    CONSUME_FROM_FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    CONSUME_FROM_TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


class ConsumeConcurrentlyStatus(enum.Enum):
    """What a concurrent listener returns."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


class ConsumeOrderlyStatus(enum.Enum):
    """What an orderly listener returns."""

    SUCCESS = "SUCCESS"
    ROLLBACK = "ROLLBACK"
    COMMIT = "COMMIT"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


# --- values ------------------------------------------------------------------------------


@attrs.frozen(order=True)
class MessageQueue:
    """One queue of a topic on one broker; ordered by (topic, broker_name, queue_id) as RocketMQ."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return (
            f"MessageQueue [topic={self.topic}, brokerName={self.broker_name}, "
            f"queueId={self.queue_id}]"
        )


def _to_props(value: Mapping[str, str] | None) -> dict[str, str]:
    if not value:
        return {}
    try:
        props = dict(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            f"message properties must be a mapping of str to str, got {value!r}"
        ) from None
    check_user_properties(props)
    return props


def _check_optional_text(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None or (
        value.__class__ is str and value.isascii() and "\x01" not in value and "\x02" not in value
    ):
        return  # the usual short ASCII tag or keys, without a call
    check_text(attribute.name, value)


def _delay_level(value: Any) -> int:
    """``delay_level`` as an int >= 0 (NumPy ints and the like accepted, bools not)."""
    if value.__class__ is int and value >= 0:
        return value  # the usual case, without a call
    if isinstance(value, bool):
        number = -1
    else:
        try:
            number = operator.index(value)
        except TypeError:
            number = -1
    if number < 0:
        raise InvalidArgumentError(
            f"message delay_level must be an int >= 0 (0 = no delay), got {value!r}"
        )
    return int(number)


def _java_int(value: Any) -> int:
    """``flag`` as RocketMQ stores it: a 32-bit signed int (NumPy ints and the like accepted)."""
    if value.__class__ is int and -(2**31) <= value < 2**31:
        return value  # the usual case, without a call
    try:
        number = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(
            f"message flag {value!r} is not an int; RocketMQ keeps a 32-bit int flag"
        ) from None
    if not -(2**31) <= number < 2**31:
        raise InvalidArgumentError(
            f"message flag {number} does not fit a 32-bit signed int (-2**31 .. 2**31 - 1)"
        )
    return int(number)


@attrs.frozen(hash=False)
class Message:
    """A message to send.

    ``tags`` is one tag (used for TAG filtering), ``keys`` one or more space-separated keys
    (indexed for lookup), ``properties`` user properties (strings), ``delay_level`` one of
    RocketMQ's 18 levels (0 = no delay).

    A timer message is delivered at a time of its own (RocketMQ 5): ``deliver_time_ms`` is
    that time in ms since the epoch (the Java client's ``setDeliveryTimestamp``);
    ``delay_ms`` or ``delay_sec`` count from the message's arrival at the broker instead.
    Set at most one of them, and no delay level with them. They are written into the
    properties ``TIMER_DELIVER_MS``, ``TIMER_DELAY_MS`` and ``TIMER_DELAY_SEC``, which is
    what is stored and sent, and what the broker reads (see ``docs/delay.md``).

    Checked when built (:class:`~mqcore.errors.InvalidArgumentError` names the field): text
    fields are ``str`` without the property separators ``\\x01`` and ``\\x02``; property
    names are not RocketMQ system names (``TAGS``, ``DELAY``, ``REAL_TOPIC``, ``UNIQ_KEY``...,
    see :data:`mqcore.validation.SYSTEM_PROPERTY_NAMES`): only the library sets those.
    """

    topic: str
    body: bytes = b""
    tags: str | None = attrs.field(default=None, validator=_check_optional_text)
    keys: str | None = attrs.field(default=None, validator=_check_optional_text)
    properties: dict[str, str] = attrs.field(factory=dict, converter=_to_props)
    flag: int = attrs.field(default=0, converter=_java_int)
    delay_level: int = attrs.field(default=0, converter=_delay_level)
    deliver_time_ms: int | None = attrs.field(default=None, kw_only=True)
    delay_ms: int | None = attrs.field(default=None, kw_only=True)
    delay_sec: int | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.deliver_time_ms is None and self.delay_ms is None and self.delay_sec is None:
            return
        _set_timer_properties(self)

    def all_properties(self) -> dict[str, str]:
        """Properties as stored: user properties plus TAGS, KEYS and DELAY when set."""
        props = dict(self.properties)
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = self.keys
        if self.delay_level:
            props[PROPERTY_DELAY] = str(self.delay_level)
        return props

    @property
    def key_list(self) -> list[str]:
        """The keys, split on spaces (RocketMQ's key separator)."""
        return self.keys.split() if self.keys else []


_TIMER_FIELDS = (
    ("deliver_time_ms", PROPERTY_TIMER_DELIVER_MS),
    ("delay_ms", PROPERTY_TIMER_DELAY_MS),
    ("delay_sec", PROPERTY_TIMER_DELAY_SEC),
)


def _set_timer_properties(m: Message) -> None:
    """Check the timer fields of ``m`` and copy them into its properties."""
    given = [(name, prop, getattr(m, name)) for name, prop in _TIMER_FIELDS]
    given = [g for g in given if g[2] is not None]
    if len(given) > 1:
        names = ", ".join(f"{name}={value!r}" for name, _, value in given)
        raise InvalidArgumentError(
            f"a timer message takes one of deliver_time_ms, delay_ms, delay_sec; got {names}"
        )
    name, prop, value = given[0]
    if value.__class__ is not int:
        try:
            value = operator.index(value)
        except TypeError:
            raise InvalidArgumentError(
                f"{name}={value!r} is not an int (ms since the epoch, ms or s)"
            ) from None
        object.__setattr__(m, name, int(value))
    if value < 0:
        raise InvalidArgumentError(f"{name}={value} is negative; give a time or delay >= 0")
    # The converter gave the message its own dict, so it may be filled in here.
    m.properties[prop] = str(value)


def system_message(*, properties: Mapping[str, str] | None = None, **fields: Any) -> Message:
    """A :class:`Message` built by the library itself, whose ``properties`` may hold system
    names (``RETRY_TOPIC``, ``REAL_TOPIC``...), as RocketMQ's ``MessageAccessor``.

    Every other check still applies, and the broker still checks what it is sent
    (:func:`mqcore.validation.check_sent_message`): this is the path for the client
    library's own setters, for the broker's retry, dead-letter and delay copies, and for
    delay-scheduler plugins, never for application data.
    """
    msg = Message(**fields)
    if properties:
        props = dict(properties)
        for name, value in props.items():
            check_text("property name", name)
            check_text(f"property {name!r} value", value)
        # Timer fields were copied into the message's own dict by its post-init.
        props.update(msg.properties)
        object.__setattr__(msg, "properties", props)
    return msg


@attrs.frozen
class SendResult:
    """Result of a send: status, message id, the queue chosen and the message's offset in it.

    ``msg_id`` is the producer's unique id of the message (its ``UNIQ_KEY``), which every
    delivery, retry and dead letter of it keeps; ``offset_msg_id`` says where the broker
    stored it (store host and commit-log offset). A batch joins each with commas.
    """

    send_status: SendStatus
    msg_id: str
    message_queue: MessageQueue
    queue_offset: int
    offset_msg_id: str | None = None


@attrs.frozen
class PullResult:
    """Result of a pull (RocketMQ's field names, snake case)."""

    pull_status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    msg_found_list: list[MessageExt] = attrs.field(factory=list)

    @property
    def status(self) -> PullStatus:
        """Alias of :attr:`pull_status`."""
        return self.pull_status

    @property
    def messages(self) -> list[MessageExt]:
        """Alias of :attr:`msg_found_list`."""
        return self.msg_found_list


# --- MessageExt: a lazy view over one record ---------------------------------------------

_BODY_LEN = struct.Struct(">i")
# The sys flag is a big-endian int: bit 0 (COMPRESSED_FLAG) is in its last byte, read
# without unpacking the header.
_SYS_FLAG_LOW_BYTE = POS_SYS_FLAG + 3


#: The fields of :class:`Message`, as :meth:`MessageExt.to_message` copies them. The timer
#: fields are left out: their properties are copied with the others, and that is what counts.
_MESSAGE_FIELDS = tuple(
    a.name for a in attrs.fields(Message) if a.name not in {n for n, _ in _TIMER_FIELDS}
)


class MessageExt:
    """A stored message: a read-only view over one encoded commit-log record.

    The fixed header (:data:`mqcore.record.layout.HEADER`) is unpacked once; body, topic
    and properties are decoded when first read. Build one with :func:`mqcore.codec.decode`
    (or ``MessageExt(record_bytes)``).
    """

    __slots__ = ("_buf", "_hdr", "_meta", "_pos")

    def __init__(self, record: bytes | bytearray | memoryview, pos: int = 0) -> None:
        if len(record) - pos < HEADER_SIZE or pos < 0:
            HEADER.unpack_from(record, pos)  # raises struct.error, as an eager unpack would
        self._buf = record
        self._pos = pos
        # The header is unpacked on first access: a consumer that only reads the body (or
        # hands the record on) never pays for it.
        self._hdr: tuple[Any, ...] | None = None
        self._meta: tuple[str, dict[str, str]] | None = None

    @property
    def _h(self) -> tuple[Any, ...]:
        h = self._hdr
        if h is None:
            h = self._hdr = HEADER.unpack_from(self._buf, self._pos)
        return h

    def record_bytes(self) -> bytes:
        """The whole stored record, exactly as the commit log holds it."""
        return bytes(self._buf[self._pos : self._pos + self.store_size])

    # header fields --------------------------------------------------------------------
    @property
    def store_size(self) -> int:
        """Total size of the record in bytes."""
        return int(self._h[H_TOTAL_SIZE])

    @property
    def body_crc(self) -> int:
        """CRC32 of the body (masked to 31 bits, as RocketMQ)."""
        return int(self._h[H_BODY_CRC])

    @property
    def queue_id(self) -> int:
        """Queue the message is stored in."""
        return int(self._h[H_QUEUE_ID])

    @property
    def flag(self) -> int:
        """The producer's flag field."""
        return int(self._h[H_FLAG])

    @property
    def queue_offset(self) -> int:
        """Logical offset of the message in its queue."""
        return int(self._h[H_QUEUE_OFFSET])

    @property
    def commitlog_offset(self) -> int:
        """Physical offset of the record in the commit log."""
        return int(self._h[H_PHYSICAL_OFFSET])

    @property
    def sys_flag(self) -> int:
        """RocketMQ's system flag (compression, transaction type...)."""
        return int(self._h[H_SYS_FLAG])

    @property
    def born_timestamp(self) -> int:
        """When the producer created the message (ms since the epoch)."""
        return int(self._h[H_BORN_TIMESTAMP])

    @property
    def born_host(self) -> str:
        """``ip:port`` of the producer."""
        return _host(self._h[H_BORN_IP], self._h[H_BORN_PORT])

    @property
    def store_timestamp(self) -> int:
        """When the broker stored the message (ms since the epoch)."""
        return int(self._h[H_STORE_TIMESTAMP])

    @property
    def store_host(self) -> str:
        """``ip:port`` of the broker that stored the message."""
        return _host(self._h[H_STORE_IP], self._h[H_STORE_PORT])

    @property
    def reconsume_times(self) -> int:
        """How many times the message has been sent back for retry."""
        return int(self._h[H_RECONSUME_TIMES])

    @property
    def prepared_transaction_offset(self) -> int:
        """Commit-log offset of the prepared half message (transactions), else 0."""
        return int(self._h[H_PREPARED_TRANSACTION_OFFSET])

    @property
    def msg_id(self) -> str:
        """The message's id as RocketMQ clients show it: the producer's unique id (the
        ``UNIQ_KEY`` property, the same on every retry or delayed copy) when it has one,
        else :attr:`offset_msg_id`."""
        uniq = self._decode_meta()[1].get(PROPERTY_UNIQ_KEY)
        return uniq if uniq else self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        """Where this copy is stored: store host (ip, port) and commit-log offset, as
        upper-case hex (RocketMQ's offset message id)."""
        h = self._h
        return f"{h[H_STORE_IP].hex().upper()}{h[H_STORE_PORT]:08X}{h[H_PHYSICAL_OFFSET]:016X}"

    # variable part --------------------------------------------------------------------
    @property
    def body(self) -> bytes:
        """The message body (copied out of the record on each read).

        A body its sender compressed (sys flag bit 0, as RocketMQ's clients send bodies over
        4 KiB) is stored as sent and inflated here.
        """
        h = self._hdr
        start = self._pos + HEADER_SIZE
        if h is None:
            # Only the body length is needed: skip unpacking the whole header.
            size = _BODY_LEN.unpack_from(self._buf, self._pos + POS_BODY_LENGTH)[0]
        else:
            size = h[H_BODY_LENGTH]
        if self._buf[self._pos + _SYS_FLAG_LOW_BYTE] & COMPRESSED_FLAG:
            return zlib.decompress(self._buf[start : start + size])
        return bytes(self._buf[start : start + size])

    @property
    def body_size(self) -> int:
        """``len(self.body)`` without the copy: read from the header (a body stored
        compressed is inflated to be measured)."""
        if self._buf[self._pos + _SYS_FLAG_LOW_BYTE] & COMPRESSED_FLAG:
            return len(self.body)
        h = self._hdr
        if h is None:
            return int(_BODY_LEN.unpack_from(self._buf, self._pos + POS_BODY_LENGTH)[0])
        return int(h[H_BODY_LENGTH])

    @property
    def body_view(self) -> memoryview:
        """The body as a memoryview into the record, without a copy (of the inflated body
        when it was stored compressed)."""
        start = self._pos + HEADER_SIZE
        if self.sys_flag & COMPRESSED_FLAG:
            return memoryview(self.body)
        return memoryview(self._buf)[start : start + self._h[H_BODY_LENGTH]]

    @property
    def stored_body(self) -> bytes:
        """The body bytes exactly as stored (still compressed when the sender compressed it)."""
        start = self._pos + HEADER_SIZE
        return bytes(self._buf[start : start + self._h[H_BODY_LENGTH]])

    def _decode_meta(self) -> tuple[str, dict[str, str]]:
        meta = self._meta
        if meta is None:
            buf = self._buf
            h = self._hdr
            pos = self._pos + HEADER_SIZE
            if h is None:  # only the body length is needed, not the whole header
                pos += _BODY_LEN.unpack_from(buf, pos - 4)[0]
            else:
                pos += h[H_BODY_LENGTH]
            tlen = buf[pos]
            # str(buffer, encoding) decodes a bytes slice or a memoryview without a copy.
            topic = str(buf[pos + 1 : pos + 1 + tlen], "utf-8")
            pos += 1 + tlen
            plen = (buf[pos] << 8) | buf[pos + 1]
            props = parse_properties(str(buf[pos + 2 : pos + 2 + plen], "utf-8"))
            meta = self._meta = (topic, props)
        return meta

    @property
    def topic(self) -> str:
        """Topic the message was stored under."""
        return self._decode_meta()[0]

    def _show_under_topic(self, topic: str) -> None:
        # Consumers present a retried message under its original topic, as RocketMQ's
        # client does; only the client that owns this fresh view calls it.
        self._meta = (topic, self._decode_meta()[1])

    def _set_reconsume_times(self, times: int) -> None:
        # A push consumer counts local re-deliveries on its own view (RocketMQ's client sets
        # reconsumeTimes in memory); the stored record is not touched.
        h = list(self._h)
        h[H_RECONSUME_TIMES] = times
        self._hdr = tuple(h)

    def all_properties(self) -> dict[str, str]:
        """Every stored property, including TAGS, KEYS and DELAY (a copy)."""
        return dict(self._decode_meta()[1])

    @property
    def properties(self) -> dict[str, str]:
        """Properties other than TAGS, KEYS and DELAY (those are fields of their own)."""
        return {k: v for k, v in self._decode_meta()[1].items() if k not in _FIELD_PROPERTIES}

    @property
    def tags(self) -> str | None:
        """The message tag, if any."""
        return self._decode_meta()[1].get(PROPERTY_TAGS)

    @property
    def keys(self) -> str | None:
        """Space-separated keys, if any."""
        return self._decode_meta()[1].get(PROPERTY_KEYS)

    @property
    def key_list(self) -> list[str]:
        """The keys, split on spaces."""
        keys = self.keys
        return keys.split() if keys else []

    @property
    def delay_level(self) -> int:
        """The delay level the producer asked for (0 = none)."""
        value = self._decode_meta()[1].get(PROPERTY_DELAY)
        return int(value) if value else 0

    def _timer_property(self, name: str) -> int | None:
        value = self._decode_meta()[1].get(name)
        return int(value) if value and value.isdigit() else None

    @property
    def deliver_time_ms(self) -> int | None:
        """``TIMER_DELIVER_MS``: when a timer message was asked to be delivered, if it was."""
        return self._timer_property(PROPERTY_TIMER_DELIVER_MS)

    @property
    def delay_ms(self) -> int | None:
        """``TIMER_DELAY_MS``: the timer delay a message was sent with, in ms, if any."""
        return self._timer_property(PROPERTY_TIMER_DELAY_MS)

    @property
    def delay_sec(self) -> int | None:
        """``TIMER_DELAY_SEC``: the timer delay a message was sent with, in s, if any."""
        return self._timer_property(PROPERTY_TIMER_DELAY_SEC)

    def get_property(self, name: str) -> str | None:
        """One stored property by name (TAGS and KEYS included), or ``None``."""
        return self._decode_meta()[1].get(name)

    # the record -----------------------------------------------------------------------
    @property
    def record(self) -> memoryview:
        """The encoded record this message was decoded from (no copy)."""
        pos = self._pos
        return memoryview(self._buf)[pos : pos + self._h[H_TOTAL_SIZE]]

    def to_message(self, **changes: Any) -> Message:
        """A plain :class:`Message` with this message's fields, ``changes`` replacing some
        (as :func:`attrs.evolve`); a field that is replaced is not decoded.

        The copy keeps the record's system properties (``RETRY_TOPIC``, ``REAL_TOPIC``...;
        see :func:`system_message`); the broker decides which of them it accepts back.
        """
        for name in _MESSAGE_FIELDS:
            if name not in changes:
                changes[name] = getattr(self, name)
        return system_message(**changes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return bytes(self.record) == bytes(other.record)

    def __hash__(self) -> int:
        return hash((self.commitlog_offset, self.store_size, self.body_crc))

    def __repr__(self) -> str:
        return (
            f"MessageExt(topic={self.topic!r}, queue_id={self.queue_id}, "
            f"queue_offset={self.queue_offset}, msg_id={self.msg_id!r}, tags={self.tags!r}, "
            f"keys={self.keys!r}, body_size={self._h[H_BODY_LENGTH]})"
        )


def _host(ip: bytes, port: int) -> str:
    return f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}:{port}"
