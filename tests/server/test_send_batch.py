"""SEND_BATCH_MESSAGE's own handler: a plain batch goes from its body straight to prepared
records; every batch is stored and answered exactly as the general path (decode the
messages, Broker.send_message) stores and answers it, errors included."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from batchwire import raw_batch

from mqcore import Broker
from mqcore.errors import InvalidArgumentError
from mqcore.protocol import headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.transaction import HALF_TOPIC
from mqcore.remoting.command import RemotingCommand
from mqcore.server.processor import BrokerProcessor
from mqcore.store import SCHEDULE_TOPIC, TIMER_TOPIC

_POS_STORE_TS = 56  # a record's store timestamp (8 bytes): the only field that may differ


class _Conn:
    remote_address = "127.0.0.1:40000"


def _plain(n: int, start: int = 0) -> bytes:
    return raw_batch(
        [
            (i % 3, b"body-%d" % i * (1 + i % 4), b"UNIQ_KEY\x01U%08d\x02" % i)
            for i in range(start, start + n)
        ]
    )


# (topic, queue id, batch body, header's sys flag): what each case sends, in order.
_CASES: list[tuple[str, int, bytes, int]] = [
    ("T", 0, _plain(5), 0),
    ("T", 1, _plain(3, 10), 1),  # compressed bodies: stored as sent, flag kept
    ("T", -1, _plain(2, 20), 0),  # any queue: the broker picks one
    (
        "T",
        2,
        raw_batch(
            [
                (0, b"x", b"KEYS\x01k1 k2\x02UNIQ_KEY\x01AB\x02TAGS\x01TagA\x02c\x013\x02"),
                (7, b"yy", b"TAGS\x01\x02KEYS\x01\x02WAIT\x01true\x02"),  # empty tag and key
                (0, b"z", b""),
            ]
        ),
        0,
    ),
    ("T", 3, raw_batch([(0, b"x", b"a\x011\x02a\x012\x02")]), 0),  # a name twice
    ("T", 3, raw_batch([(0, b"x", "é\x01ü\x02".encode())]), 0),  # non-ASCII
    ("T", 0, raw_batch([(0, b"x", b"a\x011")]), 0),  # no final separator
    ("T", 0, raw_batch([(0, b"x", b"DELAY\x012\x02")]), 0),  # delayed: the schedule topic
    ("T", 0, raw_batch([(0, b"x", b"TIMER_DELIVER_MS\x011700000000000\x02")]), 0),  # a timer
    ("T", 0, raw_batch([(0, b"x", b"TRAN_MSG\x01true\x02PGROUP\x01pg\x02")]), 0),  # a half
    ("T", 0, raw_batch([(0, b"x", b"REAL_TOPIC\x01X\x02")]), 0),  # refused property
    ("T", 0, raw_batch([(0, b"x", b"a\x01\x01b\x02")]), 0),  # a separator in a value
    ("T", 0, raw_batch([(0, b"", b"")]), 0),  # empty body
    ("T", 0, raw_batch([(0, b"x" * 1025, b"")]), 0),  # over max_message_size
    ("T", 0, _plain(2)[:-3], 0),  # truncated
    ("T", 0, b"", 0),  # no message
    ("T", 9, _plain(1), 0),  # queue out of range
    ("T", -5, _plain(1), 0),
    (SCHEDULE_TOPIC, 0, _plain(1), 0),  # forbidden
    (TIMER_TOPIC, 0, _plain(1), 0),
    ("bad topic!", 0, _plain(1), 0),
    ("X" * 200, 0, _plain(1), 0),
    ("Auto", 1, _plain(2), 0),  # auto-created
    ("%RETRY%g", 0, raw_batch([(0, b"x", b"RETRY_TOPIC\x01T\x02UNIQ_KEY\x01R1\x02")]), 0),
    ("T", 1, _plain(64, 100), 0),
]


def _request(code: int, topic: str, queue_id: int, body: bytes, sys_flag: int) -> RemotingCommand:
    header = headers.SendMessageRequestHeaderV2(
        producer_group="pg",
        topic=topic,
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=queue_id,
        sys_flag=sys_flag,
        born_timestamp=1_700_000_000_000,
        flag=0,
        properties=None,
        reconsume_times=0,
        unit_mode=False,
        batch=code != RequestCode.SEND_BATCH_MESSAGE,
    )
    return RemotingCommand.request(code, header, body)


def _answer(reply: Any) -> tuple[Any, ...]:
    return (reply.code, reply.remark, dict(reply.ext_fields or {}))


def _records(broker: Broker) -> dict[tuple[str, int], list[bytes]]:
    """Every stored record by queue, store timestamps zeroed."""
    names = {t.topic_name for t in broker.list_topics()} | {SCHEDULE_TOPIC, TIMER_TOPIC, HALF_TOPIC}
    out: dict[tuple[str, int], list[bytes]] = {}
    for topic in sorted(names):
        for queue_id in range(32 if topic != SCHEDULE_TOPIC else 18):
            offset, got = 0, []
            while True:
                r = broker.store.get_raw(topic, queue_id, offset, 256)
                if not r.records:
                    break
                for rec in r.records:
                    raw = bytearray(rec)
                    raw[_POS_STORE_TS : _POS_STORE_TS + 8] = bytes(8)
                    got.append(bytes(raw))
                offset = r.next_offset
            if got:
                out[(topic, queue_id)] = got
    return out


@pytest.fixture
def pair(tmp_path: Path, store_name: str) -> Iterator[tuple[BrokerProcessor, BrokerProcessor]]:
    """Two brokers alike: one served by the batch handler, one whose handler always takes
    the general path (what a store without put_prepared gets)."""
    options: dict[str, Any] = {"max_message_size": 1024, "broker_ip": "10.0.0.1"}
    with (
        Broker(tmp_path / "new", store=store_name, **options) as new,
        Broker(tmp_path / "old", store=store_name, **options) as old,
    ):
        for b in (new, old):
            b.create_topic("T", queue_nums=4)
        general = BrokerProcessor(old, "127.0.0.1:10911")
        general._prepared_batch = lambda req, h, sys_flag: None  # type: ignore[method-assign]
        yield BrokerProcessor(new, "127.0.0.1:10911"), general


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "code", [RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_MESSAGE_V2], ids=["batch", "v2"]
)
def test_batches_are_stored_and_answered_as_the_general_path_does(
    pair: tuple[BrokerProcessor, BrokerProcessor], code: int
) -> None:
    """Each case (plain, special, refused and malformed batches) gets the same answer from
    both, and both stores end up holding the same records byte for byte."""
    new, general = pair
    answers = []
    for i, (topic, queue_id, body, sys_flag) in enumerate(_CASES):
        got = []
        for processor in (new, general):
            random.seed(i)  # the queue a queue id of -1 picks
            req = _request(code, topic, queue_id, body, sys_flag)
            got.append(_answer(processor.process(req, _Conn())))
        assert got[0] == got[1], (i, topic, queue_id)
        answers.append(got[0][0])
    # The cases cover both outcomes: stored, and refused with the general path's errors.
    assert answers.count(ResponseCode.SUCCESS) >= 10
    assert {ResponseCode.MESSAGE_ILLEGAL, ResponseCode.NO_PERMISSION} <= set(answers)
    assert _records(new.broker) == _records(general.broker)


def test_a_plain_batch_takes_the_prepared_path(
    pair: tuple[BrokerProcessor, BrokerProcessor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain batch is stored from prepared records (the general path is never asked),
    and a lookup by its unique id finds each message, as after the general path."""
    new, _ = pair
    calls = []
    original = new.broker.send_message

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return original(*args, **kwargs)

    monkeypatch.setattr(new.broker, "send_message", counted)
    reply = new.process(_request(RequestCode.SEND_BATCH_MESSAGE, "T", 0, _plain(4), 0), _Conn())
    assert reply.code == ResponseCode.SUCCESS
    assert calls == []
    ids = reply.ext_fields["msgId"].split(",")
    assert len(ids) == 4 and reply.ext_fields["queueOffset"] == "0"
    found = new.broker.store.lookup("T", "U00000002")
    assert [m.body for m in found] == [b"body-2" * 3]
    special = raw_batch([(0, b"x", b"DELAY\x011\x02")])
    reply = new.process(_request(RequestCode.SEND_BATCH_MESSAGE, "T", 0, special, 0), _Conn())
    assert reply.code == ResponseCode.SUCCESS and len(calls) == 1


def test_a_slave_refuses_a_batch_as_before(tmp_path: Path) -> None:
    """A slave answers a plain batch with the general path's refusal (slaves run on the
    mmap store)."""
    with Broker(
        tmp_path / "s",
        store="mmap",
        broker_role="SLAVE",
        broker_id=1,
        ha_master_address="127.0.0.1:1",  # never reached: the refusal comes first
    ) as slave:
        processor = BrokerProcessor(slave, "127.0.0.1:10911")
        req = _request(RequestCode.SEND_BATCH_MESSAGE, "T", 0, _plain(2), 0)
        reply = processor.process(req, _Conn())
        assert reply.code == ResponseCode.SERVICE_NOT_AVAILABLE
        assert "is a SLAVE and takes no writes" in reply.remark


def test_a_sync_master_without_a_slave_answers_the_stored_batch(tmp_path: Path) -> None:
    """SYNC_MASTER with no slave: the batch is stored and answered SLAVE_NOT_AVAILABLE with
    its message ids, as the general path answers it (masters with slaves run on mmap)."""
    options = {"broker_role": "SYNC_MASTER", "ha_listen_port": 0, "store": "mmap"}
    with (
        Broker(tmp_path / "a", **options) as a,
        Broker(tmp_path / "b", **options) as b,
    ):
        general = BrokerProcessor(b, "127.0.0.1:10911")
        general._prepared_batch = lambda req, h, sys_flag: None  # type: ignore[method-assign]
        got = []
        for processor in (BrokerProcessor(a, "127.0.0.1:10911"), general):
            req = _request(RequestCode.SEND_BATCH_MESSAGE, "T", 0, _plain(3), 0)
            got.append(_answer(processor.process(req, _Conn())))
        assert got[0] == got[1]
        assert got[0][0] == ResponseCode.SLAVE_NOT_AVAILABLE
        assert len(got[0][2]["msgId"].split(",")) == 3


class _PlainStore:
    """A store without put_prepared: every other call goes to the wrapped one."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "put_prepared":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_batch_follows_a_store_swapped_for_one_without_put_prepared(
    pair: tuple[BrokerProcessor, BrokerProcessor], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether the store takes prepared records is asked once per store, not once ever:
    after the store changes to one without put_prepared, a plain batch takes the general
    path (no AttributeError), and the prepared path again once the store has it back."""
    new, _ = pair
    broker = new.broker
    first = new.process(_request(RequestCode.SEND_BATCH_MESSAGE, "T", 0, _plain(2), 0), _Conn())
    assert first.code == ResponseCode.SUCCESS
    inner = broker.store
    monkeypatch.setattr(broker, "store", _PlainStore(inner))
    reply = new.process(_request(RequestCode.SEND_BATCH_MESSAGE, "T", 0, _plain(2, 2), 0), _Conn())
    assert reply.code == ResponseCode.SUCCESS, reply.remark
    assert reply.ext_fields["queueOffset"] == "2"
    with pytest.raises(InvalidArgumentError, match="has no put_prepared"):
        broker.send_prepared("T", 0, [], None)
    monkeypatch.setattr(broker, "store", inner)
    third = new.process(_request(RequestCode.SEND_BATCH_MESSAGE, "T", 0, _plain(1, 4), 0), _Conn())
    assert third.code == ResponseCode.SUCCESS and third.ext_fields["queueOffset"] == "4"
