"""Writing a DataFrame into a topic: ``df.write.format("mqcore")``.

Each Spark task opens the store for writing, which takes the directory's writer lock, so the
tasks of a job write one after the other; a task waits up to ``lock_timeout`` seconds for
the lock. Rows are grouped per queue and stored ``batch_size`` at a time (one ``put`` each);
a store with ``put_prepared`` gets them as prepared records built from the Arrow columns
in one call per batch (see :mod:`.writing`), without a ``Message`` per row.

Delivery is *at least once*: a task that fails after some ``put`` calls is retried by Spark
and stores those rows again. Rows that carry a ``commitlog_offset`` column (rows read from
mqcore) get a ``REPLAY_ID`` property holding it, so that consumers can drop duplicates.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from mqcore.errors import InvalidArgumentError, StoreLockedError
from mqcore.lockfile import StoreLock
from mqcore.logs import get_logger
from mqcore.message import Message, system_message
from mqcore.storecaps import PreparedWriter
from mqcore.validation import check_copied_properties

from .layout import Location, resolve_write
from .options import NET_WRITE_OPTIONS, WRITE_OPTIONS
from .writing import arrow_prepare, queue_rows, uniq_ids

__all__ = ["REPLAY_ID", "WriteResult", "Writer", "held_error"]

log = get_logger(__name__)

#: Property naming the source commit-log offset of a written row (for de-duplication).
REPLAY_ID = "REPLAY_ID"
_DEFAULT_QUEUES = 4  # RocketMQ's defaultTopicQueueNums
_DEFAULT_BATCH = 512


@attrs.frozen
class WriteResult(WriterCommitMessage):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """What one task stored."""

    partition: int
    written: int


def held_error(location: Location, exc: StoreLockedError) -> StoreLockedError:
    """The sink's error for a held target directory: who holds it, and what to do."""
    error = StoreLockedError(
        f"{exc} -- the mqcore sink writes only to a store directory no broker or other writer "
        f"holds; to write into a running broker, give option namesrv (its address) instead "
        f"of path"
    )
    error.directory = location.store_dir  # type: ignore[attr-defined]
    error.pid = getattr(exc, "pid", None)  # type: ignore[attr-defined]
    return error


class Writer(DataSourceArrowWriter):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """Appends rows (``body``; ``tags``, ``keys``, ``properties``, ``queue_id`` when present)."""

    def __init__(self, options: Any, schema: StructType, overwrite: bool) -> None:
        opts = {str(k).lower(): v for k, v in options.items()}
        unknown = sorted(set(opts) - WRITE_OPTIONS)
        if unknown:
            raise InvalidArgumentError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for the mqcore sink; "
                f"valid options: {', '.join(sorted(WRITE_OPTIONS))}"
            )
        if overwrite:
            raise InvalidArgumentError(
                "the mqcore sink only appends (topics are logs): use mode('append')"
            )
        network = sorted(set(opts) & NET_WRITE_OPTIONS)
        if network:
            raise InvalidArgumentError(
                f"option(s) {', '.join(map(repr, network))} are for writing to a server "
                f"(option 'namesrv'); this write goes to the data directory 'path'"
            )
        if "body" not in schema.fieldNames():
            raise InvalidArgumentError(
                f"the DataFrame to write needs a binary (or string) 'body' column; it has "
                f"{', '.join(schema.fieldNames())}"
            )
        self.topic = str(opts.get("topic") or "")
        if not self.topic:
            raise InvalidArgumentError("option 'topic' is required: the topic to write to")
        from mqcore.broker.topics import TopicManager, validate_topic

        validate_topic(self.topic)
        self.location = resolve_write(opts.get("path"), opts.get("store"))
        self.batch_size = int(opts.get("batch_size") or _DEFAULT_BATCH)
        self.lock_timeout = float(opts.get("lock_timeout") or 60.0)
        # The writer lock is checked here, on the driver, for a clear error before any task.
        try:
            StoreLock(self.location.store_dir).acquire().release()
        except StoreLockedError as exc:
            raise held_error(self.location, exc) from None
        queue_nums = int(opts["queue_nums"]) if opts.get("queue_nums") else None
        if self.location.topics_file is not None:
            topics = TopicManager(self.location.topics_file)
            found = topics.get(self.topic)
            if found is None:
                found = topics.ensure(self.topic, queue_nums or _DEFAULT_QUEUES)
            # An existing topic keeps its queues: a broker serves only those.
            queue_nums = found.write_queue_nums
        self.queue_nums = queue_nums or _DEFAULT_QUEUES
        if self.queue_nums < 1:
            raise InvalidArgumentError(f"option queue_nums={self.queue_nums} must be >= 1")

    def _open(self) -> Any:
        """Open the store for writing, waiting for the lock while other tasks hold it."""
        from mqcore.kernel import Kernel

        kernel = Kernel()
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.02
        while True:
            try:
                return kernel.open_store(self.location.store, self.location.store_dir)
            except StoreLockedError as exc:
                if time.monotonic() >= deadline:
                    raise held_error(self.location, exc) from None
                time.sleep(delay)
                # Short polls: the tasks of a write hand the lock over one after another.
                delay = min(delay * 2, 0.05)

    def _messages(self, batch: pa.RecordBatch, first_row: int) -> dict[int, list[Message]]:
        cols = {name: batch.column(name).to_pylist() for name in batch.schema.names}
        n = batch.num_rows
        bodies = cols["body"]
        tags = cols.get("tags") or [None] * n
        keys = cols.get("keys") or [None] * n
        props = cols.get("properties") or [None] * n
        qids = cols.get("queue_id")
        replay = cols.get("commitlog_offset")
        per_queue: dict[int, list[Message]] = {}
        for i in range(n):
            body = bodies[i]
            if body is None:
                body = b""
            elif isinstance(body, str):
                body = body.encode()
            properties = dict(props[i] or ())
            if replay is not None and replay[i] is not None:
                properties.setdefault(REPLAY_ID, str(replay[i]))
            qid = qids[i] if qids is not None and qids[i] is not None else first_row + i
            # Rows copy records (a replay keeps UNIQ_KEY, REAL_TOPIC...): system names are
            # kept, the fields' own names and separators refused.
            check_copied_properties(properties)
            msg = system_message(
                topic=self.topic, body=body, tags=tags[i], keys=keys[i], properties=properties
            )
            per_queue.setdefault(qid % self.queue_nums, []).append(msg)
        return per_queue

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriteResult:
        """Store the task's rows; returns how many were stored."""
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        written = 0
        row = partition  # round-robin start, so that tasks do not all begin at queue 0
        store = self._open()
        # Stores that take prepared records get each batch's rows without a Message each.
        writer = store if isinstance(store, PreparedWriter) else None
        try:
            for batch in iterator:
                prepared = None
                if writer is not None:
                    prepared = arrow_prepare(batch, self.topic, time.time_ns() // 1_000_000)
                if prepared is not None:
                    assert writer is not None  # prepared only for such a store
                    groups: dict[int, list[Any]] = queue_rows(batch, row, self.queue_nums, prepared)
                    uniqs = uniq_ids(batch)  # UNIQ_KEY values, which the store indexes
                    ids = None if uniqs is None else queue_rows(batch, row, self.queue_nums, uniqs)
                    for qid, items in sorted(groups.items()):
                        for i in range(0, len(items), self.batch_size):
                            chunk = items[i : i + self.batch_size]
                            writer.put_prepared(
                                self.topic,
                                qid,
                                chunk,
                                None if ids is None else ids[qid][i : i + self.batch_size],
                            )
                            written += len(chunk)
                else:
                    for qid, messages in sorted(self._messages(batch, row).items()):
                        for i in range(0, len(messages), self.batch_size):
                            chunk = messages[i : i + self.batch_size]
                            store.put(self.topic, qid, chunk)
                            written += len(chunk)
                row += batch.num_rows
            store.flush()
        finally:
            store.close()
        log.info(
            "spark_partition_written",
            topic=self.topic,
            partition=partition,
            written=written,
            pid=os.getpid(),
        )
        return WriteResult(partition, written)

    def commit(self, messages: list[Any]) -> None:
        """Every task succeeded."""
        total = sum(m.written for m in messages if isinstance(m, WriteResult))
        log.info("spark_write_committed", topic=self.topic, written=total)

    def abort(self, messages: list[Any]) -> None:
        """A task failed: what others stored stays (at-least-once; see the module docs)."""
        total = sum(m.written for m in messages if isinstance(m, WriteResult))
        # The job's error reaches whoever ran it (a cancelled job too): this says what stays.
        log.info("spark_write_aborted", topic=self.topic, written=total)
