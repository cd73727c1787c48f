"""Writing a DataFrame into a topic of a running server: ``df.write`` and ``df.writeStream``
with ``option("namesrv", "host:port[;host:port]")``.

The driver checks the name server and the topic before any task runs (a topic that does not
exist is created on every master with ``queue_nums`` queues, 4 by default, as the local sink
creates it in a directory). Each task sends its rows straight to the masters (see
:mod:`.netsend`), over one transport per Python worker.

Delivery is *at least once*: a task that fails after some sends is retried by Spark and sends
those rows again. Every row carries a deterministic ``UNIQ_KEY`` (unless it has one of its
own, as rows read from a topic do): the write id, the partition and the row's number in the
partition, so a retried task's duplicates carry the keys of the first attempt and consumers
can drop them. The write id is drawn on the driver for a ``df.write``; for ``writeStream`` it
comes from the query id and the micro-batch id, so that a micro-batch written again after
a restart from the checkpoint repeats its keys too. Both need the DataFrame's partitions to
hold the same rows in the same order when recomputed (as Spark's Kafka sink needs for its
idempotent writes).
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from mqcore.errors import InvalidArgumentError, MQClientError, MQError, TopicNotExistError
from mqcore.logs import get_logger

from .netbatch import uniq_prefix
from .netsend import DEFAULT_BATCH, DEFAULT_IN_FLIGHT, SendSettings, send_batches, transport
from .options import WRITE_OPTIONS

__all__ = ["NetStreamWriter", "NetWriteResult", "NetWriter"]

log = get_logger(__name__)

_DEFAULT_QUEUES = 4  # RocketMQ's defaultTopicQueueNums
# Spark's local properties of a streaming query's tasks (StreamExecution.QUERY_ID_KEY and
# MicroBatchExecution.BATCH_ID_KEY).
_QUERY_ID = "sql.streaming.queryId"
_BATCH_ID = "streaming.sql.batchId"


@attrs.frozen
class NetWriteResult(WriterCommitMessage):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """What one task sent."""

    partition: int
    written: int


def _positive(opts: dict[str, Any], name: str, default: int) -> int:
    value = opts.get(name)
    if value is None or str(value).strip() == "":
        return default
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name}={value!r} must be an integer") from None
    if number < 1:
        raise InvalidArgumentError(f"option {name}={value!r} must be >= 1")
    return number


class _NetSetup:
    """Options and the driver's checks, shared by the batch and the streaming writer."""

    def _setup(self, options: Any, schema: StructType, what: str) -> None:
        opts = {str(k).lower(): v for k, v in options.items()}
        if what == "streaming sink":
            # Spark's own option of every streaming query, handed to its sink too.
            opts.pop("checkpointlocation", None)
        unknown = sorted(set(opts) - WRITE_OPTIONS)
        if unknown:
            raise InvalidArgumentError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for the mqcore sink; "
                f"valid options: {', '.join(sorted(WRITE_OPTIONS))}"
            )
        for local in ("path", "store", "lock_timeout"):
            if opts.get(local):
                raise InvalidArgumentError(
                    f"option {local!r} is for writing a data directory and 'namesrv' for "
                    f"writing to a server: give one of them, not both"
                )
        if "body" not in schema.fieldNames():
            raise InvalidArgumentError(
                f"the DataFrame to write needs a binary (or string) 'body' column; it has "
                f"{', '.join(schema.fieldNames())}"
            )
        self.topic = str(opts.get("topic") or "")
        if not self.topic:
            raise InvalidArgumentError("option 'topic' is required: the topic to write to")
        from mqcore.protocol.names import validate_topic

        validate_topic(self.topic)
        self.namesrv = str(opts["namesrv"])
        self.settings = SendSettings(
            batch_size=_positive(opts, "batch_size", DEFAULT_BATCH),
            in_flight=_positive(opts, "sends_in_flight", DEFAULT_IN_FLIGHT),
            timeout=_positive(opts, "send_timeout_ms", 3000) / 1000,
        )
        queue_nums = _positive(opts, "queue_nums", _DEFAULT_QUEUES)
        self._ensure_topic(queue_nums, what)

    def _ensure_topic(self, queue_nums: int, what: str) -> None:
        """On the driver: the servers answer, and the topic exists (created if not)."""
        from mqcore.client.admin import MQAdmin

        try:
            with MQAdmin(self.namesrv) as admin:
                try:
                    admin.topic(self.topic)
                except TopicNotExistError:
                    admin.create_topic(self.topic, queue_nums)
                    log.info("spark_topic_created", topic=self.topic, queue_nums=queue_nums)
        except MQError as exc:
            raise MQClientError(
                f"the mqcore {what} cannot prepare topic {self.topic!r} at "
                f"namesrv={self.namesrv!r}: {exc}"
            ) from exc

    def _send(self, iterator: Iterator[pa.RecordBatch], write_id: int) -> NetWriteResult:
        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        written = send_batches(
            transport(self.namesrv),
            self.topic,
            iterator,
            uniq_prefix(write_id, partition),
            0,
            self.settings,
        )
        log.info(
            "spark_partition_sent",
            topic=self.topic,
            partition=partition,
            written=written,
            pid=os.getpid(),
        )
        return NetWriteResult(partition, written)


class NetWriter(_NetSetup, DataSourceArrowWriter):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """``df.write`` to a server: appends rows (the columns of :class:`~.sink.Writer`)."""

    def __init__(self, options: Any, schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise InvalidArgumentError(
                "the mqcore sink only appends (topics are logs): use mode('append')"
            )
        self._setup(options, schema, "sink")
        # Drawn once, here on the driver: a retried task sends its rows with the same keys.
        self.write_id = secrets.randbits(48)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NetWriteResult:
        """Send the task's rows; returns how many were sent."""
        return self._send(iterator, self.write_id)

    def commit(self, messages: list[Any]) -> None:
        """Every task succeeded."""
        total = sum(m.written for m in messages if isinstance(m, NetWriteResult))
        log.info("spark_write_committed", topic=self.topic, written=total)

    def abort(self, messages: list[Any]) -> None:
        """A task failed: what was sent stays (at least once; see the module docs)."""
        total = sum(m.written for m in messages if isinstance(m, NetWriteResult))
        log.info("spark_write_aborted", topic=self.topic, written=total)


def stream_write_id(query_id: str, batch_id: str) -> int:
    """The write id of one micro-batch of a streaming query: the same after a restart."""
    digest = hashlib.blake2b(f"{query_id}/{batch_id}".encode(), digest_size=6).digest()
    return int.from_bytes(digest, "big")


class NetStreamWriter(_NetSetup, DataSourceStreamArrowWriter):  # type: ignore[misc]  # pyspark's classes are Any to mypy (no stubs checked)
    """``df.writeStream`` to a server: each micro-batch's rows, as :class:`NetWriter`."""

    def __init__(self, options: Any, schema: StructType, overwrite: bool) -> None:
        self._setup(options, schema, "streaming sink")
        self.fallback_id = secrets.randbits(48)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NetWriteResult:
        """Send the task's rows of one micro-batch."""
        ctx = TaskContext.get()
        query = ctx.getLocalProperty(_QUERY_ID) if ctx is not None else None
        batch = ctx.getLocalProperty(_BATCH_ID) if ctx is not None else None
        write_id = self.fallback_id if not query or batch is None else stream_write_id(query, batch)
        return self._send(iterator, write_id)

    def commit(self, messages: list[Any], batchId: int) -> None:
        """Every task of micro-batch ``batchId`` succeeded."""
        total = sum(m.written for m in messages if isinstance(m, NetWriteResult))
        log.info("spark_stream_batch_committed", topic=self.topic, batch=batchId, written=total)

    def abort(self, messages: list[Any], batchId: int) -> None:
        """A task of micro-batch ``batchId`` failed: what was sent stays."""
        total = sum(m.written for m in messages if isinstance(m, NetWriteResult))
        log.info("spark_stream_batch_aborted", topic=self.topic, batch=batchId, written=total)
