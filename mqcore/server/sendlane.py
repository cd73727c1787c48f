"""A plain single send straight to a prepared record, without a message object.

The served broker's direct branch stores a plain SEND_MESSAGE / SEND_MESSAGE_V2 (a normal
topic, a body, properties the broker stores as sent) as a one-message batch is stored: its
record prepared from the header's fields and the body by the batch reader's rules
(:func:`mqcore.batch.prepare_sent_batch`), then ``Broker.send_prepared``. A send that is not
plain gets None here and takes the general path, which decodes, checks and refuses it with
its own errors.

In C when the speedups are built; :func:`py_prepare_sent_single` is the reference (the send
written as the one message of a batch body and read by the batch reader's reference).
:func:`prepare_sent_group` does the same for the single sends one wake-up of the server
brings, header reading included, in one C call (:func:`py_prepare_sent_group` is its
reference).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from mqcore import speedups
from mqcore.batch import SPECIAL_PROPERTIES, py_prepare_sent_batch
from mqcore.broker.groupcommit import PreparedSend
from mqcore.codec import body_crc32
from mqcore.record.layout import HEADER_SIZE, MAX_TOPIC_LENGTH
from mqcore.store import TIMER_TOPIC

__all__ = [
    "GroupItem",
    "prepare_sent_group",
    "prepare_sent_single",
    "py_prepare_sent_group",
    "py_prepare_sent_single",
]

_protocol = speedups.load("protocol")
_c_prepare_sent_single = None if _protocol is None else _protocol.prepare_sent_single
_c_prepare_sent_group = None if _protocol is None else _protocol.prepare_sent_group

#: one single send of a group: its extFields, its body, its header's read plan (wire name,
#: attribute, kind, required per field: see mqcore.protocol.fields) and the sender's born host
GroupItem = tuple[Any, Any, tuple[tuple[str, str, int, bool], ...], str | None]

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


def prepare_sent_group(
    items: list[GroupItem], limit: int, kept: int
) -> list[PreparedSend | None] | None:
    """Each of the single sends ``items`` as a :class:`~mqcore.broker.groupcommit.PreparedSend`
    when it is plain (its header read in the plain shape clients write, no ``batch``, a body,
    a queue asked for, a topic that is neither a retry, DLQ nor the timer topic, and what
    :func:`prepare_sent_single` takes), None for one the general path serves; ``kept``: the
    ``sysFlag`` bits stored. None for the whole group when the C speedups are not built (the
    sends are served one by one, by the reference's path)."""
    if _c_prepare_sent_group is None:
        return None
    return _c_prepare_sent_group(  # type: ignore[no-any-return]
        items,
        limit,
        kept,
        TIMER_TOPIC,
        HEADER_SIZE,
        body_crc32,
        SPECIAL_PROPERTIES,
        PreparedSend,
    )


def py_prepare_sent_group(items: Sequence[GroupItem], limit: int, kept: int) -> list[Any]:
    """:func:`prepare_sent_group` in Python (the reference for the C ``prepare_sent_group`` of
    ``mqcore.protocol._protocol``)."""
    out: list[PreparedSend | None] = []
    for ext, body, plan, born_host in items:
        fields = _py_read_plan(ext, plan) if ext.__class__ is dict and body else None
        if (
            fields is None
            or not {"topic", "queue_id", "flag", "born_timestamp", "sys_flag"} <= fields.keys()
            or fields.get("batch")
        ):
            out.append(None)
            continue
        topic, queue_id = fields["topic"], fields["queue_id"]
        if queue_id < 0 or topic[:1] == "%" or topic == TIMER_TOPIC:
            out.append(None)
            continue
        got = py_prepare_sent_single(
            topic,
            body,
            fields.get("properties"),
            fields["flag"],
            limit,
            fields["born_timestamp"],
            fields.get("reconsume_times") or 0,
            fields["sys_flag"] & kept,
        )
        out.append(
            None if got is None else PreparedSend(topic, queue_id, got[0], got[1], born_host)
        )
    return out


_KIND_STRING, _KIND_INT, _KIND_LONG = 0, 1, 2
_INT64 = range(-(2**63), 2**63)


def _py_read_plan(ext: dict[str, Any], plan: Sequence[tuple[str, str, int, bool]]) -> Any:
    """The C ``read_fields`` in Python: a header's fields read from ``ext`` by ``plan`` when
    every value has the plain shape clients write, None otherwise."""
    kw: dict[str, Any] = {}
    for wire, attr, kind, required in plan:
        raw = ext.get(wire)
        if raw is None or (kind != _KIND_STRING and raw.__class__ is str and raw == ""):
            if required:
                return None
            continue
        value: Any
        if kind == _KIND_STRING:
            if raw.__class__ is not str:
                return None
            value = raw
        elif kind in (_KIND_INT, _KIND_LONG):
            if raw.__class__ is str:
                digits = raw[1:] if raw[:1] == "-" else raw
                if not (raw.isascii() and 0 < len(digits) <= 19 and digits.isdigit()):
                    return None
                value = int(raw)
            elif raw.__class__ is int:
                value = raw
            else:
                return None
            if value not in (_INT32 if kind == _KIND_INT else _INT64):
                return None
        elif raw is True or raw is False:
            value = raw
        elif raw.__class__ is str and raw in ("true", "false"):
            value = raw == "true"
        else:
            return None
        kw[attr] = value
    return kw
