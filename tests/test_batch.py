"""Per-batch layout (units, offsets, put results) and the C speedups against the Python code."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import Message, batch, codec
from mqcore.message import system_message
from mqcore.record.prepared import P_TAGS_CODE
from mqcore.record.unit import UNIT
from mqcore.store import TIMER_TOPIC, PutResult

speedups = pytest.importorskip("mqcore._codec", reason="built without a C compiler")

MAGIC = codec.MESSAGE_MAGIC_CODE
HOSTS = (b"\x0a\x01\x02\x03", 10911, b"\xc0\xa8\x00\x07", 54321)  # store ip, port, born ...

# Property text a Message accepts: no separator, no lone surrogate.
TEXT = st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",))
messages = st.builds(
    Message,
    topic=st.just("T"),
    body=st.binary(max_size=3000),
    tags=st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9]{1,10}", fullmatch=True)),
    keys=st.one_of(st.none(), st.from_regex(r"[a-z0-9]{1,8}( [a-z0-9]{1,8}){0,2}", fullmatch=True)),
    properties=st.dictionaries(st.sampled_from(["a", "b", "Ünï"]), st.text(TEXT, max_size=9)),
    flag=st.integers(-(2**31), 2**31 - 1),
)
offsets = st.integers(0, 2**62)
bodies = st.one_of(st.binary(max_size=3000), st.binary(max_size=64).map(bytearray))


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.builds(
            Message,
            topic=st.sampled_from(["T", "Other", "Ünï"]),
            body=bodies,
            tags=st.one_of(st.none(), st.sampled_from(["a", "TagB"])),
            keys=st.one_of(st.none(), st.just("k1 k2")),
            properties=st.dictionaries(st.sampled_from(["a", "b"]), st.text(TEXT, max_size=5)),
            delay_level=st.integers(0, 3),
            flag=st.integers(-(2**31), 2**31 - 1),
        ),
        max_size=30,
    ),
    st.one_of(st.none(), st.just(""), st.just("SCHEDULE_TOPIC_XXXX")),
    st.integers(0, 20),
)
def test_c_prepare_matches_python(msgs: list[Message], topic: str | None, recon: int) -> None:
    """Same tuples (sizes, CRCs, trailers, tags codes, keys) for every mix of messages."""
    kw = {"topic": topic, "reconsume_times": recon, "sys_flag": 4}
    got = speedups.prepare(
        msgs, 17, topic, recon, 4, codec._crc32, codec.message_trailer, codec._PLAIN_TRAILERS
    )
    assert got == codec.py_prepare(msgs, 17, **kw)
    assert got == codec.prepare(iter(msgs), 17, **kw)  # any iterable


# Property names and values as a held timer's: TIMER_OUT_MS among user names and unicode.
_NAMES = st.sampled_from(["a", "b", "Ünï", "TIMER_OUT_MS", "REAL_TOPIC", "UNIQ_KEY", ""])
_VALUES = st.one_of(
    st.text(TEXT, max_size=9),
    st.from_regex(r"[0-9]{0,20}", fullmatch=True),
    st.text(st.sampled_from("0123456789٣\U0001d7d8x"), max_size=19),  # non-ASCII digits too
    st.text(max_size=3),  # separators and lone surrogates: the Python code's cases
)
_held = st.builds(
    lambda topic, body, tags, keys, props, level, flag: _bypassing(
        system_message(topic=topic, body=body, tags=tags, keys=keys, flag=flag), props, level
    ),
    st.sampled_from(["T", "rmq_sys_wheel_timer"]),
    st.binary(max_size=300),
    st.one_of(st.none(), st.just(""), st.text(TEXT, max_size=6)),
    st.one_of(st.none(), st.just(""), st.text(TEXT, max_size=6)),
    st.one_of(
        st.dictionaries(_NAMES, _VALUES, max_size=6),
        st.dictionaries(
            st.text(TEXT, max_size=4), st.text(TEXT, max_size=4), min_size=17, max_size=20
        ),
        st.dictionaries(  # near and over the 32767-byte limit of a property string
            st.sampled_from(["a", "b"]),
            st.text(TEXT, min_size=1, max_size=3).map(lambda t: t * 5400),
            max_size=2,
        ),
    ),
    st.integers(0, 2**70) | st.integers(-5, 0),
    st.integers(-(2**31), 2**31 - 1),
)


def _bypassing(m: Message, props: dict[str, str], level: int) -> Message:
    # Values no Message takes (separators, surrogates, a negative or huge level) reach a
    # store only past the checks, but prepare() must treat them as the Python code does.
    object.__setattr__(m, "properties", dict(props))
    object.__setattr__(m, "delay_level", level)
    return m


def _prepare_outcome(fn: object, msgs: list[Message], topic: str | None) -> object:
    try:
        return fn(msgs, 17, topic=topic)  # type: ignore[operator]
    except Exception as exc:  # the outcome compared is the error itself
        return type(exc), str(exc)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_held, max_size=8),
    st.one_of(st.none(), st.just("rmq_sys_wheel_timer"), st.just("Ünï"), st.just("t" * 128)),
)
def test_c_trailers_match_python(msgs: list[Message], topic: str | None) -> None:
    """The trailers built in C (messages with properties, tags, keys or a delay level) are
    the Python bytes, the timer topic's tags code is the deliver time the same way, and
    what the Python code refuses (surrogates, a topic or property string too long) it
    still refuses, with the same error."""
    want = _prepare_outcome(codec.py_prepare, msgs, topic)
    assert _prepare_outcome(codec.prepare, msgs, topic) == want
    if isinstance(want, list):
        for m, p in zip(msgs, want, strict=True):
            t = topic or m.topic
            expected = codec.tags_hash_code(m.tags)
            if m.properties and t == TIMER_TOPIC:
                expected = codec.timer_tags_code(m.properties.get("TIMER_OUT_MS"), expected)
            assert p[P_TAGS_CODE] == expected


def test_timer_tags_code() -> None:
    """A deliver time of 1 to 18 ASCII digits is the timer topic's tags code."""
    assert codec.timer_tags_code("1700000000123", 5) == 1700000000123
    assert codec.timer_tags_code("9" * 18, 5) == 10**18 - 1
    for text in (None, "", "9" * 19, "-1", "12a", "١٢", " 1"):
        assert codec.timer_tags_code(text, 5) == 5
    held = system_message(topic="T", body=b"x", tags="A",
                          properties={"TIMER_OUT_MS": "1700000000123"})  # fmt: skip
    assert codec.prepare([held], 1, topic=TIMER_TOPIC)[0][9] == 1700000000123
    assert codec.prepare([held], 1, topic="T")[0][9] == codec.tags_hash_code("A")


def test_c_prepare_propagates_errors() -> None:
    """A topic too long for the record format fails the same way through the C loop."""
    with pytest.raises(codec.CodecError, match="1..127 bytes"):
        codec.prepare([Message("T", b"x")], 1, topic="t" * 128)
    with pytest.raises(AttributeError, match="body"):
        codec.prepare([Message("T", b"x"), object()], 1)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="iterable"):
        speedups.prepare(5, 1, None, 0, 0, codec._crc32, codec.message_trailer, {})
    with pytest.raises(TypeError, match=r"\(bytes, int\)"):
        speedups.prepare([Message("T", b"x")], 1, None, 0, 0, codec._crc32, lambda m, t: None, {})


@settings(max_examples=150, deadline=None)
@given(
    st.lists(messages, min_size=1, max_size=40),
    st.integers(0, 2**31 - 1),
    offsets,
    offsets,
    st.integers(0, 2**45),
)
def test_c_pack_writes_the_python_bytes(
    msgs: list[Message], queue_id: int, queue_offset: int, phys: int, ts: int
) -> None:
    """Header fields, bodies and trailers come out byte for byte as the Python code writes
    them, for one message (its own path in Python) and for batches."""
    prepared = codec.prepare(msgs, 1700000000000, reconsume_times=2, sys_flag=4)
    args = (queue_id, queue_offset, phys, ts, *HOSTS, MAGIC)
    want = codec.py_pack_records(prepared, *args)
    assert speedups.pack(prepared, *args) == want
    assert speedups.pack(prepared[:1], *args) == codec.py_pack_records(prepared[:1], *args)
    # The shared header bytes really are the hosts and times passed in.
    first = codec.decode(want)
    assert (first.store_timestamp, first.store_host, first.born_host) == (
        ts,
        "10.1.2.3:10911",
        "192.168.0.7:54321",
    )
    assert (first.born_timestamp, first.reconsume_times, first.sys_flag) == (
        1700000000000,
        2,
        4,
    )


@settings(max_examples=150, deadline=None)
@given(st.lists(messages, max_size=40), offsets, offsets, st.integers(0, 2**45))
def test_c_units_and_results_match_python(
    msgs: list[Message], start: int, queue_offset: int, ts: int
) -> None:
    prepared = codec.prepare(msgs, 1)
    got = speedups.units(prepared, start)
    want = batch.py_units(prepared, start)
    assert got == want
    _units, offs, end = got
    assert end == start + sum(p[0] for p in prepared)
    prefix = codec.message_id_prefix((bytes([10, 1, 2, 3]), 10911))
    assert prefix == "0A01020300002A9F"
    results = speedups.put_results(PutResult, prefix, prepared, offs, queue_offset, ts)
    assert results == batch.py_put_results(PutResult, prefix, prepared, offs, queue_offset, ts)
    for r, off in zip(results, offs, strict=True):
        assert type(r) is PutResult
        assert r.msg_id == codec.make_message_id(bytes([10, 1, 2, 3]), 10911, off)
        assert codec.decode_message_id(r.msg_id) == ("10.1.2.3:10911", off)


def test_units_layout() -> None:
    """Offset, size and tags code per unit, big-endian, as a consume queue stores them."""
    prepared = codec.prepare([Message("T", b"abc", tags="TagA"), Message("T", b"")], 1)
    units, offs, end = batch.units(prepared, 1000)
    first, second = UNIT.unpack_from(units, 0), UNIT.unpack_from(units, 20)
    assert first == (1000, prepared[0][0], codec.tags_hash_code("TagA"))
    assert second == (1000 + prepared[0][0], prepared[1][0], 0)
    assert offs == [first[0], second[0]]
    assert end == second[0] + second[1]


def test_pack_through_codec_decodes() -> None:
    """codec.pack (C when built) still produces records that decode to what went in."""
    msgs = [Message("T", bytes([i]) * i, tags=f"t{i}", keys=f"k{i}") for i in range(1, 9)]
    buf = codec.pack(
        codec.prepare(msgs, 5),
        queue_id=2,
        queue_offset=7,
        commitlog_offset=64,
        store_timestamp=9,
        store_host=codec.host_bytes("10.0.0.1:10911"),
    )
    got = list(codec.iter_records(buf))  # validates sizes and CRCs on the way
    assert [(m.body, m.tags, m.keys, m.queue_offset) for m in got] == [
        (m.body, m.tags, m.keys, 7 + i) for i, m in enumerate(msgs)
    ]
    assert got[0].commitlog_offset == 64


class _Index:
    """Int-like through __index__ (which pure ``struct`` would accept)."""

    def __index__(self) -> int:
        return 5


@pytest.mark.parametrize(
    ("item", "error", "match"),
    [
        ("not a tuple", TypeError, "11-field tuple"),
        ((1, 2, 3), TypeError, "11-field tuple"),
        ((100, "body", b"", 0, 0, 0, 0, 0, 0, 0, None), TypeError, "must be bytes"),
        ((100, b"body", b"", 0, 0, 0, 0, 0, 0, 0, None), ValueError, "does not match"),
        ((92, b"body", b"", 2**31, 0, 0, 0, 0, 0, 0, None), OverflowError, "CRC"),
        ((92, b"body", b"", 0, "x", 0, 0, 0, 0, 0, None), TypeError, "flag must be an int"),
        # Only ints: converting anything else would run Python code in the middle of a loop.
        ((92, b"body", b"", _Index(), 0, 0, 0, 0, 0, 0, None), TypeError, "CRC must be an int"),
    ],
)
def test_c_pack_refuses_malformed_items(item: object, error: type, match: str) -> None:
    """A bad item raises; it is never written out of bounds."""
    with pytest.raises(error, match=match):
        speedups.pack([item], 0, 0, 0, 0, *HOSTS, MAGIC)


def test_c_functions_check_their_arguments() -> None:
    prepared = codec.prepare([Message("T", b"x")], 1)
    with pytest.raises(ValueError, match="4 bytes"):
        speedups.pack(prepared, 0, 0, 0, 0, b"\x01\x02", 1, b"\x01\x02\x03\x04", 2, MAGIC)
    assert speedups.pack([], 0, 0, 0, 0, *HOSTS, MAGIC) == b""
    with pytest.raises(ValueError, match="1 offsets for 2 records"):
        speedups.put_results(PutResult, "AB", prepared * 2, [0], 0, 0)
    with pytest.raises(ValueError, match="1 offsets for 2 records"):
        batch.py_put_results(PutResult, "AB", prepared * 2, [0], 0, 0)
    with pytest.raises(TypeError, match="tuple subclass"):
        speedups.put_results(dict, "AB", prepared, [0], 0, 0)
    with pytest.raises(TypeError, match="11-field tuple"):
        speedups.units([None], 0)


def test_no_speedups_environment_variable_selects_python() -> None:
    """MQCORE_NO_SPEEDUPS=1 runs the pure-Python loops (for debugging and for comparison)."""
    code = "from mqcore import batch, codec; print(batch.SPEEDUPS, codec._pack_records.__name__)"
    env = {**os.environ, "MQCORE_NO_SPEEDUPS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == ["False", "py_pack_records"], out.stderr
    env.pop("MQCORE_NO_SPEEDUPS")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.split() == ["True", "pack"], out.stderr
