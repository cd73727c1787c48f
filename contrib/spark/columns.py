"""Arrow columns of stored records, one call per batch: no Python loop per record.

A batch is a list of *spans*: ``(buffer, units, base)``. With ``units`` (consume-queue units,
:mod:`mqcore.record.unit`) record ``i`` lies at its
commit-log offset minus ``base`` in ``buffer``; with ``units=None`` the buffer holds records
back to back. :func:`record_columns` checks every record's layout, picks those before
``end_offset`` (queue offset) and inside the store-time range, and returns the Arrow
buffers of the wanted columns: fixed-width ones read at their header positions, the others
as offsets + data (tags, keys and the properties map parsed from the property string).
Bodies are copied once, from the store's buffer into the column; a body its sender
compressed (sys flag bit 0, as clients send bodies over 4 KiB) is inflated on the way, so
the column holds what was sent, as :attr:`mqcore.message.MessageExt.body` does.

It runs in C (the ``spark`` speedups' ``record_columns``) when the extension was built and
``MQCORE_NO_SPEEDUPS`` is unset; :func:`py_record_columns` is the reference, and the tests
hold both to the same bytes and the same errors. A record whose layout is broken raises
:class:`~mqcore.errors.StoreCorruptedError` naming its commit-log offset.
"""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from mqcore import speedups
from mqcore.errors import InvalidArgumentError, StoreCorruptedError
from mqcore.record.layout import (
    H_BODY_LENGTH,
    H_BORN_TIMESTAMP,
    H_PHYSICAL_OFFSET,
    H_QUEUE_ID,
    H_QUEUE_OFFSET,
    H_RECONSUME_TIMES,
    H_STORE_TIMESTAMP,
    H_SYS_FLAG,
    H_TOTAL_SIZE,
    HEADER,
    HEADER_SIZE,
    HOST_SIZE,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    POS_PHYSICAL_OFFSET,
    POS_STORE_HOST,
    SIZE_MAGIC,
)
from mqcore.record.sysflag import COMPRESSED_FLAG, V6_FLAGS
from mqcore.record.unit import UNIT, UNIT_SIZE

__all__ = [
    "COLUMNS",
    "SPEEDUPS",
    "Span",
    "TagsFilter",
    "build_batch",
    "py_record_columns",
    "record_columns",
    "wanted_mask",
]

#: Column names of the source's schema, in order (the bit of each in a wanted mask).
COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "msg_id",
    "tags",
    "keys",
    "properties",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
    "body",
)
#: ``(buffer, units or None, base)``: see the module docstring.
Span = tuple[Any, Any, int]
#: ``(tags codes, tags as UTF-8)``: keep records whose consume-queue unit holds one of the
#: codes and whose ``TAGS`` property is one of the tags (a pushed-down tag filter).
TagsFilter = tuple[tuple[int, ...], tuple[bytes, ...]]
_speedups = speedups.load("spark")
#: True when the C builder runs.
SPEEDUPS = _speedups is not None

_INDEX = {name: i for i, name in enumerate(COLUMNS)}
_Q = struct.Struct(">q")
_FIXED = (  # column, header field, array type code
    ("queue_id", H_QUEUE_ID, "i"),
    ("queue_offset", H_QUEUE_OFFSET, "q"),
    ("commitlog_offset", H_PHYSICAL_OFFSET, "q"),
    ("born_timestamp", H_BORN_TIMESTAMP, "q"),
    ("store_timestamp", H_STORE_TIMESTAMP, "q"),
    ("reconsume_times", H_RECONSUME_TIMES, "i"),
)
_STRINGS = ("topic", "msg_id", "tags", "keys", "body")
_PROPERTY_COLUMNS = ("tags", "keys", "properties")
for _code in ("i", "q"):
    assert array(_code).itemsize == (4 if _code == "i" else 8)  # Arrow's int32 / int64


def wanted_mask(names: Sequence[str]) -> int:
    """The bit mask of columns ``names`` (each one of :data:`COLUMNS`)."""
    mask = 0
    for name in names:
        mask |= 1 << _INDEX[name]
    return mask


def _corrupt(offset: int, reason: str) -> StoreCorruptedError:
    return StoreCorruptedError(f"record at commit-log offset {offset}: {reason}", offset=offset)


def _check(buf: Any, pos: int, avail: int, usize: int | None, offset: int) -> tuple[Any, ...]:
    """The unpacked header of the record at ``pos``, its layout checked (C's check_one)."""
    if avail < MIN_RECORD_SIZE:
        raise _corrupt(
            offset, f"truncated: {avail} bytes left, a record takes at least {MIN_RECORD_SIZE}"
        )
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if usize is not None and size != usize:
        raise _corrupt(offset, f"its header says {size} bytes, its consume-queue unit {usize}")
    if magic != MESSAGE_MAGIC_CODE:
        raise _corrupt(offset, f"bad magic code 0x{magic & 0xFFFFFFFF:08X}")
    if size < MIN_RECORD_SIZE:
        raise _corrupt(offset, f"impossible record size {size}")
    if size > avail:
        raise _corrupt(offset, f"{size} bytes long, only {avail} bytes left")
    h = HEADER.unpack_from(buf, pos)
    if h[H_SYS_FLAG] & V6_FLAGS:
        raise _corrupt(offset, "IPv6 hosts, which mqcore does not read")
    body_len = h[H_BODY_LENGTH]
    if body_len < 0 or MIN_RECORD_SIZE + body_len > size:
        raise _corrupt(offset, f"bad body length {body_len}")
    tlen = buf[pos + HEADER_SIZE + body_len]
    ppos = HEADER_SIZE + body_len + 1 + tlen
    if ppos + 2 > size:
        raise _corrupt(offset, f"bad topic length {tlen}")
    plen = (buf[pos + ppos] << 8) | buf[pos + ppos + 1]
    if ppos + 2 + plen != size:
        raise _corrupt(offset, f"fields add up to {ppos + 2 + plen} bytes, header says {size}")
    return h


def inflate(data: bytes, offset: int) -> bytes:
    """The body ``data`` of the record at commit-log ``offset``, stored compressed, inflated.

    Both builders call it (the C one through the callable it is given), so a body that is
    flagged compressed but does not inflate raises the same error from each.
    """
    try:
        return zlib.decompress(data)
    except zlib.error as exc:
        raise _corrupt(
            offset, f"its body is flagged compressed but is not zlib data ({exc})"
        ) from None


def _tag(text: bytes) -> bytes | None:
    """The last TAGS value of a property string (None without one)."""
    found = None
    for item in text.split(b"\x02"):
        if item.startswith(b"TAGS\x01"):
            found = item[5:]
    return found


def _utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def _strings(
    values: list[bytes] | list[bytes | None], nullable: bool = False
) -> tuple[bytes, bytes, bytes | None]:
    """(offsets, data, validity bitmap when ``nullable`` else None) of a string column."""
    offsets = array("i", [0])
    at = 0
    valid = bytearray((len(values) + 7) // 8)
    for i, value in enumerate(values):
        if value is not None:
            at += len(value)
            valid[i >> 3] |= 1 << (i & 7)
        offsets.append(at)
    data = b"".join(v for v in values if v is not None)
    return offsets.tobytes(), data, bytes(valid) if nullable else None


def py_record_columns(
    spans: list[Span],
    wanted: int,
    ts_low: int | None,
    ts_high: int | None,
    end_offset: int,
    error: Any = StoreCorruptedError,
    tags: TagsFilter | None = None,
) -> tuple[int, bool, tuple[Any, ...]]:
    """:func:`record_columns` in Python: the reference for the C ``record_columns``."""
    # (record buffer, record position, header, body when it was inflated, else None)
    picked: list[tuple[Any, int, tuple[Any, ...], bytes | None]] = []
    codes = None if tags is None else set(tags[0])
    want = {name for name in COLUMNS if wanted >> _INDEX[name] & 1}
    want_body = "body" in want
    want_props = bool(want.intersection(_PROPERTY_COLUMNS))
    finished = False
    for buf, units, base in spans:
        view = memoryview(buf).cast("B")
        length = len(view)
        if units is None:
            locs: Any = None
        else:
            raw = memoryview(units).cast("B")
            if len(raw) % UNIT_SIZE:
                raise InvalidArgumentError(f"record_columns: units are {UNIT_SIZE} bytes each")
            locs = UNIT.iter_unpack(raw)
        pos = 0
        while True:
            usize: int | None = None
            if locs is not None:
                unit = next(locs, None)
                if unit is None:
                    break
                offset, usize = unit[0], unit[1]
                pos = offset - base
                if codes is not None and unit[2] not in codes:
                    continue  # the consume-queue stage: the record is not read
            elif pos >= length:
                break
            elif length - pos >= POS_PHYSICAL_OFFSET + 8:
                offset = _Q.unpack_from(view, pos + POS_PHYSICAL_OFFSET)[0]
            else:
                offset = base + pos
            if pos < 0 or pos > length:
                raise _corrupt(offset, f"outside its segment of {length} bytes")
            h = _check(view, pos, length - pos, usize, offset)
            if h[H_QUEUE_OFFSET] >= end_offset:
                finished = True
                break
            at = pos
            end = at + h[H_TOTAL_SIZE]
            if locs is None:
                pos = end
            ts = h[H_STORE_TIMESTAMP]
            if (ts_low is not None and ts < ts_low) or (ts_high is not None and ts >= ts_high):
                continue
            tpos = at + HEADER_SIZE + h[H_BODY_LENGTH]
            tlen = view[tpos]
            if tags is not None and _tag(bytes(view[tpos + 3 + tlen : end])) not in tags[1]:
                continue
            if "topic" in want and not _utf8(bytes(view[tpos + 1 : tpos + 1 + tlen])):
                raise _corrupt(offset, "the topic is not UTF-8")
            if want_props:
                props = bytes(view[tpos + 3 + tlen : end])
                if not _utf8(props):
                    raise _corrupt(offset, "the properties are not UTF-8")
            inflated = None
            if want_body and h[H_SYS_FLAG] & COMPRESSED_FLAG:
                inflated = inflate(bytes(view[at + HEADER_SIZE : tpos]), offset)
            picked.append((view, at, h, inflated))
        if finished:
            break
    n = len(picked)
    total_body = sum(h[H_BODY_LENGTH] if body is None else len(body) for _, _, h, body in picked)
    if total_body > 0x7FFFFFFF:
        raise OverflowError(
            f"record_columns: {total_body} body bytes in one batch, more than an Arrow binary "
            f"column takes; read fewer records per batch"
        )
    cols: list[Any] = [None] * len(COLUMNS)
    for name, field, code in _FIXED:
        if name in want:
            cols[_INDEX[name]] = array(code, [h[field] for _, _, h, _ in picked]).tobytes()
    texts: list[tuple[bytes, bytes, bytes]] = []  # topic, body, properties of each record
    for view, at, h, inflated in picked:
        bpos = at + HEADER_SIZE
        tpos = bpos + h[H_BODY_LENGTH]
        tlen = view[tpos]
        texts.append(
            (
                bytes(view[tpos + 1 : tpos + 1 + tlen]),
                bytes(view[bpos:tpos]) if inflated is None else inflated,
                bytes(view[tpos + 3 + tlen : at + h[H_TOTAL_SIZE]]),
            )
        )
    if "topic" in want:
        cols[_INDEX["topic"]] = _strings([t[0] for t in texts])
    if "body" in want:
        cols[_INDEX["body"]] = _strings([t[1] for t in texts])
    if "msg_id" in want:
        # The store host (ip, port) and the commit-log offset, as the header holds them.
        ids = [
            (
                bytes(v[at + POS_STORE_HOST : at + POS_STORE_HOST + HOST_SIZE])
                + bytes(v[at + POS_PHYSICAL_OFFSET : at + POS_PHYSICAL_OFFSET + 8])
            )
            .hex()
            .upper()
            .encode()
            for v, at, _, _ in picked
        ]
        cols[_INDEX["msg_id"]] = _strings(ids)
    if want_props:
        tag_col: list[bytes | None] = []
        key_col: list[bytes | None] = []
        map_offsets = array("i", [0])
        names: list[bytes] = []
        values: list[bytes] = []
        for _, _, text in texts:
            tag: bytes | None = None
            key: bytes | None = None
            for item in text.split(b"\x02"):
                pname, sep, pvalue = item.partition(b"\x01")
                if not sep:
                    continue  # not name\x01value: skipped, as RocketMQ does
                if pname == b"TAGS":
                    tag = pvalue
                elif pname == b"KEYS":
                    key = pvalue
                elif pname != b"DELAY":
                    names.append(pname)
                    values.append(pvalue)
            tag_col.append(tag)
            key_col.append(key)
            map_offsets.append(len(names))
        if "tags" in want:
            cols[_INDEX["tags"]] = _strings(tag_col, nullable=True)
        if "keys" in want:
            cols[_INDEX["keys"]] = _strings(key_col, nullable=True)
        if "properties" in want:
            name_off, name_data, _ = _strings(names)
            value_off, value_data, _ = _strings(values)
            cols[_INDEX["properties"]] = (
                map_offsets.tobytes(),
                name_off,
                name_data,
                value_off,
                value_data,
            )
    return n, finished, tuple(cols)


def record_columns(
    spans: list[Span],
    wanted: int,
    ts_low: int | None = None,
    ts_high: int | None = None,
    end_offset: int = 2**63 - 1,
    *,
    tags: TagsFilter | None = None,
    python: bool = False,
) -> tuple[int, bool, tuple[Any, ...]]:
    """``(rows, done, columns)``: the Arrow buffers of the ``wanted`` columns of the records
    in ``spans`` before queue offset ``end_offset`` (``done`` when one at or past it was met)
    with a store time in ``[ts_low, ts_high)``.

    Each column is ``None`` when not wanted; fixed-width ones are one ``bytes``; strings are
    ``(offsets, data, validity or None)``; properties ``(map offsets, key offsets, key data,
    value offsets, value data)``. ``tags`` keeps only records with one of those tags, checked
    on the consume-queue unit's tags code (units spans) and then on the property string,
    before the body is touched. ``python=True`` runs the reference implementation.
    """
    if SPEEDUPS and not python:
        assert _speedups is not None
        return _speedups.record_columns(  # type: ignore[no-any-return]
            spans, wanted, ts_low, ts_high, end_offset, StoreCorruptedError, tags, inflate
        )
    return py_record_columns(spans, wanted, ts_low, ts_high, end_offset, tags=tags)


def _string_array(kind: pa.DataType, n: int, col: tuple[bytes, bytes, bytes | None]) -> pa.Array:
    offsets, data, valid = col
    buffers = [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets)]
    return pa.Array.from_buffers(kind, n, [*buffers, pa.py_buffer(data)])


def build_batch(
    spans: list[Span],
    schema: pa.Schema,
    *,
    ts_low: int | None = None,
    ts_high: int | None = None,
    end_offset: int = 2**63 - 1,
    tags: TagsFilter | None = None,
    python: bool = False,
) -> tuple[pa.RecordBatch, bool]:
    """The Arrow batch (columns of ``schema``) of the records in ``spans``, and ``done``.

    See :func:`record_columns` for the arguments.
    """
    names = schema.names
    n, done, cols = record_columns(
        spans, wanted_mask(names), ts_low, ts_high, end_offset, tags=tags, python=python
    )
    arrays = []
    for name in names:
        kind = schema.field(name).type
        col = cols[_INDEX[name]]
        if name == "properties":
            map_off, key_off, key_data, value_off, value_data = col
            entries = len(key_off) // 4 - 1
            keys = _string_array(pa.string(), entries, (key_off, key_data, None))
            values = _string_array(pa.string(), entries, (value_off, value_data, None))
            offsets = pa.Array.from_buffers(pa.int32(), n + 1, [None, pa.py_buffer(map_off)])
            arrays.append(pa.MapArray.from_arrays(offsets, keys, values, type=kind))
        elif name in _STRINGS:
            arrays.append(_string_array(kind, n, col))
        else:
            arrays.append(pa.Array.from_buffers(kind, n, [None, pa.py_buffer(col)]))
    return pa.RecordBatch.from_arrays(arrays, schema=schema), done
