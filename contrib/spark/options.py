"""Options of the ``mqcore`` Spark source, what they narrow, and the (queue, offset range) plan.

Everything here is plain Python (no pyspark), so the planning rules are tested on their own:
a read is the set of queues the options select, each cut to an offset range, and each range
is split into slices of at most ``max_records_per_partition`` records. Slices are half-open
``[start, end)`` ranges of queue offsets, so consecutive slices never share or skip a record.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from mqcore.errors import InvalidArgumentError

__all__ = [
    "BATCH_OPTIONS",
    "NET_WRITE_OPTIONS",
    "STREAM_OPTIONS",
    "WRITE_OPTIONS",
    "Bounds",
    "NetworkOptions",
    "Positions",
    "ReadOptions",
    "Slice",
    "check_location",
    "parse_positions",
    "parse_starting_offsets",
    "parse_timestamp",
    "split_range",
]

_COMMON = {"path", "topic", "store"}
#: Options of reading over the network (``namesrv``), as Spark's Kafka source names them.
NETWORK_READ_OPTIONS = frozenset(
    {"namesrv", "min_partitions", "fail_on_data_loss"}
    | {"pull_batch_size", "pulls_in_flight", "pull_timeout_ms"}
)
#: Option names of ``spark.read.format("mqcore")`` (exact, case-insensitive as Spark's).
BATCH_OPTIONS = frozenset(
    _COMMON
    | {
        "queue_ids",
        "start_offset",
        "end_offset",
        "start_timestamp",
        "end_timestamp",
        "filter_type",
        "filter",
        "max_records_per_partition",
    }
    | NETWORK_READ_OPTIONS
    | {"starting_offsets", "ending_offsets"}
)
#: Option names of ``spark.readStream.format("mqcore")``.
STREAM_OPTIONS = frozenset(
    _COMMON
    | {"queue_ids", "filter_type", "filter", "max_records_per_partition"}
    | {"starting_offsets", "max_records_per_trigger"}
    | NETWORK_READ_OPTIONS
    | {"commit_group"}
)
# Read options that only mean something over the network (refused beside ``path``).
_NETWORK_ONLY = (NETWORK_READ_OPTIONS - {"namesrv"}) | {"ending_offsets", "commit_group"}
#: Option names of ``df.write.format("mqcore")`` that only a write to a server takes.
NET_WRITE_OPTIONS = frozenset({"namesrv", "sends_in_flight", "send_timeout_ms"})
#: Option names of ``df.write.format("mqcore")`` and ``df.writeStream.format("mqcore")``.
WRITE_OPTIONS = frozenset(
    _COMMON | {"queue_nums", "batch_size", "lock_timeout"} | NET_WRITE_OPTIONS
)


@attrs.frozen
class Slice:
    """Queue offsets ``[start, end)`` of one queue of one topic: the unit of a partition."""

    topic: str
    queue_id: int
    start: int
    end: int

    @property
    def count(self) -> int:
        """Number of queue offsets the slice covers."""
        return max(0, self.end - self.start)


@attrs.frozen
class Bounds:
    """A half-open integer range ``[low, high)``; ``None`` means unbounded on that side."""

    low: int | None = None
    high: int | None = None

    def narrow(self, low: int | None = None, high: int | None = None) -> Bounds:
        """The intersection with ``[low, high)``."""
        new_low = self.low if low is None else low if self.low is None else max(self.low, low)
        new_high = (
            self.high if high is None else high if self.high is None else min(self.high, high)
        )
        return Bounds(new_low, new_high)

    def contains(self, value: int) -> bool:
        """Whether ``value`` lies in the range."""
        return (self.low is None or value >= self.low) and (self.high is None or value < self.high)

    @property
    def empty(self) -> bool:
        """Whether no integer lies in the range."""
        return self.low is not None and self.high is not None and self.low >= self.high


def split_range(topic: str, queue_id: int, start: int, end: int, limit: int | None) -> list[Slice]:
    """Cut ``[start, end)`` into slices of at most ``limit`` offsets (one slice without one)."""
    if end <= start:
        return []
    if not limit:
        return [Slice(topic, queue_id, start, end)]
    return [Slice(topic, queue_id, s, min(s + limit, end)) for s in range(start, end, limit)]


def parse_timestamp(name: str, value: Any) -> int:
    """Milliseconds since the epoch from an integer or an ISO-8601 date/time (UTC if naive)."""
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        pass
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgumentError(
            f"option {name}={value!r} is neither milliseconds since the epoch nor an "
            f"ISO-8601 date/time such as 2024-05-01T12:00:00Z"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def _int(name: str, value: Any, minimum: int = 0) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise InvalidArgumentError(f"option {name}={value!r} must be an integer") from None
    if number < minimum:
        raise InvalidArgumentError(f"option {name}={value!r} must be >= {minimum}")
    return number


def _split(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


def parse_starting_offsets(
    value: str | None, topics: Iterable[str]
) -> str | dict[str, dict[int, int]]:
    """``earliest``, ``latest`` or Spark Kafka's JSON ``{"T": {"0": 12, "1": -2}}``.

    In the JSON form ``-2`` means earliest and ``-1`` latest, as in Spark's Kafka source;
    queues the JSON leaves out start at the earliest offset.
    """
    text = (value or "earliest").strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        data = json.loads(text)
        out = {
            str(topic): {int(qid): int(off) for qid, off in queues.items()}
            for topic, queues in data.items()
        }
    except (ValueError, AttributeError, TypeError):
        raise InvalidArgumentError(
            f"option starting_offsets={value!r} must be earliest, latest or JSON like "
            f'{{"T": {{"0": 12, "1": -2}}}} (-2 = earliest, -1 = latest)'
        ) from None
    unknown = sorted(set(out) - set(topics))
    if unknown:
        raise InvalidArgumentError(
            f"starting_offsets names topic(s) {', '.join(unknown)} the query does not read; "
            f"it reads {', '.join(topics)}"
        )
    for topic, queues in out.items():
        for qid, off in queues.items():
            if qid < 0 or off < -2:
                raise InvalidArgumentError(
                    f"starting_offsets: queue {qid} of {topic!r} has offset {off}; use an offset "
                    f">= 0, -2 (earliest) or -1 (latest)"
                )
    return out


def check_location(options: Mapping[str, Any]) -> None:
    """Refuse ``path`` and ``namesrv`` together: a read or write goes to one place.

    ``options`` are a source's or sink's options (any case). Used by every direction
    (``spark.read``, ``spark.readStream``, ``df.write``, ``df.writeStream``).
    """
    names = {str(k).lower(): v for k, v in options.items()}
    if names.get("path") and names.get("namesrv"):
        raise InvalidArgumentError(
            f"options path={names['path']!r} and namesrv={names['namesrv']!r} are both given; "
            f"give path for a data directory on this machine or namesrv for a running server "
            f"(host:port[;host:port]), not both"
        )


#: Offsets over the network: ``earliest``, ``latest``, or ``{topic: {broker: {queue: offset}}}``
#: where the broker is ``None`` when the JSON left it out (the topic's one broker group).
Positions = str | dict[str, dict[str | None, dict[int, int]]]


def _queue_offsets(name: str, topic: str, queues: Any) -> dict[int, int]:
    out = {int(qid): int(off) for qid, off in queues.items()}
    for qid, off in out.items():
        if qid < 0 or off < -2:
            raise InvalidArgumentError(
                f"{name}: queue {qid} of {topic!r} has offset {off}; use an offset >= 0, "
                f"-2 (earliest) or -1 (latest)"
            )
    return out


def parse_positions(name: str, value: str | None, topics: Iterable[str], default: str) -> Positions:
    """``earliest``, ``latest``, or Spark Kafka's JSON per topic, broker group and queue.

    ``{"T": {"broker-a": {"0": 12}}}`` names queue 0 of group ``broker-a``; ``{"T": {"0": 12}}``
    is accepted for a topic on one broker group. ``-2`` is earliest and ``-1`` latest.
    """
    text = (value or default).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        data = json.loads(text)
        out: dict[str, dict[str | None, dict[int, int]]] = {}
        for topic, inner in data.items():
            values = list(inner.values())
            if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
                out[str(topic)] = {None: _queue_offsets(name, topic, inner)}
            else:
                out[str(topic)] = {
                    str(broker): _queue_offsets(name, topic, queues)
                    for broker, queues in inner.items()
                }
    except (ValueError, AttributeError, TypeError) as exc:
        if isinstance(exc, InvalidArgumentError):
            raise
        raise InvalidArgumentError(
            f"option {name}={value!r} must be earliest, latest or JSON like "
            f'{{"T": {{"broker-a": {{"0": 12, "1": -2}}}}}} (-2 = earliest, -1 = latest)'
        ) from None
    unknown = sorted(set(out) - set(topics))
    if unknown:
        raise InvalidArgumentError(
            f"{name} names topic(s) {', '.join(unknown)} the query does not read; "
            f"it reads {', '.join(topics)}"
        )
    return out


def _bool(name: str, value: Any) -> bool:
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise InvalidArgumentError(f"option {name}={value!r} must be true or false")
    return text == "true"


PULL_BATCH_SIZE = 1024  # messages asked per pull (a broker may answer fewer)
PULLS_IN_FLIGHT = 4  # pulls a task keeps outstanding
PULL_TIMEOUT_MS = 30_000  # a pull's answer, and a failed broker's recovery, waited for


@attrs.frozen(kw_only=True)
class NetworkOptions:
    """How a read over the network (option ``namesrv``) plans and pulls."""

    namesrv: str
    #: Batch: ``starting_offsets``/``ending_offsets``; stream: ``starting_offsets``.
    starting: Positions = "earliest"
    ending: Positions = "latest"
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    pull_batch_size: int = PULL_BATCH_SIZE
    pulls_in_flight: int = PULLS_IN_FLIGHT
    pull_timeout_ms: int = PULL_TIMEOUT_MS
    commit_group: str | None = None

    @classmethod
    def parse(
        cls, opts: Mapping[str, Any], topics: tuple[str, ...], *, streaming: bool
    ) -> NetworkOptions:
        """The network options of ``opts`` (lower-case names), checked."""

        def num(name: str, default: int, minimum: int = 1) -> int:
            return _int(name, opts[name], minimum) if opts.get(name) else default

        return cls(
            namesrv=str(opts["namesrv"]).strip(),
            starting=parse_positions(
                "starting_offsets", opts.get("starting_offsets"), topics, "earliest"
            ),
            ending=parse_positions("ending_offsets", opts.get("ending_offsets"), topics, "latest")
            if not streaming
            else "latest",
            min_partitions=num("min_partitions", 0) or None,
            fail_on_data_loss=_bool("fail_on_data_loss", opts.get("fail_on_data_loss", "true")),
            pull_batch_size=num("pull_batch_size", PULL_BATCH_SIZE),
            pulls_in_flight=num("pulls_in_flight", PULLS_IN_FLIGHT),
            pull_timeout_ms=num("pull_timeout_ms", PULL_TIMEOUT_MS),
            commit_group=str(opts["commit_group"]).strip() if opts.get("commit_group") else None,
        )


@attrs.frozen(kw_only=True)
class ReadOptions:
    """The parsed, validated options of a read (batch or streaming)."""

    path: str
    topics: tuple[str, ...]
    store: str | None = None
    queue_ids: frozenset[int] | None = None
    offsets: Bounds = Bounds()
    timestamps: Bounds = Bounds()
    filter_type: str | None = None
    filter: str | None = None
    max_records_per_partition: int | None = None
    starting_offsets: str | dict[str, dict[int, int]] = "earliest"
    max_records_per_trigger: int | None = None
    # Narrowed further by the filters Spark pushes down (see mqcore.contrib.spark.pushdown).
    queue_range: Bounds = Bounds()
    tags: frozenset[str] | None = None
    only_topics: frozenset[str] | None = None
    #: Set when the read goes over the network (option ``namesrv``) instead of ``path``.
    network: NetworkOptions | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False) -> ReadOptions:
        """Check names and values of ``options``; raises InvalidArgumentError naming the bad one."""
        opts = {str(k).lower(): v for k, v in options.items()}
        allowed = STREAM_OPTIONS if streaming else BATCH_OPTIONS
        unknown = sorted(set(opts) - allowed)
        if unknown:
            raise InvalidArgumentError(
                f"unknown option(s) {', '.join(map(repr, unknown))} for the mqcore "
                f"{'streaming ' if streaming else ''}source; valid options: "
                f"{', '.join(sorted(allowed))}"
            )
        topics = tuple(_split(opts.get("topic")))
        if not topics:
            raise InvalidArgumentError("option 'topic' is required (comma-separated for several)")
        check_location(opts)
        network = None
        if opts.get("namesrv"):
            network = NetworkOptions.parse(opts, topics, streaming=streaming)
        else:
            stray = sorted(name for name in opts if name in _NETWORK_ONLY)
            if stray or (not streaming and opts.get("starting_offsets")):
                stray = stray or ["starting_offsets"]
                raise InvalidArgumentError(
                    f"option(s) {', '.join(stray)} are for reading from a server: give "
                    f"namesrv=host:port instead of path, or drop them"
                )
        queue_ids = None
        if opts.get("queue_ids"):
            queue_ids = frozenset(_int("queue_ids", q) for q in _split(opts["queue_ids"]))
        offsets = Bounds(
            _int("start_offset", opts["start_offset"]) if opts.get("start_offset") else None,
            _int("end_offset", opts["end_offset"]) if opts.get("end_offset") else None,
        )
        if offsets.empty:
            raise InvalidArgumentError(
                f"start_offset {offsets.low} is not before end_offset {offsets.high}"
            )
        timestamps = Bounds(
            parse_timestamp("start_timestamp", opts["start_timestamp"])
            if opts.get("start_timestamp")
            else None,
            parse_timestamp("end_timestamp", opts["end_timestamp"])
            if opts.get("end_timestamp")
            else None,
        )
        if timestamps.empty:
            raise InvalidArgumentError(
                f"start_timestamp {timestamps.low} is not before end_timestamp {timestamps.high}"
            )
        filter_type = opts.get("filter_type")
        expression = opts.get("filter")
        if expression and not filter_type:
            filter_type = "TAG"
        if filter_type:
            filter_type = str(filter_type).upper()
            if filter_type not in ("TAG", "SQL92"):
                raise InvalidArgumentError(
                    f"option filter_type={opts['filter_type']!r} must be TAG or SQL92"
                )
            if not expression:
                raise InvalidArgumentError(f"filter_type={filter_type} needs option 'filter'")
        limit = opts.get("max_records_per_partition")
        per_trigger = opts.get("max_records_per_trigger")
        return cls(
            path=str(opts.get("path") or ""),
            topics=topics,
            store=opts.get("store") or None,
            queue_ids=queue_ids,
            offsets=offsets,
            timestamps=timestamps,
            filter_type=filter_type,
            filter=expression or None,
            max_records_per_partition=_int("max_records_per_partition", limit, 1)
            if limit
            else None,
            starting_offsets=parse_starting_offsets(opts.get("starting_offsets"), topics)
            if streaming and network is None
            else "earliest",
            max_records_per_trigger=_int("max_records_per_trigger", per_trigger, 1)
            if per_trigger
            else None,
            network=network,
        )


def cap_offsets(
    ranges: list[tuple[str, str, int, int]], limit: int | None
) -> dict[str, dict[str, int]]:
    """End offsets for ``(topic, queue, start, latest)`` ranges, reading at most ``limit`` records.

    Like Spark's Kafka source, the cap is shared in proportion to each queue's backlog; the
    remainder goes one record at a time to the queues in order, so the split is deterministic.
    """
    ends: dict[str, dict[str, int]] = {}
    backlog = [max(0, latest - start) for _, _, start, latest in ranges]
    total = sum(backlog)
    if limit is None or total <= limit:
        for topic, queue, start, latest in ranges:
            ends.setdefault(topic, {})[queue] = max(start, latest)
        return ends
    share = [limit * b // total for b in backlog]
    left = limit - sum(share)
    for i, b in enumerate(backlog):
        if left <= 0:
            break
        if share[i] < b:
            share[i] += 1
            left -= 1
    for (topic, queue, start, _), n in zip(ranges, share, strict=True):
        ends.setdefault(topic, {})[queue] = start + n
    return ends
