"""Records of a queue as *spans*, for readers that decode a whole batch in one call.

:meth:`~mqcore.store.Store.get_raw` returns one memoryview per record: fine for a pull, a
Python object per record for a bulk reader. A store may also offer ``get_spans`` (same
arguments, same status rules; the :class:`~mqcore.storecaps.SpanReader` capability)
returning :class:`RawSpans`: the records as a few spans
``(buffer, units, base)``, where

- ``units`` is ``None`` and ``buffer`` holds the records back to back, or
- ``units`` holds the records' consume-queue units (20 bytes each: commit-log offset, size,
  tags code, big-endian) and record ``i`` lies at its commit-log offset minus ``base`` in
  ``buffer`` (a commit-log segment, say, read in place).

Both bundled stores provide it; the Spark source (``mqcore.contrib.spark``) uses it when
present and falls back to ``get_raw`` otherwise. Buffers stay valid while the store is open.
"""

from __future__ import annotations

from typing import Any

import attrs

from mqcore.store import GetStatus

__all__ = ["RawSpans", "Span"]

#: ``(buffer, units or None, base)``; see the module docstring.
Span = tuple[Any, Any, int]


@attrs.frozen
class RawSpans:
    """Like :class:`~mqcore.store.RawGetResult`, with the records as spans.

    ``count`` is the number of records the spans hold.
    """

    status: GetStatus
    spans: list[Span]
    count: int
    next_offset: int
    min_offset: int
    max_offset: int
