"""The store contract (mqcore.store.Store) on every registered store and variant."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mqcore import Message, codec, errors
from mqcore.message import system_message
from mqcore.store import SCHEDULE_TOPIC, TIMER_TOPIC, GetStatus
from mqcore.storecaps import UnitReader

STORE_HOST = "10.1.2.3:10911"
BORN_HOST = "192.168.7.9:52001"
BORN_TS = 1_700_000_000_123


def _sample_messages() -> list[Message]:
    return [
        Message(topic="RT", body=b"hello", tags="TagA", keys="k1", properties={"a": "1"}),
        Message(topic="RT", body=b""),
        Message(topic="RT", body=bytes(range(256)) * 3, tags="B", keys="k2 k3"),
        Message(
            topic="RT",
            body="d\u00e9j\u00e0 vu \u2713 \U0001f680".encode(),
            tags="t\u00e4g",
            keys="cl\u00e9 \u952e",
            properties={"\u00e9t\u00e9": "\u2603 snow", "empty": "", "sp ace": "a b"},
            flag=7,
        ),
        Message(topic="RT", body=b"\x00" * 1000, properties={"x": "y" * 200}),
    ]


def _assert_same(msg: Any, sent: Message, queue_id: int) -> None:
    assert msg.topic == sent.topic
    assert msg.body == sent.body
    assert msg.tags == sent.tags
    assert msg.keys == sent.keys
    assert msg.properties == sent.properties
    assert msg.flag == sent.flag
    assert msg.queue_id == queue_id


def test_put_get_round_trip_byte_for_byte(harness, reopen_mode):
    """Everything put comes back byte for byte, as the codec would encode it."""
    store = harness.open(store_host=STORE_HOST)
    sent = _sample_messages()
    results = store.put(
        "RT", 3, sent, born_timestamp=BORN_TS, born_host=BORN_HOST, reconsume_times=2
    )
    store = harness.readback(store)
    got = store.get("RT", 3, 0, max_count=32)
    raw = store.get_raw("RT", 3, 0, max_count=32)
    assert got.status is GetStatus.FOUND and raw.status is GetStatus.FOUND
    assert len(got.messages) == len(raw.records) == len(sent)
    for msg, record, m, r in zip(got.messages, raw.records, sent, results, strict=True):
        _assert_same(msg, m, 3)
        assert msg.queue_offset == r.queue_offset
        assert msg.commitlog_offset == r.commitlog_offset
        assert msg.store_timestamp == r.store_timestamp
        assert msg.store_size == r.size == len(record)
        assert msg.born_timestamp == BORN_TS
        assert msg.born_host == BORN_HOST
        assert msg.store_host == STORE_HOST
        assert msg.reconsume_times == 2
        assert msg.msg_id == r.msg_id
        expected = codec.pack(
            codec.prepare([m], BORN_TS, topic="RT", reconsume_times=2),
            queue_id=3,
            queue_offset=r.queue_offset,
            commitlog_offset=r.commitlog_offset,
            store_timestamp=r.store_timestamp,
            store_host=codec.host_bytes(STORE_HOST),
            born_host=codec.host_bytes(BORN_HOST),
        )
        assert bytes(record) == bytes(msg.record) == expected
        assert codec.check_record(bytes(record), 0) == (codec.RECORD, len(expected))


def test_put_results(harness):
    """PutResult: contiguous queue offsets, increasing log offsets, ids that decode."""
    store = harness.open(store_host=STORE_HOST)
    before = time.time() * 1000 - 1
    results = []
    for n in (1, 4, 2, 7):
        batch = [Message(topic="PR", body=b"x" * (10 * i), tags="A") for i in range(n)]
        results += store.put("PR", 0, batch)
    after = time.time() * 1000 + 1
    assert [r.queue_offset for r in results] == list(range(14))
    offsets = [r.commitlog_offset for r in results]
    assert offsets == sorted(set(offsets))
    assert all(before <= r.store_timestamp <= after for r in results)
    stored = harness.read_queue(store, "PR", 0)
    harness.assert_log_contiguous(stored)
    for r, msg in zip(results, stored, strict=True):
        assert r.size == msg.store_size
        assert codec.decode_message_id(r.msg_id) == (STORE_HOST, r.commitlog_offset)
        at = store.message_at(r.commitlog_offset)
        assert at is not None
        assert bytes(at.record) == bytes(msg.record)
    end = offsets[-1] + results[-1].size
    assert store.message_at(end + 4096 * 1024) is None


def test_get_status_rules(harness, reopen_mode):
    """Every reachable GetStatus with RocketMQ's next offsets."""
    store = harness.open()
    empty = store.get("GS", 0, 0)
    assert (empty.status, empty.next_offset, empty.min_offset, empty.max_offset) == (
        GetStatus.NO_MESSAGE_IN_QUEUE,
        0,
        0,
        0,
    )
    assert store.get("GS", 0, 7).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.get("GS", 0, 7).next_offset == 0
    store.put("GS", 0, [Message(topic="GS", body=b"%d" % i) for i in range(5)])
    store = harness.readback(store)

    def check(offset: int, status: GetStatus, next_offset: int, count: int = 0, **kw: Any):
        for result in (store.get("GS", 0, offset, **kw), store.get_raw("GS", 0, offset, **kw)):
            assert result.status is status, (offset, result)
            assert result.next_offset == next_offset, (offset, result)
            assert (result.min_offset, result.max_offset) == (0, 5)
            items = getattr(result, "messages", None) or getattr(result, "records", [])
            assert len(items) == count, (offset, result)

    check(0, GetStatus.FOUND, 5, 5)
    check(2, GetStatus.FOUND, 4, 2, max_count=2)
    check(4, GetStatus.FOUND, 5, 1)
    check(5, GetStatus.NO_NEW_MSG, 5)
    check(6, GetStatus.OFFSET_OVERFLOW_BADLY, 0)  # min is 0: start over from it
    check(1000, GetStatus.OFFSET_OVERFLOW_BADLY, 0)
    check(-1, GetStatus.OFFSET_TOO_SMALL, 0)
    assert [m.body for m in store.get("GS", 0, 1, max_count=3).messages] == [b"1", b"2", b"3"]
    assert store.get("GS", 1, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert store.get("GX", 0, 0).status is GetStatus.NO_MESSAGE_IN_QUEUE
    assert (store.min_offset("GS", 0), store.max_offset("GS", 0)) == (0, 5)
    assert (store.min_offset("GS", 1), store.max_offset("GS", 1)) == (0, 0)


def test_max_count_and_max_bytes(harness):
    """max_count caps the count; max_bytes caps the size, but the first message always comes."""
    store = harness.open()
    results = store.put("MB", 0, [Message(topic="MB", body=bytes([i]) * 500) for i in range(20)])
    size = results[0].size
    assert {r.size for r in results} == {size}
    five = store.get("MB", 0, 0, max_count=5)
    assert [m.queue_offset for m in five.messages] == [0, 1, 2, 3, 4]
    assert five.next_offset == 5
    some = store.get("MB", 0, 5, max_count=100)
    assert 1 <= len(some.messages) <= 15
    assert some.next_offset == 5 + len(some.messages)
    for limit, want in ((size * 2 + size // 2, 2), (size * 3, 3), (1, 1), (size - 1, 1)):
        for result in (
            store.get("MB", 0, 0, max_bytes=limit),
            store.get_raw("MB", 0, 0, max_bytes=limit),
        ):
            items = getattr(result, "messages", None) or getattr(result, "records", [])
            assert len(items) == want, (limit, result)
            assert result.next_offset == want
    raw = store.get_raw("MB", 0, 0, max_bytes=size * 3)
    assert sum(len(r) for r in raw.records) <= size * 3
    bodies = []
    offset = 0
    while offset < 20:
        result = store.get("MB", 0, offset, max_count=3)
        assert 1 <= len(result.messages) <= 3
        bodies += [m.body for m in result.messages]
        offset = result.next_offset
    assert bodies == [bytes([i]) * 500 for i in range(20)]


class _TagFilter:
    """A hand-made MessageFilter: passes one tag, looks at nothing else."""

    expression_type = "TEST"
    uses_properties = False

    def __init__(self, tag: str) -> None:
        self.expression = tag
        self.code = codec.tags_hash_code(tag)

    def matches(self, message: Any) -> bool:
        return message.tags == self.expression

    def matches_tags_code(self, tags_code: int) -> bool:
        return tags_code == self.code

    def matches_properties(self, properties: Any) -> bool:
        return True


class _PropertyFilter:
    """A hand-made MessageFilter on a property; records what the store showed it."""

    expression_type = "TEST"
    expression = "color = red"
    uses_properties = True

    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []

    def matches(self, message: Any) -> bool:
        return message.properties.get("color") == "red"

    def matches_tags_code(self, tags_code: int) -> bool:
        return True

    def matches_properties(self, properties: Any) -> bool:
        self.seen.append(dict(properties))
        return properties.get("color") == "red"


def test_filter_statuses_and_next_offsets(harness, reopen_mode):
    """Filtered gets skip units but count them in next_offset; none matching -> NO_MATCHED_MSG."""
    store = harness.open()
    tags = ["keep", "drop", "keep", "drop", "keep", "drop", "drop"]
    store.put("FS", 0, [Message(topic="FS", body=b"%d" % i, tags=t) for i, t in enumerate(tags)])
    store = harness.readback(store)
    keep = _TagFilter("keep")
    two = store.get("FS", 0, 0, max_count=2, message_filter=keep)
    assert two.status is GetStatus.FOUND
    assert [m.queue_offset for m in two.messages] == [0, 2]
    assert two.next_offset == 3
    rest = store.get("FS", 0, 3, message_filter=keep)
    assert [m.queue_offset for m in rest.messages] == [4]
    assert rest.next_offset == 7
    none = store.get("FS", 0, 5, message_filter=keep)
    assert (none.status, none.messages, none.next_offset) == (GetStatus.NO_MATCHED_MSG, [], 7)
    raw = store.get_raw("FS", 0, 0, max_count=2, message_filter=keep)
    assert raw.next_offset == 3
    assert [codec.decode(r).queue_offset for r in raw.records] == [0, 2]
    assert store.get("FS", 0, 0, message_filter=_TagFilter("other")).status is (
        GetStatus.NO_MATCHED_MSG
    )


def test_property_filter_sees_stored_properties(harness):
    """The second filter stage gets every stored property, TAGS included."""
    store = harness.open()
    colors = ["red", "blue", "red", None]
    msgs = [
        Message(topic="PF", body=b"b", tags=f"T{i}", properties={"color": c} if c else {})
        for i, c in enumerate(colors)
    ]
    store.put("PF", 0, msgs)
    f = _PropertyFilter()
    result = store.get("PF", 0, 0, message_filter=f)
    assert [m.queue_offset for m in result.messages] == [0, 2]
    assert result.next_offset == 4
    assert {"TAGS": "T0", "color": "red"}.items() <= f.seen[0].items()


def test_schedule_topic_units_hold_the_deliver_time(harness, reopen_mode, tags_codes):
    """In SCHEDULE_TOPIC_XXXX a delayed message's consume-queue tags code is its store
    timestamp plus its level's delay (RocketMQ's computeDeliverTimestamp); a level past the
    table counts as the last; other topics keep the tags hash code."""
    store = harness.open()
    held = [
        Message(topic=SCHEDULE_TOPIC, body=b"a", tags="TagA", delay_level=3),  # 10 s
        Message(topic=SCHEDULE_TOPIC, body=b"b", tags="TagA", delay_level=3),
    ]
    got = store.put(SCHEDULE_TOPIC, 2, held)
    late = store.put(SCHEDULE_TOPIC, 17, [Message(topic=SCHEDULE_TOPIC, body=b"c", delay_level=40)])
    plain = store.put("Plain", 0, [Message(topic="Plain", body=b"p", tags="TagA", delay_level=3)])
    store = harness.readback(store)
    seen = tags_codes
    assert [m.body for m in store.get(SCHEDULE_TOPIC, 2, 0, message_filter=seen).messages] == [
        b"a",
        b"b",
    ]
    assert seen.codes == [r.store_timestamp + 10_000 for r in got]
    seen.codes.clear()
    store.get(SCHEDULE_TOPIC, 17, 0, message_filter=seen)
    assert seen.codes == [late[0].store_timestamp + 2 * 3600 * 1000]
    seen.codes.clear()
    store.get("Plain", 0, 0, message_filter=seen)
    assert seen.codes == [codec.tags_hash_code("TagA")]
    assert plain[0].store_timestamp > 0


def _held_timers(deliver: list[str]) -> list[Message]:
    return [
        system_message(
            topic=TIMER_TOPIC,
            body=b"t%d" % i,
            tags="TagA",
            properties={"TIMER_OUT_MS": d, "REAL_TOPIC": "T", "REAL_QID": "0"},
        )
        for i, d in enumerate(deliver)
    ]


def test_timer_topic_units_hold_the_deliver_time(harness, reopen_mode, tags_codes):
    """In rmq_sys_wheel_timer a held timer's consume-queue tags code is its deliver time
    (TIMER_OUT_MS), so the timer scheduler reads units, not records; a record without a
    usable deliver time keeps its tag's hash code."""
    store = harness.open()
    store.put(TIMER_TOPIC, 0, _held_timers(["1800000000123", "1800000000007", "x1"]))
    store = harness.readback(store)
    assert len(store.get(TIMER_TOPIC, 0, 0, message_filter=tags_codes).messages) == 3
    assert tags_codes.codes == [1800000000123, 1800000000007, codec.tags_hash_code("TagA")]


def test_get_units_reads_the_consume_queue_alone(harness, reopen_mode):
    """``get_units``: the units of the records ``get_raw`` returns (commit-log offset, size,
    tags code), across batches, and get's status rules outside the queue."""
    from mqcore.record.unit import UNIT

    store = harness.open()
    if not isinstance(store, UnitReader):
        pytest.skip(f"{type(store).__name__} is no UnitReader (mqcore.storecaps)")
    store.put("U", 0, [Message(topic="U", body=b"a" * i, tags="TagA") for i in range(1, 4)])
    store.put("U", 0, [Message(topic="U", body=b"b" * i) for i in range(1, 6)])
    store.put("U", 1, [Message(topic="U", body=b"other")])
    store = harness.readback(store)
    records = [codec.decode(r) for r in store.get_raw("U", 0, 0, max_count=100).records]
    want = [(m.commitlog_offset, m.store_size, codec.tags_hash_code(m.tags)) for m in records]
    got = store.get_units("U", 0, 0, 100)
    assert (got.status, got.next_offset, got.min_offset, got.max_offset) == (
        GetStatus.FOUND, 8, 0, 8,
    )  # fmt: skip
    assert list(UNIT.iter_unpack(got.units)) == want
    part = store.get_units("U", 0, 2, 4)  # from inside the first batch into the second
    assert (list(UNIT.iter_unpack(part.units)), part.next_offset) == (want[2:6], 6)
    assert store.get_units("U", 0, 8, 5).status is GetStatus.NO_NEW_MSG
    assert store.get_units("U", 0, 9, 5).status is store.get("U", 0, 9).status
    assert store.get_units("none", 0, 0, 5).status is GetStatus.NO_MESSAGE_IN_QUEUE
    with pytest.raises(errors.InvalidArgumentError):
        store.get_units("U", 0, 0, 0)


def test_lookup_by_key(harness, reopen_mode):
    """Several keys per message, keys shared by messages, the same key in another topic."""
    store = harness.open()
    store.put(
        "K",
        0,
        [
            Message(topic="K", body=b"m0", keys="a b"),
            Message(topic="K", body=b"m1", keys="b c"),
        ],
    )
    store.put("K2", 0, [Message(topic="K2", body=b"other", keys="a")])
    store.put("K", 1, [Message(topic="K", body=b"m2", keys="c"), Message(topic="K", body=b"m3")])
    store.put("K", 0, [Message(topic="K", body=b"m4", keys="a")])
    for i in range(40):
        store.put("K", i % 2, [Message(topic="K", body=b"s%d" % i, keys=f"shared x{i}")])
    store = harness.readback(store)

    def bodies(topic: str, key: str, max_count: int = 100) -> list[bytes]:
        return [m.body for m in store.lookup(topic, key, max_count)]

    assert bodies("K", "a") == [b"m0", b"m4"]
    assert bodies("K", "b") == [b"m0", b"m1"]
    assert bodies("K", "c") == [b"m1", b"m2"]
    assert bodies("K2", "a") == [b"other"]
    assert bodies("K", "nope") == []
    assert bodies("K3", "a") == []
    assert bodies("K", "shared") == [b"s%d" % i for i in range(40)]
    assert bodies("K", "x17") == [b"s17"]
    one = bodies("K", "a", max_count=1)
    assert len(one) == 1 and one[0] in (b"m0", b"m4")
    for msg in store.lookup("K", "b"):
        assert "b" in msg.key_list and msg.topic == "K"


def test_offset_for_timestamp(harness, reopen_mode):
    """The first offset stored at or after a time; the max offset when none is."""
    store = harness.open()
    assert store.offset_for_timestamp("TS", 0, 0) == 0
    first = store.put("TS", 0, [Message(topic="TS", body=b"a%d" % i) for i in range(3)])
    time.sleep(0.02)
    second = store.put("TS", 0, [Message(topic="TS", body=b"b%d" % i) for i in range(3)])
    store = harness.readback(store)
    last_a = max(r.store_timestamp for r in first)
    first_b = min(r.store_timestamp for r in second)
    assert last_a < first_b
    assert store.offset_for_timestamp("TS", 0, 0) == 0
    assert store.offset_for_timestamp("TS", 0, first[0].store_timestamp) == 0
    assert store.offset_for_timestamp("TS", 0, last_a + 1) == 3
    assert store.offset_for_timestamp("TS", 0, first_b) == 3
    assert store.offset_for_timestamp("TS", 0, second[-1].store_timestamp + 60_000) == 6


def test_topics_and_queue_ids(harness, reopen_mode):
    """topics() and queue_ids() list what holds messages."""
    store = harness.open()
    assert list(store.topics()) == []
    assert list(store.queue_ids("T1")) == []
    for topic, qid in (("T1", 0), ("T1", 3), ("T2", 1), ("T1", 0), ("%RETRY%g", 0)):
        store.put(topic, qid, [Message(topic=topic, body=b"x")])
    store = harness.readback(store)
    assert sorted(store.topics()) == ["%RETRY%g", "T1", "T2"]
    assert sorted(store.queue_ids("T1")) == [0, 3]
    assert sorted(store.queue_ids("T2")) == [1]
    assert list(store.queue_ids("T3")) == []


def test_many_topics_and_queues(harness, reopen_mode, worker_module):
    """Interleaved puts to 12 topics x 4 queues land each in its own queue, in order."""
    store = harness.open()
    topics = [f"topic-{i}" for i in range(12)]
    for round_ in range(3):
        for qid in range(4):
            for topic in topics:
                msg = worker_module.make_message(topic, qid, round_)
                (result,) = store.put(topic, qid, [msg])
                assert result.queue_offset == round_
    store = harness.readback(store)
    assert sorted(store.topics()) == sorted(topics)
    everything = []
    for topic in topics:
        assert sorted(store.queue_ids(topic)) == [0, 1, 2, 3]
        for qid in range(4):
            msgs = harness.read_queue(store, topic, qid)
            assert len(msgs) == 3
            for msg in msgs:
                _assert_same(msg, worker_module.make_message(topic, qid, msg.queue_offset), qid)
            everything += msgs
    harness.assert_log_contiguous(everything)


def test_batches_span_segment_rolls(harness, worker_module):
    """Many batches over tiny segments: nothing lost at the rolls, offsets still contiguous."""
    store = harness.open()
    for i in range(60):
        qid = i % 3
        start = store.max_offset("SR", qid)
        store.put("SR", qid, [worker_module.make_message("SR", qid, start + j) for j in range(3)])
    for round_ in ("live", "reopened"):
        reader = store if round_ == "live" else harness.reopen(store)
        everything = []
        for qid in range(3):
            msgs = harness.read_queue(reader, "SR", qid)
            assert len(msgs) == 60
            for msg in msgs:
                _assert_same(msg, worker_module.make_message("SR", qid, msg.queue_offset), qid)
            everything += msgs
        harness.assert_log_contiguous(everything)
        if harness.segment_size:
            # Records fill the segments they span: at least this many were used.
            total = sum(m.store_size for m in everything)
            segments = {m.commitlog_offset // harness.segment_size for m in everything}
            assert len(segments) >= -(-total // harness.segment_size)


def test_reopen_preserves_everything_and_continues(harness, worker_module):
    """After close and reopen: same queues, messages and keys; new puts continue the offsets."""
    store = harness.open()
    results = []
    for i in range(10):
        qid = i % 2
        start = store.max_offset("RO", qid)
        msgs = [worker_module.make_message("RO", qid, start + j) for j in range(2)]
        results += store.put("RO", qid, msgs)

    def records(reader: Any) -> dict[int, list[bytes]]:
        return {q: [bytes(m.record) for m in harness.read_queue(reader, "RO", q)] for q in (0, 1)}

    before = records(store)
    store = harness.reopen(store)
    assert sorted(store.topics()) == ["RO"]
    assert sorted(store.queue_ids("RO")) == [0, 1]
    assert records(store) == before
    assert [m.body for m in store.lookup("RO", "k3")] == [
        worker_module.make_message("RO", q, 3).body for q in (0, 1)
    ]
    last = max(r.commitlog_offset for r in results)
    (more,) = store.put("RO", 1, [Message(topic="RO", body=b"more")])
    assert more.queue_offset == 10
    assert more.commitlog_offset > last
    store = harness.reopen(store)
    assert store.max_offset("RO", 1) == 11
    assert store.message_at(more.commitlog_offset).body == b"more"


def test_unknown_option_is_rejected(harness):
    """An unknown option raises InvalidArgumentError naming it and the valid ones."""
    with pytest.raises(errors.InvalidArgumentError) as info:
        harness.open(no_such_option=1)
    assert "no_such_option" in str(info.value)
    assert "flush_mode" in str(info.value)


@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_flush_modes_store_and_flush(harness, mode):
    """Both flush modes store, flush and survive a reopen."""
    store = harness.open(flush_mode=mode)
    store.put("FM", 0, [Message(topic="FM", body=b"%d" % i) for i in range(3)])
    store.flush()
    store = harness.reopen(store)
    assert [m.body for m in harness.read_queue(store, "FM", 0)] == [b"0", b"1", b"2"]


def test_closed_store_refuses_work(harness):
    """A closed store raises StoreClosedError; closing twice is harmless."""
    store = harness.open()
    store.put("CL", 0, [Message(topic="CL", body=b"x")])
    store.close()
    store.close()
    with pytest.raises(errors.StoreClosedError):
        store.get("CL", 0, 0)
    with pytest.raises(errors.StoreClosedError):
        store.put("CL", 0, [Message(topic="CL", body=b"y")])


def test_context_manager_closes(harness):
    """``with`` closes the store: the directory can be opened for writing again."""
    with harness.open() as store:
        store.put("CM", 0, [Message(topic="CM", body=b"x")])
    with pytest.raises(errors.StoreClosedError):
        store.max_offset("CM", 0)
    assert harness.open().max_offset("CM", 0) == 1


def test_read_only_store_reads_and_refuses_puts(harness):
    """read_only=True reads what was written and refuses to write."""
    store = harness.open()
    store.put("RD", 0, [Message(topic="RD", body=b"x", keys="kk")])
    store.close()
    reader = harness.open(read_only=True)
    assert [m.body for m in harness.read_queue(reader, "RD", 0)] == [b"x"]
    assert [m.body for m in reader.lookup("RD", "kk")] == [b"x"]
    with pytest.raises(errors.MQError):
        reader.put("RD", 0, [Message(topic="RD", body=b"y")])
    reader.refresh()
    assert reader.max_offset("RD", 0) == 1
