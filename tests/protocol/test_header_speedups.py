"""The C header reader (mqcore.protocol._protocol.read_fields) against the Python reference
(CommandHeader._read_slowly): the same values, types included, or the header is left to the
Python reader."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import speedups
from mqcore.errors import ProtocolError
from mqcore.protocol import headers as h
from mqcore.protocol.fields import _PLANS, CommandHeader

_c = speedups.load("protocol")
pytestmark = pytest.mark.skipif(_c is None, reason="the protocol speedups are not in use")

HEADER_CLASSES = sorted(
    (
        obj
        for obj in vars(h).values()
        if isinstance(obj, type) and issubclass(obj, CommandHeader) and obj is not CommandHeader
    ),
    key=lambda c: c.__name__,
)
RAW = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["", " 7 ", "+3", "007", "-0", "-", "1_000", "true", "True", "0", "9" * 19]),
    st.integers(-(2**64), 2**64).map(str),
)


def plan_of(cls: type[CommandHeader]) -> Any:
    try:
        cls.from_ext_fields({})
    except ProtocolError:
        pass
    return _PLANS[cls]


def fields_of(header: CommandHeader) -> str:
    return repr({s.attr: getattr(header, s.attr) for s in type(header)._specs()})


@settings(max_examples=400, deadline=None)
@given(cls=st.sampled_from(HEADER_CLASSES), data=st.data())
def test_c_reads_a_header_as_the_reference_or_leaves_it(
    cls: type[CommandHeader], data: st.DataObject
) -> None:
    names = [*cls.wire_names(), "AccessKey"]
    ext = data.draw(st.dictionaries(st.sampled_from(names), RAW, max_size=len(names)))
    kw = _c.read_fields(ext, plan_of(cls))  # type: ignore[union-attr]
    if kw is None:
        return
    assert fields_of(cls(**kw)) == fields_of(cls._read_slowly(ext))


@settings(max_examples=200, deadline=None)
@given(cls=st.sampled_from(HEADER_CLASSES), data=st.data())
def test_headers_as_clients_write_them_are_read_in_c(
    cls: type[CommandHeader], data: st.DataObject
) -> None:
    """What to_ext_fields writes (every value a string) always takes the C path."""
    names = cls.wire_names()
    ext = (
        data.draw(st.dictionaries(st.sampled_from(names), RAW, max_size=len(names)))
        if names
        else {}
    )
    try:
        header = cls._read_slowly(ext)
    except ProtocolError:
        return
    written = header.to_ext_fields()
    kw = _c.read_fields(written, plan_of(cls))  # type: ignore[union-attr]
    assert kw is not None
    assert fields_of(cls(**kw)) == fields_of(header)
    assert cls.from_ext_fields(written) == header


def test_a_send_header_of_java_strings_is_read_in_c() -> None:
    ext = {
        "a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "3", "f": "0",
        "g": "1700000000000", "h": "0", "i": "KEYS\x01k\x02", "j": "0", "k": "false",
        "m": "false",
    }  # fmt: skip
    kw = _c.read_fields(ext, plan_of(h.SendMessageRequestHeaderV2))  # type: ignore[union-attr]
    assert kw is not None and kw["queue_id"] == 3 and kw["unit_mode"] is False
    assert h.SendMessageRequestHeaderV2.from_ext_fields(ext) == (
        h.SendMessageRequestHeaderV2._read_slowly(ext)
    )


def test_a_missing_required_field_is_left_to_the_reference() -> None:
    assert _c.read_fields({}, plan_of(h.PullMessageRequestHeader)) is None  # type: ignore[union-attr]
    with pytest.raises(ProtocolError, match="required field 'consumerGroup'"):
        h.PullMessageRequestHeader.from_ext_fields({})


@pytest.mark.parametrize(
    "offset",
    [
        "9223372036854775807",
        "-9223372036854775808",
        "1000000000000000000",
        "9223372036854775808",  # past a Java long
        "-9223372036854775809",
        "99999999999999999999",
    ],
)
def test_long_fields_at_the_ends_of_a_java_long(offset: str) -> None:
    """19-digit values are read in C up to the ends of a Java long; past them the reference
    refuses with its own words."""
    ext = {
        "consumerGroup": "g", "topic": "T", "queueId": "0", "queueOffset": offset,
        "maxMsgNums": "32", "sysFlag": "0", "commitOffset": "0",
        "suspendTimeoutMillis": "0", "subVersion": "0",
    }  # fmt: skip
    cls = h.PullMessageRequestHeader
    kw = _c.read_fields(ext, plan_of(cls))  # type: ignore[union-attr]
    if -(2**63) <= int(offset) < 2**63:
        assert kw is not None and kw["queue_offset"] == int(offset)
        assert cls.from_ext_fields(ext) == cls._read_slowly(ext)
    else:
        assert kw is None
        with pytest.raises(ProtocolError, match="'queueOffset' must be a Long"):
            cls.from_ext_fields(ext)
