"""The ``mqcore`` source's readers over the network (option ``namesrv`` instead of ``path``).

The driver plans (:mod:`.netplan`): the route's readable queues, their bounds from the
brokers, the options resolved into fixed ranges. The executors pull those ranges
(:mod:`.netread`). Streaming offsets are ``{topic: {broker group: {queue: next offset}}}``
and live in Spark's checkpoint only; ``commit_group`` also commits them to a consumer group
after Spark has committed a batch, so ``mqcore lag`` shows a query's progress (the source
never resumes from them).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from mqcore.client.transport_remote import RemoteTransport
from mqcore.logs import get_logger
from mqcore.message import MessageQueue

from .netplan import NetSlice, plan_batch, routes, split_for_partitions, start_positions
from .netplan import check_filter as _check_filter
from .netplan import stream_bounds as _stream_bounds
from .netread import read_partition, subscription
from .options import ReadOptions, cap_offsets
from .pushdown import push

__all__ = ["NetBatchReader", "NetPartition", "NetPushdownBatchReader", "NetStreamReader"]

log = get_logger(__name__)

#: Streaming offsets: ``{topic: {broker: {"queue_id": next offset}}}``.
Offsets = dict[str, dict[str, dict[str, int]]]


class NetPartition(InputPartition):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """One Spark partition: queue offsets ``[start, end)`` of one queue of one broker group."""

    def __init__(self, value: NetSlice) -> None:
        super().__init__(value)


class _NetSetup:
    """What the network batch and stream readers share."""

    opts: ReadOptions
    schema: StructType

    def _net_setup(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self._transport: RemoteTransport | None = None
        subscription(opts)
        # Errors before any task: name servers, topics, the server's view of the filter.
        for route in routes(self._driver(), opts).values():
            _check_filter(self._driver(), opts, route)

    def _driver(self) -> RemoteTransport:
        if self._transport is None or self._transport.closed:
            assert self.opts.network is not None
            self._transport = RemoteTransport(self.opts.network.namesrv)
        return self._transport

    def _close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = None

    def __getstate__(self) -> dict[str, Any]:
        # The planning transport stays in the planning process; executors keep their own.
        return {**self.__dict__, "_transport": None}

    def _read(self, part: NetSlice | None) -> Iterator[pa.RecordBatch]:
        if part is None:
            return
        yield from read_partition(part, to_arrow_schema(self.schema, timezone="UTC"), self.opts)


class NetBatchReader(_NetSetup, DataSourceReader):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """``spark.read.format("mqcore").option("namesrv", ...)``."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        try:
            self._net_setup(opts, schema)
        finally:
            self._close()

    def partitions(self) -> Sequence[InputPartition]:
        """The plan: every selected queue's resolved range, split into partitions."""
        try:
            return [NetPartition(s) for s in plan_batch(self._driver(), self.opts)]
        finally:
            self._close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's records as Arrow batches, pulled from its broker group."""
        yield from self._read(partition.value)


class NetPushdownBatchReader(NetBatchReader):
    """:class:`NetBatchReader` taking over the ``where`` predicates (see ``PushdownBatchReader``):
    tags become the pulls' TAG subscription, queue and offset bounds narrow the plan."""

    def pushFilters(self, filters: list[Any]) -> Any:
        """Take over the predicates the pulls answer (see :mod:`.pushdown`)."""
        self.opts, left = push(self.opts, filters)
        return iter(left)


def _flat(offsets: Offsets) -> dict[tuple[str, str, str], int]:
    return {
        (topic, broker, qid): int(off)
        for topic, groups in offsets.items()
        for broker, queues in groups.items()
        for qid, off in queues.items()
    }


class NetStreamReader(_NetSetup, DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """``spark.readStream.format("mqcore").option("namesrv", ...)``.

    A queue or broker group that appears after the query started is read from its first
    offset. ``Trigger.AvailableNow`` reads what the brokers held when the query started.
    """

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self._net_setup(opts, schema)
        self._target: Offsets | None = None

    def _bounds(self) -> dict[str, dict[str, dict[str, tuple[int, int]]]]:
        return _stream_bounds(self._driver(), self.opts)

    def initialOffset(self) -> Offsets:
        """Where a new query starts: ``starting_offsets``."""
        net = self.opts.network
        assert net is not None
        t = self._driver()
        return start_positions(net, self._bounds(), t.get_route_info_by_topic)

    def getDefaultReadLimit(self) -> ReadLimit:
        """``max_records_per_trigger`` as Spark's read limit."""
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: read up to what the brokers hold now, no further."""
        self._target = {
            topic: {b: {q: high for q, (_, high) in qs.items()} for b, qs in groups.items()}
            for topic, groups in self._bounds().items()
        }

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        """The end of the next micro-batch: what the brokers hold now, capped by ``limit``
        (shared in proportion to each queue's backlog)."""
        begun = _flat(start)
        ranges = []
        for topic, groups in self._bounds().items():
            for broker, queues in groups.items():
                for qid, (low, high) in queues.items():
                    if self._target is not None:
                        high = min(high, self._target.get(topic, {}).get(broker, {}).get(qid, low))
                    first = begun.pop((topic, broker, qid), low)
                    ranges.append((topic, f"{broker}\x00{qid}", first, max(first, high)))
        # Queues the route no longer lists keep their offsets (they cannot go back).
        for (topic, broker, qid), off in begun.items():
            ranges.append((topic, f"{broker}\x00{qid}", off, off))
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        out: Offsets = {t: {} for t in start}
        for topic, capped in cap_offsets(ranges, cap).items():
            for key, end in capped.items():
                broker, _, qid = key.partition("\x00")
                out.setdefault(topic, {}).setdefault(broker, {})[qid] = end
        return out

    def reportLatestOffset(self) -> Offsets:
        """The newest offsets, for the query's progress report."""
        return {
            topic: {b: {q: hi for q, (_, hi) in qs.items()} for b, qs in groups.items()}
            for topic, groups in self._bounds().items()
        }

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        """Ranges between two offsets; a queue new in ``end`` starts at its first offset."""
        begun = _flat(start)
        bounds: dict[tuple[str, str, str], tuple[int, int]] | None = None
        ranges = []
        for (topic, broker, qid), stop in sorted(_flat(end).items()):
            first = begun.get((topic, broker, qid))
            if first is None:
                if bounds is None:
                    bounds = _flat_bounds(self._bounds())
                first = bounds.get((topic, broker, qid), (0, 0))[0]
            if stop > first:
                ranges.append(NetSlice(topic, broker, int(qid), first, stop))
        net = self.opts.network
        assert net is not None
        slices = split_for_partitions(ranges, self.opts.max_records_per_partition, None)
        return [NetPartition(s) for s in slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The range's records as Arrow batches, pulled from its broker group."""
        yield from self._read(partition.value)

    def commit(self, end: Offsets) -> None:
        """With ``commit_group``: the batch's end offsets committed to that consumer group."""
        net = self.opts.network
        assert net is not None
        if not net.commit_group:
            return
        t = self._driver()
        for (topic, broker, qid), off in _flat(end).items():
            try:
                t.update_consumer_offset(
                    net.commit_group, MessageQueue(topic, broker, int(qid)), off
                )
            except Exception as exc:  # progress for mqcore lag only: the query goes on
                log.warning(
                    "commit_group_failed",
                    group=net.commit_group,
                    topic=topic,
                    broker=broker,
                    queue_id=qid,
                    error=str(exc),
                )

    def stop(self) -> None:
        """Close the planning transport."""
        self._close()


def _flat_bounds(
    bounds: dict[str, dict[str, dict[str, tuple[int, int]]]],
) -> dict[tuple[str, str, str], tuple[int, int]]:
    return {
        (topic, broker, qid): span
        for topic, groups in bounds.items()
        for broker, queues in groups.items()
        for qid, span in queues.items()
    }
