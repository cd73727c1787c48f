"""RocketMQ's commit-log record format: encoding, checking and decoding records.

The layout itself (the header, the field positions, the magic codes, the limits, the sys
flag bits) is defined in :mod:`mqcore.record`; this module writes and reads it.

Encoding is split in two so that a store can do the expensive part outside its write lock:
:func:`prepare` turns messages into :class:`Prepared` parts (body CRC, topic and property
bytes), and :func:`pack` stamps offsets and times into one buffer for a whole batch.
"""

from __future__ import annotations

import functools
import operator
import socket
import struct
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from mqcore import speedups
from mqcore.errors import CodecError, CorruptRecordError, TruncatedRecordError
from mqcore.hostport import split_host_port

try:
    # ISA-L's CRC-32 is the same checksum as zlib's, several times faster on small bodies
    # (carry-less multiplication instead of table lookups): it is a third of the encoding
    # cost of a 1 KiB message with zlib.
    from isal.isal_zlib import crc32 as _crc32
except ImportError:  # pragma: no cover - isal is a dependency; zlib is the fallback
    from zlib import crc32 as _crc32
from mqcore.message import (
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
    Message,
    MessageExt,
    parse_properties,
)
from mqcore.record.layout import (
    BLANK_MAGIC_CODE,
    BLANK_SIZE,
    H_BODY_CRC,
    H_BODY_LENGTH,
    H_SYS_FLAG,
    HEADER,
    HEADER_SIZE,
    MAX_PROPERTIES_SIZE,
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    POS_BODY_CRC,
    POS_BODY_LENGTH,
    POS_SYS_FLAG,
    SIZE_MAGIC,
)
from mqcore.record.prepared import BATCH_SHARED, Prepared
from mqcore.record.sysflag import V6_FLAGS
from mqcore.record.unit import MAX_DELIVER_DIGITS
from mqcore.store import TIMER_TOPIC

_speedups = speedups.load("codec")

#: The CRC-32 of record bodies (ISA-L's when installed, else zlib's: the same checksum).
body_crc32: Callable[[bytes], int] = _crc32

# The layout's constants in this list are mqcore.record's, named here for the codec's users.
__all__ = [
    "BLANK_MAGIC_CODE",
    "HEADER_SIZE",
    "MAX_PROPERTIES_SIZE",
    "MAX_TOPIC_LENGTH",
    "MESSAGE_MAGIC_CODE",
    "Prepared",
    "check_record",
    "decode",
    "decode_message_id",
    "iter_records",
    "make_message_id",
    "message_id_prefix",
    "pack",
    "pack_blank",
    "prepare",
    "record_tags_code",
    "scan_valid",
    "string_hash_code",
    "tags_hash_code",
    "timer_tags_code",
]

_INT = struct.Struct(">i")
_U8 = struct.Struct(">B")
_U16 = struct.Struct(">H")
_MSGID = struct.Struct(">4siq")

# The header as pack() writes it: the fields that differ between the records of a batch,
# with the 48 bytes they share (sys flag .. prepared-transaction offset) as one field.
_MIDDLE = struct.Struct(">iq4siq4siiq")
_HEADER_SPLIT = struct.Struct(f">iiiiiqq{_MIDDLE.size}si")
assert _MIDDLE.size == POS_BODY_LENGTH - POS_SYS_FLAG and _HEADER_SPLIT.size == HEADER_SIZE


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


# 31**k mod 2**32 for k = 0, 1, ...: the weights of the units of a string, last unit first.
_POWERS_LEN = 256
_POWERS = [pow(31, k, 1 << 32) for k in range(_POWERS_LEN)]


def string_hash_code(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units), as a signed 32-bit int."""
    h = 0
    if text.isascii():
        data = text.encode()
        n = len(data)
        if n <= _POWERS_LEN:
            # sum(c_i * 31**(n-1-i)) in C-level loops: the key index hashes every key and
            # every producer's unique id, so a Python loop per character would show.
            return _int32(sum(map(operator.mul, reversed(data), _POWERS)))
        for ch in data:
            h = (31 * h + ch) & 0xFFFFFFFF
    else:
        # surrogatepass: a lone surrogate is one code unit, as in a Java string (messages
        # refuse them, but the C loops hash any str and must agree with this reference).
        data = text.encode("utf-16-be", "surrogatepass")
        for i in range(0, len(data), 2):
            h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return _int32(h)


def tags_hash_code(tags: str | None) -> int:
    """The tags code a consume-queue unit holds for ``tags`` (0 when there is no tag)."""
    return string_hash_code(tags) if tags else 0


def host_bytes(host: str) -> tuple[bytes, int]:
    """``"ip:port"`` -> (4 address bytes, port). A name is resolved; IPv6 is refused."""
    addr, port = split_host_port(host, "host", any_port=True) if ":" in host else (host, 0)
    try:
        packed = socket.inet_aton(addr)
    except OSError:
        try:
            packed = socket.inet_aton(socket.gethostbyname(addr))
        except OSError as exc:
            raise CodecError(f"host {host!r} is not an IPv4 address or resolvable name") from exc
    return packed, port


# Born hosts repeat (one per client connection): stores parse each once. Bounded, as clients
# come and go with new ports.
cached_host_bytes = functools.lru_cache(maxsize=4096)(host_bytes)


def message_id_prefix(store_host: tuple[bytes, int]) -> str:
    """The first 16 hex digits of every message id a store host makes (its ip and port);
    :func:`make_message_id` appends the commit-log offset's 16."""
    ip, port = store_host
    return f"{ip.hex().upper()}{port:08X}"


def make_message_id(store_ip: bytes, store_port: int, commitlog_offset: int) -> str:
    """RocketMQ's offset message id: 16 bytes (ip, port, offset) as upper-case hex."""
    return _MSGID.pack(store_ip, store_port, commitlog_offset).hex().upper()


def decode_message_id(msg_id: str) -> tuple[str, int]:
    """``msg_id`` -> (``"ip:port"`` of the store host, commit-log offset)."""
    try:
        raw = bytes.fromhex(msg_id)
    except ValueError:
        raw = b""
    if len(raw) != _MSGID.size:
        raise CodecError(f"message id {msg_id!r} is not 32 hex digits (store host + offset)")
    ip, port, offset = _MSGID.unpack(raw)
    return f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}:{port}", offset


# --- encoding --------------------------------------------------------------------------


def _trailer(topic: str, properties: str) -> bytes:
    tb = topic.encode()
    if not tb or len(tb) > MAX_TOPIC_LENGTH:
        raise CodecError(f"topic {topic!r} must be 1..{MAX_TOPIC_LENGTH} bytes in UTF-8")
    pb = properties.encode()
    if len(pb) > MAX_PROPERTIES_SIZE:
        raise CodecError(
            f"properties of a message to {topic!r} take {len(pb)} bytes; "
            f"the limit is {MAX_PROPERTIES_SIZE}"
        )
    return b"".join((_U8.pack(len(tb)), tb, _U16.pack(len(pb)), pb))


# Trailers (topic + property bytes) and tags codes repeat across batches: keep the last few
# thousand so that a steady stream of similar messages skips re-encoding them. Plain dicts are
# safe to share between threads under the GIL; they are cleared, not evicted, when full.
_TRAILER_CACHE: dict[tuple[str, str], bytes] = {}
_TAGS_CODE_CACHE: dict[str, int] = {}
_CACHE_LIMIT = 4096
# Topic -> trailer of a message with no properties at all (read by the C prepare loop).
_PLAIN_TRAILERS: dict[str, bytes] = {}


def _cached_trailer(topic: str, text: str) -> bytes:
    key = (topic, text)
    trailer = _TRAILER_CACHE.get(key)
    if trailer is None:
        trailer = _trailer(topic, text)
        if len(_TRAILER_CACHE) >= _CACHE_LIMIT:
            _TRAILER_CACHE.clear()
        _TRAILER_CACHE[key] = trailer
    return trailer


def _cached_tags_code(tags: str) -> int:
    code = _TAGS_CODE_CACHE.get(tags)
    if code is None:
        code = string_hash_code(tags)
        if len(_TAGS_CODE_CACHE) >= _CACHE_LIMIT:
            _TAGS_CODE_CACHE.clear()
        _TAGS_CODE_CACHE[tags] = code
    return code


def timer_tags_code(deliver: str | None, tags_code: int) -> int:
    """The consume-queue tags code of a record in the timer topic (``rmq_sys_wheel_timer``):
    its deliver time, ``TIMER_OUT_MS``, when that is 1 to 18 ASCII digits, else ``tags_code``
    (the tag's hash code, as in any other topic).

    As RocketMQ keeps the deliver time in the tags code for its schedule topic, so the timer
    scheduler reads the consume queue alone. A real deliver time (ms since the epoch) is at
    least 2**31 while a tag's hash code is a 32-bit int, so a reader tells them apart: a code
    below 2**31 means "read the record" (a unit written before the deliver time was kept
    there, or a record without a usable ``TIMER_OUT_MS``; see
    :data:`mqcore.record.unit.MIN_DELIVER_CODE`).
    """
    if (
        deliver is not None
        and 0 < len(deliver) <= MAX_DELIVER_DIGITS
        and deliver.isascii()
        and deliver.isdigit()
    ):
        return int(deliver)
    return tags_code


def record_tags_code(msg: MessageExt) -> int:
    """The tags code a stored record's consume-queue unit holds, as its put wrote it (the
    schedule topic's deliver times by delay level aside, which need the store's levels):
    its tag's hash code, or in the timer topic its deliver time (:func:`timer_tags_code`).
    For the paths that rebuild units from the commit log."""
    code = tags_hash_code(msg.tags)
    if msg.topic == TIMER_TOPIC:
        return timer_tags_code(msg.get_property(PROPERTY_TIMER_OUT_MS), code)
    return code


def message_trailer(m: Message, topic: str) -> tuple[bytes, int]:
    """The topic-and-properties bytes that end ``m``'s record under ``topic``, and its tags
    hash code (0 without a tag; in the timer topic, see :func:`timer_tags_code`). Cached per
    (topic, property string)."""
    props = m.properties
    tags = m.tags
    keys = m.keys
    if not (props or tags or keys or m.delay_level):
        trailer = _TRAILER_CACHE.get((topic, "")) or _cached_trailer(topic, "")
        if len(_PLAIN_TRAILERS) >= _CACHE_LIMIT:
            _PLAIN_TRAILERS.clear()
        _PLAIN_TRAILERS[topic] = trailer
        return trailer, 0
    # Tags/keys/delay live in the property string; no intermediate dict.
    text = "".join([f"{k}\x01{v}\x02" for k, v in props.items()]) if props else ""
    if tags:
        text += f"TAGS\x01{tags}\x02"
        code = _TAGS_CODE_CACHE.get(tags)
        if code is None:
            code = _cached_tags_code(tags)
    else:
        code = 0
    if keys:
        text += f"KEYS\x01{keys}\x02"
    if m.delay_level:
        text += f"DELAY\x01{m.delay_level}\x02"
    if props and topic == TIMER_TOPIC:
        code = timer_tags_code(props.get(PROPERTY_TIMER_OUT_MS), code)
    if props and PROPERTY_UNIQ_KEY in props:
        # A producer's unique id makes every trailer unique: caching it would only evict
        # the trailers that do repeat.
        return _trailer(topic, text), code
    return _TRAILER_CACHE.get((topic, text)) or _cached_trailer(topic, text), code


def prepare(
    messages: Iterable[Message],
    born_timestamp: int,
    *,
    topic: str | None = None,
    reconsume_times: int = 0,
    sys_flag: int = 0,
) -> list[Prepared]:
    """Compute CRCs and encode topic and properties for each message (no offsets yet).

    Each item is a plain tuple laid out as :class:`Prepared` (index or unpack it; the field
    names are not attributes of it).

    ``topic`` overrides each message's own topic (a store writes under the topic it is
    asked to, e.g. the schedule topic for delayed messages). In the timer topic a message's
    tags code is its deliver time (:func:`timer_tags_code`).
    """
    if _speedups is not None:
        return _speedups.prepare(  # type: ignore[no-any-return]
            messages,
            born_timestamp,
            topic,
            reconsume_times,
            sys_flag,
            _crc32,
            message_trailer,
            _PLAIN_TRAILERS,
            TIMER_TOPIC,
            PROPERTY_TIMER_OUT_MS,
        )
    return py_prepare(
        messages, born_timestamp, topic=topic, reconsume_times=reconsume_times, sys_flag=sys_flag
    )


def py_prepare(
    messages: Iterable[Message],
    born_timestamp: int,
    *,
    topic: str | None = None,
    reconsume_times: int = 0,
    sys_flag: int = 0,
) -> list[Any]:
    """:func:`prepare` in Python: the reference for ``mqcore._codec.prepare``."""
    # Plain tuples in Prepared's field order: building the NamedTuple would cost a second
    # allocation per message, and every consumer unpacks or indexes them anyway.
    out: list[Any] = []
    append = out.append
    crc32 = _crc32
    header_size = HEADER_SIZE
    trailers = _TRAILER_CACHE
    plain_topic: str | None = None  # last topic seen with no properties at all ...
    plain_trailer = b""  # ... and its trailer
    for m in messages:
        body = m.body
        if body.__class__ is not bytes and not isinstance(body, bytes):
            body = bytes(body)
        keys = m.keys
        t = topic or m.topic
        if m.properties or m.tags or keys or m.delay_level:
            trailer, code = message_trailer(m, t)
        else:
            code = 0
            if t != plain_topic:
                plain_trailer = trailers.get((t, "")) or _cached_trailer(t, "")
                plain_topic = t
            trailer = plain_trailer
        append(
            (
                header_size + len(body) + len(trailer),
                body,
                trailer,
                crc32(body) & 0x7FFFFFFF,
                m.flag,
                sys_flag,
                born_timestamp,
                reconsume_times,
                0,
                code,
                keys,
            )
        )
    return out


def pack(
    prepared: Sequence[Prepared],
    *,
    queue_id: int,
    queue_offset: int,
    commitlog_offset: int,
    store_timestamp: int,
    store_host: tuple[bytes, int],
    born_host: tuple[bytes, int] | None = None,
) -> bytes:
    """Encode ``prepared`` as consecutive records starting at the given offsets (one buffer).

    ``prepared`` comes from one :func:`prepare` call (or a slice of one): its items share
    the sys flag, born timestamp, reconsume times and prepared-transaction offset.
    """
    if not prepared:
        return b""
    if len(prepared) > 1 and prepared[-1][BATCH_SHARED] != prepared[0][BATCH_SHARED]:
        raise CodecError("pack() takes the items of one prepare() call (or a slice of one)")
    born_ip, born_port = born_host or store_host
    store_ip, store_port = store_host
    return _pack_records(
        prepared if prepared.__class__ is list else list(prepared),
        queue_id,
        queue_offset,
        commitlog_offset,
        store_timestamp,
        store_ip,
        store_port,
        born_ip,
        born_port,
        MESSAGE_MAGIC_CODE,
    )


def py_pack_records(
    prepared: list[Any],
    queue_id: int,
    queue_offset: int,
    commitlog_offset: int,
    store_timestamp: int,
    store_ip: bytes,
    store_port: int,
    born_ip: bytes,
    born_port: int,
    magic: int,
) -> bytes:
    """The records of ``prepared`` back to back (the items of one :func:`prepare` call).

    The reference for ``mqcore._codec.pack``, which :func:`pack` uses when it was built.
    """
    first = prepared[0]
    if len(prepared) == 1:  # one message per put is common: one 17-field pack
        size, body, trailer, crc, flag, sflag, born, recon, ptx, _code, _keys = first
        header = HEADER.pack(
            size,
            magic,
            crc,
            queue_id,
            flag,
            queue_offset,
            commitlog_offset,
            sflag,
            born,
            born_ip,
            born_port,
            store_timestamp,
            store_ip,
            store_port,
            recon,
            ptx,
            len(body),
        )
        return b"".join((header, body, trailer))
    sflag, born, recon, ptx = first[BATCH_SHARED]
    # The 48 header bytes from the sys flag to the prepared-transaction offset are the same
    # for every record of a batch: packed once, they make each header a 9-field pack.
    middle = _MIDDLE.pack(
        sflag, born, born_ip, born_port, store_timestamp, store_ip, store_port, recon, ptx
    )
    hpack = _HEADER_SPLIT.pack
    parts: list[bytes] = []
    append = parts.append
    phys = commitlog_offset
    qoff = queue_offset
    # Unpacking the tuple beats indexing in this per-message loop.
    for size, body, trailer, crc, flag, _sf, _born, _recon, _ptx, _code, _keys in prepared:
        append(hpack(size, magic, crc, queue_id, flag, qoff, phys, middle, len(body)))
        append(body)
        append(trailer)
        phys += size
        qoff += 1
    return b"".join(parts)


_pack_records: Callable[..., bytes] = py_pack_records if _speedups is None else _speedups.pack


def pack_blank(size: int) -> bytes:
    """The end-of-segment marker filling ``size`` (>= 8) bytes: total size + blank magic."""
    return SIZE_MAGIC.pack(size, BLANK_MAGIC_CODE) + bytes(size - BLANK_SIZE)


def encode(
    message: Message,
    *,
    queue_id: int = 0,
    queue_offset: int = 0,
    commitlog_offset: int = 0,
    born_timestamp: int = 0,
    store_timestamp: int = 0,
    store_host: str = "127.0.0.1:10911",
    born_host: str | None = None,
    reconsume_times: int = 0,
) -> bytes:
    """Encode one message as a complete record (convenience; stores use prepare + pack)."""
    return pack(
        prepare([message], born_timestamp, reconsume_times=reconsume_times),
        queue_id=queue_id,
        queue_offset=queue_offset,
        commitlog_offset=commitlog_offset,
        store_timestamp=store_timestamp,
        store_host=host_bytes(store_host),
        born_host=host_bytes(born_host) if born_host else None,
    )


# --- decoding --------------------------------------------------------------------------

RECORD = 1
BLANK = 2


def check_record(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int | None = None,
    *,
    base_offset: int = 0,
    check_crc: bool = True,
) -> tuple[int, int]:
    """Validate the record at ``pos`` and return ``(kind, size)``; kind is RECORD or BLANK.

    ``base_offset`` is added to ``pos`` in error messages (pass a segment's start offset so
    errors name the commit-log offset). Raises :class:`TruncatedRecordError` when the record
    runs past ``end`` and :class:`CorruptRecordError` on a bad magic code, size or CRC.
    """
    limit = len(buf) if end is None else end
    where = base_offset + pos
    if pos + BLANK_SIZE > limit:
        raise TruncatedRecordError(
            f"record header at offset {where} is truncated ({limit - pos} bytes left)",
            offset=where,
        )
    size, magic = SIZE_MAGIC.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        if size < BLANK_SIZE or pos + size > limit:
            raise CorruptRecordError(
                f"bad blank marker size {size} at offset {where}", offset=where
            )
        return BLANK, size
    if magic != MESSAGE_MAGIC_CODE:
        raise CorruptRecordError(
            f"bad magic code 0x{magic & 0xFFFFFFFF:08X} at offset {where}", offset=where
        )
    if size < MIN_RECORD_SIZE:
        raise CorruptRecordError(f"impossible record size {size} at offset {where}", offset=where)
    if pos + size > limit:
        raise TruncatedRecordError(
            f"record at offset {where} needs {size} bytes, only {limit - pos} present",
            offset=where,
        )
    h = HEADER.unpack_from(buf, pos)
    if h[H_SYS_FLAG] & V6_FLAGS:
        raise CorruptRecordError(
            f"record at offset {where} uses IPv6 hosts, which mqcore does not read", offset=where
        )
    body_len = h[H_BODY_LENGTH]
    tpos = pos + HEADER_SIZE + body_len
    if body_len < 0 or tpos + 3 > pos + size:
        raise CorruptRecordError(f"bad body length {body_len} at offset {where}", offset=where)
    tlen = buf[tpos]
    ppos = tpos + 1 + tlen
    if ppos + 2 > pos + size:
        raise CorruptRecordError(f"bad topic length {tlen} at offset {where}", offset=where)
    plen = (buf[ppos] << 8) | buf[ppos + 1]
    if ppos + 2 + plen != pos + size:
        raise CorruptRecordError(
            f"record at offset {where}: fields add up to {ppos + 2 + plen - pos} bytes, "
            f"header says {size}",
            offset=where,
        )
    if check_crc:
        start = pos + HEADER_SIZE
        crc = _crc32(memoryview(buf)[start : start + body_len]) & 0x7FFFFFFF
        if crc != h[H_BODY_CRC]:
            raise CorruptRecordError(
                f"body CRC mismatch at offset {where}: stored {h[H_BODY_CRC]}, computed {crc}",
                offset=where,
            )
    return RECORD, size


# size, magic, body CRC, sys flag, body length: what the fast scan needs of a header.
_SCAN = struct.Struct(
    f">iii{POS_SYS_FLAG - POS_BODY_CRC - 4}xi{POS_BODY_LENGTH - POS_SYS_FLAG - 4}xi"
)


def scan_valid(buf: bytes | bytearray | memoryview, pos: int, limit: int) -> int:
    """Walk consecutive valid message records from ``pos``; return where the walk stopped.

    A record passes when :func:`check_record` (CRC on) would accept it as a message; the
    walk stops at the first one that does not, at a blank marker, or at ``limit``. Call
    :func:`check_record` at the returned position to learn what is there. This is the
    recovery scan's fast path: a few C calls per record instead of a full header decode.
    """
    view = memoryview(buf)
    unpack = _SCAN.unpack_from
    crc32 = _crc32
    magic_ok = MESSAGE_MAGIC_CODE
    min_size = MIN_RECORD_SIZE
    v6 = V6_FLAGS
    while pos + HEADER_SIZE <= limit:
        size, magic, crc, sys_flag, body_len = unpack(view, pos)
        end = pos + size
        if magic != magic_ok or size < min_size or end > limit or sys_flag & v6:
            break
        tpos = pos + HEADER_SIZE + body_len
        if body_len < 0 or tpos + 3 > end:
            break
        ppos = tpos + 1 + view[tpos]
        if ppos + 2 > end or ppos + 2 + ((view[ppos] << 8) | view[ppos + 1]) != end:
            break
        if crc32(view[pos + HEADER_SIZE : tpos]) & 0x7FFFFFFF != crc:
            break
        pos = end
    return pos


def body_crc_ok(view: memoryview, pos: int) -> bool:
    """Whether the body CRC stored in the record at ``pos`` of ``view`` matches its body.

    The cheap check of a record read back (``check_crc_on_read``): the body length and CRC
    fields and one CRC of the body, no other validation (on False, :func:`check_record`
    says what is wrong).
    """
    length = _INT.unpack_from(view, pos + POS_BODY_LENGTH)[0]
    body = view[pos + HEADER_SIZE : pos + HEADER_SIZE + length]
    return bool(_crc32(body) & 0x7FFFFFFF == _INT.unpack_from(view, pos + POS_BODY_CRC)[0])


def decode(buf: bytes | bytearray | memoryview, pos: int = 0, *, check: bool = False) -> MessageExt:
    """Decode the record at ``pos`` as a lazy :class:`MessageExt` (optionally validating it)."""
    if check:
        kind, _ = check_record(buf, pos)
        if kind != RECORD:
            raise CorruptRecordError(f"offset {pos} holds an end-of-segment marker", offset=pos)
    elif len(buf) - pos < HEADER_SIZE:
        raise TruncatedRecordError(f"record header at offset {pos} is truncated", offset=pos)
    return MessageExt(buf, pos)


def iter_records(
    buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None
) -> Iterator[MessageExt]:
    """Yield every record in ``buf[start:end]``, validated; stops at a blank marker."""
    pos = start
    limit = len(buf) if end is None else end
    while pos < limit:
        kind, size = check_record(buf, pos, limit)
        if kind == BLANK:
            return
        yield MessageExt(buf, pos)
        pos += size


def record_properties(buf: bytes | bytearray | memoryview, pos: int) -> dict[str, str]:
    """All properties of the record at ``pos`` (TAGS included) without touching the body."""
    body_len = _INT.unpack_from(buf, pos + POS_BODY_LENGTH)[0]
    tpos = pos + HEADER_SIZE + body_len
    ppos = tpos + 1 + buf[tpos]
    plen = (buf[ppos] << 8) | buf[ppos + 1]
    return parse_properties(bytes(buf[ppos + 2 : ppos + 2 + plen]).decode())


__all__ += ["BLANK", "RECORD", "encode", "host_bytes", "record_properties"]
