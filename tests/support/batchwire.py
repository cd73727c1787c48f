"""A SEND_BATCH_MESSAGE body written by hand, for the tests of the batch paths."""

from __future__ import annotations

import struct


def raw_batch(entries: list[tuple[int, bytes, bytes]]) -> bytes:
    """The batch body of ``(flag, body, properties text)`` entries, each in RocketMQ's
    batch record layout (size, magic, body CRC, flag, body length, body, properties length,
    properties); magic and CRC are written as 0."""
    out = b""
    for flag, body, props in entries:
        size = 20 + len(body) + 2 + len(props)
        out += struct.pack(">iiiii", size, 0, 0, flag, len(body)) + body
        out += struct.pack(">h", len(props)) + props
    return out
