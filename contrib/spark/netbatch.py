"""Arrow batches into SEND_BATCH_MESSAGE bodies, without a :class:`~mqcore.message.Message`
per row: the network sink's counterpart of :mod:`.writing`.

A batch body is what RocketMQ's ``MessageDecoder.encodeMessages`` writes (see
:mod:`mqcore.protocol.send`): per message ``totalSize | magic 0 | bodyCRC 0 | flag 0 |
bodyLength | body | propertiesLength | properties``. A row's properties are its user
properties (in map order), ``REPLAY_ID`` (from a ``commitlog_offset`` column, unless the row
names one), ``UNIQ_KEY`` (unless the row has one), ``TAGS`` and ``KEYS``.

``UNIQ_KEY`` is deterministic: the write's prefix (20 hex digits: the write id and the
partition, see :func:`uniq_prefix`) and the row's number in its task as 12 hex digits, 32
upper-case hex digits as RocketMQ's ids. A retried task sends its rows with the same keys,
so consumers can drop the duplicates.

One C call (``arrow_batches`` of ``mqcore.contrib.spark._arrow``) builds the bodies of a
queue's rows; :func:`py_arrow_batches` is its reference, which the tests hold it to. Both
answer None when a row needs :class:`~mqcore.message.Message`'s checks (the cases of
:mod:`.writing`); :func:`message_batches` then builds the bodies through messages.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from mqcore import speedups
from mqcore.errors import InvalidArgumentError
from mqcore.message import PROPERTY_UNIQ_KEY, Message, system_message
from mqcore.protocol.send import py_encode_batch, wire_properties
from mqcore.validation import check_copied_properties

from .writing import _columns

__all__ = [
    "SPEEDUPS",
    "arrow_batches",
    "batch_bodies",
    "message_batches",
    "py_arrow_batches",
    "uniq_prefix",
]

_speedups = speedups.load("spark")
#: True when batch bodies can be built in C.
SPEEDUPS = _speedups is not None and hasattr(_speedups, "arrow_batches")

_PROPERTIES = pa.map_(pa.string(), pa.string())
_HEAD = struct.Struct(">iiiii")
_MAX_PROPERTIES = 32767
_REPLAY_ID = "REPLAY_ID"  # sink.REPLAY_ID (sink imports pyspark; this module does not)
_ROW_DIGITS = 12
_ROW_LIMIT = 16**_ROW_DIGITS


def uniq_prefix(write_id: int, partition: int) -> str:
    """The first 20 hex digits of a row's ``UNIQ_KEY``: 48 bits of the write id, then the
    partition as 32 bits."""
    return f"{write_id & 0xFFFF_FFFF_FFFF:012X}{partition & 0xFFFF_FFFF:08X}"


def uniq_key(prefix: str, row: int) -> str:
    """The ``UNIQ_KEY`` of row ``row`` (its number in the task) under ``prefix``."""
    return f"{prefix}{row % _ROW_LIMIT:012X}"


def arrow_batches(
    batch: pa.RecordBatch,
    rows: Sequence[int],
    prefix: str,
    first_row: int,
    max_count: int,
    max_bytes: int,
) -> list[tuple[bytes, int]] | None:
    """Batch bodies for rows ``rows`` of ``batch`` (``(body, messages)`` each, at most
    ``max_count`` messages and ``max_bytes`` bytes unless one message is larger), row ``i``
    keyed ``uniq_key(prefix, first_row + i)``; None when a row needs the message path.
    In C when the speedups are built, else :func:`py_arrow_batches`."""
    if not rows:
        return []
    if not SPEEDUPS:
        return py_arrow_batches(batch, rows, prefix, first_row, max_count, max_bytes)
    assert _speedups is not None
    cols = _columns(batch)
    if cols is None:
        return None
    index = pa.array(rows, pa.int64())
    return _speedups.arrow_batches(  # type: ignore[no-any-return]
        batch.num_rows,
        *cols,
        index.buffers()[1],
        prefix.encode(),
        first_row,
        max_count,
        max_bytes,
    )


def _bytes(value: Any) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _separated(value: bytes) -> bool:
    return b"\x01" in value or b"\x02" in value


def py_arrow_batches(
    batch: pa.RecordBatch,
    rows: Sequence[int],
    prefix: str,
    first_row: int,
    max_count: int,
    max_bytes: int,
) -> list[tuple[bytes, int]] | None:
    """:func:`arrow_batches` in Python (the reference for the C ``arrow_batches``)."""
    if not rows:
        return []
    names = batch.schema.names
    if _columns(batch) is None:  # the C path's own test: the two agree on every batch
        return None
    n = batch.num_rows

    def values(name: str) -> list[Any]:
        return batch.column(name).to_pylist() if name in names else [None] * n

    bodies, tags, keys = values("body"), values("tags"), values("keys")
    props = values("properties")
    replay = values("commitlog_offset")
    elements: list[bytes] = []
    for i in rows:
        body = b"" if bodies[i] is None else _bytes(bodies[i])
        tag = None if tags[i] is None else _bytes(tags[i])
        key = None if keys[i] is None else _bytes(keys[i])
        if (tag is not None and _separated(tag)) or (key is not None and _separated(key)):
            return None
        pairs: list[tuple[bytes, bytes]] = []
        for name, value in props[i] or ():
            if name is None or value is None or not name:
                return None
            name_b, value_b = name.encode(), value.encode()
            if _separated(name_b) or _separated(value_b) or any(p[0] == name_b for p in pairs):
                return None
            pairs.append((name_b, value_b))
        named = {p[0] for p in pairs}
        if replay[i] is not None and _REPLAY_ID.encode() not in named:
            pairs.append((_REPLAY_ID.encode(), str(replay[i]).encode()))
        if PROPERTY_UNIQ_KEY.encode() not in named:
            pairs.append((PROPERTY_UNIQ_KEY.encode(), uniq_key(prefix, first_row + i).encode()))
        if tag:
            pairs.append((b"TAGS", tag))
        if key:
            pairs.append((b"KEYS", key))
        text = b"".join(name + b"\x01" + value + b"\x02" for name, value in pairs)
        if len(text) > _MAX_PROPERTIES:
            return None
        elements.append(
            _HEAD.pack(_HEAD.size + len(body) + 2 + len(text), 0, 0, 0, len(body))
            + body
            + len(text).to_bytes(2, "big")
            + text
        )
    return _cut(elements, max_count, max_bytes)


def _cut(elements: list[bytes], max_count: int, max_bytes: int) -> list[tuple[bytes, int]]:
    """Consecutive elements joined into bodies of at most ``max_count`` and ``max_bytes``."""
    out: list[tuple[bytes, int]] = []
    group: list[bytes] = []
    size = 0
    for element in elements:
        if group and (len(group) >= max_count or size + len(element) > max_bytes):
            out.append((b"".join(group), len(group)))
            group, size = [], 0
        group.append(element)
        size += len(element)
    if group:
        out.append((b"".join(group), len(group)))
    return out


def message_batches(
    batch: pa.RecordBatch,
    rows: Sequence[int],
    topic: str,
    prefix: str,
    first_row: int,
    max_count: int,
    max_bytes: int,
) -> list[tuple[bytes, int]]:
    """The bodies of :func:`arrow_batches` built through :class:`~mqcore.message.Message`,
    whose checks say what is wrong with a row (the message path)."""
    names = batch.schema.names
    n = batch.num_rows

    def values(name: str) -> list[Any]:
        return batch.column(name).to_pylist() if name in names else [None] * n

    bodies, tags, keys = values("body"), values("tags"), values("keys")
    props, replay = values("properties"), values("commitlog_offset")
    elements = []
    for i in rows:
        body = b"" if bodies[i] is None else _bytes(bodies[i])
        properties = dict(props[i] or ())
        if replay[i] is not None:
            properties.setdefault(_REPLAY_ID, str(replay[i]))
        properties.setdefault(PROPERTY_UNIQ_KEY, uniq_key(prefix, first_row + i))
        check_copied_properties(properties)
        msg: Message = system_message(
            topic=topic, body=body, tags=tags[i], keys=keys[i], properties=properties
        )
        size = len(wire_properties(msg).encode())
        if size > _MAX_PROPERTIES:
            raise InvalidArgumentError(
                f"row {first_row + i} of the task has {size} bytes of properties (tags and "
                f"keys included); a message holds at most {_MAX_PROPERTIES}"
            )
        elements.append(py_encode_batch([msg]))
    return _cut(elements, max_count, max_bytes)


def batch_bodies(
    batch: pa.RecordBatch,
    rows: Sequence[int],
    topic: str,
    prefix: str,
    first_row: int,
    max_count: int,
    max_bytes: int,
) -> list[tuple[bytes, int]]:
    """The batch bodies of rows ``rows``: built from the columns where they allow it, else
    through messages (see the module docstring)."""
    out = arrow_batches(batch, rows, prefix, first_row, max_count, max_bytes)
    if out is None:
        out = message_batches(batch, rows, topic, prefix, first_row, max_count, max_bytes)
    return out
