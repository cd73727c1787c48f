"""Planning a read over the network, on the driver: queues from the route, bounds from the masters.

A read with option ``namesrv`` asks the name server for each topic's route (the broker groups
and their readable queues) and each broker group for its queues' offsets (one
GET_TOPIC_STATS_INFO per group, as ``mqcore topic stats`` does). Everything that depends on
the moment (``latest``, JSON offsets, timestamps) is resolved here, into fixed
:class:`NetSlice` ranges: a retried task reads exactly the range its first attempt had.

Errors come before any task runs, each on one line: a name server that does not answer
(naming the addresses), a topic it does not know, a filter the server refuses.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import attrs

from mqcore.client.transport_remote import RemoteTransport
from mqcore.errors import (
    BrokerError,
    FilterExpressionError,
    InvalidArgumentError,
    MQClientError,
    RemotingError,
    TopicNotExistError,
)
from mqcore.message import MessageQueue
from mqcore.protocol import admin_bodies, headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.route import MASTER_ID, TopicRoute
from mqcore.remoting.command import RemotingCommand

from .options import Bounds, NetworkOptions, Positions, ReadOptions

__all__ = [
    "NetSlice",
    "QueueKey",
    "check_filter",
    "plan_batch",
    "queue_bounds",
    "routes",
    "split_for_partitions",
]

#: ``(topic, broker group, queue id)``: one queue of a cluster.
QueueKey = tuple[str, str, int]
_EARLIEST, _LATEST = -2, -1


@attrs.frozen
class NetSlice:
    """Queue offsets ``[start, end)`` of one queue of one broker group: one Spark partition."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int

    @property
    def count(self) -> int:
        """Number of queue offsets the slice covers."""
        return max(0, self.end - self.start)

    @property
    def queue(self) -> MessageQueue:
        """The slice's queue."""
        return MessageQueue(self.topic, self.broker, self.queue_id)


def routes(transport: RemoteTransport, opts: ReadOptions) -> dict[str, TopicRoute]:
    """Each topic's route, fresh from the name server.

    :raises InvalidArgumentError: no name server answers, or one does not know a topic.
    """
    out = {}
    for topic in opts.topics:
        try:
            out[topic] = transport.refresh_route(topic)
        except TopicNotExistError:
            raise InvalidArgumentError(
                f"topic {topic!r} not found: the name server(s) "
                f"{';'.join(transport.namesrv_addrs)} have no route for it"
            ) from None
        except MQClientError as exc:
            raise InvalidArgumentError(
                f"cannot plan the read: {str(exc).splitlines()[0]}"
            ) from None
    return out


def _selected(opts: ReadOptions, topic: str, queue_id: int) -> bool:
    if opts.only_topics is not None and topic not in opts.only_topics:
        return False
    if opts.queue_ids is not None and queue_id not in opts.queue_ids:
        return False
    return opts.queue_range.contains(queue_id)


def _queues(opts: ReadOptions, route: TopicRoute) -> Iterator[MessageQueue]:
    for mq in route.read_queues():
        if _selected(opts, mq.topic, mq.queue_id):
            yield mq


def _group_addr(route: TopicRoute, broker: str) -> str | None:
    data = route.broker(broker)
    members = dict(data.broker_addrs) if data is not None else {}
    if not members:
        return None
    return members.get(MASTER_ID) or members[min(members)]


def queue_bounds(
    transport: RemoteTransport, topic: str, route: TopicRoute, queues: Iterable[MessageQueue]
) -> dict[MessageQueue, tuple[int, int]]:
    """``(min offset, max offset)`` of each of ``queues``: one GET_TOPIC_STATS_INFO per group
    (its master, else a slave while it has none); GET_MIN/MAX_OFFSET for a queue it missed."""
    wanted = list(queues)
    out: dict[MessageQueue, tuple[int, int]] = {}
    header = headers.GetTopicStatsInfoRequestHeader(topic=topic)
    for broker in sorted({mq.broker_name for mq in wanted}):
        addr = _group_addr(route, broker)
        if addr is None:
            continue
        try:
            cmd = RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, header)
            resp = transport.client.invoke_retry_busy(addr, cmd, transport.timeout)
        except RemotingError:
            continue  # asked queue by queue below, through the transport's failover
        if resp.code != ResponseCode.SUCCESS:
            continue
        table = admin_bodies.TopicStatsTable.decode(resp.body or b"{}").offset_table
        for mq, stats in table.items():
            out[MessageQueue(topic, broker, mq.queue_id)] = (stats.min_offset, stats.max_offset)
    for mq in wanted:
        if mq not in out:
            out[mq] = (transport.get_min_offset(mq), transport.get_max_offset(mq))
    return {mq: out[mq] for mq in wanted}


def _given(positions: Positions, route: TopicRoute, name: str) -> dict[QueueKey, int]:
    """The offsets a JSON ``positions`` names for ``route``'s topic, by queue."""
    if isinstance(positions, str):
        return {}
    topic = route.topic
    out: dict[QueueKey, int] = {}
    groups = sorted({b.broker_name for b in route.broker_datas})
    for broker, queues in positions.get(topic, {}).items():
        if broker is None:
            if len(groups) != 1:
                raise InvalidArgumentError(
                    f"{name} gives queues of {topic!r} without a broker group, but it lives on "
                    f"{len(groups)} groups ({', '.join(groups)}); write "
                    f'{{"{topic}": {{"{groups[0] if groups else "broker-a"}": {{"0": 12}}}}}}'
                )
            broker = groups[0]
        for qid, off in queues.items():
            out[(topic, broker, qid)] = off
    return out


def _resolve(value: int, low: int, high: int) -> int:
    if value == _EARLIEST:
        return low
    if value == _LATEST:
        return high
    return value


def _default(positions: Positions, fallback: int) -> int:
    if positions == "earliest":
        return _EARLIEST
    if positions == "latest":
        return _LATEST
    return fallback


def check_filter(transport: RemoteTransport, opts: ReadOptions, route: TopicRoute) -> None:
    """Ask a broker of ``route`` to take the read's filter (one pull of one message), so a
    SQL92 expression the server refuses fails here, before any task.

    :raises FilterExpressionError: the server refused the expression (or SQL92 at all).
    """
    if opts.filter_type != "SQL92" or not opts.filter:
        return
    queues = route.read_queues()
    if not queues:
        return
    mq = queues[0]
    try:
        transport.pull_message(
            mq, _PROBE_GROUP, 0, 1, sub_expression=opts.filter, expression_type="SQL92"
        )
    except FilterExpressionError as exc:
        raise FilterExpressionError(
            f"the server refused filter {opts.filter!r}: {str(exc).splitlines()[0]}"
        ) from None
    except BrokerError as exc:
        if "SQL92" in str(exc) or "enablePropertyFilter" in str(exc) or "filter" in str(exc):
            raise FilterExpressionError(
                f"broker group {mq.broker_name} does not filter by SQL92 ({exc}); an Apache "
                f"RocketMQ broker needs enablePropertyFilter=true in its broker.conf"
            ) from None
        raise


_PROBE_GROUP = "mqcore_spark_reader"


def plan_ranges(
    transport: RemoteTransport, opts: ReadOptions, net: NetworkOptions
) -> list[NetSlice]:
    """Every selected queue's range ``[start, end)``, resolved (one slice per queue)."""
    out: list[NetSlice] = []
    for topic, route in routes(transport, opts).items():
        check_filter(transport, opts, route)
        queues = list(_queues(opts, route))
        bounds = queue_bounds(transport, topic, route, queues)
        starts = _given(net.starting, route, "starting_offsets")
        ends = _given(net.ending, route, "ending_offsets")
        for mq in queues:
            low, high = bounds[mq]
            key = (topic, mq.broker_name, mq.queue_id)
            first = _resolve(starts.get(key, _default(net.starting, _EARLIEST)), low, high)
            last = _resolve(ends.get(key, _default(net.ending, _LATEST)), low, high)
            span = Bounds(first, last).narrow(opts.offsets.low, opts.offsets.high)
            if opts.timestamps.low is not None:
                span = span.narrow(
                    low=transport.search_offset_by_timestamp(mq, opts.timestamps.low)
                )
            if opts.timestamps.high is not None:
                span = span.narrow(
                    high=transport.search_offset_by_timestamp(mq, opts.timestamps.high)
                )
            assert span.low is not None and span.high is not None
            if span.high > span.low:
                out.append(NetSlice(topic, mq.broker_name, mq.queue_id, span.low, span.high))
    return out


def split_for_partitions(
    ranges: list[NetSlice], max_records: int | None, min_partitions: int | None
) -> list[NetSlice]:
    """Ranges cut to at most ``max_records`` offsets each, then the largest ones halved until
    there are ``min_partitions`` (Spark Kafka's ``minPartitions``)."""
    out: list[NetSlice] = []
    for r in ranges:
        if not max_records:
            out.append(r)
            continue
        for s in range(r.start, r.end, max_records):
            out.append(attrs.evolve(r, start=s, end=min(s + max_records, r.end)))
    while min_partitions and len(out) < min_partitions:
        big = max(range(len(out)), key=lambda i: out[i].count, default=None)
        if big is None or out[big].count < 2:
            break
        r = out[big]
        mid = r.start + r.count // 2
        out[big : big + 1] = [attrs.evolve(r, end=mid), attrs.evolve(r, start=mid)]
    return out


def plan_batch(transport: RemoteTransport, opts: ReadOptions) -> list[NetSlice]:
    """The batch plan: every selected queue's resolved range, split into partitions."""
    net = opts.network
    assert net is not None
    ranges = plan_ranges(transport, opts, net)
    return split_for_partitions(ranges, opts.max_records_per_partition, net.min_partitions)


def stream_bounds(
    transport: RemoteTransport, opts: ReadOptions
) -> dict[str, dict[str, dict[str, tuple[int, int]]]]:
    """Streaming: ``{topic: {broker: {"queue_id": (min offset, max offset)}}}``."""
    out: dict[str, dict[str, dict[str, tuple[int, int]]]] = {}
    for topic, route in routes(transport, opts).items():
        out[topic] = {}
        found = queue_bounds(transport, topic, route, _queues(opts, route))
        for mq, span in found.items():
            out[topic].setdefault(mq.broker_name, {})[str(mq.queue_id)] = span
    return out


def start_positions(
    net: NetworkOptions, bounds: dict[str, dict[str, dict[str, tuple[int, int]]]], route_of: Any
) -> dict[str, dict[str, dict[str, int]]]:
    """Where a new stream starts: ``starting_offsets`` resolved against ``bounds``."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for topic, groups in bounds.items():
        given = _given(net.starting, route_of(topic), "starting_offsets")
        out[topic] = {}
        for broker, queues in groups.items():
            out[topic][broker] = {}
            for qid, (low, high) in queues.items():
                value = given.get((topic, broker, int(qid)), _default(net.starting, _EARLIEST))
                out[topic][broker][qid] = _resolve(value, low, high)
    return out
