"""The C loops of a timer send and of the wheel's enqueue against their Python references:
the broker's batch checks (``sent_prefix``), the hold (``hold_timers``) and the wheel's
linking loop (``link_timers``). Same answers, same bytes, same errors; and the references
agree with the general paths they stand in for."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import Message, codec
from mqcore.broker.broker import Broker
from mqcore.broker.schedule import DelayService, py_hold_timers
from mqcore.errors import InvalidArgumentError
from mqcore.plugins import delay_timer_files as files_mod
from mqcore.plugins import delay_timer_wheel as wheel_mod
from mqcore.plugins.delay_timer_files import SLOT, SLOT_SIZE, UNIT
from mqcore.record.prepared import P_TAGS_CODE
from mqcore.store import TIMER_TOPIC
from mqcore.validation import (
    REFUSABLE_PROPERTIES,
    check_sent_message,
    py_sent_prefix,
    sent_fast_ok,
)

protocol_c = pytest.importorskip("mqcore.protocol._protocol", reason="built without a C compiler")
schedule_c = pytest.importorskip("mqcore.broker._schedule", reason="built without a C compiler")
timer_c = pytest.importorskip("mqcore.plugins._delay_timer", reason="built without a C compiler")

# Text with and without what the checks and the record format care about: separators,
# lone surrogates, non-ASCII, digits.
_CHARS = st.sampled_from(["a", "Z", "0", "7", "é", "\x01", "\x02", "\ud800", " ", "٣"])
_TEXT = st.text(_CHARS, max_size=6)
_NAMES = st.one_of(
    st.sampled_from(
        [
            *("a", "b", "UNIQ_KEY", "TIMER_DELIVER_MS", "TIMER_DELAY_MS", "TIMER_DELAY_SEC"),
            *("TIMER_OUT_MS", "REAL_TOPIC", "REAL_QID", "TAGS", "RETRY_TOPIC", "WAIT", ""),
        ]
    ),
    _TEXT,
)
_VALUES = st.one_of(
    _TEXT,
    st.from_regex(r"[0-9]{1,20}", fullmatch=True),
    st.integers(1_700_000_000_000, 1_700_000_900_000).map(str),
    st.integers(),
    st.none(),
)


class _Str(str):
    """A str subclass: the C loops take exact types only."""


def _bypassing(**fields: Any) -> Message:
    """A Message with any field values, as a remote sender's may hold them."""
    m = Message(topic="T", body=b"x")
    for name, value in fields.items():
        object.__setattr__(m, name, value)
    return m


_messages = st.builds(
    _bypassing,
    topic=st.sampled_from(["T", "U", _Str("T")]),
    body=st.one_of(st.binary(max_size=40), st.binary(max_size=4).map(bytearray), st.just("x")),
    tags=st.one_of(st.none(), _TEXT, st.just(_Str("t"))),
    keys=st.one_of(st.none(), _TEXT),
    properties=st.one_of(
        st.dictionaries(_NAMES, _VALUES, max_size=4),
        st.dictionaries(st.sampled_from(["a", "UNIQ_KEY"]), _TEXT, max_size=2).map(
            lambda d: {"TIMER_DELIVER_MS": "1700000100000", **d}
        ),
        st.just([("a", "b")]),
    ),
    delay_level=st.one_of(st.integers(-2, 3), st.just(2**64), st.just(True), st.just("1")),
)


def _broker_checks(m: Message, topic: str, limit: int) -> bool:
    """The broker's checks of one message, as Broker._check_messages runs them."""
    try:
        if m.topic != topic:
            return False
        check_sent_message(m, topic)
        return len(m.body) <= limit
    except InvalidArgumentError:
        return False


@settings(max_examples=600, deadline=None)
@given(st.lists(_messages, max_size=6), st.integers(0, 30))
def test_c_sent_prefix_matches_python(msgs: list[Message], limit: int) -> None:
    """The C loop accepts the same leading messages as its reference, and each of them
    passes the broker's full checks."""
    got = protocol_c.sent_prefix(msgs, "T", limit, REFUSABLE_PROPERTIES)
    assert got == py_sent_prefix(msgs, "T", limit)
    assert got == protocol_c.sent_prefix(tuple(msgs), "T", limit, REFUSABLE_PROPERTIES)
    for m in msgs[:got]:
        assert sent_fast_ok(m, "T", limit)
        assert _broker_checks(m, "T", limit)


def test_sent_prefix_fields_that_fail_to_read() -> None:
    """A message whose field raises is left to the Python checks (which raise it)."""

    class Broken:
        topic = "T"

        @property
        def body(self) -> bytes:
            raise RuntimeError("no body")

    assert protocol_c.sent_prefix([Message("T", b"x"), Broken()], "T", 9, REFUSABLE_PROPERTIES) == 1
    with pytest.raises(TypeError):
        protocol_c.sent_prefix(5, "T", 9, REFUSABLE_PROPERTIES)


def test_plain_and_timer_messages_take_the_fast_checks() -> None:
    """What producers send (a UNIQ_KEY, a timer) is accepted in C, refusals are not."""
    ok = [
        Message("T", b"x"),
        Message("T", b"x", tags="a", keys="k1 k2", properties={"p": "v"}),
        Message("T", b"x", deliver_time_ms=1_700_000_000_000),
        Message("T", b"x", delay_level=3),
    ]
    assert protocol_c.sent_prefix(ok, "T", 10, REFUSABLE_PROPERTIES) == len(ok)
    refused = _bypassing(properties={"TIMER_OUT_MS": "1"})
    assert protocol_c.sent_prefix([*ok, refused, *ok], "T", 10, REFUSABLE_PROPERTIES) == len(ok)


# --- the hold --------------------------------------------------------------------------

NOW = 1_700_000_000_000
_deliver = st.one_of(
    st.integers(NOW - 5, NOW + 3_600_000).map(str),
    st.sampled_from(["", "0", "00" + str(NOW + 7), "1" * 19, "x", "١٢"]),
)
_timers = st.builds(
    lambda body, tags, keys, extra, deliver, level, flag: _bypassing(
        body=body,
        tags=tags,
        keys=keys,
        properties={**extra, "TIMER_DELIVER_MS": deliver} if deliver is not None else extra,
        delay_level=level,
        flag=flag,
    ),
    st.one_of(st.binary(max_size=40), st.binary(max_size=4).map(bytearray)),
    st.one_of(st.none(), st.just(""), _TEXT, st.just(_Str("t"))),
    st.one_of(st.none(), st.just(""), _TEXT),
    st.one_of(
        st.dictionaries(_NAMES.filter(lambda n: n != "TIMER_DELIVER_MS"), _TEXT, max_size=4),
        st.dictionaries(st.text("ab", min_size=3, max_size=6), st.just("v"), min_size=16),
        st.dictionaries(st.sampled_from(["a", "b"]), st.just("é" * 8200), max_size=2),
    ),
    st.one_of(_deliver, st.none()),
    st.one_of(st.just(0), st.integers(-1, 2), st.just(False)),
    st.integers(-(2**31), 2**31 - 1),
)


def _general_hold(msgs: list[Message], topic: str, qid: str, max_delay: int) -> Any:
    """What DelayService.put's general path stores for the same batch, when it holds
    every message in the timer topic."""

    class Timer:
        max_delay_ms = max_delay

    service = object.__new__(DelayService)
    service.timer = Timer()
    held = []
    for m in msgs:
        try:
            copy = service._hold_timer(m, topic, qid, NOW)
        except Exception:
            return None
        if copy is None:
            return None
        held.append(copy)
    try:
        return codec.py_prepare(held, 17, topic=TIMER_TOPIC, reconsume_times=2, sys_flag=0)
    except Exception:
        return None


def _hold_outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:  # the outcome compared is the error itself
        return type(exc), str(exc)


@settings(max_examples=600, deadline=None)
@given(
    st.lists(_timers, max_size=5),
    st.sampled_from(["T", "Ünï", "a\ud800"]),
    st.sampled_from(["0", "3"]),
    st.sampled_from([3_600_000, 10]),
)
def test_c_hold_timers_matches_python(
    msgs: list[Message], topic: str, qid: str, max_delay: int
) -> None:
    """Same records (trailers with TIMER_OUT_MS first, REAL_TOPIC/REAL_QID, tags codes)
    or the same None; and a batch they take is stored as the general path stores it."""
    args = (msgs, topic, qid, NOW, max_delay, 17, 2, 0, codec._crc32, TIMER_TOPIC)
    want = _hold_outcome(py_hold_timers, *args)
    assert _hold_outcome(schedule_c.hold_timers, *args) == want
    if isinstance(want, tuple) and isinstance(want[0], list):
        assert want[0] == _general_hold(msgs, topic, qid, max_delay)
        uniqs = [m.properties.get("UNIQ_KEY") for m in msgs]
        assert want[1] == (uniqs if any(u is not None for u in uniqs) else None)


def test_hold_timers_takes_what_producers_send() -> None:
    msgs = [
        Message("T", b"x", tags="a", keys="k", deliver_time_ms=NOW + 5),
        Message("T", b"y", properties={"p": "é"}, deliver_time_ms=NOW + 9),
    ]
    object.__setattr__(msgs[1], "properties", {"REAL_QID": "9", **msgs[1].properties})
    args = (msgs, "T", "1", NOW, 60_000, 17, 2, 0, codec._crc32, TIMER_TOPIC)
    got, uniqs = schedule_c.hold_timers(*args)
    assert (got, uniqs) == py_hold_timers(*args)
    assert got == _general_hold(msgs, "T", "1", 60_000)
    assert uniqs is None
    assert got[1][2].endswith(b"REAL_QID\x011\x02p\x01\xc3\xa9\x02TIMER_DELIVER_MS\x01%d\x02"
                              b"REAL_TOPIC\x01T\x02" % (NOW + 9))  # fmt: skip
    assert [p[P_TAGS_CODE] for p in got] == [NOW + 5, NOW + 9]
    # A clock before the epoch (as a test's may be): a deliver time of 0 is "0".
    zero = [Message("T", b"x", deliver_time_ms=0)]
    early = (zero, "T", "1", -5, 60_000, 17, 2, 0, codec._crc32, TIMER_TOPIC)
    assert schedule_c.hold_timers(*early) == py_hold_timers(*early)
    trailer = schedule_c.hold_timers(*early)[0][0][2]
    assert trailer[22:].startswith(b"TIMER_OUT_MS\x010\x02")  # after the topic, the length
    # A timer already due, or a delay in seconds: the general path holds the batch.
    due = Message("T", b"x", deliver_time_ms=NOW)
    assert schedule_c.hold_timers([*msgs, due], *args[1:]) is None
    assert schedule_c.hold_timers([Message("T", b"x", delay_sec=5)], *args[1:]) is None


# --- the wheel's enqueue loop --------------------------------------------------------

PREC, SLOTS = 1000, 16


def _wheel(slots: list[tuple[int, int, int, int]]) -> mmap.mmap:
    m = mmap.mmap(-1, SLOTS * SLOT_SIZE)
    for i, (t, due, last, num) in enumerate(slots):
        SLOT.pack_into(m, i * SLOT_SIZE, t, due, last, num, 0)
    return m


_slot_states = st.lists(
    st.tuples(
        st.sampled_from([0, NOW, NOW + 1000, NOW + 5000]),
        st.integers(0, NOW + 9000),
        st.integers(-1, 10_000),
        st.integers(0, 9),
    ),
    min_size=SLOTS,
    max_size=SLOTS,
)
_cq_units = st.lists(
    st.tuples(
        st.integers(0, 2**40),
        st.integers(1, 2**31 - 1),
        st.one_of(st.integers(NOW - 3000, NOW + 20_000), st.integers(-5, 2**31 + 2)),
    ),
    max_size=12,
).map(lambda us: b"".join(struct.pack(">qiq", *u) for u in us))


def _link_outcome(fn: Any, units: bytes, args: tuple[Any, ...], slots: list[Any]) -> Any:
    wheel = _wheel(slots)
    changed: dict[int, Any] = {7: (NOW + 7000, NOW + 7001, 56, 1)}
    before: dict[int, Any] = {}
    out = bytearray(b"old")
    try:
        res = fn(units, *args, wheel, changed, before, out)
    except Exception as exc:
        res = (type(exc), str(exc))
    return res, changed, before, bytes(out)


@settings(max_examples=600, deadline=None)
@given(
    _cq_units,
    st.integers(0, 3),
    st.integers(-1, NOW + 2000),
    st.sampled_from([NOW, NOW + 2000, 0]),
    st.integers(0, 20) | st.just(10**9),
    _slot_states,
    st.sampled_from([NOW + 8000, NOW + 16_000]),
)
def test_c_link_timers_matches_python(
    units: bytes,
    start: int,
    forced: int,
    read_ms: int,
    seg_units: int,
    slots: list[Any],
    horizon: int,
) -> None:
    """Same timer-log units, slot updates, slots as they were, stop and status."""
    args = (
        start,
        100,
        forced,
        read_ms,
        PREC,
        SLOTS,
        horizon,
        NOW + 1,
        560,
        560 + 56 * seg_units,
        5,
    )
    want = _link_outcome(wheel_mod.py_link_timers, units, args, slots)
    assert _link_outcome(timer_c.link_timers, units, args, slots) == want


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(
        st.integers(-2, SLOTS),
        st.tuples(
            st.integers(-(2**63), 2**63 - 1),
            st.integers(0, 2**40),
            st.integers(-1, 2**40),
            st.integers(-(2**31) - 1, 2**31),
        ),
        max_size=5,
    )
)
def test_c_write_slots_matches_python(slots: dict[int, Any]) -> None:
    """Same wheel bytes, and the same error at the same slot."""
    outcomes = []
    for fn in (timer_c.write_slots, files_mod.py_write_slots):
        wheel = _wheel([(1, 2, 3, 4)] * SLOTS)
        try:
            fn(wheel, slots)
            err = None
        except Exception as exc:
            err = (type(exc), str(exc))
        outcomes.append((err, bytes(wheel)))
    assert outcomes[0] == outcomes[1]


def test_link_timers_layout_and_errors() -> None:
    units = struct.pack(">qiq", 4096, 200, NOW + 1500) + struct.pack(">qiq", 9, 3, 12)
    wheel = _wheel([(0, 0, -1, 0)] * SLOTS)
    for fn in (timer_c.link_timers, wheel_mod.py_link_timers):
        changed: dict[int, Any] = {}
        before: dict[int, Any] = {}
        out = bytearray()
        res = fn(units, 0, 40, -1, NOW, PREC, SLOTS, NOW + 9000, NOW, 0, 10**6, -1,
                 wheel, changed, before, out)  # fmt: skip
        index = (NOW + 1000) // PREC % SLOTS
        assert res == (1, 56, NOW + 1000, wheel_mod.READ_RECORD)
        assert bytes(out) == UNIT.pack(-1, NOW + 1500, NOW + 1000, 40, 4096, NOW, 200, 0x54494D52)
        assert changed == {index: (NOW + 1000, NOW + 1500, 0, 1)}
        assert before == {index: (0, 0, -1, 0)}
        with pytest.raises(ValueError):
            fn(units, 0, 40, -1, NOW, 0, SLOTS, 0, 0, 0, 0, 0, wheel, {}, {}, bytearray())
        far = struct.pack(">qiq", 9, 3, NOW + 20_500)  # slot 20 of 32, the wheel has 16
        with pytest.raises(IndexError):
            fn(far, 0, 40, -1, NOW, PREC, SLOTS * 2, NOW + 90_000, NOW, 0, 10**6, -1,
               wheel, {}, {}, out)  # fmt: skip


def test_the_modules_use_the_c_loops_unless_turned_off() -> None:
    from mqcore import batch, speedups
    from mqcore.broker import schedule

    on = not speedups.disabled()  # MQCORE_NO_SPEEDUPS=1 turns them off
    assert batch._c_sent_prefix is (protocol_c.sent_prefix if on else None)
    assert schedule._hold_timers is (schedule_c.hold_timers if on else None)
    assert wheel_mod._link_timers is (timer_c.link_timers if on else wheel_mod.py_link_timers)
    assert files_mod._write_slots is (timer_c.write_slots if on else files_mod.py_write_slots)


def test_fields_are_read_as_getattr_reads_them() -> None:
    """The C loops read a Message's slots directly; a subclass whose field is a property
    (or any other type) is read through getattr, as the Python code reads it."""

    class Emptied(Message):
        __slots__ = ()
        body = property(lambda self: b"")  # type: ignore[assignment]

    good = Message("T", b"x")
    odd = Message("T", b"x")
    object.__setattr__(odd, "__class__", Emptied)
    for batch in ([good, odd], [odd, good], [good, good, odd]):
        want = py_sent_prefix(batch, "T", 10)
        assert protocol_c.sent_prefix(batch, "T", 10, REFUSABLE_PROPERTIES) == want
    timer = Message("T", b"x", deliver_time_ms=NOW + 5)
    odd_timer = Message("T", b"x", deliver_time_ms=NOW + 5)
    object.__setattr__(odd_timer, "__class__", Emptied)
    args = ("T", "0", NOW, 60_000, 17, 0, 0, codec._crc32, TIMER_TOPIC)
    got = schedule_c.hold_timers([timer, odd_timer], *args)
    assert got == py_hold_timers([timer, odd_timer], *args)
    assert got is not None and got[0][1][1] == b""  # the property's body


@pytest.mark.parametrize("store_name", ["mmap", "lmdb"])
def test_the_broker_stores_the_same_timers_either_way(
    tmp_path: Path, store_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the broker, a batch held in C and the same batch held by the general path
    store the same records in the timer topic (fields, properties, born host, units' tags
    codes) and index the same unique ids; the wheel takes both in the same way."""
    from mqcore.broker import schedule

    def batch(now: int) -> list[Message]:
        msgs = [
            Message("T", b"a", tags="TagA", keys="k1 k2", flag=3, deliver_time_ms=now + 5000),
            Message("T", b"b", properties={"x": "é"}, deliver_time_ms=now + 9000),
            Message("T", b"c", deliver_time_ms=now + 7000),
        ]
        # A producer's unique id, and a client's REAL_TOPIC the broker replaces.
        msgs[0].properties["UNIQ_KEY"] = "AC11000100002A9F0000000000000001"
        msgs[2].properties["REAL_TOPIC"] = "Elsewhere"
        return msgs

    calls: list[int] = []
    real = schedule._hold_timers
    if real is None:
        pytest.skip("the C loops are turned off (MQCORE_NO_SPEEDUPS)")

    def spy(*args: Any) -> Any:
        calls.append(len(args[0]))
        return real(*args)

    seen = []
    for held_in_c in (True, False):
        monkeypatch.setattr(schedule, "_hold_timers", spy if held_in_c else None)
        clock = _Clock()
        path = tmp_path / str(held_in_c)
        with Broker(path, store=store_name, timer_scheduler_options={"clock": clock}) as b:
            b.create_topic("T", queue_nums=2)
            sched = b.timer_scheduler
            with sched._lock:
                got = b.send_message("T", 1, batch(clock.now), born_host="10.0.0.7:4000")
                assert [r.queue_offset for r in got] == [0, 1, 2]
                stored = b.store.get(TIMER_TOPIC, 0, 0, max_count=10).messages
                units = b.store.get_units(TIMER_TOPIC, 0, 0, 10).units
                found = [
                    m.body for m in b.store.lookup(TIMER_TOPIC, "AC11000100002A9F0000000000000001")
                ]
                sched._enqueue(clock.now)
                assert b.timer_stats().in_wheel == 3
            seen.append(
                (
                    [
                        (m.topic, m.body, m.tags, m.keys, m.flag, m.properties, m.born_host,
                         m.reconsume_times, m.queue_id, m.store_size)
                        for m in stored
                    ],
                    [struct.unpack_from(">qiq", units, i * 20)[2] for i in range(3)],
                    found,
                )
            )  # fmt: skip
    assert calls == [3]  # the first broker held the batch in C, the second did not
    assert seen[0] == seen[1]
    records, codes, found = seen[0]
    assert [r[5]["REAL_TOPIC"] for r in records] == ["T", "T", "T"]
    assert [r[5]["REAL_QID"] for r in records] == ["1", "1", "1"]
    assert next(iter(records[0][5])) == "TIMER_OUT_MS"
    assert codes == [int(r[5]["TIMER_OUT_MS"]) for r in records]
    assert found == [b"a"]


class _Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now
