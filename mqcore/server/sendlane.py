"""A plain single send straight to a prepared record, without a message object.

The served broker's direct branch stores a plain SEND_MESSAGE / SEND_MESSAGE_V2 (a normal
topic, a body, properties the broker stores as sent) as a one-message batch is stored: its
record prepared from the header's fields and the body by the batch reader's rules
(:func:`mqcore.batch.prepare_sent_batch`), then ``Broker.send_prepared``. A send that is not
plain gets None here and takes the general path, which decodes, checks and refuses it with
its own errors.

In C when the speedups are built; :func:`py_prepare_sent_single` is the reference (the send
written as the one message of a batch body and read by the batch reader's reference).
"""

from __future__ import annotations

import struct
from typing import Any

from mqcore import speedups
from mqcore.batch import SPECIAL_PROPERTIES, py_prepare_sent_batch
from mqcore.codec import body_crc32
from mqcore.record.layout import HEADER_SIZE, MAX_TOPIC_LENGTH

__all__ = ["prepare_sent_single", "py_prepare_sent_single"]

_protocol = speedups.load("protocol")
_c_prepare_sent_single = None if _protocol is None else _protocol.prepare_sent_single

_HEAD = struct.Struct(">iiiii")  # a batch message: size, magic, body CRC, flag, body size
_PROPS_LEN = struct.Struct(">h")
_FIXED = _HEAD.size + _PROPS_LEN.size
_MAX_PROPS_LEN = 0x7FFF  # a batch message's properties length is a signed short
_INT32 = range(-(2**31), 2**31)


def prepare_sent_single(
    topic: str,
    body: bytes | bytearray | memoryview,
    properties: str | None,
    flag: int,
    limit: int,
    born_timestamp: int,
    reconsume_times: int,
    sys_flag: int,
) -> tuple[Any, str | None] | None:
    """The prepared record of a single send (the tuple :func:`mqcore.codec.prepare` makes of
    the message it stands for) and its ``UNIQ_KEY``, or None when the send is not plain: a
    topic that is not ASCII or longer than a record holds, a flag outside a Java int, or a
    message :func:`mqcore.batch.prepare_sent_batch` leaves to the general path (an empty body
    or one over ``limit`` bytes, properties that are not plain, a name the broker reads).
    A send accepted here passes the broker's checks of a sent message; its topic and queue
    are the broker's to check."""
    if _c_prepare_sent_single is not None:
        return _c_prepare_sent_single(  # type: ignore[no-any-return]
            topic,
            body,
            properties,
            flag,
            limit,
            born_timestamp,
            reconsume_times,
            sys_flag,
            HEADER_SIZE,
            body_crc32,
            SPECIAL_PROPERTIES,
        )
    return py_prepare_sent_single(
        topic, body, properties, flag, limit, born_timestamp, reconsume_times, sys_flag
    )


def py_prepare_sent_single(
    topic: str,
    body: bytes | bytearray | memoryview,
    properties: str | None,
    flag: int,
    limit: int,
    born_timestamp: int,
    reconsume_times: int,
    sys_flag: int,
) -> tuple[Any, str | None] | None:
    """:func:`prepare_sent_single` in Python (the reference for the C
    ``prepare_sent_single`` of ``mqcore.protocol._protocol``)."""
    if not topic.isascii() or not 0 < len(topic) <= MAX_TOPIC_LENGTH or flag not in _INT32:
        return None
    props = properties or ""
    if not props.isascii() or len(props) > _MAX_PROPS_LEN:
        return None
    raw = props.encode()
    # The send as the one message of a SEND_BATCH_MESSAGE body (the batch reader reads
    # neither the magic nor the body CRC).
    entry = b"".join(
        (_HEAD.pack(_FIXED + len(body) + len(raw), 0, 0, flag, len(body)), body,
         _PROPS_LEN.pack(len(raw)), raw)
    )  # fmt: skip
    name = topic.encode()
    got = py_prepare_sent_batch(
        bytes((len(name),)) + name, entry, limit, born_timestamp, reconsume_times, sys_flag
    )
    if got is None:
        return None
    return got[0][0], got[1][0]
