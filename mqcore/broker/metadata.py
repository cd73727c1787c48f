"""The broker's metadata as replication moves it (RocketMQ's SlaveSynchronize, broker side).

Replication (:mod:`mqcore.broker.ha`) copies the commit log; what else a slave needs to take
over from its master, the broker hands it here: on the master a :meth:`MetadataSync.snapshot`
of its topics, consumer offsets and the progress of its delay and timer schedulers; on the
slave :meth:`MetadataSync.apply` of the master's snapshot. Replication moves the documents
and never looks inside them.

The schedulers' progress is taken from each scheduler itself (its ``export_state``, see
:class:`mqcore.interfaces.SchedulerState`) with the master's commit-log end at that moment,
and handed to the slave's scheduler (its ``import_state``) only once the slave's own log
holds that end: progress never counts a delivery whose record the slave does not have. A
slave restarted as a master then resumes each scheduler from the last progress it
received: timers and delay-level messages due later are delivered on time, once; those
delivered in the last ``slave_synchronize_interval_ms`` before the master was lost may be
delivered again (at least once, never lost).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from mqcore.broker.offsets import ConsumerOffsetManager
from mqcore.broker.schedule import DelayService
from mqcore.broker.topics import TopicConfig, TopicManager
from mqcore.logs import get_logger

__all__ = ["MetadataSync"]

log = get_logger(__name__)


class MetadataSync:
    """Snapshot (master) and apply (slave) of a broker's metadata.

    :param topics: the broker's topic table.
    :param offsets: the broker's consumer offset table.
    :param delay: the broker's scheduler host, which exports and imports the schedulers'
        progress.
    :param log_end: the store's commit-log end (its ``commitlog_max_offset``).
    """

    def __init__(
        self,
        topics: TopicManager,
        offsets: ConsumerOffsetManager,
        delay: DelayService,
        log_end: Callable[[], int],
    ) -> None:
        self.topics = topics
        self.offsets = offsets
        self.delay = delay
        self._log_end = log_end
        self._lock = threading.Lock()
        # Scheduler states received and not yet imported: (master's log end, states).
        self._pending: tuple[int, dict[str, Any]] | None = None
        #: the master's commit-log end when the scheduler progress last imported was taken
        #: (-1: none yet); that progress counts every delivery stored below it
        self.schedulers_synced_at = -1

    # -- master --------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """What a slave copies: topics, consumer offsets, scheduler progress (with the
        commit-log end it was taken at)."""
        schedulers = self.delay.export_states()
        # Read after the progress: every delivery it counts is stored below this offset.
        log_end = self._log_end()
        return {
            "topics": [t.to_json() for t in self.topics.all()],
            "offsets": self.offsets.offset_table(),
            "schedulers": schedulers,
            "log_offset": log_end,
        }

    # -- slave ---------------------------------------------------------------------------

    def apply(self, doc: Mapping[str, Any]) -> None:
        """Take the master's topics, consumer offsets and (once this log holds what they
        count) its schedulers' progress."""
        topics = {t["topicName"]: TopicConfig.from_json(t) for t in doc.get("topics") or ()}
        for name, cfg in topics.items():
            if self.topics.get(name) != cfg:
                self.topics.put(cfg)
        for gone in [t.topic_name for t in self.topics.all() if t.topic_name not in topics]:
            self.topics.delete(gone)
        self.offsets.replace_table(doc.get("offsets") or {})
        schedulers = doc.get("schedulers")
        at = doc.get("log_offset")
        if isinstance(schedulers, dict) and isinstance(at, int):
            with self._lock:
                self._pending = (at, schedulers)  # a newer snapshot replaces one still waiting
            self.log_advanced()

    def log_advanced(self) -> None:
        """This slave's log grew: import scheduler progress it now holds the records of."""
        with self._lock:
            pending = self._pending
            if pending is None or self._log_end() < pending[0]:
                return
            self._pending = None
            self.delay.import_states(pending[1])
            self.schedulers_synced_at = pending[0]
