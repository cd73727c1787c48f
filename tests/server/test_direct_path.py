"""The direct branch for single sends and pulls (BrokerProcessor.process_frame) and the group
commit of single sends (process_group, Broker.send_many) answer every request as the generic
dispatch (BrokerProcessor.process) does: the same code, remark, header fields and body, errors
included. Two brokers with the same setup are given the same requests, one through each path."""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from countingstore import CountingStore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mqtest import FakeClock

from mqcore import Broker, hookimpl, speedups
from mqcore.message import Message, format_properties
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.send import encode_batch
from mqcore.remoting.command import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand
from mqcore.server import processor as processor_module
from mqcore.server.processor import BrokerProcessor


class _Conn:
    remote_address = "10.1.2.3:4567"


class _Refuser:
    """An ACL stand-in: refuses every request naming topic Secret (both paths must ask it)."""

    def __init__(self) -> None:
        self.asked = 0

    def refuse(self, req: RemotingCommand, address: str) -> RemotingCommand | None:
        self.asked += 1
        ext = req.ext_fields or {}
        if "Secret" in (ext.get("b"), ext.get("topic")):
            return RemotingCommand.response(ResponseCode.NO_PERMISSION, f"no PUB for {address}")
        return None


def _props(**props: str) -> str:
    return format_properties(props)


def _send(
    topic: str = "T",
    body: bytes = b"hello",
    *,
    queue_id: int | str = 0,
    properties: str | None = None,
    v1: bool = False,
    sys_flag: int = 0,
    oneway: bool = False,
    batch: bool = False,
    drop: str | None = None,
) -> RemotingCommand:
    ext: dict[str, Any] = {
        "producerGroup": "pg",
        "topic": topic,
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": str(queue_id) if isinstance(queue_id, int) else queue_id,
        "sysFlag": str(sys_flag),
        "bornTimestamp": "1732800000000",
        "flag": "0",
        "reconsumeTimes": "0",
        "unitMode": "false",
    }
    if properties is not None:
        ext["properties"] = properties
    if batch:
        ext["batch"] = "true"
    if drop is not None:
        del ext[drop]
    if not v1:
        rename = headers.SendMessageRequestHeaderV2.WIRE_RENAME
        ext = {rename.get(k, k): v for k, v in ext.items()}
    code = RequestCode.SEND_MESSAGE if v1 else RequestCode.SEND_MESSAGE_V2
    return RemotingCommand(
        int(code), ext_fields=ext, body=body, opaque=random.randrange(1, 2**31),
        flag=FLAG_ONEWAY if oneway else 0,
    )  # fmt: skip


def _pull(
    topic: str = "T", queue_id: int = 0, offset: int = 0, *, lite: bool = False, **extra: str
) -> RemotingCommand:
    ext = {
        "consumerGroup": "cg",
        "topic": topic,
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(headers.PULL_FLAG_SUBSCRIPTION if "subscription" in extra else 0),
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
        **extra,
    }
    code = RequestCode.LITE_PULL_MESSAGE if lite else RequestCode.PULL_MESSAGE
    return RemotingCommand(int(code), ext_fields=ext, opaque=random.randrange(1, 2**31))


def _requests() -> list[RemotingCommand]:
    """Sends and pulls of every kind the direct branch must answer as the generic path."""
    random.seed(36)
    uniq = _props(UNIQ_KEY="0A0B0C0D0E0F00000000000000000001", WAIT="true", TAGS="a")
    return [
        _send(properties=uniq),
        _send(properties=uniq, v1=True, queue_id=1),
        _send(queue_id=-1, properties=_props(KEYS="k1 k2")),  # any writable queue
        _send(queue_id=2),  # no properties at all
        _send(properties=_props(TRAN_MSG="true", PGROUP="pg", UNIQ_KEY="U-half")),
        _send(properties=_props(DELAY="2", UNIQ_KEY="U-delay")),
        _send(properties=_props(TIMER_DELAY_SEC="5", UNIQ_KEY="U-timer")),
        _send(body=zlib.compress(b"x" * 5000), sys_flag=1, properties=_props(DELAY="1")),
        _send(body=b"not zlib", sys_flag=1, properties=_props(DELAY="1")),  # refused
        _send(body=zlib.compress(b"y" * 5000), sys_flag=1),  # stored compressed
        _send("bad topic!"),
        _send("SCHEDULE_TOPIC_XXXX"),
        _send("%RETRY%cg", properties=_props(RETRY_TOPIC="T")),
        _send(body=b"z" * 3000),  # over max_message_size
        _send(queue_id=99),
        _send(queue_id="x"),  # not an int: the reference reader's error
        _send(drop="producerGroup"),  # a required field missing
        _send("Secret"),  # refused by the ACL
        _send(oneway=True, properties=uniq),
        _send("NewTopic", properties=uniq),  # created on its first send
        _send(body=b""),  # no body
        _send(batch=True, body=encode_batch([Message(topic="T", body=b"b%d" % i)
                                             for i in range(3)])),
        _send(properties=uniq, v1=True, queue_id=3),
        _pull(),
        _pull(queue_id=1, lite=True),
        _pull(offset=1000),
        _pull(subscription="a || b", expressionType="TAG"),
        _pull(subscription="a >", expressionType="SQL92"),
        _pull(topic="Nope"),
        _pull("%RETRY%cg"),
    ]  # fmt: skip


def _wire(req: RemotingCommand, answer: Any) -> tuple[Any, ...] | None:
    """An answer as the client reads it off the wire (None: nothing is sent)."""
    if answer is None or req.flag & FLAG_ONEWAY:
        return None
    if isinstance(answer, bytes):
        cmd = RemotingCommand.decode(answer[4:])
    else:
        assert isinstance(answer, RemotingCommand)
        answer.opaque, answer.serialize_type = req.opaque, req.serialize_type
        answer.flag |= FLAG_RESPONSE
        cmd = RemotingCommand.decode(answer.encode()[4:])
    return (
        cmd.code,
        cmd.remark,
        cmd.ext_fields,
        _without_store_times(bytes(cmd.body)) if cmd.body is not None else None,
        cmd.opaque,
        cmd.flag,
        cmd.language,
        cmd.version,
    )


def _without_store_times(records: bytes) -> bytes:
    """Pulled records with each one's store timestamp zeroed (two brokers store at their own
    times; everything else must be the same)."""
    out = bytearray(records)
    pos = 0
    while pos + 64 <= len(out):
        size = int.from_bytes(out[pos : pos + 4], "big")
        sys_flag = int.from_bytes(out[pos + 36 : pos + 40], "big")
        assert not sys_flag & 0x10, "an IPv6 born host moves the store timestamp"
        out[pos + 56 : pos + 64] = bytes(8)
        pos += size
    return bytes(out)


def _durable_state(broker: Broker) -> dict[str, Any]:
    """What a broker keeps after a request, answered or not (a oneway send's effect shows
    only here): its topic table, each queue's end and the commit log's end (a record stored
    by one broker only, or stored at another length)."""
    store = broker.store
    state: dict[str, Any] = {
        "topics": sorted(repr(cfg) for cfg in broker.list_topics()),
        "queues": {
            (t, q): store.max_offset(t, q) for t in store.topics() for q in store.queue_ids(t)
        },
    }
    if hasattr(store, "log_positions"):  # both stores: the (virtual) commit log's end
        state["commitlog"] = store.log_positions().written
    return state


def _assert_same_state(
    reference: BrokerProcessor, direct: BrokerProcessor, sends: list[Any]
) -> None:
    """Both brokers left alike by an example (else a later example would show it)."""
    assert _durable_state(direct.broker) == _durable_state(reference.broker), sends


@contextmanager
def _twins(root: Path, store_name: str) -> Iterator[tuple[BrokerProcessor, BrokerProcessor]]:
    """Two processors over two brokers set up alike under ``root``: (reference, direct)."""
    made = []
    # Nothing held may come due while a test runs: each broker's delivery thread would store
    # it at its own moment, and the two commit logs (so the msgIds) would part. The delay
    # levels are hours long and the timer's clock stands still (it times the held ones too).
    held = {
        "message_delay_level": " ".join(["2h"] * 18),
        "timer_scheduler_options": {"clock": FakeClock()},
    }
    try:
        for name in ("reference", "direct"):
            broker = Broker(root / name, store=store_name, max_message_size=2048, **held)
            made.append(broker)
            broker.create_topic("T", queue_nums=4)
            broker.create_topic("Secret", queue_nums=4)
        procs = [BrokerProcessor(b, "127.0.0.1:10911") for b in made]
        for p in procs:
            p.access = _Refuser()
        procs[0].direct = False
        yield procs[0], procs[1]
    finally:
        for broker in made:
            broker.close()


@pytest.fixture
def pair(tmp_path: Path, store_name: str) -> Iterator[tuple[BrokerProcessor, BrokerProcessor]]:
    """:func:`_twins` for one test."""
    with _twins(tmp_path, store_name) as procs:
        yield procs


@pytest.fixture(params=["acl", "open"])
def acl(request: pytest.FixtureRequest) -> bool:
    """With the ACL (a group's sends then served one by one after their refusals) and
    without (its plain sends read and prepared in one call)."""
    return request.param == "acl"


@pytest.fixture
def group_pair(
    acl: bool, pair: tuple[BrokerProcessor, BrokerProcessor]
) -> tuple[BrokerProcessor, BrokerProcessor]:
    """:func:`pair`, with the ACL or without (:func:`acl`)."""
    if not acl:
        for p in pair:
            p.access = None
    return pair


@pytest.fixture
def fresh_pairs(
    tmp_path: Path, store_name: str
) -> Iterator[Callable[[], AbstractContextManager[tuple[BrokerProcessor, BrokerProcessor]]]]:
    """Twins (:func:`_twins`) for each example of a property, as its first example met
    them: the topics an example created are deleted after it (a retry or auto-created topic
    is new to every example), and an example that fails (the brokers left apart among its
    causes) has the next one served by new twins. So a failing example fails by itself and
    shrinks to its own cause, not to a later innocent one meeting what it left."""
    count = itertools.count()
    current: list[Any] = []  # [the open _twins context, its processors, their topics]

    def renew() -> None:
        if current:
            current.pop(0).__exit__(None, None, None)
            current.clear()
        twins = _twins(tmp_path / f"twins-{next(count)}", store_name)
        procs = twins.__enter__()
        current[:] = [twins, procs, {cfg.topic_name for cfg in procs[0].broker.list_topics()}]

    @contextmanager
    def fresh() -> Iterator[tuple[BrokerProcessor, BrokerProcessor]]:
        if not current:
            renew()
        _, procs, known = current
        for p in procs:
            p.access = _Refuser()
        try:
            yield procs
        except BaseException:
            renew()
            raise
        for p in procs:
            for cfg in p.broker.list_topics():
                if cfg.topic_name not in known:
                    p.broker.delete_topic(cfg.topic_name)

    try:
        yield fresh
    finally:
        if current:
            current[0].__exit__(None, None, None)


def test_direct_branch_answers_as_the_generic_path(
    pair: tuple[BrokerProcessor, BrokerProcessor],
) -> None:
    """Each request, through process (generic) and process_frame (direct): the same answer."""
    reference, direct = pair
    conn = _Conn()
    requests = _requests()
    random.seed(1)
    expected = [_wire(r, reference.process(r, conn)) for r in requests]
    random.seed(1)
    got = [_wire(r, direct.process_frame(r, conn)) for r in requests]
    for req, want, have in zip(requests, expected, got, strict=True):
        assert have == want, (req.code, req.ext_fields)
    codes = {a[0] for a in expected if a is not None}
    # The mix covers successes and the error answers of both paths.
    covered = {
        ResponseCode.SUCCESS,
        ResponseCode.MESSAGE_ILLEGAL,
        ResponseCode.NO_PERMISSION,
        ResponseCode.SYSTEM_ERROR,
        ResponseCode.INVALID_PARAMETER,
        ResponseCode.PULL_OFFSET_MOVED,
        ResponseCode.SUBSCRIPTION_PARSE_FAILED,
    }
    assert covered <= codes
    assert reference.access.asked == direct.access.asked == len(requests)  # type: ignore[union-attr]
    # With the C reader, the direct path answered the plain sends with one encoded frame.
    if speedups.load("protocol") is not None:
        assert isinstance(direct.process_frame(_send(), conn), bytes)


def test_a_slave_refuses_on_both_paths(
    pair: tuple[BrokerProcessor, BrokerProcessor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slave's refusal (SERVICE_NOT_AVAILABLE) is the direct and group paths' answer too."""
    reference, direct = pair
    monkeypatch.setattr(Broker, "is_slave", property(lambda self: True))
    conn = _Conn()
    reqs = [_send(), _send(properties=_props(TRAN_MSG="true", PGROUP="pg"))]
    want = [_wire(r, reference.process(r, conn)) for r in reqs]
    assert all(w is not None and w[0] == ResponseCode.SERVICE_NOT_AVAILABLE for w in want)
    assert [_wire(r, direct.process_frame(r, conn)) for r in reqs] == want
    answers = direct.process_group([(r, conn) for r in reqs])
    assert [_wire(r, a) for r, a in zip(reqs, answers, strict=True)] == want


def test_group_commit_answers_each_as_the_generic_path(
    group_pair: tuple[BrokerProcessor, BrokerProcessor],
) -> None:
    """A group of mixed requests: each answered as alone through the generic path, in order;
    the plain sends between two requests served otherwise share one put_many."""
    reference, direct = group_pair
    counting = CountingStore(direct.broker.store)
    direct.broker.store = counting  # type: ignore[assignment]
    conn = _Conn()
    requests = _requests()
    random.seed(2)
    expected = [_wire(r, reference.process(r, conn)) for r in requests]
    random.seed(2)
    answers = direct.process_group([(r, conn) for r in requests])
    got = [_wire(r, a) for r, a in zip(requests, answers, strict=True)]
    for req, want, have in zip(requests, expected, got, strict=True):
        assert have == want, (req.code, req.ext_fields)
    # The first four plain sends went in one write; later runs of plain ones too.
    assert counting.groups and counting.groups[0] == 4
    assert sum(counting.groups) >= 7
    # What each stored is where the generic path put it, queue by queue.
    for q in range(4):
        a = reference.broker.pull_message("chk", "T", q, 0, 64)
        b = direct.broker.pull_message("chk", "T", q, 0, 64)
        assert [(m.body, m.queue_offset, m.properties) for m in a.messages] == [
            (m.body, m.queue_offset, m.properties) for m in b.messages
        ]


def test_one_refused_send_among_good_ones(
    group_pair: tuple[BrokerProcessor, BrokerProcessor],
) -> None:
    """A too-large and a bad-topic send in a group get their own errors; the rest are stored
    in one put_many and answered SUCCESS with their own offsets."""
    _, direct = group_pair
    counting = CountingStore(direct.broker.store)
    direct.broker.store = counting  # type: ignore[assignment]
    conn = _Conn()
    reqs = [_send(body=b"m%d" % i, queue_id=1) for i in range(5)]
    reqs.insert(2, _send(body=b"z" * 3000, queue_id=1))
    reqs.insert(4, _send("bad topic!"))
    group = direct.process_group([(r, conn) for r in reqs])
    answers = [_wire(r, a) for r, a in zip(reqs, group, strict=True)]
    assert [a[0] for a in answers if a] == [0, 0, 13, 0, 13, 0, 0]
    assert "max value 2048" in answers[2][1] and "bad topic!" in answers[4][1]  # type: ignore[index]
    ok = [a for a in answers if a and a[0] == 0]
    assert [int(a[2]["queueOffset"]) for a in ok] == [0, 1, 2, 3, 4]
    assert counting.groups == [5]
    got = direct.broker.pull_message("chk", "T", 1, 0, 32)
    assert [m.body for m in got.messages] == [b"m%d" % i for i in range(5)]


# Property names a sent message may carry: the ones stored as sent, the ones the broker reads
# (a delay, a timer, a transaction: the reference path's), and names of the sender's own.
_NAMES = st.sampled_from(
    ["UNIQ_KEY", "TAGS", "KEYS", "WAIT", "DELAY", "TRAN_MSG", "TIMER_DELAY_SEC", "MIN_OFFSET",
     "a", "k", "\u00e9t\u00e9", ""]
)  # fmt: skip
_VALUES = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12)


@st.composite
def _single_sends(draw: st.DrawFn) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A single send of any shape: plain ones (the prepared lane), and ones it must leave to
    the reference (properties it cannot take, an empty or too large body, a system topic)."""
    props = draw(st.dictionaries(_NAMES, _VALUES, max_size=4))
    raw = format_properties(props) if props else None
    if draw(st.booleans()) and raw:  # a hand-made string: separators in odd places
        raw = draw(st.sampled_from([raw + "x", raw.replace("\x02", "\x01", 1), "\x02" + raw]))
    compressed = draw(st.booleans())
    body = draw(st.binary(max_size=64)) if not draw(st.booleans()) else b"b" * 2049
    if compressed:
        body = zlib.compress(body or b"c")
    topic = draw(
        st.sampled_from(["T", "T", "%RETRY%cg", "NewTopic", "rmq_sys_wheel_timer", "bad topic!"])
    )
    return (topic, body), {
        "queue_id": draw(st.integers(-1, 4)),
        "properties": raw,
        "v1": draw(st.booleans()),
        "sys_flag": int(compressed) | draw(st.sampled_from([0, 0, 2, 4, 8])),
        "oneway": draw(st.booleans()),
    }


@settings(
    max_examples=60,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sends=st.lists(_single_sends(), min_size=1, max_size=6))
def test_prepared_single_send_stores_and_answers_as_the_reference(
    fresh_pairs: Callable[[], AbstractContextManager[tuple[BrokerProcessor, BrokerProcessor]]],
    sends: list[tuple[tuple[Any, ...], dict[str, Any]]],
) -> None:
    """Single sends of any shape through the direct branch (plain ones as prepared records)
    and through the generic path: the same answers, the same records stored (each pulled
    back from where its answer says it went), and the brokers left alike."""
    with fresh_pairs() as pair:
        _prepared_singles_as_the_reference(*pair, sends)


def _prepared_singles_as_the_reference(
    reference: BrokerProcessor,
    direct: BrokerProcessor,
    sends: list[tuple[tuple[Any, ...], dict[str, Any]]],
) -> None:
    conn = _Conn()
    for args, kwargs in sends:
        req = _send(*args, **kwargs)
        random.seed(req.opaque)
        want = _wire(req, reference.process(req, conn))
        random.seed(req.opaque)
        assert _wire(req, direct.process_frame(req, conn)) == want, req.ext_fields
        if want is None or want[0] != ResponseCode.SUCCESS:
            continue
        topic = req.ext_fields.get("topic") or req.ext_fields["b"]  # type: ignore[union-attr]
        queue_id, offset = int(want[2]["queueId"]), int(want[2]["queueOffset"])
        pull = _pull(topic, queue_id, offset)
        pull.ext_fields["maxMsgNums"] = "1"  # type: ignore[index]
        assert _wire(pull, direct.process(pull, conn)) == _wire(pull, reference.process(pull, conn))
    _assert_same_state(reference, direct, sends)


def test_a_plain_single_send_is_stored_as_a_prepared_record(
    pair: tuple[BrokerProcessor, BrokerProcessor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the C header reader, a plain single send reaches the store's put_prepared (no
    message object), and one the broker reads (a delay) the reference path's put."""
    if speedups.load("protocol") is None:
        pytest.skip("the prepared lane starts from the C header reader")
    _, direct = pair
    store = direct.broker.store
    calls: list[str] = []
    for name in ("put", "put_prepared"):
        real = getattr(store, name)
        monkeypatch.setattr(
            store, name, lambda *a, _n=name, _r=real, **k: calls.append(_n) or _r(*a, **k)
        )
    conn = _Conn()
    uniq = _props(UNIQ_KEY="0A0B0C0D0E0F00000000000000000009", TAGS="t", KEYS="k")
    assert isinstance(direct.process_frame(_send(properties=uniq), conn), bytes)
    direct.process_frame(_send(properties=_props(DELAY="1")), conn)
    assert calls[0] == "put_prepared" and "put_prepared" not in calls[1:]
    got = direct.broker.pull_message("chk", "T", 0, 0, 8).messages[0]
    assert (got.tags, got.keys, got.properties["UNIQ_KEY"]) == ("t", "k", uniq[9:41])
    # Indexed as a put of the message is: by its key and by its unique id.
    assert [m.body for m in direct.broker.query_message("T", "k")] == [b"hello"]
    assert direct.broker.query_message_by_uniq_key("T", uniq[9:41]).body == b"hello"


class _StoredLog:
    """A plugin that notes each stored put the broker reports."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, int, list[int]]] = []

    @hookimpl
    def mqcore_messages_stored(self, topic: str, queue_id: int, results: Any) -> None:
        self.puts.append((topic, queue_id, [r.queue_offset for r in results]))


def test_a_group_wakes_each_queue_and_reports_each_put(
    group_pair: tuple[BrokerProcessor, BrokerProcessor],
) -> None:
    """After a group's one write: the parked pulls of every queue it wrote to are woken, and
    the stored hook hears of each send on its own (as after sends stored one by one)."""
    _, direct = group_pair
    broker = direct.broker
    stored = _StoredLog()
    broker.kernel.pm.register(stored, name="stored-log")
    woken: list[int] = []
    for q in (1, 2, 3):
        key = ("T", q)
        assert broker.waiters.park(key, broker.waiters.sequence(key), lambda q=q: woken.append(q))
    conn = _Conn()
    reqs = [_send(body=b"g%d" % i, queue_id=1 + i % 2) for i in range(5)]
    answers = direct.process_group([(r, conn) for r in reqs])
    assert [_wire(r, a)[0] for r, a in zip(reqs, answers, strict=True)] == [0] * 5  # type: ignore[index]
    assert sorted(woken) == [1, 2]  # queue 3 had no message: its pull stays parked
    assert stored.puts == [("T", 1, [0]), ("T", 2, [0]), ("T", 1, [1]), ("T", 2, [1]),
                           ("T", 1, [2])]  # fmt: skip


@settings(
    max_examples=40,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(sends=st.lists(_single_sends(), min_size=2, max_size=8))
def test_a_group_of_single_sends_stores_and_answers_as_the_reference(
    fresh_pairs: Callable[[], AbstractContextManager[tuple[BrokerProcessor, BrokerProcessor]]],
    acl: bool,
    sends: list[tuple[tuple[Any, ...], dict[str, Any]]],
) -> None:
    """Single sends of any shape in one group (plain ones as prepared records, the others as
    messages, stored together) and one by one through the generic path: the same answers,
    the same records stored (each pulled back from where its answer says it went), and the
    brokers left alike (a oneway send's effect shows only there)."""
    with fresh_pairs() as (reference, direct):
        if not acl:
            reference.access = direct.access = None
        _group_as_the_reference(reference, direct, sends)


def _group_as_the_reference(
    reference: BrokerProcessor,
    direct: BrokerProcessor,
    sends: list[tuple[tuple[Any, ...], dict[str, Any]]],
) -> None:
    conn = _Conn()
    reqs = [_send(*args, **kwargs) for args, kwargs in sends]
    random.seed(7)
    want = [_wire(r, reference.process(r, conn)) for r in reqs]
    random.seed(7)
    answers = direct.process_group([(r, conn) for r in reqs])
    got = [_wire(r, a) for r, a in zip(reqs, answers, strict=True)]
    for req, w, g in zip(reqs, want, got, strict=True):
        assert g == w, req.ext_fields
        if w is None or w[0] != ResponseCode.SUCCESS:
            continue
        topic = req.ext_fields.get("topic") or req.ext_fields["b"]  # type: ignore[union-attr]
        pull = _pull(topic, int(w[2]["queueId"]), int(w[2]["queueOffset"]))
        pull.ext_fields["maxMsgNums"] = "1"  # type: ignore[index]
        assert _wire(pull, direct.process(pull, conn)) == _wire(pull, reference.process(pull, conn))
    _assert_same_state(reference, direct, sends)


def test_a_group_of_plain_sends_is_stored_as_prepared_records(
    pair: tuple[BrokerProcessor, BrokerProcessor],
) -> None:
    """With the C header reader, a group's plain sends reach the store as prepared records in
    one put_many_prepared, a send the broker reads (a delay) among them in its place, and one
    that is plain but not preparable here (any queue) in the same write as its neighbours;
    each is answered and stored as the generic path does it."""
    if speedups.load("protocol") is None:
        pytest.skip("the prepared lane starts from the C header reader")
    reference, direct = pair
    counting = CountingStore(direct.broker.store)
    direct.broker.store = counting  # type: ignore[assignment]
    conn = _Conn()
    uniq = _props(UNIQ_KEY="0A0B0C0D0E0F00000000000000000007", KEYS="gk")
    reqs = [
        _send(body=b"p0", properties=uniq),
        _send(body=b"p1", queue_id=1),
        _send(body=b"any", queue_id=-1),  # a message (the queue is chosen), same write
        _send(body=b"p2", queue_id=1, v1=True),
        _send(body=b"held", properties=_props(DELAY="1")),  # served alone, in its place
        _send(body=b"p3", queue_id=2),
        _send(body=b"p4", queue_id=2, oneway=True),
    ]
    random.seed(3)
    want = [_wire(r, reference.process(r, conn)) for r in reqs]
    random.seed(3)
    answers = direct.process_group([(r, conn) for r in reqs])
    assert [_wire(r, a) for r, a in zip(reqs, answers, strict=True)] == want
    assert counting.prepared_groups == counting.groups == [4, 2]
    assert [m.body for m in direct.broker.query_message("T", "gk")] == [b"p0"]
    assert direct.broker.query_message_by_uniq_key("T", uniq[9:41]).body == b"p0"
    for q in range(4):
        a = reference.broker.pull_message("chk", "T", q, 0, 64)
        b = direct.broker.pull_message("chk", "T", q, 0, 64)
        assert [(m.body, m.queue_offset, m.properties, m.born_host) for m in a.messages] == [
            (m.body, m.queue_offset, m.properties, m.born_host) for m in b.messages
        ]


def test_a_group_without_acl_is_prepared_in_one_call(
    pair: tuple[BrokerProcessor, BrokerProcessor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without an ACL, a group's sends are read and prepared in one call (with the C
    speedups: the plain ones among them as prepared sends), and answered as one by one."""
    reference, direct = pair
    reference.access = direct.access = None
    calls: list[int] = []
    real = processor_module.prepare_sent_group

    def counted(items: Any, limit: int, kept: int) -> Any:
        calls.append(len(items))
        return real(items, limit, kept)

    monkeypatch.setattr(processor_module, "prepare_sent_group", counted)
    conn = _Conn()
    reqs = [_send(body=b"p%d" % i, queue_id=i % 4) for i in range(6)]
    reqs.insert(3, _pull())
    random.seed(3)
    want = [_wire(r, reference.process(r, conn)) for r in reqs]
    random.seed(3)
    got = direct.process_group([(r, conn) for r in reqs])
    assert [_wire(r, a) for r, a in zip(reqs, got, strict=True)] == want
    assert calls == [7]
    if speedups.load("protocol") is not None:
        assert all(isinstance(got[i], bytes) for i in (0, 1, 2, 4, 5, 6))


@pytest.mark.parametrize("topic", ["%RETRY%cg", "NewTopic"])
@pytest.mark.parametrize("oneway", [False, True])
def test_a_send_to_any_queue_of_a_topic_an_earlier_send_of_the_group_creates(
    group_pair: tuple[BrokerProcessor, BrokerProcessor], topic: str, oneway: bool
) -> None:
    """A send to any queue of a topic that a send before it in the group creates (a retry
    topic, an auto-created one) finds the topic, as one by one: it is not refused
    TOPIC_NOT_EXIST, and (oneway, so answered with nothing) it is stored all the same."""
    reference, direct = group_pair
    conn = _Conn()
    reqs = [
        _send(topic, body=b"first", oneway=True),
        _send(topic, body=b"any", queue_id=-1, oneway=oneway),
        _send(body=b"after", queue_id=1),
    ]
    random.seed(5)
    want = [_wire(r, reference.process(r, conn)) for r in reqs]
    random.seed(5)
    answers = direct.process_group([(r, conn) for r in reqs])
    assert [_wire(r, a) for r, a in zip(reqs, answers, strict=True)] == want
    store = reference.broker.store
    assert sum(store.max_offset(topic, q) for q in store.queue_ids(topic)) == 2  # both stored
    _assert_same_state(reference, direct, reqs)
