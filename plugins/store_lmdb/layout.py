"""Key and value layout of the LMDB store's sub-databases (format version 2).

One LMDB environment holds four named sub-databases. The commit log and the consume
queues keep **one LMDB item per put batch**, not one per message:

=============  =============================================  =================================
name           key                                            value
=============  =============================================  =================================
``commitlog``  the batch's first commit-log offset, 8 bytes     the batch's records in the codec
               big-endian                                     layout, concatenated (exactly the
                                                              buffer ``codec.pack`` returned)
``cq``         topic (length-prefixed), queue id 4, the        the batch's units concatenated:
               batch's LAST queue offset 8                    commit-log offset 8, size 4, tags
                                                              hash code 8 each (big-endian)
``keyindex``   topic (length-prefixed), message key            the record's own commit-log offset
                                                              8 (dupsort: oldest first)
``meta``       ``b"version"``; ``b"q"`` + topic + queue id       format version; ``b""`` for a
                                                              queue, or once retention deleted
                                                              some of its items, the offset
                                                              after the last one deleted 8
=============  =============================================  =================================

Why per batch: a put is one encode (``codec.pack``) and one write transaction anyway. Each
LMDB item costs a B-tree insert when written and a cursor step when read, and each costs
Python work (a key, a tuple, a slice, a call); per batch, that work is paid once for 32
messages instead of 32 times. A put is two inserts whatever its size, and a get reads one
consume-queue item and one commit-log item for a whole pull, copies the records it returns
out of LMDB once, and hands out views into that copy. What remains per message is what
LMDB does per byte (copying pages), the same for any layout.

Keying a consume-queue item by its batch's *last* offset means ``set_range(prefix + X)``
lands directly on the item that holds queue offset ``X``: the first key >= X is the batch
ending at or after X. The batch's first offset is its key minus its unit count plus one.
A unit's commit-log offset minus the batch's first one (the first unit's) is the record's
position inside the commit-log item, so a unit locates its record without a search.

Retention deletes a batch's commit-log item, its consume-queue item and its key-index
entries in one transaction, oldest batches first. A queue whose items are all deleted
keeps its offsets through its meta entry: min and max offset are then both the offset
after the last deleted unit, and the next put continues from there.

Big-endian integers make LMDB's byte order the numeric order, so a cursor walks a queue in
offset order and the commit log in append order. Commit-log offsets are logical byte
offsets: each record's offset is the previous record's offset plus its size, exactly as in
the mmap store, so message ids and ``commitlog_offset`` mean the same on both backends.
"""

from __future__ import annotations

import functools
import hashlib
import struct

from mqcore.errors import InvalidArgumentError
from mqcore.record.unit import UNIT as CQ_UNIT
from mqcore.record.unit import UNIT_SIZE, sizes_struct, units_struct

__all__ = [
    "CQ_DB",
    "CQ_UNIT",
    "FORMAT_VERSION",
    "KEYINDEX_DB",
    "LOG_DB",
    "META_DB",
    "OFFSET",
    "UNIT_SIZE",
    "cq_key",
    "index_key",
    "queue_meta_key",
    "queue_prefix",
    "sizes_struct",
    "split_queue_meta_key",
    "topic_prefix",
    "units_struct",
]

LOG_DB = b"commitlog"
CQ_DB = b"cq"
KEYINDEX_DB = b"keyindex"
META_DB = b"meta"
VERSION_KEY = b"version"
FORMAT_VERSION = b"2"
QUEUE_META = b"q"

OFFSET = struct.Struct(">Q")  # commit-log offsets and queue offsets as keys
QUEUE_ID = struct.Struct(">I")

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


@functools.lru_cache(maxsize=4096)
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
