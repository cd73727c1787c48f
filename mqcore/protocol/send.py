"""Messages as RocketMQ clients send them: one in a send request, or a batch in one body.

A send request carries one message as its header (topic, flag, properties string...) plus the
body; a batch (SEND_BATCH_MESSAGE) carries several encoded one after another in the body, as
RocketMQ's ``MessageDecoder.encodeMessages`` writes them::

    totalSize 4 | magic 4 (0) | bodyCRC 4 (0) | flag 4 | bodyLength 4 | body
    | propertiesLength 2 | properties

Both become :class:`~mqcore.message.Message` objects through the library's system-message
path: a RocketMQ client legitimately sends system properties (``UNIQ_KEY``, ``WAIT``...), and
the broker's own checks (:func:`~mqcore.protocol.validation.check_sent_message`) refuse the
ones no client may set.
"""

from __future__ import annotations

import struct

from mqcore.errors import MessageIllegalError
from mqcore.message import (
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    Message,
    format_properties,
    parse_properties,
    system_message,
)
from mqcore.protocol.codes import ResponseCode

__all__ = ["decode_batch", "encode_batch", "message_from_wire", "wire_properties"]

_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLength
_PROPS_LEN = struct.Struct(">h")


def _illegal(text: str) -> MessageIllegalError:
    return MessageIllegalError(text, code=ResponseCode.MESSAGE_ILLEGAL)


def message_from_wire(topic: str, body: bytes, flag: int, properties: str | None) -> Message:
    """The :class:`Message` a client sent: tags, keys and delay level out of its properties."""
    try:
        props = parse_properties(properties) if properties else {}
    except ValueError as exc:
        raise _illegal(f"malformed message properties: {exc}") from None
    tags = props.pop(PROPERTY_TAGS, None)
    keys = props.pop(PROPERTY_KEYS, None)
    delay = props.pop(PROPERTY_DELAY, None)
    try:
        level = int(delay) if delay else 0
    except ValueError:
        raise _illegal(f"property DELAY={delay!r} is not a delay level") from None
    return system_message(
        topic=topic,
        body=body,
        tags=tags or None,
        keys=keys or None,
        flag=flag,
        delay_level=level,
        properties=props,
    )


def wire_properties(msg: Message) -> str:
    """The properties string a send request carries for ``msg`` (tags, keys, delay included)."""
    return format_properties(msg.all_properties())


def decode_batch(topic: str, data: bytes | bytearray | memoryview) -> list[Message]:
    """The messages of a SEND_BATCH_MESSAGE body. :raises MessageIllegalError: malformed."""
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
    """A SEND_BATCH_MESSAGE body for ``messages`` (what :func:`decode_batch` reads)."""
    parts: list[bytes] = []
    for m in messages:
        props = wire_properties(m).encode()
        size = _HEAD.size + len(m.body) + _PROPS_LEN.size + len(props)
        parts.append(_HEAD.pack(size, 0, 0, m.flag, len(m.body)))
        parts.append(bytes(m.body))
        parts.append(_PROPS_LEN.pack(len(props)))
        parts.append(props)
    return b"".join(parts)
