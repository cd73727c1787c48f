"""A plain single send straight to a prepared record (mqcore.server.sendlane): the C function
against its Python reference, and both against building the message and preparing it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore import speedups
from mqcore.broker.groupcommit import PreparedSend
from mqcore.codec import prepare
from mqcore.protocol import headers
from mqcore.protocol.send import message_from_wire
from mqcore.record.sysflag import COMPRESSED_FLAG
from mqcore.server import sendlane

_PROPERTIES = st.one_of(
    st.none(),
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "TAGS", "KEYS", "UNIQ_KEY", "WAIT", "DELAY", "TRAN_MSG",
                             "TIMER_DELAY_MS", "REAL_TOPIC", "", "é"]),
            st.sampled_from(["", "1", "x y", "AB12", "é", "a\x01b", "-3"]),
            st.sampled_from(["\x01", "\x01", "\x01", ""]),
            st.sampled_from(["\x02", "\x02", "\x02", ""]),
        ),
        max_size=5,
    ).map(lambda items: "".join(f"{n}{sep}{v}{end}" for n, v, sep, end in items)),
    st.text(max_size=8),
)  # fmt: skip
_SENDS = st.tuples(
    st.sampled_from(["T", "TopicA", "", "t" * 127, "t" * 128, "été", "bad topic!"]),
    st.binary(max_size=40),
    _PROPERTIES,
    st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([2**31, -(2**31) - 1, 2**70])),
    st.sampled_from([0, 16, 40]),  # the body size limit
    st.integers(0, 2**62),
    st.integers(0, 16),
    st.sampled_from([0, 1]),
)

_C = speedups.load("protocol")


@pytest.mark.skipif(_C is None, reason="the C speedups are not built")
@given(send=_SENDS)
def test_c_prepare_sent_single_is_its_reference(send: tuple[Any, ...]) -> None:
    """The C function gives what the reference gives (None included), byte for byte."""
    assert sendlane.prepare_sent_single(*send) == sendlane.py_prepare_sent_single(*send)


@given(send=_SENDS)
def test_a_prepared_single_send_is_the_prepared_message(send: tuple[Any, ...]) -> None:
    """What the reference prepares is what preparing the message the send stands for gives
    (the record a put of that message writes), with its UNIQ_KEY."""
    topic, body, properties, flag, limit, born, reconsume, sys_flag = send
    got = sendlane.py_prepare_sent_single(*send)
    if got is None:
        return
    msg = message_from_wire(topic, body, flag, properties)
    (want,) = prepare([msg], born, reconsume_times=reconsume, sys_flag=sys_flag)
    assert got == (tuple(want), msg.properties.get("UNIQ_KEY"))
    assert 0 < len(body) <= limit


def test_a_plain_send_is_prepared_and_others_are_not() -> None:
    """Plain sends are taken; a delay, an empty body, a non-ASCII topic are left to the
    general path."""
    take = sendlane.prepare_sent_single
    got = take("T", b"x", "UNIQ_KEY\x01U1\x02TAGS\x01t\x02", 0, 16, 1, 0, 0)
    assert got is not None and got[1] == "U1"
    assert take("T", b"x", "DELAY\x013\x02", 0, 16, 1, 0, 0) is None
    assert take("T", b"", None, 0, 16, 1, 0, 0) is None
    assert take("été", b"x", None, 0, 16, 1, 0, 0) is None


# -- a group of single sends: header reading and preparing in one call -------------------------

_HEADERS = (headers.SendMessageRequestHeader, headers.SendMessageRequestHeaderV2)
_NUMBERS = st.one_of(
    st.integers(-(2**31), 2**31 - 1).map(str),
    st.integers(-5, 5),
    st.sampled_from(["", "-", "x", "1.5", "٣", "99999999999999999999", "-9223372036854775808",
                     "9223372036854775808", str(2**31), 2**63, True]),
)  # fmt: skip


@st.composite
def _group_items(draw: st.DrawFn) -> tuple[Any, ...]:
    """One single send of a group (extFields, body, plan, born host) of any shape: plain ones
    and ones the reader or the preparer leaves to the general path."""
    cls = draw(st.sampled_from(_HEADERS))
    plain: dict[str, Any] = {
        "producer_group": "pg", "topic": "T", "default_topic": "TBW102",
        "default_topic_queue_nums": "4", "queue_id": "1", "sys_flag": "0",
        "born_timestamp": "1700000000000", "flag": "0", "properties": None,
        "reconsume_times": None, "batch": None,
    }  # fmt: skip
    odd: dict[str, Any] = {
        "topic": st.sampled_from(["%RETRY%cg", "rmq_sys_wheel_timer", "", "é", 7]),
        "queue_id": st.one_of(st.sampled_from(["3", "-1", 2]), _NUMBERS),
        "sys_flag": st.sampled_from(["1", "2", "3", 1, "x"]),
        "born_timestamp": _NUMBERS,
        "flag": _NUMBERS,
        "properties": _PROPERTIES,
        "reconsume_times": st.sampled_from(["", "0", "2", 3, "x"]),
        "batch": st.sampled_from(["false", "true", False, True, "yes"]),
    }
    values = dict(plain)
    for name in draw(st.sets(st.sampled_from(sorted(odd)), max_size=3)):
        values[name] = draw(odd[name])
    names = {s[1]: s[0] for s in cls.read_plan()}
    dropped = (
        draw(st.sets(st.sampled_from(sorted(values)), max_size=1)) if draw(st.booleans()) else set()
    )
    ext = {names[k]: v for k, v in values.items() if v is not None and k not in dropped}
    body = draw(st.one_of(st.binary(max_size=40), st.none(), st.binary(min_size=1, max_size=8)))
    host = draw(st.sampled_from([None, "127.0.0.1:5000"]))
    shape = draw(st.sampled_from(["dict", "dict", "dict", "not a dict"]))
    return (ext if shape == "dict" else list(ext.items()), body, cls.read_plan(), host)


@pytest.mark.skipif(_C is None, reason="the C speedups are not built")
@given(items=st.lists(_group_items(), max_size=6), limit=st.sampled_from([16, 40]))
def test_c_prepare_sent_group_is_its_reference(items: list[tuple[Any, ...]], limit: int) -> None:
    """The C group call gives what the reference gives for each send (None included)."""
    got = sendlane.prepare_sent_group(items, limit, COMPRESSED_FLAG)  # type: ignore[arg-type]
    assert got == sendlane.py_prepare_sent_group(items, limit, COMPRESSED_FLAG)  # type: ignore[arg-type]
    assert got is not None
    for one in got:
        assert one is None or type(one) is PreparedSend


@pytest.mark.skipif(_C is None, reason="the C speedups are not built")
@given(item=_group_items())
def test_the_reference_reads_a_header_as_the_c_reader(item: tuple[Any, ...]) -> None:
    """The reference's header reading is the C reader's (read_plain), None included."""
    ext, _, plan, _ = item
    if type(ext) is dict:
        cls = next(c for c in _HEADERS if c.read_plan() == plan)
        assert sendlane._py_read_plan(ext, plan) == cls.read_plain(ext)


def test_a_plain_group_send_is_its_single_send() -> None:
    """A plain send of a group is prepared as the same send alone; the others are None."""
    plan = headers.SendMessageRequestHeaderV2.read_plan()
    ext = {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "2", "f": "1", "g": "17",
           "h": "0", "i": "UNIQ_KEY\x01U1\x02", "j": "0", "k": "false", "m": "false"}  # fmt: skip
    items = [
        (ext, b"body", plan, "1.2.3.4:5"),
        ({**ext, "e": "-1"}, b"body", plan, None),  # any queue: the broker chooses
        ({**ext, "m": "true"}, b"body", plan, None),  # a batch
        (ext, b"", plan, None),  # no body
        (None, None, (), None),  # not a send
    ]
    want = sendlane.py_prepare_sent_single("T", b"body", "UNIQ_KEY\x01U1\x02", 0, 64, 17, 0, 1)
    assert want is not None
    expected = [PreparedSend("T", 2, want[0], "U1", "1.2.3.4:5"), None, None, None, None]
    assert sendlane.py_prepare_sent_group(items, 64, COMPRESSED_FLAG) == expected  # type: ignore[arg-type]
    if _C is not None:
        assert sendlane.prepare_sent_group(items, 64, COMPRESSED_FLAG) == expected  # type: ignore[arg-type]
    else:
        assert sendlane.prepare_sent_group(items, 64, COMPRESSED_FLAG) is None  # type: ignore[arg-type]
