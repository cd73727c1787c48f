"""Producer -> broker -> pull consumer, end to end on every store backend."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mqcore import Broker, Message, MessageQueue, Producer, PullConsumer, PullStatus, SendStatus

N = 100_000
QUEUES = 8


def _body(i: int) -> bytes:
    # Distinct, binary and of varying length, so a mix-up or truncation cannot pass.
    return hashlib.sha256(b"%d" % i).digest() * (1 + i % 5) + bytes([i % 256])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_100k_messages_each_once_in_queue_order(tmp_path: Path, store_name: str) -> None:
    # Retention by disk use (75 % by default) would delete this test's messages on a busy
    # shared disk; it is tested on its own, not here.
    options = {"disk_max_used_space_ratio": 99}
    with Broker(tmp_path, store=store_name, store_options=options) as broker:
        broker.create_topic("E2E", queue_nums=QUEUES)
        sent: dict[MessageQueue, list[int]] = {}
        ids: dict[int, str] = {}  # the producer's unique ids
        offset_ids: dict[int, str | None] = {}  # where the broker stored each message
        with Producer("pg", broker=broker) as producer:
            # Single sends for a share of the messages, batches for the rest (same contract).
            for i in range(2_000):
                r = producer.send(
                    Message(topic="E2E", body=_body(i), tags=f"T{i % 3}", keys=f"key-{i}",
                            properties={"seq": str(i), "ü": "ö"})
                )  # fmt: skip
                assert r.send_status is SendStatus.SEND_OK
                sent.setdefault(r.message_queue, []).append(i)
                ids[i] = r.msg_id
                offset_ids[i] = r.offset_msg_id
            for start in range(2_000, N, 32):
                batch = range(start, min(start + 32, N))
                r = producer.send_batch(
                    [
                        Message(topic="E2E", body=_body(i), tags=f"T{i % 3}", keys=f"key-{i}",
                                properties={"seq": str(i), "ü": "ö"})
                        for i in batch
                    ]
                )  # fmt: skip
                sent.setdefault(r.message_queue, []).extend(batch)
        assert len(sent) == QUEUES  # round robin reached every queue

        with PullConsumer("cg", broker=broker) as consumer:
            mqs = consumer.fetch_subscribe_message_queues("E2E")
            assert len(mqs) == QUEUES
            seen = 0
            for mq in sorted(mqs):
                offset, got = 0, []
                while True:
                    res = consumer.pull(mq, "*", offset, 32)
                    if res.pull_status is PullStatus.NO_NEW_MSG:
                        break
                    assert res.pull_status is PullStatus.FOUND
                    got.extend(res.msg_found_list)
                    offset = res.next_begin_offset
                expected = sent.get(mq, [])
                assert [int(m.properties["seq"]) for m in got] == expected
                assert [m.queue_offset for m in got] == list(range(len(expected)))
                for m, i in zip(got, expected, strict=True):
                    assert m.body == _body(i)
                    assert m.tags == f"T{i % 3}" and m.keys == f"key-{i}"
                    props = m.properties
                    uniq = props.pop("UNIQ_KEY")  # set by the producer
                    assert props == {"seq": str(i), "ü": "ö"}
                    assert m.msg_id == uniq and len(uniq) == 32
                    assert m.offset_msg_id != uniq
                    if i in ids:
                        assert (ids[i], offset_ids[i]) == (m.msg_id, m.offset_msg_id)
                seen += len(got)
                consumer.update_consume_offset(mq, offset)
            assert seen == N
            # Lookup by key and by message id.
            for i in (0, 1_999, 2_000, 54_321, N - 1):
                found = consumer.query_message("E2E", f"key-{i}")
                assert [m.body for m in found] == [_body(i)]
            for i in (0, 777, 1_999):
                offset_id = offset_ids[i]
                assert offset_id is not None
                assert consumer.view_message(offset_id).body == _body(i)
                assert consumer.view_message(ids[i], "E2E").body == _body(i)
