"""Per-batch layout shared by the stores: consume-queue units, record offsets, put results.

A put of ``n`` messages stores ``n`` records back to back. Each store then needs the
records' commit-log offsets, their 20-byte consume-queue units
(:data:`mqcore.record.unit.UNIT`) and one :class:`~mqcore.store.PutResult` per message. These
loops run once per message on the producer's hot path, so they run in C when the optional
``codec`` speedups were built (see :data:`SPEEDUPS` and :mod:`mqcore.speedups`); the Python
versions here are the reference, and the tests hold both to the same output.

Set ``MQCORE_NO_SPEEDUPS=1`` in the environment to run the pure-Python code.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import accumulate, repeat
from typing import Any

from mqcore import speedups
from mqcore.errors import InvalidArgumentError
from mqcore.message import Message
from mqcore.record.prepared import size_of, tags_code_of, with_tags_code
from mqcore.record.unit import UNIT
from mqcore.store import PutResult, deliver_timestamp
from mqcore.validation import REFUSABLE_PROPERTIES

__all__ = ["SPEEDUPS", "put_results", "units", "with_deliver_times"]

_speedups = speedups.load("codec")

#: True when the C versions of the batch loops (and of :func:`mqcore.codec.pack`) are used.
SPEEDUPS = _speedups is not None

_protocol = speedups.load("protocol")
_c_sent_prefix = None if _protocol is None else _protocol.sent_prefix


def plain_prefix(messages: Sequence[Message], topic: str, limit: int) -> int:
    """How many leading ``messages`` certainly pass the checks of a message sent to ``topic``
    with bodies of at most ``limit`` bytes, told on the plain rules alone in one C call
    (:func:`mqcore.validation.sent_fast_ok` is the reference, message by message);
    0 without the speedups. The broker and the producer check the rest one by one."""
    if _c_sent_prefix is None:
        return 0
    return int(_c_sent_prefix(messages, topic, limit, REFUSABLE_PROPERTIES))


_new_tuple = tuple.__new__
_QWORDS: dict[int, struct.Struct] = {}


def _qwords(count: int) -> struct.Struct:
    st = _QWORDS.get(count)
    if st is None:
        st = _QWORDS[count] = struct.Struct(f">{count}q")
    return st


def py_units(prepared: list[Any], start: int) -> tuple[bytes, list[int], int]:
    """:func:`units` in Python."""
    sizes = list(map(size_of, prepared))
    offsets = list(accumulate(sizes, initial=start))
    end = offsets.pop()
    return b"".join(map(UNIT.pack, offsets, sizes, map(tags_code_of, prepared))), offsets, end


def py_put_results(
    cls: type[PutResult],
    prefix: str,
    prepared: list[Any],
    offsets: list[int],
    queue_offset: int,
    store_timestamp: int,
) -> list[PutResult]:
    """:func:`put_results` in Python."""
    n = len(prepared)
    if len(offsets) != n:
        raise InvalidArgumentError(f"put_results: {len(offsets)} offsets for {n} records")
    # The ids of the whole batch: one pack and one hex call instead of a format per message.
    digits = _qwords(n).pack(*offsets).hex().upper()
    ids = [prefix + digits[j : j + 16] for j in range(0, 16 * n, 16)]
    return list(
        map(
            _new_tuple,
            repeat(cls, n),
            zip(
                ids,
                range(queue_offset, queue_offset + n),
                offsets,
                repeat(store_timestamp, n),
                map(size_of, prepared),
                strict=True,
            ),
        )
    )


def units(prepared: list[Any], start: int) -> tuple[bytes, list[int], int]:
    """The records of ``prepared`` laid back to back from commit-log offset ``start``.

    Returns their consume-queue units as one ``bytes`` (a ``UNIT`` each), the offset of
    each record, and the offset just past the last one.
    """
    if _speedups is not None:
        return _speedups.units(prepared, start)  # type: ignore[no-any-return]
    return py_units(prepared, start)


def put_results(
    prefix: str,
    prepared: list[Any],
    offsets: list[int],
    queue_offset: int,
    store_timestamp: int,
) -> list[PutResult]:
    """One :class:`~mqcore.store.PutResult` per record of a stored batch.

    ``prefix`` is the store host part of RocketMQ's offset message id (address and port as
    16 upper-case hex digits); the commit-log offset makes up the other 16 digits.
    """
    if _speedups is not None:
        return _speedups.put_results(  # type: ignore[no-any-return]
            PutResult, prefix, prepared, offsets, queue_offset, store_timestamp
        )
    return py_put_results(PutResult, prefix, prepared, offsets, queue_offset, store_timestamp)


def with_deliver_times(
    prepared: list[Any],
    messages: Sequence[Message],
    delays: Sequence[int],
    store_timestamp: int,
) -> list[Any]:
    """``prepared`` for a put into ``SCHEDULE_TOPIC_XXXX``: each delayed message's tags code
    replaced by its deliver time (:func:`mqcore.store.deliver_timestamp`), as RocketMQ's
    commit log does for the schedule topic. Messages without a delay level keep theirs."""
    out = list(prepared)
    for i, m in enumerate(messages):
        if m.delay_level > 0:
            code = deliver_timestamp(delays, m.delay_level, store_timestamp)
            out[i] = with_tags_code(out[i], code)
    return out
