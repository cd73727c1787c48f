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

Timer messages (RocketMQ 5) go the same way through a second scheduler, the timer scheduler
(``timer`` by default, :attr:`~mqcore.config.BrokerConfig.timer_scheduler`): on put, a
message with ``TIMER_DELIVER_MS``, ``TIMER_DELAY_MS`` or ``TIMER_DELAY_SEC`` whose time is
still ahead is stored in the timer topic ``rmq_sys_wheel_timer``, queue 0, with its deliver
time in ``TIMER_OUT_MS`` and its real topic and queue in ``REAL_TOPIC``/``REAL_QID``; one
whose time has come is stored in its topic at once. The timer scheduler runs in a thread of
its own and reads the timer topic through this service (a
:class:`~mqcore.interfaces.TimerHost`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from mqcore import codec, speedups
from mqcore.broker.topics import NOT_ALLOWED_SEND_TOPICS, SCHEDULE_TOPIC, validate_topic
from mqcore.errors import CodecError, MessageIllegalError, TimerMessageError
from mqcore.interfaces import SchedulerState
from mqcore.logs import get_logger
from mqcore.message import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_KEY,
    TIMER_REQUEST_PROPERTIES,
    Message,
    MessageExt,
    system_message,
)
from mqcore.protocol.codes import ResponseCode
from mqcore.store import (
    TIMER_TOPIC,
    GetResult,
    GetStatus,
    PutResult,
    RawGetResult,
    UnitsResult,
)
from mqcore.storecaps import PreparedWriter, UnitReader

__all__ = ["DelayService", "is_timer_message", "py_hold_timers"]

log = get_logger(__name__)

_MAX_WAIT_MS = 100  # wake at least this often: an injected clock does not tell real time
_ERROR_WAIT_MS = 10_000  # RocketMQ's DELAY_FOR_A_PERIOD after an unexpected error

#: Called after each store put with (topic, queue id, results): wakes pulls, runs hooks.
Stored = Callable[[str, int, list[PutResult]], None]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def is_timer_message(m: Message) -> bool:
    """Whether the broker holds ``m`` as a timer message (RocketMQ's ``checkIfTimerMessage``):
    it asks for a time, and is not a copy of one already delivered (``TIMER_OUT_MS``)."""
    props = m.properties
    return (
        bool(props)
        and not TIMER_REQUEST_PROPERTIES.isdisjoint(props)
        and PROPERTY_TIMER_OUT_MS not in props
    )


def _timer_deliver_ms(m: Message, now: int) -> int:
    """The deliver time a timer message asks for (RocketMQ's order: delay in s, in ms, time)."""
    props = m.properties
    name = PROPERTY_TIMER_DELIVER_MS
    text = props.get(name)
    base, unit = 0, 1
    if PROPERTY_TIMER_DELAY_SEC in props:
        name, base, unit = PROPERTY_TIMER_DELAY_SEC, now, 1000
    elif PROPERTY_TIMER_DELAY_MS in props:
        name, base = PROPERTY_TIMER_DELAY_MS, now
    else:
        assert text is not None, "not a timer message"  # callers check is_timer_message
        if text.isdigit() and text.isascii():
            return int(text)
    text = props[name]
    if not (text.isascii() and text.isdigit()):
        raise TimerMessageError(
            f"timer property {name}={text!r} is not a whole number >= 0",
            code=ResponseCode.MESSAGE_ILLEGAL,
        )
    return base + int(text) * unit


# Fields _held_copy sets by name; any other (a field added to Message later) is copied as is.
_HELD_FIELDS = frozenset(
    {"topic", "body", "tags", "keys", "properties", "flag", "delay_level"}
    | {"deliver_time_ms", "delay_ms", "delay_sec"}
)
_OTHER_FIELDS = tuple(a.name for a in attrs.fields(Message) if a.name not in _HELD_FIELDS)


def _held_copy(m: Message, topic: str, properties: dict[str, str]) -> Message:
    """``m`` under ``topic`` with ``properties`` (system names included), its timer fields
    cleared: the copy the broker stores while it holds a timer message.

    Built field by field rather than through ``Message(...)``: ``m`` passed its checks when
    it was built and again when it was sent, and the broker adds only its own properties,
    so checking it all again would only double the cost of a timer send.
    """
    copy = object.__new__(Message)
    put = object.__setattr__
    put(copy, "topic", topic)
    put(copy, "body", m.body)
    put(copy, "tags", m.tags)
    put(copy, "keys", m.keys)
    put(copy, "properties", properties)
    put(copy, "flag", m.flag)
    put(copy, "delay_level", 0)
    put(copy, "deliver_time_ms", None)
    put(copy, "delay_ms", None)
    put(copy, "delay_sec", None)
    for name in _OTHER_FIELDS:
        put(copy, name, getattr(m, name))
    return copy


_HOLD_PROPERTIES = 16  # more properties than this: held by the Python code
_DECLINED = (PROPERTY_TIMER_DELAY_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_OUT_MS)


def _utf8_text(value: object) -> bool:
    """An exact ``str`` that encodes as UTF-8 (no lone surrogate)."""
    if value.__class__ is not str:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def py_hold_timers(
    messages: Sequence[Message],
    topic: str,
    queue_id: str,
    now: int,
    max_delay_ms: int,
    born_timestamp: int,
    reconsume_times: int,
    sys_flag: int,
    crc32: Any = None,
    timer_topic: str = TIMER_TOPIC,
) -> tuple[list[Any], list[str | None] | None] | None:
    """The records the broker stores for a batch of timer messages held in the timer topic,
    as :func:`mqcore.codec.prepare` tuples, with the messages' ``UNIQ_KEY`` values (as
    :func:`mqcore.uniqkey.uniq_ids`, but None when none has one); or None when one of them
    is left to :meth:`DelayService.put`'s general path (which then holds the whole batch).

    The reference for ``mqcore.broker._schedule.hold_timers``, which does the same in one C call
    per batch and no :class:`Message` copy: the tests hold both to the same bytes, and these
    to the general path's. Taken here: a ``dict`` of at most 16 ``str`` properties that
    encode as UTF-8, with ``TIMER_DELIVER_MS`` of 1 to 18 ASCII digits (no
    ``TIMER_DELAY_MS``, ``TIMER_DELAY_SEC`` or ``TIMER_OUT_MS``), ahead of ``now`` by at most
    ``max_delay_ms``; no delay level; ``bytes`` body; ``str`` tags and keys. Left to the
    general path: everything else (a timer already due, one too far ahead, a delay level
    beside a timer...), which also raises what it always raised.
    """
    del crc32  # codec's CRC function, as the C call takes it
    if not (_utf8_text(topic) and _utf8_text(queue_id)):
        return None
    held = []
    for m in messages:
        props = m.properties
        level = m.delay_level
        if (
            props.__class__ is not dict
            or len(props) > _HOLD_PROPERTIES
            or level.__class__ is not int
            or level != 0
            or m.body.__class__ is not bytes
        ):
            return None
        for text in (m.tags, m.keys):
            if text is not None and not _utf8_text(text):
                return None
        deliver = -1
        for name, value in props.items():
            if not (_utf8_text(name) and _utf8_text(value)):
                return None
            if name == PROPERTY_TIMER_DELIVER_MS:
                if not (0 < len(value) <= 18 and value.isascii() and value.isdigit()):
                    return None
                deliver = int(value)
            elif name in _DECLINED:
                return None
        if deliver <= now or deliver - now > max_delay_ms:
            return None
        copy = {
            PROPERTY_TIMER_OUT_MS: str(deliver),
            **props,
            PROPERTY_REAL_TOPIC: topic,
            PROPERTY_REAL_QUEUE_ID: queue_id,
        }
        held.append(_held_copy(m, timer_topic, copy))
    try:
        prepared = codec.py_prepare(
            held,
            born_timestamp,
            topic=timer_topic,
            reconsume_times=reconsume_times,
            sys_flag=sys_flag,
        )
    except CodecError:  # a property string beyond the record format: the general path
        return None
    uniqs = [m.properties.get(PROPERTY_UNIQ_KEY) for m in messages]
    return prepared, (uniqs if any(u is not None for u in uniqs) else None)


_speedups = speedups.load("schedule")
_hold_timers: Callable[..., tuple[list[Any], list[str | None] | None] | None] | None = (
    None if _speedups is None else _speedups.hold_timers
)


class DelayService:
    """The broker's side of delayed delivery: diversion on put, the delivery thread.

    :param store: the broker's store.
    :param scheduler: a :class:`~mqcore.interfaces.DelayScheduler`.
    :param config_dir: where the scheduler keeps its progress file.
    :param stored: the broker's after-put callback.
    :param flush_interval_ms: how often progress is persisted.
    :param name: used in the thread's name.
    :param timer: a :class:`~mqcore.interfaces.TimerScheduler`, or None: timer messages are
        then refused.
    :param data_dir: where the timer scheduler keeps its data files (the broker's data dir).
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
        timer: Any = None,
        data_dir: Path | None = None,
    ) -> None:
        self.store = store
        # The store's optional capabilities this service uses (see mqcore.storecaps).
        self._prepared_writer = store if isinstance(store, PreparedWriter) else None
        self._unit_reader = store if isinstance(store, UnitReader) else None
        self.scheduler = scheduler
        self.timer = timer
        self.config_dir = config_dir
        self.data_dir = data_dir if data_dir is not None else config_dir.parent
        self._stored = stored
        self.flush_interval_ms = flush_interval_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(scheduler,), name=f"mqcore-delay-{name}", daemon=True
        )
        self._timer_thread = threading.Thread(
            target=self._run, args=(timer,), name=f"mqcore-timer-{name}", daemon=True
        )
        # What import_states last handed each kind, and the master's scheduler name a kind
        # refused last (logged once per name).
        self._imported: dict[str, Any] = {}
        self._refused: dict[str, Any] = {}
        # The timer's clock (tests inject one) also times a timer message's arrival.
        self._clock: Callable[[], int] = getattr(timer, "clock", None) or _wall_clock_ms

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Load the schedulers' progress and start their delivery threads."""
        self.scheduler.start(self)
        if self.timer is not None:
            try:
                self.timer.start(self)
            except BaseException:
                self.scheduler.stop()
                raise
            self._timer_thread.start()
        self._thread.start()

    def close(self) -> None:
        """Stop the delivery threads, then let the schedulers persist their progress."""
        self._stop.set()
        for thread in (self._thread, self._timer_thread):
            if thread.is_alive():
                thread.join(timeout=30)
        try:
            self.scheduler.stop()
        finally:
            if self.timer is not None:
                self.timer.stop()

    # -- progress, for replication -------------------------------------------------------

    def _kinds(self) -> list[tuple[str, Any]]:
        kinds = [("delay", self.scheduler)]
        if self.timer is not None:
            kinds.append(("timer", self.timer))
        return kinds

    def export_states(self) -> dict[str, Any]:
        """The running schedulers' progress, by kind (``delay``, ``timer``): each as
        ``{"name": ..., "state": ...}`` (see :class:`~mqcore.interfaces.SchedulerState`);
        a scheduler that exports none is left out."""
        out: dict[str, Any] = {}
        for kind, scheduler in self._kinds():
            if not isinstance(scheduler, SchedulerState):
                continue
            state = scheduler.export_state()
            if state is not None:
                out[kind] = {"name": scheduler.name, "state": state}
        return out

    def import_states(self, states: Mapping[str, Any]) -> None:
        """Hand another broker's :meth:`export_states` to these (not started) schedulers, each
        to the one of its kind with the same name; what one cannot take is logged, and the
        others still take theirs."""
        for kind, scheduler in self._kinds():
            entry = states.get(kind)
            if not isinstance(entry, dict) or not isinstance(scheduler, SchedulerState):
                continue
            if entry.get("name") != scheduler.name:
                if self._refused.get(kind) != entry.get("name"):
                    self._refused[kind] = entry.get("name")
                    log.warning(
                        "scheduler_state_not_imported", kind=kind, scheduler=scheduler.name,
                        master_scheduler=entry.get("name"),
                    )  # fmt: skip
                continue
            state = entry.get("state")
            if state == self._imported.get(kind):
                continue  # unchanged since the last import: nothing to write
            try:
                scheduler.import_state(self, state)
            except Exception:  # a bad state from the network: keep the last one imported
                log.exception("scheduler_state_import_failed", kind=kind, scheduler=scheduler.name)
                continue
            self._imported[kind] = state

    def _run(self, scheduler: Any) -> None:
        every = self.flush_interval_ms / 1000
        next_persist = time.monotonic() + every
        while True:
            try:
                wait_ms = scheduler.run_due()
            except Exception:  # keep delivering; RocketMQ retries the task after a period
                log.exception("delay_delivery_pass_failed")
                wait_ms = _ERROR_WAIT_MS
            if time.monotonic() >= next_persist:
                next_persist = time.monotonic() + every
                try:
                    scheduler.persist()
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
        if self.timer is not None and _hold_timers is not None:
            got = self._put_timers(topic, queue_id, messages, born_timestamp, born_host,
                                   reconsume_times)  # fmt: skip
            if got is not None:
                return got
        plain: list[int] = []
        held: dict[int, list[tuple[int, Message]]] = {}
        timers: list[tuple[int, Message]] = []
        now = self._clock()
        qid_text = str(queue_id)
        requests, out_ms = TIMER_REQUEST_PROPERTIES, PROPERTY_TIMER_OUT_MS
        for i, m in enumerate(messages):
            props = m.properties
            # is_timer_message(m), inline: this loop runs once per message.
            if props and out_ms not in props and not requests.isdisjoint(props):
                copy = self._hold_timer(m, topic, qid_text, now)
                if copy is None:
                    plain.append(i)  # its time has come: stored in its topic at once
                else:
                    timers.append((i, copy))
            elif m.delay_level > 0:
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
        if timers:
            got = self.store.put(TIMER_TOPIC, 0, [m for _, m in timers], **kw)
            for (i, _), r in zip(timers, got, strict=True):
                results[i] = r
            self._stored(TIMER_TOPIC, 0, got)
        return [r for r in results if r is not None]

    def _put_timers(
        self,
        topic: str,
        queue_id: int,
        messages: Sequence[Message],
        born_timestamp: int | None,
        born_host: str | None,
        reconsume_times: int,
    ) -> list[PutResult] | None:
        """A batch of timer messages held in one C call (see :func:`py_hold_timers`) and
        stored with the store's ``put_prepared`` (a
        :class:`~mqcore.storecaps.PreparedWriter`); None when the general path must hold it."""
        writer = self._prepared_writer
        if writer is None or _hold_timers is None:
            return None
        assert self.timer is not None
        held = _hold_timers(
            messages,
            topic,
            str(queue_id),
            self._clock(),
            self.timer.max_delay_ms,
            _wall_clock_ms() if born_timestamp is None else born_timestamp,
            reconsume_times,
            0,
            codec.body_crc32,
            TIMER_TOPIC,
        )
        if held is None:
            return None
        prepared, uniqs = held
        got = writer.put_prepared(TIMER_TOPIC, 0, prepared, uniqs, born_host=born_host)
        self._stored(TIMER_TOPIC, 0, got)
        return got

    def _hold_timer(self, m: Message, topic: str, queue_id: str, now: int) -> Message | None:
        """The copy of timer message ``m`` to store in the timer topic, or None when it is
        due now (a past deliver time is delivered at once)."""
        if m.delay_level > 0:
            asked = ", ".join(sorted(TIMER_REQUEST_PROPERTIES & m.properties.keys()))
            raise TimerMessageError(
                f"a message to {topic} has both delay level {m.delay_level} and a timer "
                f"({asked}); use one of them",
                code=ResponseCode.MESSAGE_ILLEGAL,
            )
        deliver = _timer_deliver_ms(m, now)
        if deliver <= now:
            return None
        timer = self.timer
        if timer is None:
            raise TimerMessageError(
                f"timer messages are not enabled on this broker (a message to {topic} asks "
                "for one); set the broker's timer_scheduler, e.g. 'timer'",
                code=ResponseCode.MESSAGE_ILLEGAL,
            )
        if deliver - now > timer.max_delay_ms:
            raise TimerMessageError(
                f"a message to {topic} asks to be delivered {deliver - now} ms from now, "
                f"beyond the broker's timer_max_delay_sec ({timer.max_delay_ms // 1000} s); "
                "deliver it sooner or raise the limit",
                code=ResponseCode.MESSAGE_ILLEGAL,
            )
        # TIMER_OUT_MS first: the scheduler reads it from the record without decoding it all.
        # The broker's own REAL_TOPIC/REAL_QID replace any a client sent.
        props = {
            PROPERTY_TIMER_OUT_MS: str(deliver),
            **m.properties,
            PROPERTY_REAL_TOPIC: topic,
            PROPERTY_REAL_QUEUE_ID: queue_id,
        }
        return _held_copy(m, TIMER_TOPIC, props)

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

    # -- TimerHost -----------------------------------------------------------------------

    def read_timers(self, offset: int, max_count: int) -> RawGetResult:
        """Encoded held timer messages from ``offset``."""
        got: RawGetResult = self.store.get_raw(TIMER_TOPIC, 0, offset, max_count=max_count)
        return got

    def read_timer_units(self, offset: int, max_count: int) -> UnitsResult | None:
        """The timer topic's consume-queue units from ``offset``, whose tags codes are the
        held messages' deliver times (see :func:`mqcore.codec.timer_tags_code`), or None
        when the store is no :class:`~mqcore.storecaps.UnitReader` (then :meth:`read_timers`
        serves)."""
        if self._unit_reader is None:
            return None
        return self._unit_reader.get_units(TIMER_TOPIC, 0, offset, max_count)

    def timer_max_offset(self) -> int:
        """One past the last held timer message."""
        return int(self.store.max_offset(TIMER_TOPIC, 0))

    def timer_message(self, queue_offset: int) -> MessageExt | None:
        """The held timer message at ``queue_offset``, or None when it is gone."""
        got: GetResult = self.store.get(TIMER_TOPIC, 0, queue_offset, max_count=1)
        if got.status is GetStatus.FOUND and got.messages:
            msg = got.messages[0]
            if msg.queue_offset == queue_offset:
                return msg
        return None

    def data_path(self, name: str) -> Path:
        """``<data_dir>/<name>``."""
        return self.data_dir / name
