"""Hostile message fields: property separators, system property names, bad types, names."""

from __future__ import annotations

import pytest

from mqcore import Broker, Message, Producer
from mqcore.broker.topics import SCHEDULE_TOPIC
from mqcore.errors import (
    InvalidArgumentError,
    MessageFieldError,
    MessageIllegalError,
)
from mqcore.message import system_message
from mqcore.validation import (
    BROKER_PROPERTIES,
    FIELD_PROPERTIES,
    HOLD_PROPERTIES,
    RETRY_PROPERTIES,
    SYSTEM_PROPERTY_NAMES,
    check_name,
)

SEPARATORS = ["\x01", "\x02"]
#: Names the broker refuses from a client on a plain topic without a delay.
REFUSED_ON_PLAIN_TOPIC = FIELD_PROPERTIES | BROKER_PROPERTIES | HOLD_PROPERTIES | RETRY_PROPERTIES


@pytest.fixture
def store_name() -> str:
    """The checks do not depend on the store: one is enough."""
    return "mmap"


@pytest.fixture
def broker_topics() -> dict[str, int]:
    return {"T": 2}


@pytest.fixture
def producer(broker: Broker):  # type: ignore[no-untyped-def]
    with Producer("pg", broker=broker) as p:
        yield p


def stored(broker: Broker, topic: str = "T", queue_id: int = 0) -> list:  # type: ignore[type-arg]
    return broker.store.get(topic, queue_id, 0, max_count=100).messages


def forced(field: str, value: str) -> Message:
    """A message whose ``field`` holds ``value`` although a Message would refuse it (what a
    remote client's request can carry)."""
    m = Message(topic="T", body=b"x")
    if field in ("tags", "keys"):
        object.__setattr__(m, field, value)
    elif field == "property name":
        m.properties[value] = "v"
    else:
        m.properties["p"] = value
    return m


def test_the_system_names_are_rocketmqs_string_hash_set() -> None:
    assert len(SYSTEM_PROPERTY_NAMES) == 51
    assert {"TAGS", "KEYS", "DELAY", "REAL_TOPIC", "REAL_QID", "UNIQ_KEY", "RETRY_TOPIC"} <= (
        SYSTEM_PROPERTY_NAMES
    )
    assert {n for n in SYSTEM_PROPERTY_NAMES if n.startswith("TIMER_")} == {
        "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
    }  # fmt: skip
    assert REFUSED_ON_PLAIN_TOPIC <= SYSTEM_PROPERTY_NAMES


@pytest.mark.parametrize("name", sorted(SYSTEM_PROPERTY_NAMES))
def test_every_system_name_is_refused_as_a_user_property(name: str, producer: Producer) -> None:
    """Embedded: the application cannot build the message, so the producer never sends it."""
    with pytest.raises(InvalidArgumentError, match=f"{name!r} is reserved"):
        producer.send(Message(topic="T", body=b"x", properties={name: "v"}))
    assert Message(topic="T", body=b"x", properties={name.lower() + "_x": "v"}).properties


@pytest.mark.parametrize("name", sorted(SYSTEM_PROPERTY_NAMES))
def test_every_system_name_sent_anyway_follows_the_brokers_rule(
    name: str, broker: Broker, producer: Producer
) -> None:
    """Past the Message check (a properties dict changed afterwards, a remote client), the
    producer and the broker's send operation refuse exactly the dangerous names."""
    # Timer requests must be numbers; 0 means "deliver now", so the message is stored in T.
    value = "0" if name.startswith(("TIMER_DELAY_", "TIMER_DELIVER_")) else "v"
    m = Message(topic="T", body=b"x", tags="A")
    m.properties[name] = value
    lib = system_message(topic="T", body=b"x", tags="A", properties={name: value})
    if name in REFUSED_ON_PLAIN_TOPIC:
        with pytest.raises(InvalidArgumentError, match=repr(name)):
            producer.send(m)
        with pytest.raises(MessageFieldError, match=repr(name)) as refused:
            broker.send_message("T", 0, [lib])
        assert refused.value.code == 13  # MESSAGE_ILLEGAL
        assert stored(broker) == []
    else:
        producer.send(m, selector=lambda mqs, msg, arg: mqs[0])
        broker.send_message("T", 0, [lib])
        got = stored(broker)
        assert [g.get_property(name) for g in got] == [value, value]
        assert [g.tags for g in got] == ["A", "A"]


@pytest.mark.parametrize("name", sorted(RETRY_PROPERTIES | HOLD_PROPERTIES))
def test_retry_properties_are_accepted_on_a_retry_topic(name: str, broker: Broker) -> None:
    """A RocketMQ consumer whose send-back failed sends the copy itself, delayed, to its
    retry topic with these set (and with REAL_* copied from the message it consumed)."""
    m = system_message(topic="%RETRY%cg", body=b"x", properties={name: "v"}, delay_level=3)
    broker.send_message("%RETRY%cg", 0, [m])
    (held,) = broker.store.get(SCHEDULE_TOPIC, 2, 0, max_count=1).messages
    if name in HOLD_PROPERTIES:  # replaced by the broker's own
        assert held.get_property("REAL_TOPIC") == "%RETRY%cg"
        assert held.get_property("REAL_QID") == "0"
    else:
        assert held.get_property(name) == "v"


def test_a_forged_destination_is_replaced_when_the_message_is_held(broker: Broker) -> None:
    m = system_message(
        topic="T",
        body=b"x",
        delay_level=1,
        properties={"REAL_TOPIC": SCHEDULE_TOPIC, "REAL_QID": "7"},
    )
    broker.send_message("T", 1, [m])
    (held,) = broker.store.get(SCHEDULE_TOPIC, 0, 0, max_count=1).messages
    assert held.get_property("REAL_TOPIC") == "T" and held.get_property("REAL_QID") == "1"


def test_a_held_record_with_a_forbidden_destination_is_never_delivered(broker: Broker) -> None:
    """A record stored before these checks, held for SCHEDULE_TOPIC_XXXX, is logged and
    skipped instead of copied into the schedule topic again and again."""
    before = broker.store.max_offset(SCHEDULE_TOPIC, 0)
    loop = system_message(topic=SCHEDULE_TOPIC, body=b"x", properties={"REAL_QID": "0"})
    broker.delay.deliver(loop, 0, born_timestamp=0, born_host="1.2.3.4:5", reconsume_times=0)
    broker.delay.deliver(
        system_message(topic="T", body=b"x"), -1, born_timestamp=0, born_host="", reconsume_times=0
    )
    assert broker.store.max_offset(SCHEDULE_TOPIC, 0) == before
    broker.delay.deliver(
        system_message(topic="T", body=b"ok"), 1, born_timestamp=0, born_host="1.2.3.4:5",
        reconsume_times=0,
    )  # fmt: skip
    assert [m.body for m in stored(broker, "T", 1)] == [b"ok"]


# -- separators ---------------------------------------------------------------------------

FIELDS = ["tags", "keys", "property name", "property value"]


def _build(field: str, value: str) -> Message:
    if field in ("tags", "keys"):
        return Message(topic="T", body=b"x", **{field: value})
    if field == "property name":
        return Message(topic="T", body=b"x", properties={value: "v"})
    return Message(topic="T", body=b"x", properties={"p": value})


@pytest.mark.parametrize("sep", SEPARATORS, ids=["x01", "x02"])
@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_separators_are_refused_in_every_field(
    field: str, sep: str, where: str, broker: Broker, producer: Producer
) -> None:
    value = {"start": sep + "A", "middle": "A" + sep + "TAGS\x01B", "end": "A" + sep}[where]
    name = field.split()[0]
    # embedded: the Message itself, and the producer for a message changed afterwards
    with pytest.raises(InvalidArgumentError, match=f"message {name}.*property separator"):
        _build(field, value)
    with pytest.raises(InvalidArgumentError, match="property separator"):
        producer.send(forced(field, value))
    # the broker's send operation, for a client that skipped every check
    with pytest.raises(MessageFieldError, match=f"message {name}.*property separator"):
        broker.send_message("T", 0, [Message(topic="T", body=b"ok"), forced(field, value)])
    # the library's own path checks separators too
    if field.startswith("property"):
        with pytest.raises(InvalidArgumentError, match="property separator"):
            system_message(topic="T", body=b"x", properties=forced(field, value).properties)
    assert stored(broker) == []


@pytest.mark.parametrize("sep", SEPARATORS, ids=["x01", "x02"])
def test_separators_are_refused_in_the_topic(sep: str, broker: Broker, producer: Producer) -> None:
    with pytest.raises(MessageIllegalError, match="illegal characters"):
        producer.send(Message(topic="T" + sep + "REAL_TOPIC", body=b"x"))
    with pytest.raises(MessageIllegalError, match="illegal characters"):
        broker.send_message("T" + sep, 0, [Message(topic="T" + sep, body=b"x")])


def test_a_tag_cannot_be_forged_through_keys(broker: Broker) -> None:
    """The attack the checks close: keys ending a TAGS pair would show tag B on a message the
    consume queue indexed under tag A."""
    with pytest.raises(MessageFieldError, match="message keys"):
        broker.send_message("T", 0, [forced("keys", "k\x02TAGS\x01B")])
    broker.send_message("T", 0, [Message(topic="T", body=b"x", tags="A", keys="k")])
    (m,) = stored(broker)
    assert m.tags == "A" and m.keys == "k"


# -- types, names, bodies -----------------------------------------------------------------


@pytest.mark.parametrize("value", [None, b"v", 5, 1.5, ["v"]])
def test_property_values_must_be_str(value: object, broker: Broker) -> None:
    with pytest.raises(InvalidArgumentError, match="property 'p' value must be a str"):
        Message(topic="T", body=b"x", properties={"p": value})  # type: ignore[dict-item]
    m = Message(topic="T", body=b"x")
    m.properties["p"] = value  # type: ignore[assignment]
    with pytest.raises(MessageFieldError, match="must be a str"):
        broker.send_message("T", 0, [m])


@pytest.mark.parametrize("value", [5, b"A"])
def test_tags_and_keys_must_be_str(value: object) -> None:
    with pytest.raises(InvalidArgumentError, match="message tags must be a str"):
        Message(topic="T", tags=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="message keys must be a str"):
        Message(topic="T", keys=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="property name must be a str"):
        Message(topic="T", properties={value: "v"})  # type: ignore[dict-item]


@pytest.mark.parametrize("field", ["tags", "keys", "property name", "property value"])
def test_lone_surrogates_are_refused(field: str, broker: Broker) -> None:
    with pytest.raises(InvalidArgumentError, match="lone surrogate"):
        _build(field, "a\udc80b")
    with pytest.raises(MessageFieldError, match="lone surrogate"):
        broker.send_message("T", 0, [forced(field, "a\ud800")])
    assert _build(field, "ünï©ødé 标签").body == b"x"


@pytest.mark.parametrize("value", ["3", 1.5, True, -1, None])
def test_delay_level_must_be_a_non_negative_int(value: object, broker: Broker) -> None:
    with pytest.raises(InvalidArgumentError, match="delay_level"):
        Message(topic="T", body=b"x", delay_level=value)  # type: ignore[arg-type]
    m = Message(topic="T", body=b"x")
    object.__setattr__(m, "delay_level", value)
    with pytest.raises(MessageFieldError, match="delay_level"):
        broker.send_message("T", 0, [m])


def test_delay_level_takes_int_likes() -> None:
    class Level:
        def __index__(self) -> int:
            return 2

    assert Message(topic="T", delay_level=Level()).delay_level == 2  # type: ignore[arg-type]


def test_a_zero_byte_body_is_refused_by_the_broker(broker: Broker, producer: Producer) -> None:
    with pytest.raises(MessageIllegalError, match="zero"):
        producer.send(Message(topic="T", body=b""))
    with pytest.raises(MessageIllegalError, match="empty"):
        broker.send_message("T", 0, [Message(topic="T", body=b"")])
    with pytest.raises(MessageIllegalError, match="must be bytes"):
        broker.send_message("T", 0, [Message(topic="T", body="text")])  # type: ignore[arg-type]
    assert stored(broker) == []


@pytest.mark.parametrize("name", ["T\n", "T\r\n", "\nT", "T ", "T\x00"])
def test_names_are_matched_whole(name: str, broker: Broker) -> None:
    """RocketMQ's pattern ends in ``$``, which also matches before a trailing newline."""
    with pytest.raises(MessageIllegalError, match="illegal characters"):
        broker.create_topic(name, 1)
    with pytest.raises(MessageIllegalError, match="illegal characters"):
        broker.send_message(name, 0, [Message(topic=name, body=b"x")])
    with pytest.raises(MessageIllegalError, match="illegal characters"):
        Producer(name, broker=broker)
    with pytest.raises(InvalidArgumentError, match="illegal characters"):
        check_name("topic", name, 127)
    assert name not in {t.topic_name for t in broker.list_topics()}


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("origin_topic", "T\x02TAGS\x01B", MessageIllegalError),
        ("origin_topic", "T\n", MessageIllegalError),
        ("origin_msg_id", "ID\x01x", MessageFieldError),
        ("origin_msg_id", "ID\ud800", MessageFieldError),
    ],
)
def test_send_back_request_fields_are_checked(
    field: str, value: str, error: type[Exception], broker: Broker
) -> None:
    """A send-back request's origin topic and id come from the client and go into the
    retry record's properties: refused unless they are clean."""
    (r,) = broker.send_message("T", 0, [Message(topic="T", body=b"x", tags="A")])
    offset = broker.store.get("T", 0, 0, max_count=1).messages[0].commitlog_offset
    with pytest.raises(error):
        broker.consumer_send_msg_back("cg", offset, **{field: value})
    assert broker.store.max_offset(SCHEDULE_TOPIC, 2) == 0  # nothing held for a retry
    broker.consumer_send_msg_back("cg", offset, origin_topic="T", origin_msg_id=r.msg_id)
    (held,) = broker.store.get(SCHEDULE_TOPIC, 2, 0, max_count=1).messages
    assert held.get_property("RETRY_TOPIC") == "T" and held.tags == "A"
