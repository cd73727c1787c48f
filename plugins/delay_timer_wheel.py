"""The ``timer`` delay scheduler: timer messages delivered at any time (RocketMQ 5's way).

A message with ``TIMER_DELIVER_MS`` (or ``TIMER_DELAY_MS``/``TIMER_DELAY_SEC``) is stored by
the broker in the system topic ``rmq_sys_wheel_timer``, queue 0, with its real topic and
queue in ``REAL_TOPIC``/``REAL_QID`` and its deliver time in ``TIMER_OUT_MS``; the commit log
stays the one source of truth. This scheduler, in the broker's timer thread:

1. *enqueues*: reads the timer topic from the offset it reached and links each held message
   into the timing wheel slot of its deliver time, through a unit appended to the timer log
   (:mod:`mqcore.plugins.delay_timer_files`); a batch is committed (checkpoint) once its
   units and slots are written;
2. *dequeues*: the read cursor walks the wheel one slot (``precision_ms``, 1 s) at a time;
   when the latest deliver time in the cursor's slot has come, its units are read in the
   order they were appended and each message is stored again in its real topic and queue,
   the checkpoint counting the deliveries one by one; the cursor moves on once the slot's
   time span is over.

Nothing is ever delivered before its time; a delivery comes at most one slot (plus the
thread's wake-up delay) after it. After a process crash the uncommitted tail of the log is
cut, wheel slots that pointed into it are walked back to the committed units, and the timer
topic is read again from the committed offset: every timer is delivered, and at most the one
delivery under way when the process died is repeated.

Memory holds no pending message: the wheel is a memory-mapped file of ``slots x 32`` bytes
(pages touched only), the log is read with ``pread``; the delivery of one slot keeps the
positions of that slot's units (8 bytes each).
"""

from __future__ import annotations

import array
import json
import shutil
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from mqcore import speedups
from mqcore.atomicfile import backup_path, read_with_backup, write_json_atomic
from mqcore.errors import InvalidArgumentError, StoreCorruptedError
from mqcore.hookspecs import RegisterTimerSchedulers, hookimpl
from mqcore.logs import get_logger
from mqcore.message import (
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
)
from mqcore.plugins.delay_held import deliver_held, real_destination
from mqcore.plugins.delay_timer_files import (
    SLOT,
    SLOT_SIZE,
    UNIT,
    UNIT_MAGIC,
    UNIT_SIZE,
    Checkpoint,
    TimerCheckpoint,
    TimerLog,
    TimerWheel,
)
from mqcore.record.layout import HEADER_SIZE, POS_BODY_LENGTH, POS_PHYSICAL_OFFSET, POS_QUEUE_OFFSET
from mqcore.record.unit import MIN_DELIVER_CODE
from mqcore.record.unit import UNIT as CQ_UNIT
from mqcore.store import GetStatus, UnitsResult

__all__ = [
    "TimerScheduler",
    "TimerStats",
    "mqcore_register_timer_schedulers",
    "py_link_timers",
    "read_stats",
]

log = get_logger(__name__)

DEFAULT_MAX_DELAY_SEC = 3 * 24 * 3600  # RocketMQ's timerMaxDelaySec
DEFAULT_PRECISION_MS = 1000  # RocketMQ's timerPrecisionMs
SEGMENTS_FILE = "timerSegments.json"
CHECKPOINT_FILE = "timercheck"
#: A master's progress copied to this (slave's) broker, in its config directory; the next
#: start rebuilds the wheel from it (see TimerScheduler.import_state).
IMPORT_FILE = "timerImport.json"

_IDLE_MS = 100
_ENQUEUE_BATCH = 256  # held messages read per store call
_ENQUEUE_PER_PASS = 65_536  # bound one pass, so deliveries are not starved by a backlog
# Bound the lock hold of one pass (stats and close wait for it) when much is overdue.
_DELIVER_PER_PASS = 512
_SKIP_PER_PASS = 65_536
# Record size, queue offset, commit-log offset and body length, from the record header.
_RECORD = struct.Struct(f">i{POS_QUEUE_OFFSET - 4}xqq{POS_BODY_LENGTH - POS_PHYSICAL_OFFSET - 8}xi")
_OUT_PREFIX = PROPERTY_TIMER_OUT_MS.encode() + b"\x01"
_OUT_START = len(_OUT_PREFIX)
_OUT_HEAD = _OUT_START + 13 + 1  # prefix, 13 digits, separator


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _deliver_ms_of(record: memoryview, body_len: int) -> int | None:
    """``TIMER_OUT_MS`` of an encoded record, without decoding the rest."""
    pos = HEADER_SIZE + body_len
    pos += 1 + record[pos]  # the topic
    plen = (record[pos] << 8) | record[pos + 1]
    pos += 2
    # The broker writes TIMER_OUT_MS first, with a 13-digit time until the year 2286.
    head = bytes(record[pos : pos + _OUT_HEAD])
    if head.startswith(_OUT_PREFIX) and head[-1] == 2:
        return int(head[_OUT_START:-1])
    props = bytes(record[pos : pos + plen])  # written some other way: look for it
    at = 0 if props.startswith(_OUT_PREFIX) else props.find(b"\x02" + _OUT_PREFIX) + 1
    if at == 0 and not props.startswith(_OUT_PREFIX):
        return None
    start = at + len(_OUT_PREFIX)
    end = props.find(b"\x02", start)
    text = props[start : end if end >= 0 else len(props)]
    return int(text) if text.isdigit() else None


def _held_from_records(records: list[memoryview]) -> list[tuple[int, int, int, Any]]:
    """``(record size, queue offset, commit-log offset, deliver time or None)`` of the held
    messages ``records`` (for a store that cannot read units alone)."""
    unpack = _RECORD.unpack_from
    held = []
    for record in records:
        size, queue_offset, cl_offset, body_len = unpack(record, 0)
        held.append((size, queue_offset, cl_offset, _deliver_ms_of(record, body_len)))
    return held


# What py_link_timers stopped at.
LINKED = 0  # every unit
BLOCKED = 1  # a unit beyond the wheel's span: the cursor must catch up first
NEW_SEGMENT = 2  # a unit that opens the next timer-log segment (the caller notes the old one)
READ_RECORD = 3  # a unit without a deliver time in its tags code: the caller reads the record


def py_link_timers(
    units: bytes,
    start: int,
    offset: int,
    forced: int,
    read_ms: int,
    precision_ms: int,
    slots: int,
    horizon: int,
    now: int,
    pos: int,
    seg_end: int,
    top_slot: int,
    wheel: Any,
    changed: dict[int, tuple[int, int, int, int]],
    before: dict[int, tuple[int, int, int, int]],
    out: bytearray,
) -> tuple[int, int, int, int]:
    """The enqueue loop of :class:`TimerScheduler`: link held messages into the wheel.

    ``units`` are consume-queue units of the timer topic (the first at queue offset
    ``offset``), their tags codes the deliver times; from index ``start`` (whose deliver
    time is ``forced`` instead when that is >= 0, read from its record by the caller), each
    gets a timer-log unit at ``pos`` (appended to ``out``) pointing back to the last unit
    of its slot, and the slot (from ``changed``, else read from the mapped ``wheel`` and
    kept in ``before``) is updated in ``changed``. A unit overdue goes into the slot at
    ``read_ms``. Stops at the end, or at a unit that is ``BLOCKED``, opens a
    ``NEW_SEGMENT`` (``pos >= seg_end``) or must ``READ_RECORD``: returns ``(index of
    that unit, pos, top_slot, status)``, ``top_slot`` the latest slot time linked.

    The reference for the ``timer`` speedups' ``link_timers`` (same arguments, same results, the
    tests hold both to the same bytes).
    """
    if precision_ms <= 0 or slots <= 0 or start < 0:
        raise InvalidArgumentError("link_timers: precision and slots must be > 0")
    unpack = CQ_UNIT.unpack_from
    pack = UNIT.pack
    get_slot = SLOT.unpack_from
    n = len(units) // CQ_UNIT.size
    i = start
    status = LINKED
    chunks: list[bytes] = []
    while i < n:
        cl_offset, size, deliver = unpack(units, i * CQ_UNIT.size)
        if i == start and forced >= 0:
            deliver = forced
        elif deliver < MIN_DELIVER_CODE:
            status = READ_RECORD
            break
        slot_ms = deliver - deliver % precision_ms
        if slot_ms < read_ms:
            slot_ms = read_ms  # overdue: into the slot being delivered
        elif slot_ms >= horizon:
            status = BLOCKED
            break
        if pos >= seg_end:
            status = NEW_SEGMENT
            break
        index = (slot_ms // precision_ms) % slots
        slot = changed.get(index)
        if slot is None:
            if (index + 1) * SLOT_SIZE > len(wheel):
                raise IndexError(f"link_timers: slot {index} is past the wheel")
            slot = before[index] = get_slot(wheel, index * SLOT_SIZE)[:4]
        if slot[0] != slot_ms:  # a new round of this slot
            slot = (slot_ms, 0, -1, 0)
        chunks.append(pack(slot[2], deliver, slot_ms, offset + i, cl_offset, now, size, UNIT_MAGIC))
        changed[index] = (slot_ms, deliver if deliver > slot[1] else slot[1], pos, slot[3] + 1)
        if slot_ms > top_slot:
            top_slot = slot_ms
        pos += UNIT_SIZE
        i += 1
    out += b"".join(chunks)
    return i, pos, top_slot, status


_speedups = speedups.load("timer")
_link_timers: Any = py_link_timers if _speedups is None else _speedups.link_timers


def _units_of_records(
    records: list[memoryview], offset: int
) -> tuple[int, bytes, dict[int, int | None]]:
    """For a store that cannot read units alone: the queue offset of ``records``' first
    (``offset`` when there is none),
    consume-queue units standing for them (cut at a gap in their queue offsets) whose tags
    codes are their deliver times, and by index the deliver times too small to be told
    from a tags code (or None when a record has none)."""
    held = _held_from_records(records)
    if not held:
        return offset, b"", {}
    first = held[0][1]
    parts = []
    odd: dict[int, int | None] = {}
    for i, (size, queue_offset, cl_offset, deliver) in enumerate(held):
        if queue_offset != first + i:
            break
        if deliver is None or deliver < MIN_DELIVER_CODE:
            odd[i] = deliver
            deliver = 0
        parts.append(CQ_UNIT.pack(cl_offset, size, deliver))
    return first, b"".join(parts), odd


@attrs.frozen
class _Replay:
    """A master's progress a promoted slave resumes from (see ``import_state``): of the held
    messages below queue offset ``end``, those whose deliver time falls in a slot up to
    ``read_ms`` were delivered, but for the ``pending`` ones of that last slot."""

    end: int
    read_ms: int
    precision_ms: int
    pending: frozenset[int]

    def delivered(self, queue_offset: int, deliver_ms: int) -> bool:
        """Whether the old master delivered the held message at ``queue_offset``."""
        return (
            queue_offset < self.end
            and deliver_ms - deliver_ms % self.precision_ms <= self.read_ms
            and queue_offset not in self.pending
        )


def _imported_state(state: Any) -> dict[str, Any]:
    """``state`` (an :meth:`TimerScheduler.export_state`) checked, or InvalidArgumentError."""
    fields = ("enqueue_offset", "read_ms", "precision_ms", "slots")
    if not isinstance(state, dict) or not all(
        type(state.get(f)) is int and state[f] >= 0 for f in fields
    ):
        raise InvalidArgumentError(f"timer progress {state!r} lacks {', '.join(fields)}")
    pending = state.get("cursor_pending")
    if not isinstance(pending, list) or not all(type(q) is int for q in pending):
        raise InvalidArgumentError("timer progress: cursor_pending is not a list of offsets")
    if state["precision_ms"] <= 0 or state["slots"] <= 0:
        raise InvalidArgumentError(f"timer progress {state!r}: precision and slots must be > 0")
    return {f: state[f] for f in fields} | {"cursor_pending": pending}


@attrs.frozen
class TimerStats:
    """What ``mqcore timer stats`` shows.

    :param pending: timers held and not delivered yet (in the wheel, plus those stored in
        the timer topic and not yet put into the wheel).
    :param in_wheel: of those, the ones in the wheel.
    :param enqueue_backlog: held messages not yet put into the wheel.
    :param next_due_ms: when the next pending slot of the wheel is delivered (the latest
        deliver time in it), or None.
    :param lag_ms: how far delivery is behind: now minus that time, when it has passed.
    :param read_ms: start of the slot being delivered.
    """

    pending: int
    in_wheel: int
    enqueue_backlog: int
    next_due_ms: int | None
    lag_ms: int
    read_ms: int

    def as_dict(self) -> dict[str, Any]:
        """The fields as a dict (for JSON)."""
        return attrs.asdict(self)


class TimerScheduler:
    """Timer messages on a timing wheel (see the module docstring).

    :param precision_ms: width of a wheel slot (RocketMQ's ``timerPrecisionMs``, 1 s).
    :param max_delay_sec: the furthest a timer may be set ahead (``timerMaxDelaySec``, 3
        days); the broker refuses a timer beyond it at send.
    :param clock: current time in ms; injectable for tests.
    :param segment_bytes: size of a timer-log segment.
    :param message_delay_level: accepted and ignored, so that any scheduler factory can be
        called the same way.
    """

    name = "timer"

    def __init__(
        self,
        *,
        precision_ms: int = DEFAULT_PRECISION_MS,
        max_delay_sec: int = DEFAULT_MAX_DELAY_SEC,
        clock: Callable[[], int] | None = None,
        segment_bytes: int = 64 * 1024 * 1024,
        message_delay_level: str | None = None,
    ) -> None:
        if precision_ms <= 0 or max_delay_sec <= 0:
            raise InvalidArgumentError(
                f"timer precision_ms={precision_ms} and max_delay_sec={max_delay_sec} must be "
                "positive (RocketMQ's defaults: 1000 and 259200)"
            )
        self.precision_ms = precision_ms
        self.max_delay_ms = max_delay_sec * 1000
        self.clock = clock or _wall_clock_ms
        self.segment_bytes = segment_bytes
        # Room for the longest delay plus as much again: the cursor may lag that long.
        self.slots = 2 * (self.max_delay_ms // precision_ms + 1)
        self._host: Any = None
        self._lock = threading.RLock()
        self._running = False
        self._log: TimerLog | None = None
        self._wheel: TimerWheel | None = None
        self._ckpt: TimerCheckpoint | None = None
        self._cp = Checkpoint(0, 0, 0, 0, 0, 0, precision_ms, self.slots)
        # Segment start -> latest slot time of its units: it is deleted once the cursor is
        # past that (a unit overdue when enqueued sits in a later slot than its deliver time).
        self._seg_max: dict[int, int] = {}
        self._seg_path: Any = None
        # (read ms, last pos, units) of the cursor's slot -> its unit positions, append order.
        self._slot_cache: tuple[tuple[int, int, int], array.array[int]] | None = None
        self._seg_dirty = False
        self._replay: _Replay | None = None
        self._import_path: Path | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, host: Any) -> None:
        """Open (or create) the files, recover an uncommitted tail, begin serving ``host``."""
        with self._lock:
            self._host = host
            imported = self._take_import(host)
            ckpt = TimerCheckpoint(host.state_path(CHECKPOINT_FILE))
            try:
                cp = ckpt.load()
            except BaseException:
                ckpt.close()
                raise
            if cp is not None and (cp.precision_ms, cp.slots) != (self.precision_ms, self.slots):
                # The wheel's layout is fixed when it is created: keep it.
                log.warning(
                    "timer_layout_kept", precision_ms=cp.precision_ms, slots=cp.slots,
                    asked_precision_ms=self.precision_ms, asked_slots=self.slots,
                )  # fmt: skip
                self.precision_ms, self.slots = cp.precision_ms, cp.slots
                # Never accept a timer the wheel cannot place (half its span).
                self.max_delay_ms = min(
                    self.max_delay_ms, (self.slots // 2 - 1) * self.precision_ms
                )
            self._ckpt = ckpt
            self._log = TimerLog(host.data_path("timerlog"), self.segment_bytes)
            self._wheel = TimerWheel(host.data_path("timerwheel"), self.slots)
            fresh = cp is None
            if cp is None:
                now = self.clock()
                read_ms = now - now % self.precision_ms
                if imported is not None:
                    read_ms = imported["read_ms"]  # the old master's cursor
                cp = Checkpoint(0, 0, 0, read_ms, 0, 0, self.precision_ms, self.slots)
            self._cp = cp
            if fresh:  # both copies, so that a torn later write always has one to fall back on
                self._commit()
                self._commit()
            self._seg_path = host.state_path(SEGMENTS_FILE)
            self._recover()
            high = host.timer_max_offset()
            if self._cp.enqueue_offset > high:
                log.error("timer_offset_corrected", offset=self._cp.enqueue_offset, to=high)
                self._commit(enqueue_offset=high)
            if imported is not None:
                self._start_replay(imported, high)
            self._running = True
        log.info("timer_scheduler_started", pending=self._cp.pending, read_ms=self._cp.read_ms)

    def _recover(self) -> None:
        """Cut the log's uncommitted tail and walk back the slots that point into it."""
        assert self._log is not None and self._wheel is not None
        committed = self._cp.log_end
        on_disk = self._log.end()
        if on_disk > committed:
            # Units past the committed end were never counted as pending: only the slots
            # that link to them need walking back, and each of those units names its slot.
            touched = {
                (unit.slot_ms // self.precision_ms) % self.slots
                for _, unit in self._log.scan(committed, on_disk)
            }
            cut = 0
            for index in sorted(touched):
                t, due, last, num = self._wheel.get(index)
                pos = last
                while pos >= committed:
                    unit = self._log.read(pos)
                    if unit is None:  # cannot happen after a process crash; be safe
                        raise StoreCorruptedError(
                            f"timer wheel slot {index} points at position {pos} of the "
                            "timer log, which holds no unit; restore the timer files, or "
                            "remove them to rebuild from the timer topic (timers already "
                            "delivered are then delivered again)"
                        )
                    pos = unit.prev_pos
                    num -= 1
                    cut += 1
                self._wheel.put(index, t, due, pos, max(num, 0))
            log.warning("timer_log_tail_cut", committed=committed, end=on_disk, units=cut)
            self._log.truncate(committed)
        self._load_segments()

    def _load_segments(self) -> None:
        assert self._log is not None
        parsed: list[dict[str, Any]] = []

        def validate(data: bytes) -> bool:
            parsed.append(json.loads(data))
            return True

        try:
            data = read_with_backup(self._seg_path, validate)
        except StoreCorruptedError:
            data = None  # rebuilt from the log below
        table = parsed[-1] if data is not None and parsed else {}
        seg_max = {int(k): int(v) for k, v in table.get("segments", {}).items()}
        scanned_to = int(table.get("log_end", 0))
        # Units appended after the table was written are read again.
        for pos, unit in self._log.scan(min(scanned_to, self._cp.log_end), self._cp.log_end):
            start = pos - pos % self._log.segment_bytes
            seg_max[start] = max(seg_max.get(start, 0), unit.slot_ms)
        self._seg_max = {s: m for s, m in seg_max.items() if s in set(self._log.segments())}
        self._seg_dirty = True

    # -- replication (mqcore.interfaces.SchedulerState) --------------------------------

    def export_state(self) -> dict[str, Any] | None:
        """The progress a slave needs to take over, in a few numbers: the timer-topic offset
        enqueued up to, the read cursor (the slot being delivered), the wheel's layout and
        the queue offsets of the cursor slot's units not delivered yet. Every held message
        below that offset whose deliver time falls in a slot up to the cursor's was
        delivered, but for those; every other one is pending. None before :meth:`start`."""
        with self._lock:
            if not self._running:
                return None
            cp = self._cp
            return {
                "enqueue_offset": cp.enqueue_offset,
                "read_ms": cp.read_ms,
                "precision_ms": cp.precision_ms,
                "slots": cp.slots,
                "cursor_pending": self._cursor_pending(),
            }

    def import_state(self, host: Any, state: Any) -> None:
        """Keep another broker's :meth:`export_state` in ``timerImport.json``: the next
        :meth:`start` on this data directory drops the timer files it finds, takes the
        wheel's layout and read cursor from ``state`` and enqueues the timer topic again
        from its start, leaving out what ``state`` says was delivered.

        :raises InvalidArgumentError: when ``state`` is not such progress.
        """
        checked = _imported_state(state)
        write_json_atomic(host.state_path(IMPORT_FILE), {"applied": False, **checked})

    def _take_import(self, host: Any) -> dict[str, Any] | None:
        """The imported progress to resume from, or None; a newly imported one replaces the
        timer files on disk (they are this directory's own, older than its master's)."""
        path = host.state_path(IMPORT_FILE)
        self._import_path = path
        parsed: list[dict[str, Any]] = []

        def validate(data: bytes) -> bool:
            doc = json.loads(data)
            parsed.append(doc | _imported_state(doc))
            return True

        try:
            data = read_with_backup(path, validate)
        except StoreCorruptedError:
            log.error("timer_import_unreadable", path=str(path))
            raise
        if data is None:
            return None
        doc = parsed[-1]
        if doc.get("applied") is not True:
            for name in (CHECKPOINT_FILE, SEGMENTS_FILE):
                host.state_path(name).unlink(missing_ok=True)
                backup_path(host.state_path(name)).unlink(missing_ok=True)
            host.data_path("timerwheel").unlink(missing_ok=True)
            shutil.rmtree(host.data_path("timerlog"), ignore_errors=True)
            if (doc["precision_ms"], doc["slots"]) != (self.precision_ms, self.slots):
                log.warning(
                    "timer_layout_kept", precision_ms=doc["precision_ms"], slots=doc["slots"],
                    asked_precision_ms=self.precision_ms, asked_slots=self.slots,
                )  # fmt: skip
                self.precision_ms, self.slots = doc["precision_ms"], doc["slots"]
                self.max_delay_ms = min(
                    self.max_delay_ms, (self.slots // 2 - 1) * self.precision_ms
                )
            log.info(
                "timer_state_imported", enqueue_offset=doc["enqueue_offset"],
                read_ms=doc["read_ms"], cursor_pending=len(doc["cursor_pending"]),
            )  # fmt: skip
        return doc

    def _start_replay(self, doc: dict[str, Any], high: int) -> None:
        """Leave out what the old master delivered while the timer topic is enqueued again."""
        assert self._import_path is not None
        if doc.get("applied") is not True:
            # Only what this store held when it took over is the old master's: a message
            # stored later at an offset below its enqueue offset is this broker's own.
            doc = {**doc, "applied": True, "end": min(doc["enqueue_offset"], high)}
            write_json_atomic(self._import_path, doc)
        end = doc.get("end")
        end = end if type(end) is int else min(doc["enqueue_offset"], high)
        self._replay = _Replay(
            end, doc["read_ms"], doc["precision_ms"], frozenset(doc["cursor_pending"])
        )
        self._end_replay()

    def _end_replay(self) -> None:
        """Forget the imported progress once the timer topic is enqueued past it."""
        replay = self._replay
        if replay is None or self._cp.enqueue_offset < replay.end:
            return
        assert self._ckpt is not None and self._import_path is not None
        self._ckpt.flush()  # the checkpoint past it first: it stands for the import now
        self._import_path.unlink(missing_ok=True)
        backup_path(self._import_path).unlink(missing_ok=True)
        self._replay = None
        log.info("timer_state_import_done", enqueue_offset=self._cp.enqueue_offset)

    def _cursor_pending(self) -> list[int]:
        """Queue offsets of the units of the cursor's slot not delivered yet."""
        assert self._wheel is not None and self._log is not None
        cp = self._cp
        t, _, last, num = self._wheel.get(self._slot_index(cp.read_ms))
        if t != cp.read_ms or num <= cp.done:
            return []
        positions = self._slot_positions(last, num)
        start = max(cp.done - (num - len(positions)), 0)
        out = []
        for pos in positions[start:]:
            unit = self._log.read(pos)
            if unit is not None:
                out.append(unit.queue_offset)
        return out

    def _replayed(self, base: int, units: bytes, odd: dict[int, int | None] | None) -> list[int]:
        """Indexes of ``units`` (the first at queue offset ``base``) the old master
        delivered, while enqueuing from imported progress."""
        replay = self._replay
        if replay is None or base >= replay.end:
            return []
        out = []
        for i in range(min(len(units) // CQ_UNIT.size, replay.end - base)):
            deliver: int | None = CQ_UNIT.unpack_from(units, i * CQ_UNIT.size)[2]
            if deliver is None or deliver < MIN_DELIVER_CODE:
                deliver = self._deliver_of_record(base + i) if odd is None else odd.get(i)
            if deliver is not None and replay.delivered(base + i, deliver):
                out.append(i)
        return out

    def stop(self) -> None:
        """Stop delivering, persist, close the files."""
        with self._lock:
            if not self._running:
                return
            self._running = False
            self._persist_locked()
            assert self._log is not None and self._wheel is not None and self._ckpt is not None
            self._log.close()
            self._wheel.close()
            self._ckpt.close()

    def persist(self) -> bool:
        """Flush log, wheel and checkpoint to disk; drop log segments fully delivered."""
        with self._lock:
            if not self._running:
                return False
            return self._persist_locked()

    def _persist_locked(self) -> bool:
        assert self._log is not None and self._wheel is not None and self._ckpt is not None
        self._log.flush()
        self._wheel.flush()
        self._ckpt.flush()  # after the data it describes
        read_ms = self._cp.read_ms
        current = self._cp.log_end - self._cp.log_end % self._log.segment_bytes
        for start in self._log.segments():
            if start < current and self._seg_max.get(start, 0) < read_ms:
                self._log.delete(start)
                self._seg_max.pop(start, None)
                self._seg_dirty = True
        if self._seg_dirty:
            table = {
                "log_end": self._cp.log_end,
                "segments": {str(s): m for s, m in sorted(self._seg_max.items())},
            }
            write_json_atomic(self._seg_path, table)
            self._seg_dirty = False
        return True

    def _commit(self, **changes: int) -> None:
        assert self._ckpt is not None
        cp = self._cp._replace(seq=self._cp.seq + 1, **changes)
        self._ckpt.write(cp)
        self._cp = cp

    # -- the timer thread ----------------------------------------------------------------

    def run_due(self) -> int:
        """Put newly held messages into the wheel, deliver what is due; ms until next useful."""
        with self._lock:
            if not self._running:
                return _IDLE_MS
            now = self.clock()
            more = self._enqueue(now)
            wait = self._dequeue(self.clock())
            return 0 if more else wait

    def _slot_index(self, slot_ms: int) -> int:
        return (slot_ms // self.precision_ms) % self.slots

    def _enqueue(self, now: int) -> bool:
        """Link held messages into the wheel; True when more are waiting."""
        host, wheel, tlog = self._host, self._wheel, self._log
        assert wheel is not None and tlog is not None
        prec = self.precision_ms
        read_units = getattr(host, "read_timer_units", None)
        done = 0
        while done < _ENQUEUE_PER_PASS:
            offset = self._cp.enqueue_offset
            if offset >= host.timer_max_offset():
                return False
            got = read_units(offset, _ENQUEUE_BATCH) if read_units is not None else None
            if got is None:  # a store that cannot read units alone: the records
                got = host.read_timers(offset, _ENQUEUE_BATCH)
            if got.status is not GetStatus.FOUND:
                if got.next_offset != offset and got.status in (
                    GetStatus.OFFSET_TOO_SMALL,
                    GetStatus.OFFSET_OVERFLOW_BADLY,
                ):
                    log.error("timer_offset_corrected", offset=offset, to=got.next_offset)
                    self._commit(enqueue_offset=got.next_offset)
                    continue
                return False
            if isinstance(got, UnitsResult):
                base, units, odd = offset, got.units, None
            else:
                base, units, odd = _units_of_records(got.records, offset)
            read_ms = self._cp.read_ms
            horizon = read_ms + self.slots * prec
            nslots = self.slots
            slots: dict[int, tuple[int, int, int, int]] = {}
            before: dict[int, tuple[int, int, int, int]] = {}  # slots as committed
            linked = bytearray()
            begin = pos = self._cp.log_end
            seg = tlog.segment_bytes
            seg_end = begin - begin % seg + seg  # end of the segment being filled
            top_slot = self._seg_max.get(seg_end - seg, -1)
            blocked = False
            mapping = wheel.mapping
            i, n = 0, len(units) // CQ_UNIT.size
            forced, forced_at = -1, -1
            # Units the old master delivered (imported progress): left out of the wheel.
            skip = self._replayed(base, units, odd)
            k = 0
            while i < n:
                while k < len(skip) and skip[k] < i:
                    k += 1
                if k < len(skip) and skip[k] == i:
                    i += 1
                    continue
                upto = units if k == len(skip) else units[: skip[k] * CQ_UNIT.size]
                i, pos, top_slot, status = _link_timers(
                    upto, i, base, forced if i == forced_at else -1, read_ms, prec, nslots,
                    horizon, now, pos, seg_end, top_slot, mapping, slots, before, linked,
                )  # fmt: skip
                if status == BLOCKED:
                    blocked = True  # the cursor must catch up before this one fits
                    break
                if status == NEW_SEGMENT:  # unit i opens the next segment
                    self._seg_max[seg_end - seg] = top_slot
                    seg_end += seg
                    top_slot = -1
                elif status == READ_RECORD:
                    deliver = self._deliver_of_record(base + i) if odd is None else odd.get(i)
                    if deliver is None:
                        log.error("timer_message_without_deliver_time", queue_offset=base + i)
                        i += 1
                    else:
                        forced, forced_at = deliver, i
            next_offset = base + i if i else offset
            if linked:
                self._seg_max[seg_end - seg] = top_slot
            linked_count = len(linked) // UNIT_SIZE
            pending = self._cp.pending + linked_count
            try:
                if linked:
                    # Log first, then the slots, then the checkpoint: a crash in between
                    # leaves a tail that start() cuts and slots it can walk back.
                    tlog.append(begin, bytes(linked))
                    wheel.put_many(slots)
                    self._seg_dirty = True
                if next_offset != offset or linked:
                    self._commit(enqueue_offset=next_offset, log_end=pos, pending=pending)
            except BaseException:
                self._rollback(before)
                raise
            done += linked_count
            self._end_replay()
            if blocked:
                return False
        return True

    def _deliver_of_record(self, queue_offset: int) -> int | None:
        msg = self._host.timer_message(queue_offset)
        text = None if msg is None else msg.get_property(PROPERTY_TIMER_OUT_MS)
        return int(text) if text and text.isascii() and text.isdigit() else None

    def _rollback(self, before: dict[int, tuple[int, int, int, int]]) -> None:
        """Undo a batch that failed before its commit (the next pass takes it in again)."""
        assert self._wheel is not None and self._log is not None
        for index, (t, due, last, num) in before.items():
            self._wheel.put(index, t, due, last, num)
        self._log.truncate(self._cp.log_end)
        log.error("timer_enqueue_rolled_back", log_end=self._cp.log_end)

    def _dequeue(self, now: int) -> int:
        """Deliver due slots; ms until the cursor's slot may have work."""
        wheel = self._wheel
        assert wheel is not None
        prec = self.precision_ms
        skipped = 0
        budget = _DELIVER_PER_PASS
        while True:
            if budget <= 0 or skipped >= _SKIP_PER_PASS:
                if skipped:
                    self._commit()
                return 0  # more to do at once: the next pass goes on
            read_ms = self._cp.read_ms
            index = self._slot_index(read_ms)
            t, due, last, num = wheel.get(index)
            if t == read_ms and num > self._cp.done:
                if now < due:
                    if skipped:
                        self._commit()
                    return min(_IDLE_MS, due - now)
                if skipped:
                    self._commit()
                    skipped = 0
                delivered = self._deliver_slot(last, num, budget)
                if delivered < 0:
                    return _IDLE_MS
                budget -= max(delivered, 1)
                now = self.clock()
                continue
            if now < read_ms + prec:
                if skipped:
                    self._commit()
                return min(_IDLE_MS, read_ms + prec - now)
            # The slot's span is over and everything in it is delivered: move on. Empty
            # slots are skipped in a row and committed once.
            self._cp = self._cp._replace(read_ms=read_ms + prec, done=0)
            skipped += 1

    def _deliver_slot(self, last: int, num: int, budget: int) -> int:
        """Deliver up to ``budget`` undelivered units of the cursor's slot; how many were
        delivered, or -1 when a put failed (the same unit is tried again next pass)."""
        tlog = self._log
        assert tlog is not None
        positions = self._slot_positions(last, num)
        start = max(self._cp.done - (num - len(positions)), 0)
        delivered = 0
        for pos in positions[start : start + budget]:
            unit = tlog.read(pos)
            assert unit is not None
            if not self._deliver(unit):
                return -1
            self._commit(done=self._cp.done + 1, pending=max(self._cp.pending - 1, 0))
            delivered += 1
        if start + delivered >= len(positions) and self._cp.done < num:
            self._commit(done=num)  # units that could not be read count as done
        return delivered

    def _slot_positions(self, last: int, num: int) -> array.array[int]:
        """Positions of the cursor slot's units (its last at ``last``), in append order."""
        tlog = self._log
        assert tlog is not None
        key = (self._cp.read_ms, last, num)
        cached = self._slot_cache
        if cached is not None and cached[0] == key:
            return cached[1]  # a big slot is delivered over several passes
        positions = array.array("q")
        pos = last
        while pos >= 0 and len(positions) < num:
            unit = tlog.read(pos)
            if unit is None:
                log.error("timer_unit_missing", pos=pos, slot_ms=self._cp.read_ms)
                break
            positions.append(pos)
            pos = unit.prev_pos
        positions.reverse()  # append order
        self._slot_cache = (key, positions)
        return positions

    def _deliver(self, unit: Any) -> bool:
        host = self._host
        msg = host.timer_message(unit.queue_offset)
        if msg is None:
            log.error("timer_message_missing", queue_offset=unit.queue_offset)
            return True
        destination = real_destination(msg)
        if destination is None:
            log.error("timer_message_without_real_topic", queue_offset=unit.queue_offset)
            return True
        props = msg.properties
        props[PROPERTY_TIMER_ENQUEUE_MS] = str(unit.enqueue_ms)
        props[PROPERTY_TIMER_DEQUEUE_MS] = str(self.clock())
        try:
            deliver_held(host, msg, destination, props)
        except Exception:
            log.exception("timer_delivery_failed", queue_offset=unit.queue_offset)
            return False
        return True

    # -- stats -------------------------------------------------------------------------

    def stats(self) -> TimerStats:
        """Pending timers, the next deliver time, and how far delivery lags."""
        with self._lock:
            if not self._running or self._wheel is None:
                raise InvalidArgumentError("the timer scheduler is not running; start a broker")
            backlog = max(self._host.timer_max_offset() - self._cp.enqueue_offset, 0)
            return _stats(self._cp, self._wheel, backlog, self.clock())


def _stats(cp: Checkpoint, wheel: TimerWheel, backlog: int, now: int) -> TimerStats:
    next_due: int | None = None
    lag = 0
    if cp.pending:
        first = (cp.read_ms // cp.precision_ms) % cp.slots
        for step in range(cp.slots):
            t, due, _, num = wheel.get((first + step) % cp.slots)
            if t == cp.read_ms + step * cp.precision_ms and num > (cp.done if step == 0 else 0):
                next_due = due  # the slot is delivered once its latest time has come
                lag = max(now - due, 0)
                break
    return TimerStats(
        pending=cp.pending + backlog,
        in_wheel=cp.pending,
        enqueue_backlog=backlog,
        next_due_ms=next_due,
        lag_ms=lag,
        read_ms=cp.read_ms,
    )


def read_stats(data_dir: Path, timer_max_offset: int, now: int | None = None) -> TimerStats:
    """:class:`TimerStats` from the files of a broker's data directory, read only (the
    broker may be running in another process).

    :param timer_max_offset: the store's max offset of the timer topic (held messages).
    :raises InvalidArgumentError: when the directory holds no timer state.
    """
    path = data_dir / "config" / CHECKPOINT_FILE
    if not path.exists():
        raise InvalidArgumentError(
            f"{data_dir} holds no timer state ({path} is missing); is it a broker's data dir?"
        )
    ckpt = TimerCheckpoint(path, read_only=True)
    try:
        cp = ckpt.load()
    finally:
        ckpt.close()
    if cp is None:
        raise InvalidArgumentError(f"{path} is empty: the timer scheduler never started there")
    wheel = TimerWheel(data_dir / "timerwheel", cp.slots, read_only=True)
    try:
        backlog = max(timer_max_offset - cp.enqueue_offset, 0)
        return _stats(cp, wheel, backlog, _wall_clock_ms() if now is None else now)
    finally:
        wheel.close()


@hookimpl
def mqcore_register_timer_schedulers(register: RegisterTimerSchedulers) -> None:
    """Register the ``timer`` scheduler."""
    register("timer", TimerScheduler)
