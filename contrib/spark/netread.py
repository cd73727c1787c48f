"""Reading a planned range over the network, on the executors: pipelined pulls into Arrow.

Each Python worker keeps one :class:`~mqcore.client.transport_remote.RemoteTransport` per
name-server list (:func:`transport`), reused by every task it runs and closed at exit. A
task's range ``[start, end)`` is cut into segments of ``pull_batch_size`` offsets; up to
``pulls_in_flight`` segments are pulled at once, and a segment the broker answered in part
(a broker caps a pull at a number of messages or bytes: Apache RocketMQ at 32 messages) is
pulled again from the answer's ``nextBeginOffset``. The pull bodies are the stored records
back to back, so they go to the column builder as they arrived (:func:`~.columns.build_batch`
over ``(body, None, 0)`` spans): no record is decoded in Python.

Filters travel as the pull's subscription (TAG or SQL92), so the broker sends only matching
records; the builder checks the tag strings again (a broker compares tag hash codes only).

A range never comes back shorter than planned without saying so: offsets the broker no
longer holds (retention, ``OFFSET_MOVED``) fail the task naming the queue and the range,
unless ``fail_on_data_loss=false`` (then they are skipped and logged). A broker that fails
mid-read (a killed master) is left for the group's other members until the route names a
master again; a pull that no member answers within ``pull_timeout_ms`` fails the task.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import struct
import threading
import time
from collections.abc import Iterator
from typing import Any

import attrs
import pyarrow as pa

from mqcore import codec
from mqcore.client.transport_remote import RemoteTransport, _check
from mqcore.errors import DataLossError, MQClientError, RemotingError
from mqcore.logs import get_logger
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.route import MASTER_ID
from mqcore.record.layout import POS_QUEUE_OFFSET
from mqcore.remoting.command import RemotingCommand

from .columns import Span, TagsFilter, build_batch
from .netplan import NetSlice
from .options import Bounds, NetworkOptions, ReadOptions

__all__ = ["READER_GROUP", "PullCounters", "counters", "read_range", "subscription", "transport"]

log = get_logger(__name__)

#: The consumer group named in the source's pulls (it commits nothing).
READER_GROUP = "mqcore_spark_reader"
_BATCH_ROWS = 8192  # offsets covered per Arrow batch handed to Spark
_MAX_BYTES = 64 * 1024 * 1024  # pulled bytes per Arrow batch
_SIZE = struct.Struct(">i")
_OFFSET = struct.Struct(">q")
_RETRY_PAUSE_S = 0.05
_AVOID_S = 2.0  # a member that failed is not asked again for this long


@attrs.define
class PullCounters:
    """What this process's reads moved: pulls answered and bytes of records received."""

    pulls: int = 0
    body_bytes: int = 0
    records_bytes_kept: int = 0

    def reset(self) -> None:
        """Start counting again from zero."""
        self.pulls = self.body_bytes = self.records_bytes_kept = 0


_COUNTERS = PullCounters()
_TRANSPORTS: dict[str, RemoteTransport] = {}
_LOCK = threading.Lock()


def counters() -> PullCounters:
    """The pull counters of this process (what the wire carried to its reads)."""
    return _COUNTERS


def _close_all() -> None:
    with _LOCK:
        found = list(_TRANSPORTS.values())
        _TRANSPORTS.clear()
    for t in found:
        t.close()


def transport(namesrv: str) -> RemoteTransport:
    """This process's transport to ``namesrv`` (made once, reused by every task, closed at
    exit)."""
    with _LOCK:
        found = _TRANSPORTS.get(namesrv)
        if found is None or found.closed:
            if not _TRANSPORTS:
                atexit.register(_close_all)
            found = _TRANSPORTS[namesrv] = RemoteTransport(namesrv)
        return found


def _tag_set(expression: str) -> frozenset[str] | None:
    tags = frozenset(t.strip() for t in expression.split("||") if t.strip())
    return None if not tags or "*" in tags else tags


def subscription(opts: ReadOptions) -> tuple[str, str, TagsFilter | None]:
    """``(expression, type, tags the builder re-checks)`` of the read's pulls."""
    tags = opts.tags
    expression, kind = "*", "TAG"
    if opts.filter_type == "SQL92" and opts.filter:
        expression, kind = opts.filter, "SQL92"
    elif opts.filter_type == "TAG" and opts.filter:
        given = _tag_set(opts.filter)
        if given is not None:
            tags = given if tags is None else tags & given
    if kind == "TAG" and tags is not None:
        expression = " || ".join(sorted(tags)) if tags else "\x00none"
    if tags is None:
        return expression, kind, None
    codes = tuple(sorted({codec.tags_hash_code(t) for t in tags}))
    return expression, kind, (codes, tuple(sorted(t.encode() for t in tags)))


def _cut(body: bytes, end: int) -> bytes:
    """The records of ``body`` before queue offset ``end`` (a filtered scan that ran past the
    segment: the next segment owns the rest). Only the headers are read."""
    view = memoryview(body)
    pos = 0
    while pos + POS_QUEUE_OFFSET + 8 <= len(view):
        if _OFFSET.unpack_from(view, pos + POS_QUEUE_OFFSET)[0] >= end:
            break
        pos += _SIZE.unpack_from(view, pos)[0]
    return bytes(view[:pos])


@attrs.define
class _Segment:
    """Offsets ``[start, end)`` of the range, pulled from ``at`` on."""

    start: int
    end: int
    at: int
    bodies: list[bytes] = attrs.field(factory=list)
    future: concurrent.futures.Future[RemotingCommand] | None = None
    addr: str = ""
    first_try: float = 0.0
    retry_at: float = 0.0

    @property
    def done(self) -> bool:
        return self.at >= self.end


class _RangeReader:
    """The pulls of one planned range, several in flight, answered in any order."""

    def __init__(
        self, t: RemoteTransport, part: NetSlice, net: NetworkOptions, expression: str, kind: str
    ) -> None:
        self.t = t
        self.part = part
        self.net = net
        self.expression = expression
        self.kind = kind
        self.timeout = net.pull_timeout_ms / 1000
        self.suggested = MASTER_ID
        self.avoid: dict[str, float] = {}

    # -- where a pull goes ---------------------------------------------------------------------

    def _members(self, refresh: bool = False) -> dict[int, str]:
        topic = self.part.topic
        route = self.t.refresh_route(topic) if refresh else self.t.get_route_info_by_topic(topic)
        data = route.broker(self.part.broker)
        return dict(data.broker_addrs) if data is not None else {}

    def _addr(self) -> str | None:
        members = self._members()
        now = time.monotonic()
        order = [self.suggested, MASTER_ID, *sorted(members)]
        for broker_id in order:
            addr = members.get(broker_id)
            if addr is not None and self.avoid.get(addr, 0.0) <= now:
                return addr
        return None

    def _failed(self, addr: str, error: Exception) -> None:
        log.info("pull_failed", addr=addr, queue=str(self.part.queue), error=str(error))
        self.avoid[addr] = time.monotonic() + _AVOID_S
        self.suggested = MASTER_ID
        try:
            self._members(refresh=True)  # who serves the group now
        except Exception as exc:  # the name server too: the next try asks again
            log.info("route_refresh_failed", topic=self.part.topic, error=str(exc))

    # -- pulls ------------------------------------------------------------------------------

    def send(self, seg: _Segment) -> None:
        """Pull the rest of ``seg`` (or schedule a retry when no member can be asked)."""
        now = time.monotonic()
        if not seg.first_try:
            seg.first_try = now
        if now - seg.first_try > self.timeout:
            raise MQClientError(
                f"queue {self.part.queue_id} of topic {self.part.topic!r} on broker group "
                f"{self.part.broker}: no member answered a pull of offsets [{seg.at}, "
                f"{seg.end}) within pull_timeout_ms={self.net.pull_timeout_ms}"
            )
        addr = self._addr()
        if addr is None:
            seg.retry_at = now + _RETRY_PAUSE_S * 4
            return
        header = headers.PullMessageRequestHeader(
            consumer_group=READER_GROUP,
            topic=self.part.topic,
            queue_id=self.part.queue_id,
            queue_offset=seg.at,
            max_msg_nums=min(self.net.pull_batch_size, seg.end - seg.at),
            sys_flag=headers.PULL_FLAG_SUBSCRIPTION,
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription=self.expression,
            sub_version=0,
            expression_type=self.kind,
        )
        cmd = RemotingCommand.request(RequestCode.PULL_MESSAGE, header)
        try:
            seg.future = self.t.client.invoke_async(addr, cmd, self.timeout)
            seg.addr = addr
        except RemotingError as exc:
            self._failed(addr, exc)
            seg.retry_at = time.monotonic()

    def answer(self, seg: _Segment) -> None:
        """Take ``seg``'s answer: keep its records, move ``at``, or plan the retry."""
        future, seg.future = seg.future, None
        assert future is not None
        try:
            resp = future.result()
        except RemotingError as exc:
            self._failed(seg.addr, exc)
            seg.retry_at = time.monotonic()
            return
        code = resp.code
        if code not in (
            ResponseCode.SUCCESS,
            ResponseCode.PULL_NOT_FOUND,
            ResponseCode.PULL_RETRY_IMMEDIATELY,
            ResponseCode.PULL_OFFSET_MOVED,
        ):
            if code in (ResponseCode.SYSTEM_BUSY, ResponseCode.SERVICE_NOT_AVAILABLE):
                seg.retry_at = time.monotonic() + _RETRY_PAUSE_S
                return
            _check(resp)
        h = resp.read_header(headers.PullMessageResponseHeader)
        self.suggested = int(h.suggest_which_broker_id)
        nxt = int(h.next_begin_offset)
        _COUNTERS.pulls += 1
        if code == ResponseCode.SUCCESS:
            body = resp.body or b""
            _COUNTERS.body_bytes += len(body)
            if nxt > seg.end:
                body = _cut(bytes(body), seg.end)
            if body:
                seg.bodies.append(bytes(body))
                _COUNTERS.records_bytes_kept += len(body)
            self._advance(seg, nxt)
        elif code == ResponseCode.PULL_RETRY_IMMEDIATELY:
            self._advance(seg, nxt)  # nothing matched the filter up to nxt
        elif seg.at < h.min_offset or (code == ResponseCode.PULL_NOT_FOUND and nxt > seg.at):
            # Offsets the broker no longer holds (retention): min_offset (or nxt) is the
            # first it still has.
            self._lost(seg, max(int(h.min_offset), nxt))
        else:
            # Not there (yet): a slave behind its master, or a queue shorter than planned.
            # Asked again until pull_timeout_ms, then the task fails: never fewer rows.
            if time.monotonic() - seg.first_try > self.timeout:
                raise DataLossError(
                    f"queue {self.part.queue_id} of topic {self.part.topic!r} on broker group "
                    f"{self.part.broker} holds offsets up to {h.max_offset} only; the planned "
                    f"range [{self.part.start}, {self.part.end}) cannot be read from "
                    f"{seg.at} on"
                )
            seg.retry_at = time.monotonic() + _RETRY_PAUSE_S

    def _advance(self, seg: _Segment, nxt: int) -> None:
        if nxt <= seg.at:
            raise MQClientError(
                f"queue {self.part.queue_id} of topic {self.part.topic!r}: the broker answered "
                f"a pull at offset {seg.at} with nextBeginOffset {nxt}"
            )
        seg.at = min(nxt, seg.end)
        seg.first_try = 0.0

    def _lost(self, seg: _Segment, first_held: int) -> None:
        gone = (seg.at, min(max(first_held, seg.at + 1), self.part.end))
        where = (
            f"queue {self.part.queue_id} of topic {self.part.topic!r} on broker group "
            f"{self.part.broker}: offsets [{gone[0]}, {gone[1]}) of the planned range "
            f"[{self.part.start}, {self.part.end}) are no longer stored"
        )
        if self.net.fail_on_data_loss:
            raise DataLossError(
                f"{where} (removed by retention?); set fail_on_data_loss=false to skip them"
            )
        log.warning(
            "data_loss_skipped",
            topic=self.part.topic,
            broker=self.part.broker,
            queue_id=self.part.queue_id,
            start=gone[0],
            end=gone[1],
        )
        seg.at = min(gone[1], seg.end)
        seg.first_try = 0.0

    # -- the loop -----------------------------------------------------------------------------

    def segments(self) -> Iterator[_Segment]:
        """The range's segments, in order, each once its records are all in."""
        size = self.net.pull_batch_size
        next_start = self.part.start
        active: list[_Segment] = []
        window = self.net.pulls_in_flight
        while active or next_start < self.part.end:
            while len(active) < window and next_start < self.part.end:
                end = min(next_start + size, self.part.end)
                active.append(_Segment(next_start, end, next_start))
                next_start = end
            while active and active[0].done and active[0].future is None:
                yield active.pop(0)
            if not active:
                continue
            now = time.monotonic()
            for seg in active:
                if not seg.done and seg.future is None and seg.retry_at <= now:
                    self.send(seg)
            waiting = [s.future for s in active if s.future is not None]
            if not waiting:
                pause = min((s.retry_at for s in active if not s.done), default=now) - now
                time.sleep(max(0.0, min(pause, _RETRY_PAUSE_S)))
                continue
            finished, _ = concurrent.futures.wait(
                waiting, timeout=self.timeout + 1, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for seg in active:
                if seg.future is not None and seg.future in finished:
                    self.answer(seg)


def read_range(
    t: RemoteTransport,
    part: NetSlice,
    schema: pa.Schema,
    opts: ReadOptions,
    *,
    batch_rows: int = _BATCH_ROWS,
    python: bool = False,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches (columns of ``schema``) of the records of ``part`` that pass the read's
    filters, pulled from its broker group."""
    net = opts.network
    assert net is not None
    expression, kind, tags = subscription(opts)
    reader = _RangeReader(t, part, net, expression, kind)
    timestamps: Bounds = opts.timestamps
    pending: list[Span] = []
    covered = 0
    nbytes = 0

    def batch() -> pa.RecordBatch:
        out, _ = build_batch(
            pending,
            schema,
            ts_low=timestamps.low,
            ts_high=timestamps.high,
            end_offset=part.end,
            tags=tags,
            python=python,
        )
        return out

    for seg in reader.segments():
        pending.extend((body, None, 0) for body in seg.bodies)
        covered += seg.end - seg.start
        nbytes += sum(len(b) for b in seg.bodies)
        if covered >= batch_rows or nbytes >= _MAX_BYTES:
            out = batch()
            pending, covered, nbytes = [], 0, 0
            if out.num_rows:
                yield out
    if pending:
        out = batch()
        if out.num_rows:
            yield out


def read_partition(part: NetSlice, schema: pa.Schema, opts: ReadOptions) -> Iterator[Any]:
    """A task's read: ``part`` through this worker's transport."""
    net = opts.network
    assert net is not None
    yield from read_range(transport(net.namesrv), part, schema, opts)
