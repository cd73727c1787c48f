"""The commit-log record codec: round trips, ids, hash codes and damaged records."""

from __future__ import annotations

import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore import Message, codec
from mqcore.errors import CodecError, CorruptRecordError, TruncatedRecordError
from mqcore.validation import SYSTEM_PROPERTY_NAMES

STORE_HOST = codec.host_bytes("10.1.2.3:10911")

names = st.text(
    alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)),
    min_size=1,
    max_size=12,
).filter(lambda s: s not in SYSTEM_PROPERTY_NAMES)  # a Message refuses them
values = st.text(
    alphabet=st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)),
    max_size=20,
)
messages = st.builds(
    Message,
    topic=st.from_regex(r"[A-Za-z0-9_%|-]{1,40}", fullmatch=True),
    body=st.binary(max_size=2048),
    tags=st.one_of(st.none(), st.from_regex(r"[A-Za-z0-9]{1,10}", fullmatch=True)),
    keys=st.one_of(st.none(), st.from_regex(r"[a-z0-9]{1,8}( [a-z0-9]{1,8}){0,3}", fullmatch=True)),
    properties=st.dictionaries(names, values, max_size=5),
    flag=st.integers(-(2**31), 2**31 - 1),
    delay_level=st.integers(0, 18),
)


def _pack(msgs: list[Message], **kw: int) -> bytes:
    return codec.pack(
        codec.prepare(msgs, kw.get("born", 1700000000000)),
        queue_id=kw.get("queue_id", 3),
        queue_offset=kw.get("queue_offset", 10),
        commitlog_offset=kw.get("commitlog_offset", 4096),
        store_timestamp=kw.get("store", 1700000000123),
        store_host=STORE_HOST,
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=8))
def test_batch_round_trip(msgs: list[Message]) -> None:
    buf = _pack(msgs)
    decoded = list(codec.iter_records(buf))
    assert len(decoded) == len(msgs)
    pos = 0
    for i, (m, d) in enumerate(zip(msgs, decoded, strict=True)):
        assert d.to_message() == m
        assert d.queue_id == 3 and d.queue_offset == 10 + i
        assert d.commitlog_offset == 4096 + pos
        assert d.born_timestamp == 1700000000000 and d.store_timestamp == 1700000000123
        assert d.store_host == "10.1.2.3:10911"
        assert d.body_crc == zlib.crc32(m.body) & 0x7FFFFFFF
        assert codec.decode_message_id(d.msg_id) == ("10.1.2.3:10911", 4096 + pos)
        assert bytes(d.record) == buf[pos : pos + d.store_size]
        pos += d.store_size
    assert pos == len(buf)


def test_empty_body_and_unicode_properties() -> None:
    m = Message(topic="T", body=b"", tags="标签", properties={"ключ": "値 ☃"})
    d = codec.decode(_pack([m]), check=True)
    assert d.body == b"" and d.tags == "标签" and d.properties == {"ключ": "値 ☃"}
    assert d.all_properties()["TAGS"] == "标签"


def test_layout_matches_rocketmq_positions() -> None:
    buf = _pack([Message(topic="T", body=b"abc")], queue_offset=7, commitlog_offset=99)
    assert int.from_bytes(buf[0:4], "big") == len(buf)
    assert buf[4:8] == bytes.fromhex("DAA320A7")
    assert int.from_bytes(buf[20:28], "big") == 7  # queue offset
    assert int.from_bytes(buf[28:36], "big") == 99  # physical offset
    assert int.from_bytes(buf[56:64], "big") == 1700000000123  # store timestamp
    assert buf[84:88] == (3).to_bytes(4, "big") and buf[88:91] == b"abc"
    assert buf[91] == 1 and buf[92:93] == b"T"


def test_message_id_is_host_port_offset_hex() -> None:
    assert codec.make_message_id(bytes([127, 0, 0, 1]), 10911, 1000) == (
        "7F00000100002A9F00000000000003E8"
    )
    with pytest.raises(CodecError, match="32 hex digits"):
        codec.decode_message_id("nothex")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("TagA", 2598919), ("hello", 99162322), ("TagB", 2598920), ("\U0001f600", 1772899)],
)
def test_java_string_hash_code(text: str, expected: int) -> None:
    assert codec.string_hash_code(text) == expected


def test_hash_code_wraps_to_signed_int() -> None:
    assert codec.string_hash_code("polygenelubricants") == -(2**31)


def test_bad_magic_names_offset() -> None:
    buf = bytearray(_pack([Message(topic="T", body=b"x" * 10)]))
    buf[4:8] = b"\x00\x00\x00\x01"
    with pytest.raises(CorruptRecordError, match="bad magic code.*offset 500"):
        codec.check_record(buf, 0, base_offset=500)


def test_crc_mismatch_is_detected() -> None:
    buf = bytearray(_pack([Message(topic="T", body=b"x" * 10)]))
    buf[90] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC mismatch at offset 0"):
        codec.check_record(buf, 0)
    assert codec.check_record(buf, 0, check_crc=False)[0] == codec.RECORD


@pytest.mark.parametrize("cut", [1, 7, 50, 88, 100])
def test_truncated_record(cut: int) -> None:
    buf = _pack([Message(topic="Topic", body=b"y" * 20, tags="t")])
    with pytest.raises(TruncatedRecordError, match="offset 0"):
        codec.check_record(buf[: len(buf) - cut], 0)


def test_inconsistent_lengths_are_corrupt() -> None:
    buf = bytearray(_pack([Message(topic="T", body=b"abc")]))
    buf[84:88] = (50).to_bytes(4, "big")  # body length past the record's end
    with pytest.raises(CorruptRecordError, match="body length"):
        codec.check_record(buf, 0)


def test_blank_marker_stops_iteration() -> None:
    one = _pack([Message(topic="T", body=b"abc")])
    buf = one + codec.pack_blank(64)
    assert [m.body for m in codec.iter_records(buf)] == [b"abc"]
    assert codec.check_record(buf, len(one)) == (codec.BLANK, 64)


def test_record_properties_skip_body() -> None:
    buf = _pack([Message(topic="T", body=b"zz", tags="A", properties={"a": "1"})])
    assert codec.record_properties(buf, 0) == {"a": "1", "TAGS": "A"}


def test_topic_too_long_is_rejected() -> None:
    with pytest.raises(CodecError, match="1..127 bytes"):
        codec.prepare([Message(topic="x" * 128)], 0)


def test_decode_view_does_not_copy_body() -> None:
    buf = bytearray(_pack([Message(topic="T", body=b"abc")]))
    d = codec.decode(buf)
    view = d.body_view
    buf[88] = ord("X")
    assert bytes(view) == b"Xbc"


@pytest.mark.parametrize("decoded_first", [False, True])
def test_body_size_is_the_length_of_the_body(decoded_first: bool) -> None:
    """body_size reads the header's body length; a compressed body is measured inflated."""
    plain = codec.decode(bytearray(_pack([Message(topic="T", body=b"abcde")])))
    inflated = b"0123456789" * 50
    packed = codec.pack(
        codec.prepare([Message(topic="T", body=zlib.compress(inflated))], 1, sys_flag=1),
        queue_id=0,
        queue_offset=0,
        commitlog_offset=0,
        store_timestamp=5,
        store_host=STORE_HOST,
    )
    compressed = codec.decode(bytearray(packed))
    if decoded_first:  # the header already unpacked, as after reading another field
        assert plain.queue_offset == 10 and compressed.queue_offset == 0
    assert plain.body_size == 5 == len(plain.body)
    assert compressed.body_size == len(inflated) == len(compressed.body)
    assert len(compressed.stored_body) < len(inflated)


def test_pack_takes_one_prepare_call() -> None:
    """pack() shares the born timestamp etc. across a batch; mixing prepare calls is refused."""
    host = codec.host_bytes("10.0.0.1:10911")
    one = codec.prepare([Message(topic="T", body=b"a")], 1_000)
    other = codec.prepare([Message(topic="T", body=b"b")], 2_000, reconsume_times=3)
    with pytest.raises(CodecError, match="one prepare"):
        codec.pack(
            one + other,
            queue_id=0,
            queue_offset=0,
            commitlog_offset=0,
            store_timestamp=5,
            store_host=host,
        )
    assert (
        codec.pack(
            [], queue_id=0, queue_offset=0, commitlog_offset=0, store_timestamp=5, store_host=host
        )
        == b""
    )
    # Each call on its own keeps its own fields.
    rec = codec.pack(
        other, queue_id=0, queue_offset=0, commitlog_offset=0, store_timestamp=5, store_host=host
    )
    decoded = codec.decode(rec)
    assert (decoded.born_timestamp, decoded.reconsume_times) == (2_000, 3)


def _walk_with_check_record(buf: bytes) -> int:
    """Where a check_record walk stops (the reference for scan_valid)."""
    pos = 0
    while pos < len(buf):
        try:
            kind, size = codec.check_record(buf, pos)
        except CodecError:
            return pos
        if kind != codec.RECORD:
            return pos
        pos += size
    return pos


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    flip=st.integers(min_value=0, max_value=10_000),
    cut=st.integers(min_value=0, max_value=10_000),
)
def test_scan_valid_stops_where_check_record_does(bodies, flip, cut) -> None:
    """The recovery fast path accepts exactly the records check_record accepts."""
    msgs = [Message(topic="T", body=b, tags="t" if i % 2 else None) for i, b in enumerate(bodies)]
    buf = bytearray(
        codec.pack(
            codec.prepare(msgs, 1),
            queue_id=0,
            queue_offset=0,
            commitlog_offset=0,
            store_timestamp=2,
            store_host=codec.host_bytes("127.0.0.1:10911"),
        )
    )
    assert codec.scan_valid(bytes(buf), 0, len(buf)) == len(buf)
    buf[flip % len(buf)] ^= 0x5A
    data = bytes(buf[: max(1, len(buf) - cut % len(buf))]) + codec.pack_blank(16)
    expected = _walk_with_check_record(data)
    assert codec.scan_valid(data, 0, len(data)) == expected


@pytest.mark.parametrize("length", [1, 2, 31, 34, 255, 256, 257, 1000])
def test_hash_code_of_long_ascii_matches_the_java_loop(length: int) -> None:
    """The weighted-sum form used for ASCII equals Java's h = 31 * h + c, every length."""
    text = "".join(chr(33 + (i * 7) % 90) for i in range(length))
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    assert codec.string_hash_code(text) == (h - (1 << 32) if h & 0x80000000 else h)
