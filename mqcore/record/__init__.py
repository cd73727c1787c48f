"""The record and queue formats, in one place: what the bytes of a store mean.

- :mod:`~mqcore.record.layout`: RocketMQ's commit-log record (version 1, IPv4 hosts): the
  fixed header, the position of each field in the record and its index in the unpacked
  header, the magic codes, the size limits;
- :mod:`~mqcore.record.sysflag`: the bits of a record's sys flag (``COMPRESSED_FLAG``...);
- :mod:`~mqcore.record.unit`: the 20-byte consume-queue unit;
- :mod:`~mqcore.record.prepared`: the fields of a prepared record (what
  :func:`mqcore.codec.prepare` returns and the stores append), by name.

This package is the bottom of the record layer: it imports nothing else of mqcore. The value
types (:mod:`mqcore.message`), the codec, the stores, the schedulers and the Spark source
read these definitions; the C extensions read them from ``mqcore/record/record.h``, which
``tests/test_record.py`` holds to the values here.
"""

from __future__ import annotations

from .layout import (
    BLANK_MAGIC_CODE,
    BLANK_SIZE,
    HEADER,
    HEADER_SIZE,
    MAX_PROPERTIES_SIZE,
    MAX_TOPIC_LENGTH,
    MESSAGE_MAGIC_CODE,
    MIN_RECORD_SIZE,
    SIZE_MAGIC,
)
from .prepared import Prepared
from .sysflag import COMPRESSED_FLAG, V6_FLAGS
from .unit import UNIT, UNIT_SIZE

__all__ = [
    "BLANK_MAGIC_CODE",
    "BLANK_SIZE",
    "COMPRESSED_FLAG",
    "HEADER",
    "HEADER_SIZE",
    "MAX_PROPERTIES_SIZE",
    "MAX_TOPIC_LENGTH",
    "MESSAGE_MAGIC_CODE",
    "MIN_RECORD_SIZE",
    "SIZE_MAGIC",
    "UNIT",
    "UNIT_SIZE",
    "V6_FLAGS",
    "Prepared",
]
