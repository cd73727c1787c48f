"""Per-batch layout shared by the stores: consume-queue units, record offsets, put results.

A put of ``n`` messages stores ``n`` records back to back. Each store then needs the
records' commit-log offsets, their 20-byte consume-queue units
(:data:`mqcore.record.unit.UNIT`) and one :class:`~mqcore.store.PutResult` per message. These
loops run once per message on the producer's hot path, so they run in C when the optional
``codec`` speedups were built (see :data:`SPEEDUPS` and :mod:`mqcore.speedups`); the Python
versions here are the reference, and the tests hold both to the same output.

Set ``MQCORE_NO_SPEEDUPS=1`` in the environment to run the pure-Python code.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import accumulate, repeat
from typing import Any

from mqcore import speedups
from mqcore.codec import body_crc32, string_hash_code
from mqcore.errors import InvalidArgumentError
from mqcore.message import PROPERTY_TIMER_OUT_MS, TIMER_REQUEST_PROPERTIES, Message
from mqcore.record.layout import HEADER_SIZE
from mqcore.record.prepared import size_of, tags_code_of, with_tags_code
from mqcore.record.unit import UNIT
from mqcore.store import PutResult, deliver_timestamp
from mqcore.validation import REFUSABLE_PROPERTIES, SYSTEM_PROPERTY_NAMES

__all__ = [
    "SPEEDUPS",
    "prepare_sent_batch",
    "put_results",
    "py_prepare_sent_batch",
    "units",
    "with_deliver_times",
]

_speedups = speedups.load("codec")

#: True when the C versions of the batch loops (and of :func:`mqcore.codec.pack`) are used.
SPEEDUPS = _speedups is not None

_protocol = speedups.load("protocol")
_c_sent_prefix = None if _protocol is None else _protocol.sent_prefix


def plain_prefix(messages: Sequence[Message], topic: str, limit: int) -> int:
    """How many leading ``messages`` certainly pass the checks of a message sent to ``topic``
    with bodies of at most ``limit`` bytes, told on the plain rules alone in one C call
    (:func:`mqcore.validation.sent_fast_ok` is the reference, message by message);
    0 without the speedups. The broker and the producer check the rest one by one."""
    if _c_sent_prefix is None:
        return 0
    return int(_c_sent_prefix(messages, topic, limit, REFUSABLE_PROPERTIES))


_c_prepare_sent_batch = None if _protocol is None else _protocol.prepare_sent_batch

_HEAD = struct.Struct(">iiiii")  # a batch message: totalSize, magic, bodyCRC, flag, bodyLength
_PROPS_LEN = struct.Struct(">h")
_U16 = struct.Struct(">H")
# Property names that make the broker check, hold or store a message specially (delay and
# timer requests, transactions, what only the broker may write...): a batch with one of them
# takes the general path. Every client's batch carries UNIQ_KEY and may carry TAGS, KEYS and
# RocketMQ's WAIT, which are stored as they are.
_PLAIN_SYSTEM = frozenset({"UNIQ_KEY", "TAGS", "KEYS", "WAIT"})
if not {"UNIQ_KEY", "WAIT"}.isdisjoint(REFUSABLE_PROPERTIES | TIMER_REQUEST_PROPERTIES):
    raise ImportError("mqcore.batch: a plain system property is one the broker refuses")
SPECIAL_PROPERTIES = tuple(
    sorted(
        n.encode()
        for n in (SYSTEM_PROPERTY_NAMES | TIMER_REQUEST_PROPERTIES | {PROPERTY_TIMER_OUT_MS})
        - _PLAIN_SYSTEM
    )
)
_MAX_PROPERTIES = 64  # more pairs in one message: the general path (a quadratic check here)

_new_tuple = tuple.__new__
_QWORDS: dict[int, struct.Struct] = {}


def _qwords(count: int) -> struct.Struct:
    st = _QWORDS.get(count)
    if st is None:
        st = _QWORDS[count] = struct.Struct(f">{count}q")
    return st


def py_units(prepared: list[Any], start: int) -> tuple[bytes, list[int], int]:
    """:func:`units` in Python."""
    sizes = list(map(size_of, prepared))
    offsets = list(accumulate(sizes, initial=start))
    end = offsets.pop()
    return b"".join(map(UNIT.pack, offsets, sizes, map(tags_code_of, prepared))), offsets, end


def py_put_results(
    cls: type[PutResult],
    prefix: str,
    prepared: list[Any],
    offsets: list[int],
    queue_offset: int,
    store_timestamp: int,
) -> list[PutResult]:
    """:func:`put_results` in Python."""
    n = len(prepared)
    if len(offsets) != n:
        raise InvalidArgumentError(f"put_results: {len(offsets)} offsets for {n} records")
    # The ids of the whole batch: one pack and one hex call instead of a format per message.
    digits = _qwords(n).pack(*offsets).hex().upper()
    ids = [prefix + digits[j : j + 16] for j in range(0, 16 * n, 16)]
    return list(
        map(
            _new_tuple,
            repeat(cls, n),
            zip(
                ids,
                range(queue_offset, queue_offset + n),
                offsets,
                repeat(store_timestamp, n),
                map(size_of, prepared),
                strict=True,
            ),
        )
    )


def units(prepared: list[Any], start: int) -> tuple[bytes, list[int], int]:
    """The records of ``prepared`` laid back to back from commit-log offset ``start``.

    Returns their consume-queue units as one ``bytes`` (a ``UNIT`` each), the offset of
    each record, and the offset just past the last one.
    """
    if _speedups is not None:
        return _speedups.units(prepared, start)  # type: ignore[no-any-return]
    return py_units(prepared, start)


def put_results(
    prefix: str,
    prepared: list[Any],
    offsets: list[int],
    queue_offset: int,
    store_timestamp: int,
) -> list[PutResult]:
    """One :class:`~mqcore.store.PutResult` per record of a stored batch.

    ``prefix`` is the store host part of RocketMQ's offset message id (address and port as
    16 upper-case hex digits); the commit-log offset makes up the other 16 digits.
    """
    if _speedups is not None:
        return _speedups.put_results(  # type: ignore[no-any-return]
            PutResult, prefix, prepared, offsets, queue_offset, store_timestamp
        )
    return py_put_results(PutResult, prefix, prepared, offsets, queue_offset, store_timestamp)


def with_deliver_times(
    prepared: list[Any],
    messages: Sequence[Message],
    delays: Sequence[int],
    store_timestamp: int,
) -> list[Any]:
    """``prepared`` for a put into ``SCHEDULE_TOPIC_XXXX``: each delayed message's tags code
    replaced by its deliver time (:func:`mqcore.store.deliver_timestamp`), as RocketMQ's
    commit log does for the schedule topic. Messages without a delay level keep theirs."""
    out = list(prepared)
    for i, m in enumerate(messages):
        if m.delay_level > 0:
            code = deliver_timestamp(delays, m.delay_level, store_timestamp)
            out[i] = with_tags_code(out[i], code)
    return out


def prepare_sent_batch(
    topic_head: bytes,
    data: bytes | bytearray | memoryview,
    limit: int,
    born_timestamp: int,
    reconsume_times: int,
    sys_flag: int,
) -> tuple[list[Any], list[str | None]] | None:
    """A SEND_BATCH_MESSAGE body straight to prepared records, when every message is plain.

    ``topic_head`` is the start of each record's trailer (the topic's length byte and its
    UTF-8). Returns the tuples :func:`mqcore.codec.prepare` makes of the messages
    :func:`mqcore.protocol.send.decode_batch` reads from ``data`` (for a store's
    ``put_prepared``) and each message's ``UNIQ_KEY`` (None where it has none), without a
    :class:`~mqcore.message.Message` per record. None when a message is not plain: a
    malformed body, an empty body or one over ``limit`` bytes, properties that are not ASCII
    ``name\x01value\x02`` pairs with distinct non-empty names, or a name of
    :data:`SPECIAL_PROPERTIES`; the broker's general path then decodes, checks (and
    refuses, with its own error) or stores them. Every message accepted here passes the
    broker's checks of a sent message.

    In C when the speedups are built; :func:`py_prepare_sent_batch` is the reference.
    """
    if _c_prepare_sent_batch is not None:
        return _c_prepare_sent_batch(  # type: ignore[no-any-return]
            topic_head,
            data,
            limit,
            born_timestamp,
            reconsume_times,
            sys_flag,
            HEADER_SIZE,
            body_crc32,
            SPECIAL_PROPERTIES,
        )
    return py_prepare_sent_batch(topic_head, data, limit, born_timestamp, reconsume_times, sys_flag)


def py_prepare_sent_batch(
    topic_head: bytes,
    data: bytes | bytearray | memoryview,
    limit: int,
    born_timestamp: int,
    reconsume_times: int,
    sys_flag: int,
) -> tuple[list[Any], list[str | None]] | None:
    """:func:`prepare_sent_batch` in Python (the reference for the C ``prepare_sent_batch``
    of ``mqcore.protocol._protocol``)."""
    view = memoryview(data)
    out: list[Any] = []
    uniqs: list[str | None] = []
    special = SPECIAL_PROPERTIES
    pos, end = 0, len(view)
    fixed = _HEAD.size + _PROPS_LEN.size
    while pos < end:
        if end - pos < fixed:
            return None
        size, _magic, _crc, flag, body_len = _HEAD.unpack_from(view, pos)
        body_at = pos + _HEAD.size
        props_at = body_at + body_len
        if body_len < 0 or size < fixed or props_at + 2 > end:
            return None
        (props_len,) = _PROPS_LEN.unpack_from(view, props_at)
        stop = props_at + 2 + props_len
        if props_len < 0 or stop != pos + size or stop > end:
            return None
        if not 0 < body_len <= limit:
            return None
        raw = bytes(view[props_at + 2 : stop])
        tags = keys = uniq = None
        kept: list[bytes] = []
        if raw:
            if not raw.isascii() or not raw.endswith(b"\x02"):
                return None
            items = raw[:-1].split(b"\x02")
            if len(items) > _MAX_PROPERTIES:
                return None
            names: set[bytes] = set()
            for item in items:
                name, sep, value = item.partition(b"\x01")
                if not sep or not name or b"\x01" in value or name in names or name in special:
                    return None
                names.add(name)
                if name == b"TAGS":
                    tags = value
                elif name == b"KEYS":
                    keys = value
                else:
                    kept.append(item + b"\x02")
                    if name == b"UNIQ_KEY":
                        uniq = value.decode()
        # The stored properties: the others in the sent order, then tags and keys (as the
        # record of a decoded message writes its fields); an empty tag or key is no field.
        if tags:
            kept.append(b"TAGS\x01" + tags + b"\x02")
        if keys:
            kept.append(b"KEYS\x01" + keys + b"\x02")
        text = b"".join(kept)
        trailer = b"".join((topic_head, _U16.pack(len(text)), text))
        body = bytes(view[body_at:props_at])
        out.append(
            (
                HEADER_SIZE + body_len + len(trailer),
                body,
                trailer,
                body_crc32(body) & 0x7FFFFFFF,
                flag,
                sys_flag,
                born_timestamp,
                reconsume_times,
                0,
                string_hash_code(tags.decode()) if tags else 0,
                keys.decode() if keys else None,
            )
        )
        uniqs.append(uniq)
        pos = stop
    if not out:
        return None
    return out, uniqs
