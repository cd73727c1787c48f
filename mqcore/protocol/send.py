"""Messages as RocketMQ clients send them: one in a send request, or a batch in one body.

A send request carries one message as its header (topic, flag, properties string...) plus the
body; a batch (SEND_BATCH_MESSAGE) carries several encoded one after another in the body, as
RocketMQ's ``MessageDecoder.encodeMessages`` writes them::

    totalSize 4 | magic 4 (0) | bodyCRC 4 (0) | flag 4 | bodyLength 4 | body
    | propertiesLength 2 | properties

Both become :class:`~mqcore.message.Message` objects through the library's system-message
path: a RocketMQ client legitimately sends system properties (``UNIQ_KEY``, ``WAIT``...), and
the broker's own checks (:func:`~mqcore.validation.check_sent_message`) refuse the
ones no client may set.
"""

from __future__ import annotations

import functools
import struct

import attrs

from mqcore import speedups
from mqcore.errors import MessageIllegalError
from mqcore.message import (
    _FIELD_PROPERTIES,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    Message,
    format_properties,
    parse_properties,
)
from mqcore.protocol.codes import ResponseCode

__all__ = [
    "decode_batch",
    "encode_batch",
    "message_from_wire",
    "py_decode_batch",
    "py_encode_batch",
    "wire_properties",
]

_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLength
_PROPS_LEN = struct.Struct(">h")


def _illegal(text: str) -> MessageIllegalError:
    return MessageIllegalError(text, code=ResponseCode.MESSAGE_ILLEGAL)


def message_from_wire(topic: str, body: bytes, flag: int, properties: str | None) -> Message:
    """The :class:`Message` a client sent: tags, keys and delay level out of its properties.

    In C when the speedups are built and the message is plain (no tags, keys or delay);
    :func:`py_message_from_wire` is the reference, and makes every other message.
    """
    if (
        _c_message_from_wire is not None
        and topic.__class__ is str
        and body.__class__ is bytes
        and flag.__class__ is int
    ):
        return _c_message_from_wire(  # type: ignore[no-any-return]
            topic, body, flag, properties, _blank_message, _OTHER_DEFAULTS, py_message_from_wire
        )
    return py_message_from_wire(topic, body, flag, properties)


def py_message_from_wire(topic: str, body: bytes, flag: int, properties: str | None) -> Message:
    """:func:`message_from_wire` in Python (the reference for the C ``message_from_wire``)."""
    try:
        props = parse_properties(properties) if properties else {}
    except ValueError as exc:
        raise _illegal(f"malformed message properties: {exc}") from None
    if props.keys().isdisjoint(_FIELD_PROPERTIES):  # no tags, keys or delay (most messages)
        return _wire_message(topic, body, None, None, props, flag, 0)
    tags = props.pop(PROPERTY_TAGS, None)
    keys = props.pop(PROPERTY_KEYS, None)
    delay = props.pop(PROPERTY_DELAY, None)
    try:
        level = int(delay) if delay else 0
    except ValueError:
        raise _illegal(f"property DELAY={delay!r} is not a delay level") from None
    return _wire_message(topic, body, tags or None, keys or None, props, flag, level)


def _wire_message(
    topic: str,
    body: bytes,
    tags: str | None,
    keys: str | None,
    props: dict[str, str],
    flag: int,
    level: int,
) -> Message:
    # Built without Message's own checks (about a fifth of a batch's cost on the server):
    # the broker checks every sent message with check_sent_message, which covers the types,
    # separators, Unicode and system properties those checks would, and the header reader
    # checked the flag's range. What a library setter may write is the system-message path's
    # business; from the wire, the broker's rules decide.
    m = _new_message(Message)
    put = _set
    put(m, "topic", topic)
    put(m, "body", body)
    put(m, "tags", tags)
    put(m, "keys", keys)
    put(m, "properties", props)
    put(m, "flag", flag)
    put(m, "delay_level", level)
    for name, default in _OTHER_DEFAULTS:
        put(m, name, default)
    return m


_new_message = object.__new__
_set = object.__setattr__
_SET_HERE = {"topic", "body", "tags", "keys", "properties", "flag", "delay_level"}
_OTHER_DEFAULTS = tuple(
    (f.name, f.default) for f in attrs.fields(Message) if f.name not in _SET_HERE
)
if any(hasattr(d, "factory") or d is attrs.NOTHING for _, d in _OTHER_DEFAULTS):
    raise ImportError("mqcore.protocol.send: a Message field without a plain default")
_blank_message = functools.partial(_new_message, Message)
_speedups = speedups.load("protocol")
_c_decode_batch = None if _speedups is None else _speedups.decode_batch
_c_encode_batch = None if _speedups is None else _speedups.encode_batch
_c_message_from_wire = None if _speedups is None else _speedups.message_from_wire


def wire_properties(msg: Message) -> str:
    """The properties string a send request carries for ``msg`` (tags, keys, delay included)."""
    return format_properties(msg.all_properties())


def decode_batch(topic: str, data: bytes | bytearray | memoryview) -> list[Message]:
    """The messages of a SEND_BATCH_MESSAGE body. :raises MessageIllegalError: malformed.

    In C when the speedups are built (a third of the server's work on a batch in Python);
    :func:`py_decode_batch` is the reference.
    """
    if _c_decode_batch is not None and topic.__class__ is str:
        return _c_decode_batch(  # type: ignore[no-any-return]
            topic, data, _blank_message, _OTHER_DEFAULTS, message_from_wire, _illegal
        )
    return py_decode_batch(topic, data)


def py_decode_batch(topic: str, data: bytes | bytearray | memoryview) -> list[Message]:
    """:func:`decode_batch` in Python (the reference for the C ``decode_batch`` of
    ``mqcore.protocol._protocol``)."""
    view = memoryview(data)
    out: list[Message] = []
    pos, end = 0, len(view)
    while pos < end:
        if end - pos < _HEAD.size + _PROPS_LEN.size:
            raise _illegal(f"batch body truncated at byte {pos} of {end}")
        size, _magic, _crc, flag, body_len = _HEAD.unpack_from(view, pos)
        body_at = pos + _HEAD.size
        props_at = body_at + body_len
        if body_len < 0 or size < _HEAD.size + _PROPS_LEN.size or props_at + 2 > end:
            raise _illegal(f"batch message at byte {pos} has a bad length ({size}, {body_len})")
        (props_len,) = _PROPS_LEN.unpack_from(view, props_at)
        stop = props_at + 2 + props_len
        if props_len < 0 or stop != pos + size or stop > end:
            raise _illegal(f"batch message at byte {pos} has a bad size {size}")
        try:
            props = bytes(view[props_at + 2 : stop]).decode() if props_len else None
        except UnicodeDecodeError:
            raise _illegal(f"batch message at byte {pos}: properties are not UTF-8") from None
        out.append(message_from_wire(topic, bytes(view[body_at:props_at]), flag, props))
        pos = stop
    if not out:
        raise _illegal("the batch holds no message")
    return out


def encode_batch(messages: list[Message]) -> bytes:
    """A SEND_BATCH_MESSAGE body for ``messages`` (what :func:`decode_batch` reads).

    In C when the speedups are built and every message is plain (no tags, keys or delay
    level); :func:`py_encode_batch` is the reference, and encodes the rest.
    """
    if _c_encode_batch is not None and messages.__class__ is list:
        data = _c_encode_batch(messages, Message)
        if data is not None:
            return data  # type: ignore[no-any-return]
    return py_encode_batch(messages)


def py_encode_batch(messages: list[Message]) -> bytes:
    """:func:`encode_batch` in Python (the reference for the C ``encode_batch`` of
    ``mqcore.protocol._protocol``)."""
    parts: list[bytes | bytearray | memoryview] = []
    append, head, props_len = parts.append, _HEAD.pack, _PROPS_LEN.pack
    fixed = _HEAD.size + _PROPS_LEN.size
    for m in messages:
        props = m.properties
        if len(props) == 1 and not (m.tags or m.keys or m.delay_level):
            # One property (a producer's UNIQ_KEY): what wire_properties gives, directly.
            ((name, value),) = props.items()
            text = f"{name}\x01{value}\x02".encode()
        else:
            text = wire_properties(m).encode()
        body = m.body
        size = len(body)
        append(head(fixed + size + len(text), 0, 0, m.flag, size))
        append(body)
        append(props_len(len(text)) + text)
    return b"".join(parts)
