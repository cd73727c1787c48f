"""Custom headers and JSON bodies: round trips, numbers or strings, fastjson's map keys."""

from __future__ import annotations

import json

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqcore.errors import ProtocolError
from mqcore.message import MessageQueue
from mqcore.protocol import headers as h
from mqcore.protocol.bodies import (
    ConsumerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    ProducerData,
    ResetOffsetBody,
    SubscriptionData,
    UnlockBatchRequestBody,
)
from mqcore.protocol.codes import RequestCode
from mqcore.protocol.fastjson import loads
from mqcore.protocol.fields import CommandHeader

HEADER_CLASSES = sorted(
    (
        obj
        for obj in vars(h).values()
        if isinstance(obj, type) and issubclass(obj, CommandHeader) and obj is not CommandHeader
    ),
    key=lambda c: c.__name__,
)


def _sample(cls: type[CommandHeader]) -> CommandHeader:
    """A header of ``cls`` with every field set to a distinct value of its type."""
    values = {}
    for i, f in enumerate(attrs.fields(cls)):  # type: ignore[arg-type]
        kind = f.metadata["mqcore.wire"][1].name
        values[f.name] = {
            "STRING": f"v{i}-é",
            "INT": -(i + 1),
            "LONG": 2**40 + i,
            "BOOLEAN": i % 2 == 0,
        }[kind]
    return cls(**values)


@pytest.mark.parametrize("cls", HEADER_CLASSES, ids=lambda c: c.__name__)
def test_every_header_round_trips_through_strings(cls: type[CommandHeader]) -> None:
    header = _sample(cls)
    ext = header.to_ext_fields()
    assert all(isinstance(v, str) for v in ext.values())
    assert cls.from_ext_fields(ext) == header


@pytest.mark.parametrize("cls", HEADER_CLASSES, ids=lambda c: c.__name__)
def test_every_header_reads_json_numbers_and_booleans(cls: type[CommandHeader]) -> None:
    header = _sample(cls)
    ext: dict[str, object] = {}
    for name, value in header.to_ext_fields().items():
        if value.lstrip("-").isdigit():
            ext[name] = int(value)
        elif value in ("true", "false"):
            ext[name] = value == "true"
        else:
            ext[name] = value
    assert cls.from_ext_fields(ext) == header


def test_send_header_wire_names_are_rocketmqs() -> None:
    assert h.SendMessageRequestHeader.wire_names() == (
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
        "properties",
        "reconsumeTimes",
        "unitMode",
        "batch",
        "maxReconsumeTimes",
    )
    assert h.SendMessageRequestHeaderV2.wire_names() == tuple("abcdefghijkml")
    assert h.UnregisterClientRequestHeader.wire_names()[0] == "clientID"
    assert h.ResetOffsetRequestHeader.wire_names() == ("topic", "group", "timestamp", "isForce")


def test_v2_send_header_as_the_cpp_core_writes_it() -> None:
    """The C++ core sends d, e, f, h, l as JSON numbers and the rest as strings."""
    ext = {
        "a": "pg",
        "b": "TopicTest",
        "c": "TBW102",
        "d": 4,
        "e": 3,
        "f": 0,
        "g": "1700000000123",
        "h": 0,
        "i": "KEYS\x01k1\x02TAGS\x01A\x02",
        "j": "0",
        "k": "false",
        "l": 16,
        "m": "false",
        "AccessKey": "",
        "Signature": "",
        "OnsChannel": "ALIYUN",
        "n": "broker-a",  # a RocketMQ 5 field: ignored
    }
    v2 = h.SendMessageRequestHeaderV2.from_ext_fields(ext)
    v1 = v2.to_v1()
    assert isinstance(v2, h.SendMessageRequestHeader)
    assert type(v1) is h.SendMessageRequestHeader
    assert (v1.producer_group, v1.topic, v1.queue_id, v1.born_timestamp) == (
        "pg",
        "TopicTest",
        3,
        1700000000123,
    )
    assert v1.max_reconsume_times == 16 and v1.unit_mode is False and v1.batch is False
    assert v1.properties == "KEYS\x01k1\x02TAGS\x01A\x02"
    assert h.SendMessageRequestHeaderV2.from_v1(v1) == v2
    assert v1.to_ext_fields()["producerGroup"] == "pg"
    assert v2.to_ext_fields()["a"] == "pg"


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", " true ", True, 1])
def test_booleans_in_every_spelling(raw: object) -> None:
    ext = {"offset": "5", "group": "g", "delayLevel": "3", "unitMode": raw}
    assert h.ConsumerSendMsgBackRequestHeader.from_ext_fields(ext).unit_mode is True


def test_missing_required_field_names_it() -> None:
    with pytest.raises(ProtocolError, match="'suggestWhichBrokerId' is missing") as info:
        h.PullMessageResponseHeader.from_ext_fields(None)  # first missing field
    assert info.value.field == "suggestWhichBrokerId"
    with pytest.raises(ProtocolError, match="GetMaxOffsetRequestHeader.*'queueId'"):
        h.GetMaxOffsetRequestHeader.from_ext_fields({"topic": "T", "queueId": ""})


@pytest.mark.parametrize(
    ("field", "raw"),
    [
        ("queueId", "x1"),
        ("queueId", str(2**31)),  # over Integer
        ("queueId", True),
        ("queueId", 1.5),
        ("queueOffset", str(2**63)),  # over Long
        ("queueOffset", [1]),
        ("topic", {"a": 1}),
    ],
)
def test_wrong_types_are_refused_with_the_field(field: str, raw: object) -> None:
    ext: dict[str, object] = {
        "consumerGroup": "g",
        "topic": "T",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "2",
        "commitOffset": "0",
        "suspendTimeoutMillis": "15000",
        "subVersion": "0",
    }
    ext[field] = raw
    with pytest.raises(ProtocolError) as info:
        h.PullMessageRequestHeader.from_ext_fields(ext)
    assert info.value.field == field
    assert field in str(info.value)


def test_optional_fields_default_and_are_not_written() -> None:
    header = h.PullMessageRequestHeader.from_ext_fields(
        {
            "consumerGroup": "g",
            "topic": "T",
            "queueId": 0,
            "queueOffset": 0,
            "maxMsgNums": 32,
            "sysFlag": 7,
            "commitOffset": 0,
            "suspendTimeoutMillis": 15000,
            "subVersion": 0,
        }
    )
    assert header.subscription is None and header.expression_type is None
    assert "subscription" not in header.to_ext_fields()
    flags = h.PullSysFlag(header.sys_flag)
    assert h.PullSysFlag.SUSPEND in flags and h.PullSysFlag.CLASS_FILTER not in flags


@given(
    queue_id=st.integers(-(2**31), 2**31 - 1),
    offset=st.integers(-(2**63), 2**63 - 1),
    topic=st.text(),
    as_number=st.booleans(),
)
def test_numbers_or_strings_property(
    queue_id: int, offset: int, topic: str, as_number: bool
) -> None:
    ext = {"topic": topic, "queueId": queue_id, "timestamp": offset}
    if not as_number:
        ext = {k: str(v) for k, v in ext.items()}
    header = h.SearchOffsetRequestHeader.from_ext_fields(ext)
    assert (header.topic, header.queue_id, header.timestamp) == (topic, queue_id, offset)
    assert h.SearchOffsetRequestHeader.from_ext_fields(header.to_ext_fields()) == header


def test_request_header_table_uses_rocketmq_numbers() -> None:
    assert h.REQUEST_HEADERS[310] is h.SendMessageRequestHeaderV2
    assert h.REQUEST_HEADERS[320] is h.SendMessageRequestHeaderV2
    assert h.REQUEST_HEADERS[11] is h.PullMessageRequestHeader
    assert h.REQUEST_HEADERS[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] is h.ResetOffsetRequestHeader
    assert RequestCode.RESET_CONSUMER_CLIENT_OFFSET == 220
    assert RequestCode.INVOKE_BROKER_TO_RESET_OFFSET == 222
    assert RequestCode.NOTIFY_CONSUMER_IDS_CHANGED == 40


# --- bodies ---------------------------------------------------------------------------


def test_heartbeat_from_the_java_client() -> None:
    body = json.dumps(
        {
            "clientID": "10.0.0.1@4242",
            "consumerDataSet": [
                {
                    "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                    "consumeType": "CONSUME_PASSIVELY",
                    "groupName": "cg",
                    "messageModel": "CLUSTERING",
                    "subscriptionDataSet": [
                        {
                            "classFilterMode": False,
                            "codeSet": [2598919, 2598920],
                            "expressionType": "TAG",
                            "subString": "TagA || TagB",
                            "subVersion": 1700000000000,
                            "tagsSet": ["TagA", "TagB"],
                            "topic": "T",
                        }
                    ],
                    "unitMode": False,
                }
            ],
            "producerDataSet": [{"groupName": "CLIENT_INNER_PRODUCER"}],
        }
    ).encode()
    hb = HeartbeatData.decode(body)
    assert hb.client_id == "10.0.0.1@4242"
    assert hb.producer_data_set == (ProducerData(group_name="CLIENT_INNER_PRODUCER"),)
    (cd,) = hb.consumer_data_set
    assert cd.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
    (sub,) = cd.subscription_data_set
    assert sub.tags_set == {"TagA", "TagB"} and sub.sub_version == 1700000000000
    assert HeartbeatData.decode(hb.encode()) == hb


def test_heartbeat_from_the_cpp_core_uses_ordinals_and_strings() -> None:
    body = (
        b'{"clientID":"127.0.0.1@99#1","consumerDataSet":[{"consumeFromWhere":4,'
        b'"consumeType":1,"groupName":"cg","messageModel":0,"subscriptionDataSet":'
        b'[{"subString":"*","subVersion":"1700000000001","topic":"T"}]}],'
        b'"producerDataSet":[{"groupName":"pg"}]}'
    )
    (cd,) = HeartbeatData.decode(body).consumer_data_set
    assert (cd.consume_type, cd.message_model, cd.consume_from_where) == (
        "CONSUME_PASSIVELY",
        "BROADCASTING",
        "CONSUME_FROM_FIRST_OFFSET",
    )
    assert cd.subscription_data_set[0].sub_version == 1700000000001
    assert cd.subscription_data_set[0].expression_type == "TAG"


def test_heartbeat_refuses_a_bad_enum() -> None:
    with pytest.raises(ProtocolError, match="messageModel"):
        HeartbeatData.decode(
            b'{"clientID":"c","consumerDataSet":[{"groupName":"g","messageModel":7}]}'
        )
    with pytest.raises(ProtocolError, match="JSON object"):
        HeartbeatData.decode(b"[1,2]")


def test_lock_bodies_round_trip() -> None:
    mqs = {MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)}
    req = LockBatchRequestBody(consumer_group="cg", client_id="c1", mq_set=mqs)
    decoded = LockBatchRequestBody.decode(req.encode())
    assert decoded == req and decoded.mq_set == mqs
    assert json.loads(req.encode())["mqSet"][1] == {"topic": "T", "brokerName": "b", "queueId": 1}
    unlock = UnlockBatchRequestBody(consumer_group="cg", client_id="c1", mq_set=mqs)
    assert UnlockBatchRequestBody.decode(unlock.encode()) == unlock
    resp = LockBatchResponseBody(lock_ok_mq_set=mqs)
    assert LockBatchResponseBody.decode(resp.encode()).lock_ok_mq_set == mqs
    # what the C++ core's LockBatchBody parser reads
    assert set(json.loads(resp.encode())) == {"lockOKMQSet"}


def test_reset_offset_body_in_both_shapes() -> None:
    table = {MessageQueue("T", "broker-a", 0): 5, MessageQueue("T", "broker-a", 1): 7}
    body = ResetOffsetBody(offset_table=table)
    java = body.encode()
    # fastjson's Map<MessageQueue, Long>: objects as keys
    assert java.startswith(b'{"offsetTable":{{"topic":"T","brokerName":"broker-a","queueId":0}:5,')
    assert ResetOffsetBody.decode(java).offset_table == table
    cpp = json.loads(body.encode(for_cpp=True))
    assert cpp["offsetTable"][1] == {
        "topic": "T",
        "brokerName": "broker-a",
        "queueId": 1,
        "offset": 7,
    }
    assert ResetOffsetBody.decode(body.encode(for_cpp=True)).offset_table == table


def test_consumer_list_body() -> None:
    body = GetConsumerListByGroupResponseBody(consumer_id_list=("a@1", "b@2"))
    assert json.loads(body.encode()) == {"consumerIdList": ["a@1", "b@2"]}
    assert GetConsumerListByGroupResponseBody.decode(body.encode()) == body


def test_consumer_data_and_subscription_round_trip() -> None:
    sub = SubscriptionData(topic="T", sub_string="a > 1", expression_type="SQL92", sub_version=3)
    cd = ConsumerData(group_name="g", subscription_data_set=[sub])
    assert ConsumerData.from_json(cd.to_json()) == cd


# --- fastjson ---------------------------------------------------------------------------


def test_fastjson_route_with_unquoted_broker_ids() -> None:
    """A RocketMQ 4.x name server writes Map<Long, String> keys as bare numbers."""
    body = (
        b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
        b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,'
        b'"topicSynFlag":0,"writeQueueNums":4}]}'
    )
    route = loads(body)
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "10.0.0.1:10911", "1": "10.0.0.2:10911"}
    assert route["queueDatas"][0]["readQueueNums"] == 4


def test_fastjson_keeps_strings_that_look_like_keys() -> None:
    text = '{"a":"{0:1}",1:[1.5,-2e3,true,null,"x\\"y"]}'
    assert loads(text) == {"a": "{0:1}", "1": [1.5, -2000.0, True, None, 'x"y']}


@pytest.mark.parametrize("bad", [b"{0:", b"{[1]:2}", b"{0 1}", b"[1,", b'{"a":1} x', b"\xff"])
def test_fastjson_refuses_garbage(bad: bytes) -> None:
    with pytest.raises(ProtocolError, match="bad JSON body"):
        loads(bad)


def test_fastjson_depth_is_bounded() -> None:
    with pytest.raises(ProtocolError, match="deeper"):
        loads("{0:" * 100)


# --- hostile input: only ProtocolError, whatever arrives ------------------------------------

_JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)


@pytest.mark.parametrize("cls", HEADER_CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_headers_take_any_ext_fields(cls: type[CommandHeader], data: st.DataObject) -> None:
    names = [*cls.wire_names(), "AccessKey", "x"]
    ext = data.draw(st.dictionaries(st.sampled_from(names), _JSON, max_size=len(names)))
    try:
        header = cls.from_ext_fields(ext)
    except ProtocolError:
        return
    assert cls.from_ext_fields(header.to_ext_fields()) == header


_BODY_DECODERS = [
    HeartbeatData.decode,
    LockBatchRequestBody.decode,
    UnlockBatchRequestBody.decode,
    LockBatchResponseBody.decode,
    ResetOffsetBody.decode,
    GetConsumerListByGroupResponseBody.decode,
]


@pytest.mark.parametrize("decode", _BODY_DECODERS, ids=lambda d: d.__qualname__)
@settings(max_examples=50)
@given(doc=_JSON, raw=st.binary(max_size=64))
def test_bodies_take_any_bytes(decode: object, doc: object, raw: bytes) -> None:
    for body in (json.dumps(doc).encode(), raw):
        try:
            decode(body)  # type: ignore[operator]
        except ProtocolError:
            pass


@pytest.mark.parametrize("decode", _BODY_DECODERS, ids=lambda d: d.__qualname__)
def test_bodies_refuse_deep_nesting(decode: object) -> None:
    with pytest.raises(ProtocolError):
        decode(b"[" * 100_000)  # type: ignore[operator]


# Values a client may put in extFields: strings that are and are not numbers or booleans,
# JSON numbers, booleans, floats, nulls and nested values.
_RAW_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**64), 2**64),
    st.floats(allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["", " 7 ", "1_000", "true", "FALSE", "0", "1", "-0", "9" * 20, "1e3"]),
    st.integers(-(2**64), 2**64).map(str),
    st.lists(st.integers(), max_size=2),
)


def _reference_to_ext_fields(header: CommandHeader) -> dict[str, str]:
    out: dict[str, str] = {}
    for spec in type(header)._specs():
        value = getattr(header, spec.attr)
        if value is None:
            continue
        if spec.kind.name == "BOOLEAN":
            out[spec.wire] = "true" if value else "false"
        else:
            out[spec.wire] = value if spec.kind.name == "STRING" else str(int(value))
    return out


@settings(max_examples=300)
@given(cls=st.sampled_from(HEADER_CLASSES), data=st.data())
def test_generated_header_codecs_agree_with_the_field_loop(
    cls: type[CommandHeader], data: st.DataObject
) -> None:
    """from_ext_fields / to_ext_fields run generated straight-line code per header class; it
    reads, refuses (same message) and writes exactly as the plain loop over the fields."""
    names = [*cls.wire_names(), "AccessKey", "unknownField"]
    ext = data.draw(st.dictionaries(st.sampled_from(names), _RAW_VALUES, max_size=len(names)))
    try:
        expected: object = cls._read_slowly(ext)
    except ProtocolError as exc:
        expected = ("error", str(exc), exc.field)
    try:
        got: object = cls.from_ext_fields(ext)
    except ProtocolError as exc:
        got = ("error", str(exc), exc.field)
    assert got == expected
    if isinstance(got, CommandHeader):
        assert got.to_ext_fields() == _reference_to_ext_fields(got)
