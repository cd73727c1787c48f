"""Reading a store for Spark: the plan of slices, and raw records turned into Arrow batches.

Records come from :meth:`~mqcore.store.Store.get_raw` as the stored bytes and are never
re-encoded or decoded into :class:`~mqcore.message.MessageExt` objects: each column is built
straight from the record header, and only the columns the read's schema names are built
(a schema without ``body`` never copies a body). Filters run inside the store's scan, on the
consume-queue tags code and then on the record's properties, before any body is touched.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from itertools import accumulate
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mqcore import codec
from mqcore.errors import InvalidArgumentError, StoreError
from mqcore.kernel import Kernel
from mqcore.logs import get_logger
from mqcore.message import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
)
from mqcore.store import GetStatus

from .layout import Location
from .options import Bounds, ReadOptions, Slice, split_range

__all__ = [
    "COLUMNS",
    "ReadFilter",
    "build_filter",
    "existing_topics",
    "plan_slices",
    "read_slice",
    "stream_bounds",
]

log = get_logger(__name__)

#: Column names of the source's schema, in order.
COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "msg_id",
    "tags",
    "keys",
    "properties",
    "born_timestamp",
    "store_timestamp",
    "reconsume_times",
    "body",
)

# The fixed record header (see mqcore.codec): size, magic, crc, queue id, flag, queue offset,
# commit-log offset, sys flag, born ts, born ip+port, store ts, store ip+port, reconsume
# times, prepared offset, body length.
_HEADER = struct.Struct(">iiiiiqqiq4siq4siiqi")
_HEADER_SIZE = _HEADER.size
_FIELD_NAMES = pa.array(sorted({PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_DELAY}), pa.string())
_PROPERTY_COLUMNS = frozenset({"tags", "keys", "properties"})
_CHUNK = 2048  # records per get_raw call
_MAX_BYTES = 64 * 1024 * 1024
_BATCH_ROWS = 8192  # records per Arrow batch handed to Spark
_Q = struct.Struct(">q")
_UNBOUNDED = Bounds()
_POS_QUEUE_OFFSET = codec.POS_QUEUE_OFFSET
_POS_STORE_TIMESTAMP = codec.POS_STORE_TIMESTAMP


class ReadFilter:
    """The store-side filter of a read: the tags Spark pushed down and the user's filter.

    It follows the :class:`~mqcore.interfaces.MessageFilter` protocol, so the store applies
    it while it scans: the tags hash code first, then the record's properties.
    """

    uses_properties = True

    def __init__(self, tags: frozenset[str] | None, inner: Any = None) -> None:
        self.tags = tags
        self.codes = None if tags is None else {codec.tags_hash_code(t) for t in tags}
        self.inner = inner

    def matches_tags_code(self, tags_code: int) -> bool:
        """Consume-queue stage: may the message with this tags hash code pass?"""
        if self.codes is not None and tags_code not in self.codes:
            return False
        return self.inner is None or bool(self.inner.matches_tags_code(tags_code))

    def matches_properties(self, properties: Mapping[str, str]) -> bool:
        """Commit-log stage: the exact tag, then the user's filter on all properties."""
        if self.tags is not None and properties.get(PROPERTY_TAGS) not in self.tags:
            return False
        return self.inner is None or bool(self.inner.matches_properties(properties))

    def matches(self, message: Any) -> bool:
        """Whether a whole message passes."""
        if self.tags is not None and message.tags not in self.tags:
            return False
        return self.inner is None or bool(self.inner.matches(message))


def build_filter(opts: ReadOptions, kernel: Kernel | None = None) -> ReadFilter | None:
    """The store-side filter for ``opts`` (``None`` when nothing filters).

    Raises :class:`~mqcore.errors.FilterExpressionError` for a bad expression and
    :class:`~mqcore.errors.NotRegisteredError` when no filter plugin of that type exists.
    """
    inner = None
    if opts.filter_type and opts.filter:
        inner = (kernel or Kernel()).filter(opts.filter_type, opts.filter)
    if inner is None and opts.tags is None:
        return None
    return ReadFilter(opts.tags, inner)


def existing_topics(store: Any, location: Location) -> set[str]:
    """Topics of the store, plus those of the broker's topic table (they may be empty)."""
    found = set(store.topics())
    if location.topics_file is not None and location.topics_file.exists():
        from mqcore.broker.topics import TopicManager

        found.update(cfg.topic_name for cfg in TopicManager(location.topics_file).all())
    return found


def _check_topics(store: Any, location: Location, opts: ReadOptions) -> None:
    known = existing_topics(store, location)
    missing = [t for t in opts.topics if t not in known]
    if missing:
        raise InvalidArgumentError(
            f"topic(s) {', '.join(map(repr, missing))} not found in {location.store_dir!r}; "
            f"topics there: {', '.join(sorted(known)) or 'none'}"
        )


def _queues(store: Any, opts: ReadOptions) -> Iterator[tuple[str, int]]:
    for topic in opts.topics:
        if opts.only_topics is not None and topic not in opts.only_topics:
            continue
        for qid in store.queue_ids(topic):
            if opts.queue_ids is not None and qid not in opts.queue_ids:
                continue
            if opts.queue_range.contains(qid):
                yield topic, qid


def plan_slices(store: Any, location: Location, opts: ReadOptions) -> list[Slice]:
    """Batch plan: every selected queue cut to the offset and time bounds, then split."""
    _check_topics(store, location, opts)
    slices: list[Slice] = []
    for topic, qid in _queues(store, opts):
        bounds = Bounds(store.min_offset(topic, qid), store.max_offset(topic, qid))
        bounds = bounds.narrow(opts.offsets.low, opts.offsets.high)
        # Store timestamps never decrease along a queue, so a time range is an offset range.
        if opts.timestamps.low is not None:
            bounds = bounds.narrow(low=store.offset_for_timestamp(topic, qid, opts.timestamps.low))
        if opts.timestamps.high is not None:
            bounds = bounds.narrow(
                high=store.offset_for_timestamp(topic, qid, opts.timestamps.high)
            )
        assert bounds.low is not None and bounds.high is not None
        slices.extend(
            split_range(topic, qid, bounds.low, bounds.high, opts.max_records_per_partition)
        )
    return slices


def stream_bounds(
    store: Any, location: Location, opts: ReadOptions
) -> dict[str, dict[str, tuple[int, int]]]:
    """Streaming: ``{topic: {"queue_id": (min offset, max offset)}}`` of every selected queue."""
    _check_topics(store, location, opts)
    out: dict[str, dict[str, tuple[int, int]]] = {t: {} for t in opts.topics}
    for topic, qid in _queues(store, opts):
        out[topic][str(qid)] = (store.min_offset(topic, qid), store.max_offset(topic, qid))
    return out


def _property_text(rec: Any, header: tuple[Any, ...]) -> bytes:
    """The record's encoded property string, located from its unpacked header."""
    tpos = _HEADER_SIZE + header[16]
    ppos = tpos + 1 + rec[tpos]
    return bytes(rec[ppos + 2 : ppos + 2 + ((rec[ppos] << 8) | rec[ppos + 1])])


def _scatter(n: int, rows: pa.Array, values: pa.Array) -> pa.Array:
    """A string array of ``n`` nulls with ``values`` put at ``rows``."""
    out: list[str | None] = [None] * n
    for row, value in zip(rows.to_pylist(), values.to_pylist(), strict=True):
        out[row] = value
    return pa.array(out, pa.string())


def _property_columns(
    records: list[Any], headers: list[tuple[Any, ...]], wanted: set[str]
) -> dict[str, Any]:
    """tags, keys and properties of a batch, parsed with Arrow kernels rather than per record.

    Properties are ``name\x01value\x02`` pairs (see :func:`mqcore.message.format_properties`):
    split every record's string on ``\x02`` then each pair on its first ``\x01``; pairs
    without a separator are skipped, as RocketMQ skips them.
    """
    n = len(records)
    texts = pa.array(list(map(_property_text, records, headers)), pa.binary()).cast(pa.string())
    items = pc.split_pattern(texts, PROPERTY_SEPARATOR)
    pairs = items.flatten()
    rows = items.value_parent_indices()
    complete = pc.match_substring(pairs, NAME_VALUE_SEPARATOR)
    pairs, rows = pairs.filter(complete), rows.filter(complete)
    split = pc.split_pattern(pairs, NAME_VALUE_SEPARATOR, max_splits=1)
    names, values = pc.list_element(split, 0), pc.list_element(split, 1)
    cols: dict[str, Any] = {}
    for column, name in (("tags", PROPERTY_TAGS), ("keys", PROPERTY_KEYS)):
        if column in wanted:
            mask = pc.equal(names, name)
            cols[column] = _scatter(n, rows.filter(mask), values.filter(mask))
    if "properties" in wanted:
        keep = pc.invert(pc.is_in(names, value_set=_FIELD_NAMES))
        per_row = [0] * n
        for row in rows.filter(keep).to_pylist():
            per_row[row] += 1
        offsets = pa.array([0, *accumulate(per_row)], pa.int32())
        cols["properties"] = pa.MapArray.from_arrays(
            offsets, names.filter(keep), values.filter(keep)
        )
    return cols


def _columns(records: list[Any], topic: str, names: tuple[str, ...]) -> dict[str, list[Any]]:
    """Python lists for the wanted columns of ``records`` (each a whole record)."""
    unpack = _HEADER.unpack_from
    headers = [unpack(rec, 0) for rec in records]
    cols: dict[str, list[Any]] = {}
    wanted = set(names)
    if "topic" in wanted:
        cols["topic"] = [topic] * len(records)
    if "queue_id" in wanted:
        cols["queue_id"] = [h[3] for h in headers]
    if "queue_offset" in wanted:
        cols["queue_offset"] = [h[5] for h in headers]
    if "commitlog_offset" in wanted:
        cols["commitlog_offset"] = [h[6] for h in headers]
    if "msg_id" in wanted:
        # A message id is the store host, then the offset; a store has one or few hosts.
        hosts = {
            (ip, port): f"{ip.hex().upper()}{port:08X}%016X"
            for ip, port in {(h[12], h[13]) for h in headers}
        }
        if len(hosts) == 1:
            (fmt,) = hosts.values()
            cols["msg_id"] = [fmt % h[6] for h in headers]
        else:
            cols["msg_id"] = [hosts[h[12], h[13]] % h[6] for h in headers]
    if "born_timestamp" in wanted:
        cols["born_timestamp"] = [h[8] for h in headers]
    if "store_timestamp" in wanted:
        cols["store_timestamp"] = [h[11] for h in headers]
    if "reconsume_times" in wanted:
        cols["reconsume_times"] = [h[14] for h in headers]
    if wanted & _PROPERTY_COLUMNS:
        cols.update(_property_columns(records, headers, wanted))
    if "body" in wanted:
        cols["body"] = [
            bytes(rec[_HEADER_SIZE : _HEADER_SIZE + h[16]])
            for rec, h in zip(records, headers, strict=True)
        ]
    return cols


def _batch(records: list[Any], topic: str, schema: pa.Schema) -> pa.RecordBatch:
    names = tuple(schema.names)
    cols = _columns(records, topic, names)
    arrays = []
    for name in names:
        kind = schema.field(name).type
        col = cols[name]
        arrays.append(col.cast(kind) if isinstance(col, pa.Array) else pa.array(col, type=kind))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_slice(
    store: Any,
    part: Slice,
    schema: pa.Schema,
    *,
    timestamps: Bounds = _UNBOUNDED,
    message_filter: ReadFilter | None = None,
    batch_rows: int = _BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches (columns of ``schema``) of the records of ``part`` that pass the filter.

    Raises :class:`~mqcore.errors.StoreError` when the store holds fewer records than the
    slice names (it was planned on a newer view than this one), rather than return less.
    """
    offset = part.start
    pending: list[Any] = []
    low, high = timestamps.low, timestamps.high
    while offset < part.end:
        got = store.get_raw(
            part.topic,
            part.queue_id,
            offset,
            max_count=min(_CHUNK, part.end - offset),
            max_bytes=_MAX_BYTES,
            message_filter=message_filter,
        )
        status = got.status
        if status in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_FOUND_NULL):
            # Retention removed these offsets: nothing to return for them.
            offset = max(got.next_offset, offset + 1)
            continue
        if status not in (GetStatus.FOUND, GetStatus.NO_MATCHED_MSG):
            raise StoreError(
                f"queue {part.queue_id} of topic {part.topic!r} ends at offset "
                f"{got.max_offset}, before the planned slice [{part.start}, {part.end}) "
                f"({status.name} at {offset})"
            )
        records = got.records
        done = False
        if message_filter is None and low is None and high is None:
            # Unfiltered reads stop at max_count, inside the slice: take them as they are.
            pending.extend(records)
        else:
            for rec in records:
                if _Q.unpack_from(rec, _POS_QUEUE_OFFSET)[0] >= part.end:
                    done = True  # a filtered scan may run past the slice: the next one owns it
                    break
                ts = _Q.unpack_from(rec, _POS_STORE_TIMESTAMP)[0]
                if (low is not None and ts < low) or (high is not None and ts >= high):
                    continue
                pending.append(rec)
        if len(pending) >= batch_rows:
            yield _batch(pending, part.topic, schema)
            pending = []
        if done:
            break
        offset = max(got.next_offset, offset + 1)
    if pending:
        yield _batch(pending, part.topic, schema)
