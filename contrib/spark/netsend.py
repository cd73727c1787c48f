"""Sending a task's rows to the masters of a topic: the network sink's engine (no pyspark).

Rows go to the topic's writable queues as the local sink sends them to its queues: a row's
``queue_id`` (when present and not null) picks ``queues[queue_id % len(queues)]``, the
route's writable queues in order (for one broker group, queue ``queue_id % queues`` as the
local sink); other rows go round-robin from their running row number. Each queue's rows are
cut into SEND_BATCH_MESSAGE bodies (:mod:`.netbatch`), and up to ``in_flight`` of them are
on the wire at a time, answered in any order.

A body whose master fails (refused connection, timeout, a busy or unavailable answer) is
sent again: to a queue of another broker group, as RocketMQ's producer retries, unless a row
of it has a ``queue_id`` (pinned rows wait for their own group, ``retries`` times). The
failed group is avoided for the rest of the task. A body answered by a timeout may have been
stored as well: delivery is at least once, and the duplicates carry the same ``UNIQ_KEY``.
"""

from __future__ import annotations

import atexit
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from mqcore.client.transport_remote import RemoteTransport
from mqcore.errors import (
    BrokerError,
    MQClientError,
    NoRouteInfoError,
    RemotingConnectError,
    RemotingError,
    SlaveNotAcknowledgedError,
)
from mqcore.logs import get_logger
from mqcore.message import MessageQueue
from mqcore.protocol.codes import ResponseCode
from mqcore.remoting.command import RemotingCommand

from .netbatch import batch_bodies

__all__ = ["DEFAULT_BATCH", "DEFAULT_IN_FLIGHT", "SendSettings", "send_batches", "transport"]

log = get_logger(__name__)

#: Producer group the sink's sends name (brokers keep per-group send statistics).
PRODUCER_GROUP = "mqcore_spark_sink"
# Answers worth sending again elsewhere (RocketMQ's DefaultMQProducer.retryResponseCodes).
_RETRY_CODES = frozenset(
    {
        ResponseCode.TOPIC_NOT_EXIST,
        ResponseCode.SERVICE_NOT_AVAILABLE,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.SYSTEM_BUSY,
        ResponseCode.NO_PERMISSION,
    }
)
_MAX_BODY = 4 * 1024 * 1024 - 64 * 1024  # under the broker's maxMessageSize (4 MiB)

DEFAULT_BATCH = 512  # rows per body
DEFAULT_IN_FLIGHT = 4  # bodies on the wire per task

_transports: dict[str, RemoteTransport] = {}
_transports_lock = threading.Lock()


def transport(namesrv: str) -> RemoteTransport:
    """This process's transport to ``namesrv`` (a Python worker reuses it across tasks; it
    is closed when the process exits)."""
    with _transports_lock:
        found = _transports.get(namesrv)
        if found is None or found.closed:
            found = _transports[namesrv] = RemoteTransport(namesrv)
        return found


@atexit.register
def _close_transports() -> None:
    with _transports_lock:
        for t in _transports.values():
            t.close()
        _transports.clear()


@attrs.frozen(kw_only=True)
class SendSettings:
    """How a task sends: rows per body, bodies on the wire, seconds per send, retries."""

    batch_size: int = DEFAULT_BATCH
    in_flight: int = DEFAULT_IN_FLIGHT
    timeout: float = 3.0
    retries: int = 2  # RocketMQ's retryTimesWhenSendFailed
    max_bytes: int = _MAX_BODY


@attrs.define(eq=False)
class _Send:
    queue: MessageQueue
    body: bytes
    count: int
    pinned: bool
    attempt: int = 0
    future: Future[RemotingCommand] | None = None
    error: Exception | None = None


class _Sender:
    """One task's sends to one topic (see the module docstring)."""

    def __init__(self, client: RemoteTransport, topic: str, settings: SendSettings) -> None:
        self.client = client
        self.topic = topic
        self.settings = settings
        self.down: set[str] = set()  # broker groups that failed during this task
        self.flight: deque[_Send] = deque()
        self.sent = 0
        self.queues = self._queues()

    def _queues(self, fresh: bool = False) -> list[MessageQueue]:
        if fresh:
            self.client.forget_route(self.topic)
        route = self.client.get_route_info_by_topic(self.topic)
        queues = sorted(route.write_queues(), key=lambda q: (q.broker_name, q.queue_id))
        if not queues:
            raise NoRouteInfoError(
                f"topic {self.topic} has no writable queue (is every master down?)",
                topic=self.topic,
            )
        return queues

    def _elsewhere(self, failed: MessageQueue) -> MessageQueue:
        """A queue for an unpinned body whose group failed: another live group's queue."""
        others = [q for q in self.queues if q.broker_name not in self.down]
        if not others:
            self.queues = self._queues(fresh=True)
            others = [q for q in self.queues if q.broker_name != failed.broker_name]
        if not others:
            return failed  # a single group: its master again
        return others[(failed.queue_id + self.sent) % len(others)]

    def submit(self, send: _Send) -> None:
        """Put ``send`` on the wire, first waiting for the oldest when enough are."""
        while len(self.flight) >= self.settings.in_flight:
            self._settle(self.flight.popleft())
        if not send.pinned and send.queue.broker_name in self.down:
            send.queue = self._elsewhere(send.queue)
        self._start(send)
        self.flight.append(send)

    def _start(self, send: _Send) -> None:
        send.error = None
        try:
            send.future = self.client.send_batch_async(
                send.queue,
                send.body,
                producer_group=PRODUCER_GROUP,
                born_timestamp=time.time_ns() // 1_000_000,
                timeout=self.settings.timeout,
            )
        except (RemotingError, MQClientError) as exc:  # unreachable, or no master now
            send.future, send.error = None, exc

    def _settle(self, send: _Send) -> None:
        """Wait for ``send``'s answer; send it again (elsewhere) while it fails and may."""
        while True:
            error = send.error
            if error is None:
                assert send.future is not None
                try:
                    RemoteTransport.send_results(send.future.result())
                    self.sent += send.count
                    return
                except SlaveNotAcknowledgedError:  # stored by the master: delivered
                    self.sent += send.count
                    return
                except Exception as exc:
                    error = exc
            if not self._retryable(error) or send.attempt >= self.settings.retries:
                raise MQClientError(
                    f"sending {send.count} rows to {send.queue} failed after "
                    f"{send.attempt + 1} attempt(s): {error}"
                ) from error
            send.attempt += 1
            failed = send.queue
            self.down.add(failed.broker_name)
            log.info(
                "spark_send_retried",
                topic=self.topic,
                broker=failed.broker_name,
                queue_id=failed.queue_id,
                rows=send.count,
                pinned=send.pinned,
                error=str(error),
            )
            self.queues = self._queues(fresh=True)
            if send.pinned:
                time.sleep(0.2 * send.attempt)  # its own master: give it a moment
            else:
                send.queue = self._elsewhere(failed)
            self._start(send)

    @staticmethod
    def _retryable(error: BaseException) -> bool:
        if isinstance(error, RemotingConnectError | RemotingError):
            return True
        code = getattr(error, "code", None)
        return isinstance(error, BrokerError | MQClientError) and code in _RETRY_CODES

    def drain(self) -> None:
        """Wait for every body on the wire."""
        while self.flight:
            self._settle(self.flight.popleft())


def _groups(
    batch: pa.RecordBatch, first_row: int, queues: int
) -> Iterator[tuple[int, bool, list[int]]]:
    """``(queue index, pinned, rows)`` of a batch: rows by queue, pinned apart."""
    n = batch.num_rows
    qids = batch.column("queue_id") if "queue_id" in batch.schema.names else None
    rows = pa.array(range(first_row, first_row + n), pa.int64())
    if qids is None or qids.null_count == n:
        for k in range(min(n, queues)):
            yield (first_row + k) % queues, False, list(range(k, n, queues))
        return
    pinned = pc.is_valid(qids)
    q = pc.if_else(pinned, qids.cast(pa.int64()), rows)
    r = pc.modulo(q, queues)
    r = pc.if_else(pc.less(r, 0), pc.add(r, queues), r)
    for queue in sorted(pc.unique(r).to_pylist()):
        here = pc.equal(r, queue)
        for pin in (False, True):
            idx = pc.indices_nonzero(pc.and_(here, pinned if pin else pc.invert(pinned)))
            if len(idx):
                yield queue, pin, idx.to_pylist()


def send_batches(
    client: RemoteTransport,
    topic: str,
    batches: Iterable[pa.RecordBatch],
    prefix: str,
    first_row: int,
    settings: SendSettings,
) -> int:
    """Send the rows of ``batches`` to ``topic``'s masters; the number sent. Row ``i`` of
    the task (counting from ``first_row``) gets ``UNIQ_KEY`` ``prefix`` + ``i`` in hex."""
    sender = _Sender(client, topic, settings)
    row = first_row
    try:
        for batch in batches:
            n = batch.num_rows
            if not n:
                continue
            queues = sender.queues
            for index, pinned, rows in _groups(batch, row, len(queues)):
                bodies = batch_bodies(
                    batch, rows, topic, prefix, row, settings.batch_size, settings.max_bytes
                )
                for body, count in bodies:
                    sender.submit(_Send(queues[index], body, count, pinned))
            row += n
        sender.drain()
    finally:
        # A failing task leaves nothing on the wire behind it (answers are dropped).
        for send in sender.flight:
            if send.future is not None:
                send.future.cancel()
    return sender.sent
