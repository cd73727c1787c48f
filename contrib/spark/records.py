"""Reading a store for Spark: the plan of slices, and stored records turned into Arrow batches.

Records come from the store as spans of stored bytes (:mod:`mqcore.spans`; ``get_raw`` for a
store without ``get_spans``) and are never re-encoded or decoded into
:class:`~mqcore.message.MessageExt` objects: each batch's columns are built by one call of
:func:`~.columns.build_batch` (C when built), only those the read's schema names (a schema
without ``body`` never copies a body). Filters run inside the store's scan, on the
consume-queue tags code and then on the record's properties, before any body is touched.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from mqcore import codec
from mqcore.errors import InvalidArgumentError, StoreError
from mqcore.kernel import Kernel
from mqcore.logs import get_logger
from mqcore.message import PROPERTY_TAGS
from mqcore.protocol.transaction import TRANSACTION_TOPICS
from mqcore.spans import RawSpans
from mqcore.store import GetStatus
from mqcore.storecaps import SpanReader

from .columns import COLUMNS, Span, TagsFilter, build_batch
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

_MAX_BYTES = 64 * 1024 * 1024  # of records per batch (an Arrow binary column holds 2 GiB)
_BATCH_ROWS = 8192  # records per Arrow batch handed to Spark
_MAX_TAGS = 64  # pushed-down tags the builder checks itself (more: the store's scan)
_UNBOUNDED = Bounds()


class ReadFilter:
    """The store-side filter of a read: the tags Spark pushed down and the user's filter.

    It follows the :class:`~mqcore.interfaces.MessageFilter` protocol, so the store applies
    it while it scans: the tags hash code first, then the record's properties.
    """

    uses_properties = True
    #: The :class:`~mqcore.interfaces.MessageFilter` fields naming the expression (for logs;
    #: stores do not read them).
    expression_type = "SPARK"
    expression = "the read's pushed-down tags and filter"

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
    """Topics of the store, plus those of the broker's topic table (they may be empty); never
    the broker's transaction topics (undecided halves and their outcomes are no user data)."""
    found = set(store.topics()) - TRANSACTION_TOPICS
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


def _spans(
    store: Any,
    part: Slice,
    offset: int,
    count: int,
    message_filter: ReadFilter | None,
) -> RawSpans:
    """The records from ``offset`` as spans: the store's ``get_spans`` when it is a
    :class:`~mqcore.storecaps.SpanReader`, else its ``get_raw`` records joined into one
    buffer (one more copy)."""
    if isinstance(store, SpanReader):
        return store.get_spans(part.topic, part.queue_id, offset, count, _MAX_BYTES, message_filter)
    got = store.get_raw(part.topic, part.queue_id, offset, count, _MAX_BYTES, message_filter)
    spans: list[Span] = [(b"".join(got.records), None, 0)] if got.records else []
    return RawSpans(
        got.status, spans, len(got.records), got.next_offset, got.min_offset, got.max_offset
    )


def read_slice(
    store: Any,
    part: Slice,
    schema: pa.Schema,
    *,
    timestamps: Bounds = _UNBOUNDED,
    message_filter: ReadFilter | None = None,
    batch_rows: int = _BATCH_ROWS,
    python: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches (columns of ``schema``) of the records of ``part`` that pass the filter.

    Each batch is built by one :func:`~.columns.build_batch` call over the spans the store
    returned (``python=True``: its pure-Python reference). Raises
    :class:`~mqcore.errors.StoreError` when the store holds fewer records than the slice
    names (it was planned on a newer view than this one), rather than return less, and
    :class:`~mqcore.errors.StoreCorruptedError` for a damaged record.
    """
    offset = part.start
    pending: list[Span] = []
    rows = 0
    nbytes = 0
    tags: TagsFilter | None = None
    if message_filter is not None and message_filter.inner is None and message_filter.codes:
        # Tags alone: the builder checks them on the units' tags codes and the property
        # strings of a whole batch at once, instead of the store record by record.
        codes = tuple(sorted(message_filter.codes))
        tags = (codes, tuple(sorted(t.encode() for t in message_filter.tags or ())))
        message_filter = None if len(codes) <= _MAX_TAGS else message_filter
        tags = tags if message_filter is None else None

    def batch() -> tuple[pa.RecordBatch, bool]:
        return build_batch(
            pending,
            schema,
            ts_low=timestamps.low,
            ts_high=timestamps.high,
            end_offset=part.end,
            tags=tags,
            python=python,
        )

    while offset < part.end:
        got = _spans(store, part, offset, min(batch_rows - rows, part.end - offset), message_filter)
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
        pending.extend(got.spans)
        rows += got.count
        nbytes += sum(len(memoryview(s[1] if s[1] is not None else s[0])) for s in got.spans)
        offset = max(got.next_offset, offset + 1)
        if rows >= batch_rows or nbytes >= _MAX_BYTES:
            out, done = batch()
            pending, rows, nbytes = [], 0, 0
            if out.num_rows:
                yield out
            if done:  # a filtered scan ran past the slice: the next slice owns the rest
                return
    if pending:
        out, _ = batch()
        if out.num_rows:
            yield out
