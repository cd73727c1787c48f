"""A pull's answer as both sides see it: RocketMQ's response header and the stored records."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from mqcore.message import MessageExt
from mqcore.protocol.codes import ResponseCode

__all__ = ["PullResponse", "decode_records"]


def decode_records(records: Iterable[bytes | bytearray | memoryview]) -> list[MessageExt]:
    """Views over stored records, decoded field by field only when read."""
    return [MessageExt(r) for r in records]


@attrs.frozen
class PullResponse:
    """A pull as the broker answers it: RocketMQ's response code and header, and the records.

    ``records`` are the stored bytes, exactly as the commit log holds them; :attr:`messages`
    decodes them on first access (lazily, field by field).
    """

    code: ResponseCode
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: Sequence[bytes | bytearray | memoryview] = attrs.field(factory=list)
    suggest_which_broker_id: int = 0
    _decoded: list[list[MessageExt]] = attrs.field(factory=list, eq=False, repr=False)

    @property
    def messages(self) -> list[MessageExt]:
        """The records as :class:`~mqcore.message.MessageExt` views (decoded once)."""
        if not self._decoded:
            self._decoded.append(decode_records(self.records))
        return self._decoded[0]
