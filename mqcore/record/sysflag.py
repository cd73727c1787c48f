"""The bits of a record's sys flag (RocketMQ's ``MessageSysFlag``) that mqcore reads or writes."""

from __future__ import annotations

__all__ = ["BORNHOST_V6_FLAG", "COMPRESSED_FLAG", "STOREHOSTADDRESS_V6_FLAG", "V6_FLAGS"]

#: The body is zlib-compressed (clients compress single bodies over 4 KiB); readers inflate it.
COMPRESSED_FLAG = 0x1
#: The born host is IPv6 (16 + 4 bytes): a layout mqcore neither writes nor reads.
BORNHOST_V6_FLAG = 0x1 << 4
#: The store host is IPv6: the same.
STOREHOSTADDRESS_V6_FLAG = 0x1 << 5
#: Either host IPv6: such a record is refused as unreadable.
V6_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
