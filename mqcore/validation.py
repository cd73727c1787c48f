"""Checks a message passes before it is stored: names, text fields and system properties.

A stored record keeps its properties as ``name\\x01value\\x02`` pairs (see
:mod:`mqcore.codec`), and tags, keys and the delay level are properties too. A separator inside
any field would therefore let a sender forge other properties (a tag its consumers' filter
never matched, a delayed message's destination), so both separators are refused everywhere.

Two levels of checks:

- :func:`check_user_properties`: what an application may put in ``Message.properties``. As
  RocketMQ's ``Message.putUserProperty``, no name of :data:`SYSTEM_PROPERTY_NAMES`
  (``MessageConst.STRING_HASH_SET``): only the client library's own setters write those.
- :func:`check_sent_message`: what the broker accepts from any client, mqcore's or not (the
  producer applies it too, before sending). A RocketMQ client legitimately sends some system
  properties (``UNIQ_KEY``, ``WAIT``, ``TRAN_MSG``, ``PGROUP``, ``TIMER_DELIVER_MS``...); the
  ones that would steer where the broker delivers a message, or what it shows, are refused
  (see :data:`FIELD_PROPERTIES`, :data:`HOLD_PROPERTIES`, :data:`RETRY_PROPERTIES`,
  :data:`BROKER_PROPERTIES`).

Every check costs one type test and one or two ``in`` tests per field; a message without
properties pays nothing for them.

:mod:`mqcore.message` checks its fields with these functions, so this module sits below it:
the checks of a whole message take any object of :class:`SentMessage`'s shape (a
:class:`~mqcore.message.Message` is one) and import nothing of the message module.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from mqcore.errors import InvalidArgumentError

__all__ = [
    "BROKER_PROPERTIES",
    "FIELD_PROPERTIES",
    "HOLD_PROPERTIES",
    "RETRY_PROPERTIES",
    "SYSTEM_PROPERTY_NAMES",
    "VALID_NAME",
    "SentMessage",
    "check_copied_properties",
    "check_delay_level",
    "check_name",
    "check_sent_message",
    "check_text",
    "check_user_properties",
    "py_sent_prefix",
    "sent_fast_ok",
]


class SentMessage(Protocol):
    """The fields of a sent message the checks read (a :class:`~mqcore.message.Message`)."""

    @property
    def topic(self) -> str:
        """Where it is sent."""
        ...

    @property
    def body(self) -> bytes:
        """Its payload."""
        ...

    @property
    def tags(self) -> str | None:
        """Its tag."""
        ...

    @property
    def keys(self) -> str | None:
        """Its index keys."""
        ...

    @property
    def delay_level(self) -> int:
        """Its delay level (0: none)."""
        ...

    @property
    def properties(self) -> Mapping[str, str]:
        """Its user and system properties."""
        ...


#: Topic and group names: RocketMQ's ``^[%|a-zA-Z0-9_-]+$``, matched as a whole (``fullmatch``:
#: ``$`` alone would also accept a trailing newline).
VALID_NAME = re.compile(r"[%|a-zA-Z0-9_-]+")

#: RocketMQ's ``MessageConst.STRING_HASH_SET``: property names no application may set.
SYSTEM_PROPERTY_NAMES = frozenset(
    {
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    }
)

#: Fields of :class:`~mqcore.message.Message` that the record keeps as properties: never a
#: ``properties`` entry too (a second ``TAGS`` would show a tag the consume queue never indexed).
FIELD_PROPERTIES = frozenset({"TAGS", "KEYS", "DELAY"})

#: Written by the broker when it holds a delayed message (where to deliver it when due). On a
#: message that asks for a delay level or a timer, a client's value is replaced when the
#: broker holds it (as RocketMQ's commit log does; a RocketMQ consumer's own send-back copies
#: them from the message it consumed); on any other it is refused. No held record carries a
#: destination the broker did not choose.
HOLD_PROPERTIES = frozenset({"REAL_TOPIC", "REAL_QID"})

#: Written on a message sent back for retry. A RocketMQ consumer whose send-back request fails
#: sends the copy itself to ``%RETRY%<group>`` with these set, so they are accepted on retry
#: topics only: elsewhere ``RETRY_TOPIC`` would make a later retry show a topic it never had.
RETRY_PROPERTIES = frozenset(
    {"RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "RECONSUME_TIME", "MAX_RECONSUME_TIMES"}
)

#: Broker-side state (timer wheel, pop consumption, DLQ provenance, dispatch): never from a
#: client.
BROKER_PROPERTIES = frozenset(
    {
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "DUP_INFO",
        "INNER_MULTI_QUEUE_OFFSET",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    }
)

_RETRY_TOPIC_PREFIX = "%RETRY%"
# A message carrying one of these is held by the timer (RocketMQ 5's timer message).
_TIMER_REQUESTS = frozenset({"TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC"})
_SYSTEM_BUT_UNIQ_KEY = SYSTEM_PROPERTY_NAMES - {"UNIQ_KEY"}
# The system names check_sent_message may refuse; the others (UNIQ_KEY, WAIT, a timer's
# TIMER_DELIVER_MS...) pass, so a message without any of these needs no loop over its names.
_REFUSABLE = REFUSABLE_PROPERTIES = SYSTEM_PROPERTY_NAMES & (
    FIELD_PROPERTIES | BROKER_PROPERTIES | HOLD_PROPERTIES | RETRY_PROPERTIES
)
# Lone surrogates cannot be encoded as UTF-8; checked only for non-ASCII text.
_BAD_TEXT = re.compile("[\x01\x02\ud800-\udfff]")


def check_name(kind: str, name: object, max_length: int) -> None:
    """Raise :class:`InvalidArgumentError` unless ``name`` is a legal topic or group name.

    :param kind: ``"topic"`` or ``"group"``, for the message.
    """
    if name.__class__ is not str or not name:
        raise InvalidArgumentError(f"the {kind} name must be a non-empty str, got {name!r}")
    assert isinstance(name, str)
    if VALID_NAME.fullmatch(name) is None:
        raise InvalidArgumentError(
            f"the {kind} name {name!r} contains illegal characters; "
            "allowed: letters, digits, '%', '|', '_' and '-'"
        )
    if len(name) > max_length:
        raise InvalidArgumentError(
            f"the {kind} name {name[:20]!r}... is {len(name)} characters long; "
            f"the limit is {max_length}"
        )


def check_text(field: str, value: object) -> None:
    """Raise :class:`InvalidArgumentError` naming ``field`` unless ``value`` is a ``str`` that
    holds neither property separator (``\\x01``, ``\\x02``) and encodes as UTF-8."""
    if not isinstance(value, str):
        raise InvalidArgumentError(
            f"message {field} must be a str, got {type(value).__name__} {value!r}"
        )
    if value.isascii():
        if "\x01" not in value and "\x02" not in value:
            return
    elif _BAD_TEXT.search(value) is None:
        return
    bad = _BAD_TEXT.search(value)
    what = "a property separator" if bad and bad.group() in "\x01\x02" else "a lone surrogate"
    raise InvalidArgumentError(
        f"message {field} {value!r} contains {what}; "
        "\\x01 and \\x02 separate stored properties and text must be valid Unicode"
    )


def _clean(texts: Iterable[Any]) -> bool:
    """Whether every item is a ``str`` without separators or lone surrogates: one join and
    one or two scans for all of them (the fast path; on False, check one by one)."""
    try:
        joined = "".join(texts)
    except TypeError:
        return False
    if joined.isascii():
        return "\x01" not in joined and "\x02" not in joined
    return _BAD_TEXT.search(joined) is None


def _clean_mapping(properties: Mapping[Any, Any]) -> bool:
    """:func:`_clean` of every name and every value of ``properties``, in one scan (a
    separator or lone surrogate is one code point: it shows in the joined text exactly when
    it is in one of them)."""
    try:
        texts = [*properties, *properties.values()]
    except TypeError:  # as _clean's join of an iterable that fails
        return False
    return _clean(texts)


def check_user_properties(properties: Mapping[Any, Any]) -> None:
    """What an application may set as ``Message.properties``: ``str`` names and values, no
    separators, no empty or system name (:data:`SYSTEM_PROPERTY_NAMES`)."""
    if (
        _clean_mapping(properties)
        and "" not in properties
        and properties.keys().isdisjoint(SYSTEM_PROPERTY_NAMES)
    ):
        return
    for name, value in properties.items():
        check_text("property name", name)
        if not name:
            raise InvalidArgumentError("message property name must not be empty")
        if name in SYSTEM_PROPERTY_NAMES:
            raise InvalidArgumentError(
                f"message property name {name!r} is reserved by the system; "
                "use the Message fields (tags, keys, delay_level) or another name"
            )
        check_text(f"property {name!r} value", value)


def check_copied_properties(properties: Mapping[Any, Any]) -> None:
    """Properties copied from stored records into new ones (a replay, a bulk write straight
    into a store): ``str`` names and values without separators, no empty name, and none of
    :data:`FIELD_PROPERTIES` (tags, keys and the delay level are fields of their own). System
    names are kept: a replayed message keeps its ``UNIQ_KEY``, a delivered one its
    ``REAL_TOPIC``, as the records they copy hold them."""
    if _clean_mapping(properties) and "" not in properties:
        bad = properties.keys() & FIELD_PROPERTIES
    else:
        for name, value in properties.items():
            check_text("property name", name)
            check_text(f"property {name!r} value", value)
        bad = properties.keys() & (FIELD_PROPERTIES | {""})
    if bad:
        raise InvalidArgumentError(
            f"message property name {sorted(bad)[0]!r} is refused: empty, or a message field "
            "(set tags, keys or delay_level instead)"
        )


def check_delay_level(value: object) -> None:
    """Raise :class:`InvalidArgumentError` unless ``value`` is an ``int`` level >= 0."""
    if value.__class__ is not int:  # bool is an int subclass, and no level
        raise InvalidArgumentError(
            f"message delay_level must be an int (0 = no delay), got {value!r}"
        )
    assert isinstance(value, int)
    if value < 0:
        raise InvalidArgumentError(f"message delay_level {value} is negative; 0 means no delay")


def check_sent_message(msg: SentMessage, topic: str) -> None:
    """What the broker accepts from any client for ``topic`` (the producer checks it first).

    Body, tags, keys, property names and values: the right types, no separators, valid
    Unicode; the body not empty. System properties: see the module docstring.
    """
    body = msg.body
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"message body must be bytes, got {type(body).__name__}")
    if len(body) == 0:
        raise InvalidArgumentError("message body is empty; RocketMQ refuses a 0-byte body")
    # Inline fast paths for the usual short ASCII text; check_text explains any refusal.
    tags = msg.tags
    if tags is not None and not (
        tags.__class__ is str and tags.isascii() and "\x01" not in tags and "\x02" not in tags
    ):
        check_text("tags", tags)
    keys = msg.keys
    if keys is not None and not (
        keys.__class__ is str and keys.isascii() and "\x01" not in keys and "\x02" not in keys
    ):
        check_text("keys", keys)
    if msg.delay_level.__class__ is not int or msg.delay_level < 0:
        check_delay_level(msg.delay_level)
    props = msg.properties
    if not props:
        return
    if len(props) == 1:
        # A producer's unique id alone, as most messages carry: ASCII letters and digits
        # hold no separator, and UNIQ_KEY is always accepted (the general path agrees).
        uniq = props.get("UNIQ_KEY")
        if uniq.__class__ is str and uniq.isascii() and uniq.isalnum():
            return
    if props.__class__ is not dict and not isinstance(props, Mapping):
        raise InvalidArgumentError(f"message properties must be a dict, got {props!r}")
    if not _clean_mapping(props) or "" in props:
        for name, value in props.items():
            check_text("property name", name)
            check_text(f"property {name!r} value", value)
            if not name:
                raise InvalidArgumentError("message property name must not be empty")
    if props.keys().isdisjoint(_SYSTEM_BUT_UNIQ_KEY):
        return  # UNIQ_KEY alone (every producer's message carries it) is always accepted
    if msg.delay_level > 0 and not props.keys().isdisjoint(_TIMER_REQUESTS):
        # RocketMQ would silently drop the timer; a clear error is kinder.
        asked = ", ".join(sorted(props.keys() & _TIMER_REQUESTS))
        raise InvalidArgumentError(
            f"a message to {topic!r} has both delay level {msg.delay_level} and a timer "
            f"({asked}); use one of them"
        )
    if props.keys().isdisjoint(_REFUSABLE):
        return  # e.g. a timer message: TIMER_DELIVER_MS (and UNIQ_KEY) pass the loop below
    for name in props.keys() & SYSTEM_PROPERTY_NAMES:
        if name in FIELD_PROPERTIES:
            why = "it is a message field: set tags, keys or delay_level instead"
        elif name in BROKER_PROPERTIES:
            why = "only the broker writes it"
        elif name in HOLD_PROPERTIES:
            if msg.delay_level > 0 or not props.keys().isdisjoint(_TIMER_REQUESTS):
                continue  # the broker replaces it when it holds the message
            why = "only the broker writes it, when it holds a delayed message"
        elif name in RETRY_PROPERTIES:
            if topic.startswith(_RETRY_TOPIC_PREFIX):
                continue
            why = "it is accepted on retry topics (%RETRY%<group>) only"
        else:
            continue  # set by RocketMQ's client library itself (UNIQ_KEY, WAIT, TRAN_MSG...)
        raise InvalidArgumentError(f"message property {name!r} is refused for {topic!r}: {why}")


def sent_fast_ok(msg: SentMessage, topic: str, limit: int) -> bool:
    """Whether ``msg`` certainly passes the broker's checks of a message sent to ``topic``
    (its topic, :func:`check_sent_message`, a body of at most ``limit`` bytes) on the plain
    rules alone: exact ``str`` and ``bytes`` fields, ASCII text without separators, a delay
    level in ``0..2**63 - 1``, a ``dict`` of properties with no name of
    :data:`REFUSABLE_PROPERTIES` (none at all with a delay level). False says nothing: the
    full checks then decide, and explain a refusal.

    The reference for ``mqcore.protocol._protocol.sent_prefix``, which the broker runs over a batch
    before checking the rest in Python (the tests hold both to the same answers, and every
    message accepted here to :func:`check_sent_message`'s).
    """
    if msg.topic.__class__ is not str or msg.topic != topic:
        return False
    body = msg.body
    if body.__class__ is not bytes or not 0 < len(body) <= limit:
        return False
    for text in (msg.tags, msg.keys):
        if text is not None and not _ascii_clean(text):
            return False
    level = msg.delay_level
    if level.__class__ is not int or not 0 <= level < 2**63:
        return False
    props = msg.properties
    if props.__class__ is not dict:
        return False
    if not props:
        return True
    if level:
        return False
    return all(
        _ascii_clean(name) and name != "" and name not in _REFUSABLE and _ascii_clean(value)
        for name, value in props.items()
    )


def _ascii_clean(text: object) -> bool:
    return text.__class__ is str and text.isascii() and "\x01" not in text and "\x02" not in text


def py_sent_prefix(messages: Sequence[SentMessage], topic: str, limit: int) -> int:
    """How many leading ``messages`` :func:`sent_fast_ok` accepts (the reference for
    ``mqcore.protocol._protocol.sent_prefix``)."""
    count = 0
    for m in messages:
        if not sent_fast_ok(m, topic, limit):
            break
        count += 1
    return count
