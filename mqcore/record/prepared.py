"""A prepared record: the parts of one record that do not depend on where it is stored.

:func:`mqcore.codec.prepare` returns them (and the Spark sink builds them from Arrow), a
store stamps offsets and times into them with :func:`mqcore.codec.pack`. They are plain
tuples laid out as :class:`Prepared` (building a named tuple per message would cost a
second allocation on the hot path): read a field with its index, ``p[P_KEYS]``, or with
the getters below, never with a bare number.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any, NamedTuple

__all__ = [
    "BATCH_SHARED",
    "P_BODY",
    "P_BODY_CRC",
    "P_BORN_TIMESTAMP",
    "P_FLAG",
    "P_KEYS",
    "P_PREPARED_TRANSACTION_OFFSET",
    "P_RECONSUME_TIMES",
    "P_SIZE",
    "P_SYS_FLAG",
    "P_TAGS_CODE",
    "P_TRAILER",
    "Prepared",
    "body_of",
    "keys_of",
    "size_of",
    "tags_code_of",
    "with_tags_code",
]


class Prepared(NamedTuple):
    """The fields of a prepared record, in order."""

    size: int  # total record size
    body: bytes
    trailer: bytes  # topic length, topic, properties length, properties
    body_crc: int
    flag: int
    sys_flag: int
    born_timestamp: int
    reconsume_times: int
    prepared_transaction_offset: int
    tags_code: int  # what the record's consume-queue unit holds
    keys: str | None  # the message keys, for the key index


P_SIZE = 0
P_BODY = 1
P_TRAILER = 2
P_BODY_CRC = 3
P_FLAG = 4
P_SYS_FLAG = 5
P_BORN_TIMESTAMP = 6
P_RECONSUME_TIMES = 7
P_PREPARED_TRANSACTION_OFFSET = 8
P_TAGS_CODE = 9
P_KEYS = 10
#: The fields every record of one prepare() call shares (sys flag .. transaction offset).
BATCH_SHARED = slice(P_SYS_FLAG, P_TAGS_CODE)

size_of = itemgetter(P_SIZE)
body_of = itemgetter(P_BODY)
tags_code_of = itemgetter(P_TAGS_CODE)
keys_of = itemgetter(P_KEYS)


def with_tags_code(p: Any, code: int) -> tuple[Any, ...]:
    """``p`` with its tags code replaced (a deliver time, for the schedule topic)."""
    return (*p[:P_TAGS_CODE], code, *p[P_TAGS_CODE + 1 :])
