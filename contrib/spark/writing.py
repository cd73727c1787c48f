"""Arrow batches into a store's batch put, without a :class:`~mqcore.message.Message` per row.

The sink receives Arrow record batches. For a store with ``put_prepared`` (both bundled
stores), one C call (``mqcore.contrib.spark._arrow.arrow_prepare``) turns a batch's columns into the
tuples :func:`mqcore.codec.prepare` would make from the equivalent messages: body, CRC, the
topic and property bytes (user properties, ``REPLAY_ID``, ``TAGS``, ``KEYS``, in the order
``prepare`` writes them) and the tags hash code. Rows go to queues as the message path sends
them, with Arrow kernels instead of a loop.

A batch takes the message path instead (:meth:`Writer._messages` in :mod:`.sink`, which
checks every field as :class:`~mqcore.message.Message` does and says what is wrong) when
the C extension is off, the store lacks ``put_prepared``, a column has another Arrow type
than the source's, or a row needs those checks: a property name the sink refuses (empty,
or ``TAGS``, ``KEYS``, ``DELAY``: system names of copied records such as ``UNIQ_KEY`` are
kept, and :func:`uniq_ids` hands the ``UNIQ_KEY`` values to the store, which indexes them),
a separator (``\\x01``, ``\\x02``) in a tag, key or property value, a null property value,
a name twice in one row, or a property string over 32767 bytes.
"""

from __future__ import annotations

from bisect import bisect_right
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mqcore import codec, speedups
from mqcore.errors import MQError
from mqcore.message import PROPERTY_UNIQ_KEY
from mqcore.validation import check_copied_properties

__all__ = ["SPEEDUPS", "arrow_prepare", "queue_rows", "uniq_ids"]

_speedups = speedups.load("spark")
#: True when batches can be prepared in C.
SPEEDUPS = _speedups is not None

_STRINGS = (pa.string(), pa.binary())
_PROPERTIES = pa.map_(pa.string(), pa.string())
_NAMES_SEEN: dict[str, bool] = {}  # property name -> whether Message accepts it
_NAMES_LIMIT = 4096


def _plain(arr: Any) -> bool:
    """Whether ``arr`` can be read through its buffers as they are (no slice offset)."""
    return arr is not None and arr.offset == 0


def _strings(arr: Any) -> tuple[Any, Any, Any] | None:
    """``(validity, offsets, data)`` of a string or binary array, or None if it is another."""
    if arr is None:
        return None
    if arr.type not in _STRINGS or not _plain(arr):
        raise _Other
    validity, offsets, data = arr.buffers()
    return validity, offsets, data if data is not None else b""


class _Other(Exception):
    """A column the C path does not read: the message path takes the batch."""


def _names_ok(keys: pa.Array) -> bool:
    """Whether the sink accepts every distinct property name of a batch (checked once each;
    see :func:`mqcore.validation.check_copied_properties`)."""
    for name in pc.unique(keys).to_pylist():
        ok = _NAMES_SEEN.get(name)
        if ok is None:
            try:
                check_copied_properties({name: ""})
                ok = True
            except (MQError, ValueError, TypeError):
                ok = False
            if len(_NAMES_SEEN) >= _NAMES_LIMIT:
                _NAMES_SEEN.clear()
            _NAMES_SEEN[name] = ok
        if not ok:
            return False
    return True


def _columns(batch: pa.RecordBatch) -> tuple[Any, ...] | None:
    """The column buffers the C builders read (body, tags, keys, properties, replay
    offsets), or None when a column takes the message path."""
    names = batch.schema.names

    def column(name: str) -> Any:
        return batch.column(name) if name in names else None

    try:
        body = _strings(column("body"))
        tags = _strings(column("tags"))
        keys = _strings(column("keys"))
        props = None
        arr = column("properties")
        if arr is not None:
            if arr.type != _PROPERTIES or not _plain(arr) or not _plain(arr.values):
                raise _Other
            names_arr, values_arr = arr.values.field(0), arr.values.field(1)
            if not _names_ok(names_arr):
                return None
            props = (arr.buffers()[0], arr.buffers()[1], _strings(names_arr), _strings(values_arr))
        replay = None
        arr = column("commitlog_offset")
        if arr is not None:
            if not pa.types.is_integer(arr.type):
                raise _Other
            if arr.type != pa.int64() or not _plain(arr):
                arr = pa.concat_arrays([arr.cast(pa.int64())])
            replay = (arr.buffers()[0], arr.buffers()[1])
    except _Other:
        return None
    return body, tags, keys, props, replay


def arrow_prepare(batch: pa.RecordBatch, topic: str, born_timestamp: int) -> list[Any] | None:
    """:func:`mqcore.codec.prepare`'s tuples for the rows of ``batch`` under ``topic``, or
    None when the batch must take the message path (see the module docstring)."""
    if not SPEEDUPS or batch.num_rows == 0:
        return None
    assert _speedups is not None
    columns = _columns(batch)
    if columns is None:
        return None
    body, tags, keys, props, replay = columns
    return _speedups.arrow_prepare(  # type: ignore[no-any-return]
        batch.num_rows,
        body,
        tags,
        keys,
        props,
        replay,
        _topic_head(topic),
        born_timestamp,
        codec._crc32,  # type: ignore[attr-defined]  # the checksum prepare() uses
        (),
    )


def _topic_head(topic: str) -> bytes:
    """The topic's length byte and UTF-8 bytes, as a record's trailer starts."""
    data = topic.encode()
    return bytes((len(data),)) + data


def queue_rows(
    batch: pa.RecordBatch, first_row: int, queue_nums: int, prepared: list[Any]
) -> dict[int, list[Any]]:
    """``prepared`` (one item per row of ``batch``) grouped by queue, in row order: a row's
    ``queue_id`` column value (when present and not null), else its running row number
    ``first_row + i``, modulo ``queue_nums``."""
    n = batch.num_rows
    qids = batch.column("queue_id") if "queue_id" in batch.schema.names else None
    if qids is None or qids.null_count == n:
        # Round-robin: row i goes to (first_row + i) % queue_nums, every queue_nums-th row.
        out: dict[int, list[Any]] = {}
        for k in range(min(n, queue_nums)):
            out[(first_row + k) % queue_nums] = prepared[k::queue_nums]
        return out
    rows = pa.array(range(first_row, first_row + n), pa.int64())
    q = pc.if_else(pc.is_null(qids), rows, qids.cast(pa.int64()))
    # Python's modulo (never negative), as the message path computes it.
    r = pc.modulo(q, queue_nums)
    r = pc.if_else(pc.less(r, 0), pc.add(r, queue_nums), r)
    grouped: dict[int, list[Any]] = {}
    for queue in pc.unique(r).to_pylist():
        idx = pc.indices_nonzero(pc.equal(r, queue)).to_pylist()
        grouped[queue] = [prepared[idx[0]]] if len(idx) == 1 else list(itemgetter(*idx)(prepared))
    return grouped


def uniq_ids(batch: pa.RecordBatch) -> list[str | None] | None:
    """Each row's ``UNIQ_KEY`` property (None where it has none), or None when no row has
    one: what :func:`mqcore.uniqkey.uniq_ids` gives the store for the equivalent messages."""
    if "properties" not in batch.schema.names:
        return None
    arr = batch.column("properties")
    if arr.type != _PROPERTIES or not _plain(arr) or not _plain(arr.values):
        return None
    found = pc.equal(arr.values.field(0), PROPERTY_UNIQ_KEY)
    if not pc.any(found).as_py():
        return None
    # The row of each entry found, from the map offsets (pyarrow's list_parent_indices
    # aborts the process on a map array).
    offsets = arr.offsets.to_pylist()
    entries = pc.indices_nonzero(found).to_pylist()
    values = arr.values.field(1).filter(found).to_pylist()
    out: list[str | None] = [None] * batch.num_rows
    for entry, value in zip(entries, values, strict=True):
        out[bisect_right(offsets, entry) - 1] = value
    return out
