"""The ``delay_levels`` delay scheduler: RocketMQ 4.x's fixed delay levels.

A message sent with delay level ``n > 0`` is not stored in its topic. The broker stores it in
the schedule topic ``SCHEDULE_TOPIC_XXXX``, queue ``n - 1`` (levels above the highest one are
clamped to it, as RocketMQ's commit log does), with its real topic and queue id in the
``REAL_TOPIC`` and ``REAL_QID`` properties. Every level has a delivery task: it reads its queue
from the offset it reached, and each message whose time has come is stored again in its real
topic and queue (same body, tags, keys, flag, born time and host, reconsume times and
properties; the ``DELAY`` property cleared, ``REAL_TOPIC``/``REAL_QID`` left in place as
RocketMQ leaves them). Within one level all messages wait equally long, so the queue is in
delivery order and the task stops at the first message not yet due.

The delivery time is RocketMQ's ``computeDeliverTimestamp``: store timestamp plus the level's
delay; a time further away than one full delay (the clock went back) counts as due now
(``correctDeliverTimestamp``). The stores keep that time as the held message's consume-queue
tags code, as RocketMQ does (:func:`mqcore.store.deliver_timestamp`); the task reads the held
message anyway and computes it from its store timestamp, which gives the same value.

Progress (the next offset of every level) is written to ``delayOffset.json`` in the broker's
config directory, in RocketMQ's shape ``{"offsetTable": {"<level>": <offset>}}``, atomically
(:mod:`mqcore.atomicfile`), every ``flush_delay_offset_interval_ms`` (10 s) and at shutdown.
After a clean stop nothing is delivered twice; after a crash the messages delivered since
the last write (at most one interval's worth) are delivered again, none are lost.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from mqcore.atomicfile import read_with_backup, write_json_atomic
from mqcore.errors import InvalidArgumentError, StoreCorruptedError
from mqcore.hookspecs import RegisterDelaySchedulers, hookimpl
from mqcore.interfaces import DelayHost
from mqcore.logs import get_logger
from mqcore.message import MessageExt
from mqcore.plugins.delay_held import deliver_held, real_destination
from mqcore.protocol import fastjson
from mqcore.store import DEFAULT_MESSAGE_DELAY_LEVEL, GetStatus, parse_delay_levels

__all__ = [
    "DEFAULT_MESSAGE_DELAY_LEVEL",
    "DELAY_OFFSET_FILE",
    "DelayLevelScheduler",
    "mqcore_register_delay_schedulers",
    "parse_delay_levels",
]

log = get_logger(__name__)

#: The progress file, in the broker's config directory (RocketMQ's ``delayOffset.json``).
DELAY_OFFSET_FILE = "delayOffset.json"

_IDLE_MS = 100  # RocketMQ's DELAY_FOR_A_WHILE: how soon an idle or blocked level looks again
_BATCH = 32  # held messages read per store call


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _decode_offsets(data: bytes) -> dict[int, int]:
    # Apache RocketMQ writes this file with fastjson: levels are bare numbers ({1:0}).
    obj = fastjson.loads(data)
    table = obj.get("offsetTable") if isinstance(obj, dict) else None
    if not isinstance(table, dict):
        raise StoreCorruptedError("no offsetTable object")
    out: dict[int, int] = {}
    for level, offset in table.items():
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise StoreCorruptedError(
                f"offset {offset!r} of level {level!r} is not a non-negative int"
            )
        out[int(level)] = offset
    return out


@attrs.define
class _Level:
    """Progress of one level's delivery task."""

    level: int
    delay_ms: int
    offset: int = 0
    # Delivery time of the held message at ``offset``, once read: lets an idle check skip
    # the store until that time comes.
    head_due_ms: int | None = None


class DelayLevelScheduler:
    """RocketMQ's delay levels (see the module docstring).

    :param message_delay_level: the levels, RocketMQ's ``messageDelayLevel`` string.
    :param clock: current time in ms; injectable so that tests need not wait for a level.
    :param batch_size: held messages read per store call.
    """

    name = "delay_levels"

    def __init__(
        self,
        message_delay_level: str = DEFAULT_MESSAGE_DELAY_LEVEL,
        *,
        clock: Callable[[], int] | None = None,
        batch_size: int = _BATCH,
    ) -> None:
        self.delays = parse_delay_levels(message_delay_level)
        self.clock = clock or _wall_clock_ms
        self.batch_size = batch_size
        self._levels = [_Level(i + 1, d) for i, d in enumerate(self.delays)]
        self._host: DelayHost | None = None
        self._path: Path | None = None
        self._lock = threading.Lock()  # one delivery pass at a time; guards the offsets
        self._persist_lock = threading.Lock()
        self._dirty = False
        self._running = False

    @property
    def max_level(self) -> int:
        """The highest level; higher requested levels are clamped to it."""
        return len(self.delays)

    def delay_ms(self, delay_level: int) -> int:
        """How long a message of ``delay_level`` (clamped) is held, in ms."""
        return self.delays[min(delay_level, self.max_level) - 1]

    def deliver_at(self, delay_level: int, store_timestamp: int) -> int:
        """Store timestamp plus the level's delay (RocketMQ's ``computeDeliverTimestamp``)."""
        if delay_level <= 0:
            return store_timestamp
        return store_timestamp + self.delay_ms(delay_level)

    def schedule_queue(self, delay_level: int) -> tuple[int, int]:
        """``(queue id, effective level)``: queue ``level - 1`` after clamping to the max."""
        if delay_level <= 0:
            raise InvalidArgumentError(f"delay level {delay_level} is not a delay; use 1 or more")
        level = min(delay_level, self.max_level)
        return level - 1, level

    def offsets(self) -> dict[int, int]:
        """Next offset to deliver, per level."""
        with self._lock:
            return {lv.level: lv.offset for lv in self._levels}

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, host: DelayHost) -> None:
        """Load ``delayOffset.json`` (or its backup) and clamp each offset into its queue.

        :raises StoreCorruptedError: when the file and its backup exist but neither parses:
            starting from offset 0 would deliver every held message again.
        """
        path = host.state_path(DELAY_OFFSET_FILE)
        parsed: list[dict[int, int]] = []

        def validate(data: bytes) -> bool:
            parsed.append(_decode_offsets(data))
            return True

        try:
            data = read_with_backup(path, validate)
        except StoreCorruptedError:
            log.error("delay_offsets_unreadable", path=str(path))
            raise
        table = parsed[-1] if data is not None else {}
        with self._lock:
            self._host = host
            self._path = path
            for lv in self._levels:
                offset = table.get(lv.level, 0)
                # As RocketMQ's correctDelayOffset: never beyond what the queue holds.
                high = host.scheduled_max_offset(lv.level - 1)
                if offset > high:
                    log.error("delay_offset_corrected", level=lv.level, offset=offset, to=high)
                    offset = high
                lv.offset = offset
                lv.head_due_ms = None
            self._running = True
        log.info("delay_scheduler_started", levels=self.max_level, path=str(path))

    def stop(self) -> None:
        """Finish the pass under way, stop delivering and persist progress."""
        with self._lock:
            self._running = False
        self.persist()

    def persist(self) -> bool:
        """Write progress atomically if it changed since the last write."""
        with self._persist_lock:
            with self._lock:
                if not self._dirty or self._path is None:
                    return False
                snapshot = {"offsetTable": {str(lv.level): lv.offset for lv in self._levels}}
                self._dirty = False
            try:
                write_json_atomic(self._path, snapshot)
            except BaseException:
                with self._lock:
                    self._dirty = True
                raise
        log.debug("delay_offsets_persisted", path=str(self._path))
        return True

    # -- replication (mqcore.interfaces.SchedulerState) --------------------------------

    def export_state(self) -> dict[str, Any] | None:
        """The next offset of every level as ``delayOffset.json`` holds them (taken from
        memory: newer than the file between two persists); None before :meth:`start`."""
        with self._lock:
            if self._host is None:
                return None
            return {"offsetTable": {str(lv.level): lv.offset for lv in self._levels}}

    def import_state(self, host: DelayHost, state: Any) -> None:
        """Write another broker's :meth:`export_state` as this broker's ``delayOffset.json``
        (which :meth:`start` reads, clamping each offset into its queue).

        :raises InvalidArgumentError: when ``state`` is not such a table.
        """
        try:
            table = _decode_offsets(json.dumps(state).encode())
        except (StoreCorruptedError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidArgumentError(
                f"delay-level progress {state!r} is not a table of level offsets ({exc})"
            ) from None
        write_json_atomic(
            host.state_path(DELAY_OFFSET_FILE),
            {"offsetTable": {str(level): offset for level, offset in table.items()}},
        )

    # -- delivery ----------------------------------------------------------------------

    def run_due(self) -> int:
        """Run every level's delivery task once; ms until a task may have work again."""
        with self._lock:
            if not self._running or self._host is None:
                return _IDLE_MS
            wait = _IDLE_MS
            for lv in self._levels:
                wait = min(wait, self._run_level(self._host, lv))
            return max(wait, 0)

    def _due(self, lv: _Level, now: int, store_timestamp: int) -> int:
        due = store_timestamp + lv.delay_ms
        # RocketMQ's correctDeliverTimestamp: a time more than one delay ahead means the
        # clock went back; deliver now rather than hold the whole level.
        return now if due > now + lv.delay_ms else due

    def _run_level(self, host: DelayHost, lv: _Level) -> int:
        now = self.clock()
        if lv.head_due_ms is not None and lv.head_due_ms > now:
            return lv.head_due_ms - now
        queue_id = lv.level - 1
        while True:
            if lv.offset >= host.scheduled_max_offset(queue_id):
                return _IDLE_MS
            got: Any = host.read_scheduled(queue_id, lv.offset, self.batch_size)
            if got.status is not GetStatus.FOUND:
                if got.next_offset != lv.offset and got.status in (
                    GetStatus.OFFSET_TOO_SMALL,
                    GetStatus.OFFSET_OVERFLOW_BADLY,
                ):
                    log.error(
                        "delay_offset_corrected", level=lv.level, offset=lv.offset,
                        to=got.next_offset,
                    )  # fmt: skip
                    self._advance(lv, got.next_offset)
                    continue
                return _IDLE_MS
            for msg in got.messages:
                due = self._due(lv, now, msg.store_timestamp)
                if due > now:
                    lv.head_due_ms = due
                    self._advance(lv, msg.queue_offset)
                    return due - now
                if not self._deliver(host, lv, msg):
                    return _IDLE_MS  # the put failed: retry this message on the next pass
                self._advance(lv, msg.queue_offset + 1)
            if got.next_offset > lv.offset:
                self._advance(lv, got.next_offset)
            now = self.clock()

    def _advance(self, lv: _Level, offset: int) -> None:
        if offset != lv.offset:
            lv.offset = offset
            lv.head_due_ms = None
            self._dirty = True

    def _deliver(self, host: DelayHost, lv: _Level, msg: MessageExt) -> bool:
        """Store ``msg`` in its real topic; False when that failed and should be retried."""
        destination = real_destination(msg)
        if destination is None:
            # Nothing can ever deliver it; holding the level for it would block the rest.
            log.error(
                "delay_message_without_real_topic", level=lv.level, offset=msg.queue_offset,
                msg_id=msg.msg_id,
            )  # fmt: skip
            return True
        try:
            deliver_held(host, msg, destination, msg.properties)
        except Exception:
            log.exception(
                "delay_delivery_failed", level=lv.level, offset=msg.queue_offset,
                topic=destination[0],
            )  # fmt: skip
            return False
        return True


@hookimpl
def mqcore_register_delay_schedulers(register: RegisterDelaySchedulers) -> None:
    """Register the ``delay_levels`` scheduler."""
    register("delay_levels", DelayLevelScheduler)
