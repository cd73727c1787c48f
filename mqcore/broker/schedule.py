"""How the broker hosts its delay scheduler (RocketMQ's ScheduleMessageService, broker side).

The broker owns the moving parts; the scheduler plugin (``delay_levels`` by default, chosen by
:attr:`~mqcore.config.BrokerConfig.delay_scheduler`) owns the timing:

- on put (send, batch send, consumer send-back), a message with a delay level goes to the
  schedule topic ``SCHEDULE_TOPIC_XXXX``, in the queue the scheduler names, with its real topic
  and queue id in the ``REAL_TOPIC`` and ``REAL_QID`` properties (:meth:`DelayService.put`);
- one delivery thread calls the scheduler's :meth:`~mqcore.interfaces.DelayScheduler.run_due`
  at least every 100 ms (RocketMQ's period for an idle level) and its ``persist`` every
  ``flush_delay_offset_interval_ms`` (10 s); both stop, and progress is persisted, when the
  broker closes;
- the service is the scheduler's :class:`~mqcore.interfaces.DelayHost`: it reads the
  schedule queues and stores due messages in their real topic, waking held pulls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from mqcore.broker.topics import NOT_ALLOWED_SEND_TOPICS, SCHEDULE_TOPIC, validate_topic
from mqcore.errors import MessageIllegalError
from mqcore.logs import get_logger
from mqcore.message import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, Message, system_message
from mqcore.store import GetResult, PutResult

__all__ = ["DelayService"]

log = get_logger(__name__)

_MAX_WAIT_MS = 100  # wake at least this often: an injected clock does not tell real time
_ERROR_WAIT_MS = 10_000  # RocketMQ's DELAY_FOR_A_PERIOD after an unexpected error

#: Called after each store put with (topic, queue id, results): wakes pulls, runs hooks.
Stored = Callable[[str, int, list[PutResult]], None]


class DelayService:
    """The broker's side of delayed delivery: diversion on put, the delivery thread.

    :param store: the broker's store.
    :param scheduler: a :class:`~mqcore.interfaces.DelayScheduler`.
    :param config_dir: where the scheduler keeps its progress file.
    :param stored: the broker's after-put callback.
    :param flush_interval_ms: how often progress is persisted.
    :param name: used in the thread's name.
    """

    def __init__(
        self,
        store: Any,
        scheduler: Any,
        config_dir: Path,
        stored: Stored,
        *,
        flush_interval_ms: int = 10_000,
        name: str = "broker",
    ) -> None:
        self.store = store
        self.scheduler = scheduler
        self.config_dir = config_dir
        self._stored = stored
        self.flush_interval_ms = flush_interval_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mqcore-delay-{name}", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Load the scheduler's progress and start the delivery thread."""
        self.scheduler.start(self)
        self._thread.start()

    def close(self) -> None:
        """Stop the delivery thread, then let the scheduler persist its progress."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self.scheduler.stop()

    def _run(self) -> None:
        every = self.flush_interval_ms / 1000
        next_persist = time.monotonic() + every
        while True:
            try:
                wait_ms = self.scheduler.run_due()
            except Exception:  # keep delivering; RocketMQ retries the task after a period
                log.exception("delay_delivery_pass_failed")
                wait_ms = _ERROR_WAIT_MS
            if time.monotonic() >= next_persist:
                next_persist = time.monotonic() + every
                try:
                    self.scheduler.persist()
                except Exception:  # the offsets stay dirty; the next round retries
                    log.exception("delay_offsets_persist_failed")
            if self._stop.wait(min(max(wait_ms, 1), _MAX_WAIT_MS) / 1000):
                return

    # -- put ---------------------------------------------------------------------------

    def put(
        self,
        topic: str,
        queue_id: int,
        messages: Sequence[Message],
        *,
        born_timestamp: int | None = None,
        born_host: str | None = None,
        reconsume_times: int = 0,
    ) -> list[PutResult]:
        """Store ``messages`` for ``topic``/``queue_id``; delayed ones in the schedule topic.

        Messages without a delay are stored together in their queue; delayed ones together
        per schedule queue. Results are in the order of ``messages``.
        """
        plain: list[int] = []
        held: dict[int, list[tuple[int, Message]]] = {}
        for i, m in enumerate(messages):
            if m.delay_level > 0:
                qid, level = self.scheduler.schedule_queue(m.delay_level)
                props = dict(m.properties)
                props[PROPERTY_REAL_TOPIC] = topic
                props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
                # The broker's own REAL_TOPIC/REAL_QID replace any a client sent.
                fields = attrs.asdict(m, recurse=False)
                fields.update(topic=SCHEDULE_TOPIC, properties=props, delay_level=level)
                moved = system_message(**fields)
                held.setdefault(qid, []).append((i, moved))
            else:
                plain.append(i)
        results: list[PutResult | None] = [None] * len(messages)
        kw: dict[str, Any] = {
            "born_timestamp": born_timestamp,
            "born_host": born_host,
            "reconsume_times": reconsume_times,
        }
        if plain:
            got = self.store.put(topic, queue_id, [messages[i] for i in plain], **kw)
            for i, r in zip(plain, got, strict=True):
                results[i] = r
            self._stored(topic, queue_id, got)
        for qid, items in held.items():
            got = self.store.put(SCHEDULE_TOPIC, qid, [m for _, m in items], **kw)
            for (i, _), r in zip(items, got, strict=True):
                results[i] = r
            self._stored(SCHEDULE_TOPIC, qid, got)
        return [r for r in results if r is not None]

    # -- DelayHost ---------------------------------------------------------------------

    def read_scheduled(self, queue_id: int, offset: int, max_count: int) -> GetResult:
        """Held messages of one schedule queue."""
        got: GetResult = self.store.get(SCHEDULE_TOPIC, queue_id, offset, max_count=max_count)
        return got

    def scheduled_max_offset(self, queue_id: int) -> int:
        """One past the last held message of a schedule queue."""
        return int(self.store.max_offset(SCHEDULE_TOPIC, queue_id))

    def deliver(
        self,
        message: Message,
        queue_id: int,
        *,
        born_timestamp: int,
        born_host: str,
        reconsume_times: int,
    ) -> None:
        """Store a due message in its real topic and wake the pulls waiting on that queue.

        Raises only when the message was not stored: once it is, a failing wake-up or hook
        must not make the scheduler deliver it a second time.

        A destination no producer may send to (the schedule topic itself, an illegal name, a
        negative queue) is never written: such a record can only predate the broker's checks
        of ``REAL_TOPIC``, and delivering it could make it copy itself forever. It is logged
        and skipped.
        """
        topic = message.topic
        try:
            validate_topic(topic)
            refused = topic in NOT_ALLOWED_SEND_TOPICS or queue_id < 0
        except MessageIllegalError:
            refused = True
        if refused:
            log.error("delay_delivery_refused", topic=topic, queue_id=queue_id)
            return
        got = self.store.put(
            message.topic,
            queue_id,
            [message],
            born_timestamp=born_timestamp,
            born_host=born_host,
            reconsume_times=reconsume_times,
        )
        try:
            self._stored(message.topic, queue_id, got)
        except Exception:
            log.exception("delay_delivered_notify_failed", topic=message.topic, queue_id=queue_id)

    def state_path(self, name: str) -> Path:
        """``<data_dir>/config/<name>``."""
        return self.config_dir / name
