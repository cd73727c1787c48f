"""Key and value layout of the LMDB store's sub-databases.

One LMDB environment holds four named sub-databases:

=============  ===========================================  ===================================
name           key                                          value
=============  ===========================================  ===================================
``commitlog``  commit-log offset, 8 bytes big-endian         one record in the codec layout
``cq``         topic (length-prefixed), queue id 4, offset 8  unit: commit-log offset 8, size 4,
                                                            tags hash code 8 (big-endian)
``keyindex``   topic (length-prefixed), message key           commit-log offset 8 (dupsort, so
                                                            the values of a key sort oldest first)
``meta``       ``b"version"``; ``b"q"`` + topic + queue id     format version; ``b""`` (a queue)
=============  ===========================================  ===================================

Big-endian integers make LMDB's byte order the numeric order, so a cursor walks a queue in
offset order and the commit log in append order. Commit-log offsets are logical byte
offsets: each record's offset is the previous record's offset plus its size, exactly as in
the mmap store, so message ids and ``commitlog_offset`` mean the same on both backends.
"""

from __future__ import annotations

import hashlib
import struct

from mqcore.errors import InvalidArgumentError

__all__ = [
    "CQ_DB",
    "CQ_UNIT",
    "FORMAT_VERSION",
    "KEYINDEX_DB",
    "LOG_DB",
    "META_DB",
    "OFFSET",
    "cq_key",
    "index_key",
    "queue_meta_key",
    "queue_prefix",
    "split_queue_meta_key",
    "topic_prefix",
]

LOG_DB = b"commitlog"
CQ_DB = b"cq"
KEYINDEX_DB = b"keyindex"
META_DB = b"meta"
VERSION_KEY = b"version"
FORMAT_VERSION = b"1"
QUEUE_META = b"q"

OFFSET = struct.Struct(">Q")  # commit-log offsets and queue offsets as keys
QUEUE_ID = struct.Struct(">I")
CQ_UNIT = struct.Struct(">qiq")  # commit-log offset, size, tags hash code: RocketMQ's 20 bytes

# LMDB refuses keys over 511 bytes; a long message key is indexed by its digest instead
# (lookups compare the record's own keys, so a digest can never return a wrong message).
_MAX_INDEX_KEY = 400
_DIGEST_MARK = b"\xff#"


def topic_prefix(topic: str) -> bytes:
    """The topic as it starts every key: one length byte, then its UTF-8 bytes."""
    raw = topic.encode()
    if not raw or len(raw) > 127:
        raise InvalidArgumentError(f"topic {topic!r} must be 1..127 bytes in UTF-8")
    return bytes((len(raw),)) + raw


def queue_prefix(topic: str, queue_id: int) -> bytes:
    """Key prefix of every consume-queue unit of ``(topic, queue_id)``."""
    if not 0 <= queue_id < 2**31:
        raise InvalidArgumentError(f"queue id {queue_id!r} must be in 0..2**31-1")
    return topic_prefix(topic) + QUEUE_ID.pack(queue_id)


def cq_key(prefix: bytes, queue_offset: int) -> bytes:
    """Consume-queue key of ``queue_offset`` under a :func:`queue_prefix`."""
    return prefix + OFFSET.pack(queue_offset)


def index_key(tprefix: bytes, key: str) -> bytes:
    """Key-index key of message key ``key`` under a :func:`topic_prefix`."""
    raw = key.encode()
    if len(raw) > _MAX_INDEX_KEY:
        raw = _DIGEST_MARK + hashlib.blake2b(raw, digest_size=32).digest()
    return tprefix + raw


def queue_meta_key(topic: str, queue_id: int) -> bytes:
    """Meta key recording that ``(topic, queue_id)`` exists."""
    return QUEUE_META + queue_prefix(topic, queue_id)


def split_queue_meta_key(key: bytes) -> tuple[str, int]:
    """The ``(topic, queue_id)`` a :func:`queue_meta_key` names."""
    tlen = key[1]
    topic = key[2 : 2 + tlen].decode()
    return topic, QUEUE_ID.unpack_from(key, 2 + tlen)[0]
