"""The consume-queue unit: 20 bytes per message of a queue, big-endian.

=====  ======  ================================================================
bytes  struct  field
=====  ======  ================================================================
8      q       commit-log offset of the record (``UNIT_POS_OFFSET``)
4      i       size of the record (``UNIT_POS_SIZE``)
8      q       tags hash code (``UNIT_POS_TAGS_CODE``); in the schedule and timer
               topics, the deliver time (see :data:`MIN_DELIVER_CODE`)
=====  ======  ================================================================

Both stores keep these units (the mmap store in its consume-queue files, the LMDB store one
item per put batch); the timer wheel and the Spark source read them.
"""

from __future__ import annotations

import functools
import struct

__all__ = [
    "MAX_DELIVER_DIGITS",
    "MIN_DELIVER_CODE",
    "UNIT",
    "UNIT_POS_OFFSET",
    "UNIT_POS_SIZE",
    "UNIT_POS_TAGS_CODE",
    "UNIT_SIZE",
    "sizes_struct",
    "units_struct",
]

#: One unit: commit-log offset, record size, tags hash code.
UNIT = struct.Struct(">qiq")
UNIT_SIZE = UNIT.size  # 20
UNIT_POS_OFFSET = 0
UNIT_POS_SIZE = 8
UNIT_POS_TAGS_CODE = 12
#: A tags code at or above this is a deliver time (ms since the epoch, so at least 2**31),
#: below it a tag's hash code (a 32-bit int): how a timer unit says whether its record must
#: be read for its deliver time.
MIN_DELIVER_CODE = 1 << 31
#: A deliver time written in a record's properties takes 1 to this many digits to become a
#: unit's tags code (any longer may not fit the signed 64-bit field).
MAX_DELIVER_DIGITS = 18


@functools.lru_cache(maxsize=1024)
def units_struct(count: int) -> struct.Struct:
    """Packs or unpacks ``count`` units in one call (flat: offset, size, code, offset...)."""
    return struct.Struct(">" + "qiq" * count)


@functools.lru_cache(maxsize=1024)
def sizes_struct(count: int) -> struct.Struct:
    """Unpacks only the record sizes of ``count`` units in one call."""
    return struct.Struct(">" + "8xi8x" * count)
