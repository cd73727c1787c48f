"""The ``mqcore`` PySpark Python Data Source: batch read, streaming read and write.

Spark runs these classes in its own Python processes: the planning methods in a worker
next to the driver, ``read``/``write`` in executor workers. Every one of them opens the store
itself, read-only for reading, and keeps nothing between calls that Spark does not hand back
(partitions and, for streams, offsets in Spark's checkpoint).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from mqcore.errors import InvalidArgumentError
from mqcore.kernel import Kernel

from .layout import Location, resolve_read
from .options import ReadOptions, Slice, cap_offsets, check_location, split_range
from .pushdown import push
from .records import build_filter, plan_slices, read_slice, stream_bounds
from .workerenv import pushdown_enabled

__all__ = ["SCHEMA", "MqcoreDataSource", "SlicePartition"]

#: The rows of a topic, as ``spark.read.format("mqcore")`` returns them.
SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("commitlog_offset", LongType(), False),
        StructField("msg_id", StringType(), False),
        StructField("tags", StringType(), True),
        StructField("keys", StringType(), True),
        StructField("properties", MapType(StringType(), StringType(), True), False),
        StructField("born_timestamp", LongType(), False),
        StructField("store_timestamp", LongType(), False),
        StructField("reconsume_times", IntegerType(), False),
        StructField("body", BinaryType(), False),
    ]
)


@functools.lru_cache(maxsize=1)
def _kernel() -> Kernel:
    """One kernel per Python worker process (loading plugins costs more than a read)."""
    return Kernel()


def _open(location: Location) -> Any:
    return _kernel().open_store(location.store, location.store_dir, read_only=True)


def _check_schema(schema: StructType) -> StructType:
    """A user-given schema must be a subset of :data:`SCHEMA` (it selects columns)."""
    known = {f.name: f for f in SCHEMA.fields}
    for field in schema.fields:
        if field.name not in known or field.dataType != known[field.name].dataType:
            raise InvalidArgumentError(
                f"column {field.name} {field.dataType.simpleString()} is not one the mqcore "
                f"source provides; its schema is {SCHEMA.simpleString()}"
            )
    return schema


class SlicePartition(InputPartition):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """One Spark partition: queue offsets ``[start, end)`` of one queue."""

    def __init__(self, value: Slice) -> None:
        super().__init__(value)


class _Setup:
    """What the batch and stream readers share: parsed options and checks on the driver."""

    def _setup(self, options: Any, schema: StructType, *, streaming: bool) -> None:
        self.opts = ReadOptions.parse(options, streaming=streaming)
        self.location = resolve_read(self.opts.path, self.opts.store)
        self.schema = _check_schema(schema)
        # Fail on the driver for a bad filter expression or an unknown topic.
        build_filter(self.opts, _kernel())
        with _open(self.location) as store:
            stream_bounds(store, self.location, self.opts)

    def _read(self, part: Slice | None) -> Iterator[pa.RecordBatch]:
        if part is None:
            # Spark reads one empty partition when the plan has none (nothing selected).
            return
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        message_filter = build_filter(self.opts, _kernel())
        with _open(self.location) as store:
            yield from read_slice(
                store,
                part,
                arrow_schema,
                timestamps=self.opts.timestamps,
                message_filter=message_filter,
            )


class BatchReader(_Setup, DataSourceReader):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """``spark.read.format("mqcore")``: one partition per (queue, offset range) slice."""

    def __init__(self, options: Any, schema: StructType) -> None:
        self._setup(options, schema, streaming=False)

    def partitions(self) -> Sequence[InputPartition]:
        """The plan: every selected queue's range, split by ``max_records_per_partition``."""
        with _open(self.location) as store:
            slices = plan_slices(store, self.location, self.opts)
        return [SlicePartition(s) for s in slices]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The slice's records as Arrow batches."""
        yield from self._read(partition.value)


class PushdownBatchReader(BatchReader):
    """A batch reader that takes over the ``where`` predicates the store answers.

    Used only when the source was registered with ``filter_pushdown=True``: PySpark (4.3 and
    earlier) keeps the read planned after :meth:`pushFilters` on the DataFrame and runs it
    again for the DataFrame's later queries, whose own filters differ, so they would miss
    rows. By default the source hands every filter back to Spark (:class:`BatchReader` has
    no ``pushFilters``) and plans the same read for every query.
    """

    def pushFilters(self, filters: list[Any]) -> Any:
        """Take over the predicates the store answers (see :mod:`.pushdown`)."""
        self.opts, left = push(self.opts, filters)
        return iter(left)


class StreamReader(_Setup, DataSourceStreamReader):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """``spark.readStream.format("mqcore")``: offsets are ``{topic: {queue_id: offset}}``.

    An offset is the next queue offset to read; a queue missing from an offset (it appeared
    later) starts at 0, so any restart plans the same slices from the same checkpoint.
    """

    def __init__(self, options: Any, schema: StructType) -> None:
        self._setup(options, schema, streaming=True)
        self._store: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # The planning store stays in the planning process; executors open their own.
        return {**self.__dict__, "_store": None}

    def _bounds(self) -> dict[str, dict[str, tuple[int, int]]]:
        if self._store is None:
            self._store = _open(self.location)
        else:
            self._store.refresh()
        return stream_bounds(self._store, self.location, self.opts)

    def initialOffset(self) -> dict[str, Any]:
        """Where a new query starts: ``starting_offsets``."""
        start = self.opts.starting_offsets
        out: dict[str, Any] = {}
        for topic, queues in self._bounds().items():
            given = start.get(topic, {}) if isinstance(start, dict) else {}
            out[topic] = {}
            for qid, (low, high) in queues.items():
                off = given.get(int(qid), -2 if start != "latest" else -1)
                out[topic][qid] = low if off == -2 else high if off == -1 else off
            # Queues the JSON names that hold nothing yet start where it says (or at 0).
            for qid_int, off in given.items():
                out[topic].setdefault(str(qid_int), max(off, 0))
        return out

    def getDefaultReadLimit(self) -> ReadLimit:
        """``max_records_per_trigger`` as Spark's read limit."""
        n = self.opts.max_records_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The end of the next micro-batch: what the store holds now, capped by ``limit``."""
        ranges = []
        for topic, queues in self._bounds().items():
            begun = start.get(topic, {})
            for qid, (_, high) in queues.items():
                ranges.append((topic, qid, int(begun.get(qid, 0)), high))
            # Keep queues the store no longer lists (they cannot go back).
            for qid, off in begun.items():
                if qid not in queues:
                    ranges.append((topic, qid, int(off), int(off)))
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        ends: dict[str, Any] = {t: {} for t in start}
        ends.update(cap_offsets(ranges, cap))
        return ends

    def reportLatestOffset(self) -> dict[str, Any]:
        """The newest offsets, for the query's progress report."""
        return {t: {q: hi for q, (_, hi) in qs.items()} for t, qs in self._bounds().items()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """Slices between two offsets (deterministic: a restarted batch plans the same)."""
        out = []
        for topic, queues in sorted(end.items()):
            begun = start.get(topic, {})
            for qid, stop in sorted(queues.items(), key=lambda item: int(item[0])):
                first = int(begun.get(qid, 0))
                out.extend(
                    split_range(
                        topic, int(qid), first, int(stop), self.opts.max_records_per_partition
                    )
                )
        return [SlicePartition(s) for s in out]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The slice's records as Arrow batches."""
        yield from self._read(partition.value)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the checkpoint holds the offsets, the store keeps the messages."""

    def stop(self) -> None:
        """Close the planning store."""
        if self._store is not None:
            self._store.close()
            self._store = None


class MqcoreDataSource(DataSource):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """The ``mqcore`` data source: topics of a store directory as DataFrames, and back."""

    @classmethod
    def name(cls) -> str:
        """The format name: ``spark.read.format("mqcore")``."""
        return "mqcore"

    def schema(self) -> StructType:
        """:data:`SCHEMA` (give a subset of it with ``.schema(...)`` to read fewer columns)."""
        return SCHEMA

    def _network(self, streaming: bool) -> ReadOptions | None:
        """The parsed options when the read goes to a server (option ``namesrv``)."""
        if not any(str(k).lower() == "namesrv" for k in self.options):
            return None
        return ReadOptions.parse(self.options, streaming=streaming)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch reader (options are checked here, on the driver)."""
        net = self._network(streaming=False)
        if net is not None:
            from .netsource import NetBatchReader, NetPushdownBatchReader

            kind = NetPushdownBatchReader if pushdown_enabled() else NetBatchReader
            return kind(net, _check_schema(schema))
        if pushdown_enabled():
            return PushdownBatchReader(self.options, schema)
        return BatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A streaming reader."""
        net = self._network(streaming=True)
        if net is not None:
            from .netsource import NetStreamReader

            return NetStreamReader(net, _check_schema(schema))
        return StreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        """A writer appending rows to a topic: of a data directory (``path``, see
        :mod:`.sink`) or of a running server (``namesrv``, see :mod:`.netwrite`)."""
        check_location(self.options)
        if _names_server(self.options):
            from .netwrite import NetWriter

            return NetWriter(self.options, schema, overwrite)
        from .sink import Writer

        return Writer(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        """A streaming writer appending each micro-batch's rows to a topic of a running
        server (``namesrv``, see :mod:`.netwrite`)."""
        check_location(self.options)
        if not _names_server(self.options):
            raise InvalidArgumentError(
                "df.writeStream.format('mqcore') writes to a running server: give option "
                "'namesrv' (host:port[;host:port]); a data directory is written with df.write"
            )
        from .netwrite import NetStreamWriter

        return NetStreamWriter(self.options, schema, overwrite)


def _names_server(options: Any) -> bool:
    """Whether the options name a server to write to (``namesrv``)."""
    return any(str(k).lower() == "namesrv" and v for k, v in options.items())
