"""The dashboard's memory of the last hour: a thread that samples topic and group offsets
every few seconds and turns consecutive samples into TPS and lag series for the charts.

Nothing is written to disk: the history starts when the dashboard starts, as RocketMQ
Dashboard's own in-memory charts do.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import attrs

from mqcore.errors import InvalidArgumentError, MQError
from mqcore.logs import get_logger

__all__ = ["Sample", "Sampler", "is_system_topic"]

log = get_logger(__name__)

#: Topics the brokers keep for themselves (RocketMQ's TopicValidator system topics and
#: the per-group retry and dead-letter topics, shown on their groups' pages instead).
_SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "OFFSET_MOVED_EVENT",
        "SELF_TEST_TOPIC",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "rmq_sys_wheel_timer",
        "rmq_sys_REVIVE_LOG",
    }
)


def is_system_topic(topic: str) -> bool:
    """Whether ``topic`` is one the brokers keep for themselves (retry, dead-letter, delay,
    transaction and other system topics)."""
    return (
        topic in _SYSTEM_TOPICS
        or topic.startswith(("%RETRY%", "%DLQ%", "rmq_sys_", "RMQ_SYS_"))
        or topic.endswith("_REVIVE_TOPIC")
    )


@attrs.frozen
class Sample:
    """Offsets summed at one moment (``at``, seconds since the epoch)."""

    at: float
    #: user topic -> sum of its queues' max offsets (messages stored so far)
    topic_put: dict[str, int]
    #: broker group -> sum of its user queues' max offsets
    broker_put: dict[str, int]
    #: consumer group -> sum of its committed offsets
    group_consumed: dict[str, int]
    #: broker group -> sum of every group's committed offsets in its queues
    broker_consumed: dict[str, int]
    #: consumer group -> its total lag
    group_lag: dict[str, int]


Series = list[tuple[float, float]]


class Sampler:
    """Samples the cluster through an admin client every ``interval`` seconds and keeps
    ``window`` seconds of samples. :meth:`start` runs it in a thread; :meth:`stop` ends it.

    :param admin: makes the admin client the thread uses (its own; closed on stop).
    """

    def __init__(
        self, admin: Callable[[], Any], *, interval: float = 10.0, window: float = 3600.0
    ) -> None:
        if interval <= 0:
            raise InvalidArgumentError(f"the sampling interval must be positive, got {interval}")
        self.interval = interval
        self.window = window
        self._make_admin = admin
        self._samples: deque[Sample] = deque(maxlen=int(window / interval) + 2)
        # Reentrant: a caller waiting on ``taken`` may read :meth:`samples` in its predicate.
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.taken = threading.Condition(self._lock)  # notified after each sample

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Start sampling in a thread of its own."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="dashboard-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        admin = None
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                try:
                    if admin is None:
                        admin = self._make_admin()
                    self.add(self.collect(admin))
                except MQError as exc:
                    log.warning("dashboard_sample_failed", error=str(exc))
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
        finally:
            if admin is not None:
                admin.close()

    # -- samples ------------------------------------------------------------------------------

    @staticmethod
    def collect(admin: Any) -> Sample:
        """One sample of the cluster's offsets, through ``admin`` (an ``MQAdmin``)."""
        topic_put: dict[str, int] = {}
        broker_put: dict[str, int] = {}
        for info in admin.topics():
            if is_system_topic(info.topic):
                continue
            stats = admin.topic_stats(info.topic).offset_table
            topic_put[info.topic] = sum(o.max_offset for o in stats.values())
            for mq, o in stats.items():
                broker_put[mq.broker_name] = broker_put.get(mq.broker_name, 0) + o.max_offset
        consumed: dict[str, int] = {}
        broker_consumed: dict[str, int] = {}
        lag: dict[str, int] = {}
        for group in admin.groups():
            try:
                table = admin.consume_stats(group).offset_table
            except MQError:
                continue  # a group without offsets yet
            consumed[group] = sum(max(0, w.consumer_offset) for w in table.values())
            lag[group] = sum(
                max(0, w.broker_offset - max(0, w.consumer_offset)) for w in table.values()
            )
            for mq, w in table.items():
                if not is_system_topic(mq.topic):
                    broker_consumed[mq.broker_name] = broker_consumed.get(mq.broker_name, 0) + max(
                        0, w.consumer_offset
                    )
        return Sample(time.time(), topic_put, broker_put, consumed, broker_consumed, lag)

    def add(self, sample: Sample) -> None:
        """Keep ``sample``, dropping those older than the window."""
        with self.taken:
            self._samples.append(sample)
            while self._samples and self._samples[0].at < sample.at - self.window:
                self._samples.popleft()
            self.taken.notify_all()

    def samples(self) -> list[Sample]:
        """The samples kept, oldest first."""
        with self._lock:
            return list(self._samples)

    def rate(self, field: str, name: str) -> Series:
        """Per second between consecutive samples of ``field`` (a :class:`Sample` counter:
        ``topic_put``, ``broker_put``, ``group_consumed``, ``broker_consumed``) for ``name``;
        an offset moved back (a reset) counts as 0, not as negative traffic."""
        out: Series = []
        previous: Sample | None = None
        for s in self.samples():
            if previous is not None and name in getattr(s, field):
                before = getattr(previous, field).get(name)
                dt = s.at - previous.at
                if before is not None and dt > 0:
                    out.append((s.at, max(0.0, (getattr(s, field)[name] - before) / dt)))
            previous = s
        return out

    def level(self, field: str, name: str) -> Series:
        """The value of ``field`` (``group_lag``) for ``name`` in each sample."""
        return [
            (s.at, float(getattr(s, field)[name]))
            for s in self.samples()
            if name in getattr(s, field)
        ]

    def latest_rate(self, field: str, name: str) -> float | None:
        """The last :meth:`rate` of ``name``, or None before two samples."""
        series = self.rate(field, name)
        return series[-1][1] if series else None
