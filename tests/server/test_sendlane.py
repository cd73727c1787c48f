"""A plain single send straight to a prepared record (mqcore.server.sendlane): the C function
against its Python reference, and both against building the message and preparing it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mqcore import speedups
from mqcore.codec import prepare
from mqcore.protocol.send import message_from_wire
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
