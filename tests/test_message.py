"""Message value types."""

from __future__ import annotations

import pytest

from mqcore import Message, MessageQueue, PullResult, PullStatus, codec, errors


def test_message_queue_str_is_rocketmqs() -> None:
    mq = MessageQueue("T", "broker-a", 0)
    assert str(mq) == "MessageQueue [topic=T, brokerName=broker-a, queueId=0]"


def test_message_queue_is_frozen_hashable_and_ordered_like_rocketmq() -> None:
    a, b, c = MessageQueue("T", "b1", 2), MessageQueue("T", "b1", 10), MessageQueue("S", "b9", 0)
    assert sorted([b, a, c]) == [c, a, b]
    assert len({a, MessageQueue("T", "b1", 2)}) == 1
    with pytest.raises(AttributeError):
        a.queue_id = 3  # type: ignore[misc]


def test_all_properties_adds_tags_keys_delay() -> None:
    m = Message(topic="T", body=b"x", tags="A", keys="k1 k2", properties={"p": "1"}, delay_level=3)
    assert m.all_properties() == {"p": "1", "TAGS": "A", "KEYS": "k1 k2", "DELAY": "3"}
    assert m.key_list == ["k1", "k2"]
    assert Message(topic="T").all_properties() == {}


def test_properties_are_copied() -> None:
    props = {"a": "1"}
    m = Message(topic="T", properties=props)
    props["a"] = "2"
    assert m.properties == {"a": "1"}


def test_pull_result_aliases() -> None:
    r = PullResult(PullStatus.NO_NEW_MSG, 5, 0, 5)
    assert r.status is PullStatus.NO_NEW_MSG and r.messages == []


@pytest.mark.parametrize(
    ("flag", "match"),
    [(2**31, "does not fit a 32-bit"), (-(2**31) - 1, "does not fit"), ("7", "is not an int"),
     (1.5, "is not an int")],
)  # fmt: skip
def test_flag_must_be_a_java_int(flag: object, match: str) -> None:
    """A flag RocketMQ could not store is refused when the message is built, not at put."""
    with pytest.raises(errors.InvalidArgumentError, match=match):
        Message(topic="T", flag=flag)  # type: ignore[arg-type]


def test_flag_accepts_int_likes() -> None:
    class Int:
        def __index__(self) -> int:
            return 42

    assert Message(topic="T", flag=Int()).flag == 42  # type: ignore[arg-type]
    assert type(Message(topic="T", flag=True).flag) is int
    assert Message(topic="T", flag=-(2**31)).flag == -(2**31)


def test_to_message_copies_every_field_and_takes_changes() -> None:
    """A stored message becomes a Message again with any field replaced (retries, delays)."""
    m = Message(
        topic="T", body=b"b", tags="A", keys="k1 k2", properties={"x": "1"}, flag=7,
        delay_level=3,
    )  # fmt: skip
    ext = codec.decode(
        codec.pack(
            codec.prepare([m], 1),
            queue_id=0,
            queue_offset=0,
            commitlog_offset=0,
            store_timestamp=2,
            store_host=codec.host_bytes("127.0.0.1:10911"),
        )
    )
    assert ext.to_message() == m
    moved = ext.to_message(topic="%RETRY%g", properties={"y": "2"}, delay_level=0)
    assert moved == Message(
        topic="%RETRY%g", body=b"b", tags="A", keys="k1 k2", properties={"y": "2"}, flag=7
    )
    with pytest.raises(TypeError):
        ext.to_message(colour="red")


# -- timer fields (RocketMQ 5's TIMER_DELIVER_MS / TIMER_DELAY_MS / TIMER_DELAY_SEC) --------


def test_timer_fields_are_written_as_properties() -> None:
    m = Message(topic="T", body=b"x", deliver_time_ms=1_795_000_000_000)
    assert m.properties == {"TIMER_DELIVER_MS": "1795000000000"}
    assert Message(topic="T", body=b"x", delay_ms=1500).properties == {"TIMER_DELAY_MS": "1500"}
    assert Message(topic="T", body=b"x", delay_sec=3).properties == {"TIMER_DELAY_SEC": "3"}
    ext = codec.decode(codec.encode(m, queue_offset=0, commitlog_offset=0, store_timestamp=1))
    assert ext.deliver_time_ms == 1_795_000_000_000 and ext.delay_ms is None
    back = ext.to_message()
    assert back.properties["TIMER_DELIVER_MS"] == "1795000000000"


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"deliver_time_ms": 5, "delay_ms": 1}, "one of deliver_time_ms, delay_ms, delay_sec"),
        ({"delay_sec": -1}, "negative"),
        ({"delay_ms": "10"}, "not an int"),
        ({"deliver_time_ms": 1.5}, "not an int"),
    ],
)
def test_bad_timer_fields(fields: dict[str, object], match: str) -> None:
    with pytest.raises(errors.InvalidArgumentError, match=match):
        Message(topic="T", body=b"x", **fields)  # type: ignore[arg-type]
