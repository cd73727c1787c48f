"""Which of Spark's pushed-down filters the store answers itself, and how.

The store reads a queue by offset and can bisect it by store timestamp, and its consume queue
holds each message's tags hash code, so these predicates cost (almost) nothing to apply while
reading and are taken over from Spark entirely:

======================  ==========================================================
column                  predicates
======================  ==========================================================
``topic``, ``tags``     ``=``, ``IN``
``queue_id``            ``=``, ``IN``, ``<``, ``<=``, ``>``, ``>=``
``queue_offset``        ``=``, ``<``, ``<=``, ``>``, ``>=``
``store_timestamp``     ``=``, ``<``, ``<=``, ``>``, ``>=`` (milliseconds)
======================  ==========================================================

Everything else is handed back to Spark, which evaluates it after the scan.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

from .options import Bounds, ReadOptions

__all__ = ["push"]

_RANGE_COLUMNS = {
    "queue_id": "queue_range",
    "queue_offset": "offsets",
    "store_timestamp": "timestamps",
}
_SET_COLUMNS = {"topic": "only_topics", "tags": "tags"}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _range(f: Any) -> Bounds | None:
    """The half-open range a comparison with an integer selects, or None."""
    value = f.value
    if not _is_int(value):
        return None
    if isinstance(f, EqualTo):
        return Bounds(value, value + 1)
    if isinstance(f, GreaterThan):
        return Bounds(value + 1, None)
    if isinstance(f, GreaterThanOrEqual):
        return Bounds(value, None)
    if isinstance(f, LessThan):
        return Bounds(None, value)
    if isinstance(f, LessThanOrEqual):
        return Bounds(None, value + 1)
    return None


def _values(f: Any, kind: type) -> frozenset[Any] | None:
    """The set of values an ``=`` or ``IN`` selects, when they all have type ``kind``."""
    if isinstance(f, EqualTo):
        values: tuple[Any, ...] = (f.value,)
    elif isinstance(f, In):
        values = tuple(f.value)
    else:
        return None
    if not all(isinstance(v, kind) and not isinstance(v, bool) for v in values):
        return None
    return frozenset(values)


def push(opts: ReadOptions, filters: Iterable[Any]) -> tuple[ReadOptions, list[Any]]:
    """``opts`` narrowed by the filters the store answers, and the filters left for Spark."""
    left = []
    for f in filters:
        column = f.attribute[0] if len(f.attribute) == 1 else None
        if column in _RANGE_COLUMNS:
            field = _RANGE_COLUMNS[column]
            bounds = _range(f)
            if bounds is not None:
                current: Bounds = getattr(opts, field)
                changes: dict[str, Any] = {field: current.narrow(bounds.low, bounds.high)}
                opts = attrs.evolve(opts, **changes)
                continue
            if column == "queue_id":
                ids = _values(f, int)
                if ids is not None:
                    merged = ids if opts.queue_ids is None else opts.queue_ids & ids
                    opts = attrs.evolve(opts, queue_ids=merged)
                    continue
        elif column in _SET_COLUMNS:
            field = _SET_COLUMNS[column]
            values = _values(f, str)
            if values is not None:
                current_set = getattr(opts, field)
                narrowed: dict[str, Any] = {
                    field: values if current_set is None else current_set & values
                }
                opts = attrs.evolve(opts, **narrowed)
                continue
        left.append(f)
    return opts, left
