"""RocketMQ's commit-log record (version 1, IPv4 hosts), big-endian.

=====  ======  ==========================================  ===========================
bytes  struct  field                                       name (``POS_``/``H_`` + it)
=====  ======  ==========================================  ===========================
4      i       total size of the record                    ``TOTAL_SIZE``
4      i       magic code (``MESSAGE_MAGIC_CODE``;          ``MAGIC_CODE``
               ``BLANK_MAGIC_CODE`` ends a segment)
4      i       body CRC32, masked to 31 bits               ``BODY_CRC``
4      i       queue id                                    ``QUEUE_ID``
4      i       flag (the producer's)                       ``FLAG``
8      q       queue offset (in the consume queue)         ``QUEUE_OFFSET``
8      q       physical offset (in the commit log)         ``PHYSICAL_OFFSET``
4      i       sys flag (:mod:`mqcore.record.sysflag`)     ``SYS_FLAG``
8      q       born timestamp (ms)                         ``BORN_TIMESTAMP``
8      4s i    born host (IPv4, port)                      ``BORN_HOST`` (``IP``, ``PORT``)
8      q       store timestamp (ms)                        ``STORE_TIMESTAMP``
8      4s i    store host (IPv4, port)                     ``STORE_HOST`` (``IP``, ``PORT``)
4      i       reconsume times                             ``RECONSUME_TIMES``
8      q       prepared transaction offset                 ``PREPARED_TRANSACTION_OFFSET``
4+n    i ...   body length and body                        ``BODY_LENGTH``
1+n    b ...   topic length and topic (UTF-8)
2+n    h ...   properties length and ``name\\x01value\\x02``
               pairs (UTF-8)
=====  ======  ==========================================  ===========================

``POS_<name>`` is the byte position of a field in the record; ``H_<name>`` its index in the
tuple :data:`HEADER` unpacks (the 17 fields before the body: a host is two, ``H_BORN_IP``
and ``H_BORN_PORT``). The header ends with the body length, so the body starts at
:data:`HEADER_SIZE`, the topic after it, the properties after the topic.
"""

from __future__ import annotations

import struct

__all__ = [
    "BLANK_MAGIC_CODE",
    "BLANK_SIZE",
    "HEADER",
    "HEADER_SIZE",
    "HOST_SIZE",
    "H_BODY_CRC",
    "H_BODY_LENGTH",
    "H_BORN_IP",
    "H_BORN_PORT",
    "H_BORN_TIMESTAMP",
    "H_FLAG",
    "H_MAGIC_CODE",
    "H_PHYSICAL_OFFSET",
    "H_PREPARED_TRANSACTION_OFFSET",
    "H_QUEUE_ID",
    "H_QUEUE_OFFSET",
    "H_RECONSUME_TIMES",
    "H_STORE_IP",
    "H_STORE_PORT",
    "H_STORE_TIMESTAMP",
    "H_SYS_FLAG",
    "H_TOTAL_SIZE",
    "MAX_PROPERTIES_SIZE",
    "MAX_TOPIC_LENGTH",
    "MESSAGE_MAGIC_CODE",
    "MIN_RECORD_SIZE",
    "POS_BODY_CRC",
    "POS_BODY_LENGTH",
    "POS_BORN_HOST",
    "POS_BORN_TIMESTAMP",
    "POS_FLAG",
    "POS_MAGIC_CODE",
    "POS_PHYSICAL_OFFSET",
    "POS_PREPARED_TRANSACTION_OFFSET",
    "POS_QUEUE_ID",
    "POS_QUEUE_OFFSET",
    "POS_RECONSUME_TIMES",
    "POS_STORE_HOST",
    "POS_STORE_TIMESTAMP",
    "POS_SYS_FLAG",
    "POS_TOTAL_SIZE",
    "SIZE_MAGIC",
]

MESSAGE_MAGIC_CODE = -626843481  # 0xDAA320A7 as a signed Java int
BLANK_MAGIC_CODE = -875286124  # 0xCBD43194: the rest of the segment is empty
BLANK_SIZE = 8  # a blank marker is total size + magic code
MAX_TOPIC_LENGTH = 127  # the topic length is one signed byte in version-1 records
MAX_PROPERTIES_SIZE = 32767  # the properties length is one signed short

#: The fixed header, up to and including the body length.
HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")
HEADER_SIZE = HEADER.size  # 88: the body starts here
#: The smallest record: an empty body, topic length and property length.
MIN_RECORD_SIZE = HEADER_SIZE + 3
#: What every record and blank marker starts with: total size, magic code.
SIZE_MAGIC = struct.Struct(">ii")

# Byte positions of the header's fields in a record.
POS_TOTAL_SIZE = 0
POS_MAGIC_CODE = 4
POS_BODY_CRC = 8
POS_QUEUE_ID = 12
POS_FLAG = 16
POS_QUEUE_OFFSET = 20
POS_PHYSICAL_OFFSET = 28
POS_SYS_FLAG = 36
POS_BORN_TIMESTAMP = 40
POS_BORN_HOST = 48
POS_STORE_TIMESTAMP = 56
POS_STORE_HOST = 64  # 4 address bytes, then the port: 8 bytes in all
POS_RECONSUME_TIMES = 72
POS_PREPARED_TRANSACTION_OFFSET = 76
POS_BODY_LENGTH = 84
HOST_SIZE = 8  # an IPv4 host: address and port

# Indexes of the fields in the tuple HEADER unpacks.
H_TOTAL_SIZE = 0
H_MAGIC_CODE = 1
H_BODY_CRC = 2
H_QUEUE_ID = 3
H_FLAG = 4
H_QUEUE_OFFSET = 5
H_PHYSICAL_OFFSET = 6
H_SYS_FLAG = 7
H_BORN_TIMESTAMP = 8
H_BORN_IP = 9
H_BORN_PORT = 10
H_STORE_TIMESTAMP = 11
H_STORE_IP = 12
H_STORE_PORT = 13
H_RECONSUME_TIMES = 14
H_PREPARED_TRANSACTION_OFFSET = 15
H_BODY_LENGTH = 16
