"""SIGKILL a writing process at random moments: nothing acknowledged may be lost.

A helper process (``store_worker.py write``) puts batches and prints each acknowledged
batch (queue offsets, commit-log offsets, message ids, a hash of the bodies) as one line.
The test kills it with SIGKILL at a random moment, reopens the store (recovery), and checks
that every acknowledged message is there byte for byte and found by key and by unique id
(the key index), that offsets are contiguous, and that whatever else is readable (batches
stored but not yet acknowledged) is complete and exactly what the writer wrote. Runs
accumulate on one directory, alternating flush modes. The writer gives each message a unique
id (``UNIQ_KEY``) as a producer does.

``MQCORE_CRASH_RUNS`` sets the number of kills per store variant (default 5; the
acceptance run uses 50). ``MQCORE_CRASH_SEED`` replays a sequence of kill moments.
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from typing import Any

import pytest

from mqcore import codec
from mqcore.message import PROPERTY_UNIQ_KEY
from mqcore.store import GetStatus
from mqcore.storecaps import MultiQueuePut

CRASH_RUNS = int(os.environ.get("MQCORE_CRASH_RUNS", "5"))
TOPICS = ["C1", "C2"]
QUEUES = 3


def _acked(lines: str) -> list[dict[str, Any]]:
    """Acknowledged batches in ``lines`` (only complete, newline-terminated JSON lines)."""
    out = []
    for line in lines.splitlines(keepends=True):
        if line.endswith("\n") and line.startswith("{"):
            out.append(json.loads(line))
    return out


def _kill_at_random(
    harness: Any, rnd: random.Random, run: int, many: bool = False
) -> list[dict[str, Any]]:
    """Start a writer, let it acknowledge a random number of batches, SIGKILL it (``many``:
    the writer stores several batches per ``put_many``)."""
    flush_mode = "SYNC_FLUSH" if run % 2 else "ASYNC_FLUSH"
    harness_options = harness.options
    harness.options = {**harness_options, "flush_mode": flush_mode}
    try:
        proc = harness.worker(
            "write",
            topics=TOPICS,
            queues=QUEUES,
            batches=-1,
            batch_max=8,
            seed=rnd.randrange(1 << 30),
            uniq=True,
            many=many,
        )
    finally:
        harness.options = harness_options
    acked: list[dict[str, Any]] = []
    try:
        assert proc.stdout is not None
        for _ in range(rnd.randint(0, 40)):
            line = proc.stdout.readline()
            if not line:
                break
            acked += _acked(line)
        time.sleep(rnd.uniform(0, 0.03))
        proc.send_signal(signal.SIGKILL)
        rest, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"writer died on its own:\n{stderr}"
    return acked + _acked(rest)


def _message(worker_module: Any, topic: str, queue_id: int, queue_offset: int) -> Any:
    """What the writer stores at these offsets: its message with its unique id."""
    msg = worker_module.make_message(topic, queue_id, queue_offset)
    msg.properties[PROPERTY_UNIQ_KEY] = worker_module.uniq_id(topic, queue_id, queue_offset)
    return msg


def _verify(harness: Any, worker_module: Any, acked: list[dict[str, Any]]) -> None:
    store = harness.open()
    try:
        for batch in acked:
            got = store.get(batch["t"], batch["q"], batch["qo"], max_count=batch["n"])
            assert got.status is GetStatus.FOUND, (batch, got)
            msgs = got.messages
            first = batch["qo"]
            assert [m.queue_offset for m in msgs] == list(range(first, first + batch["n"]))
            assert [m.commitlog_offset for m in msgs] == batch["co"]
            assert [m.offset_msg_id for m in msgs] == batch["ids"]
            assert worker_module.body_hash([m.body for m in msgs]) == batch["h"]
            # The key index finds every acknowledged message by key and by unique id.
            for msg in msgs:
                uniq = worker_module.uniq_id(msg.topic, msg.queue_id, msg.queue_offset)
                assert msg.msg_id == uniq
                found = store.lookup(msg.topic, uniq)
                assert [m.offset_msg_id for m in found] == [msg.offset_msg_id], (batch, uniq)
                by_key = store.lookup(msg.topic, f"k{msg.queue_offset}", max_count=64)
                assert msg.offset_msg_id in {m.offset_msg_id for m in by_key}, batch
        everything = []
        for topic in TOPICS:
            for qid in range(QUEUES):
                for msg in harness.read_queue(store, topic, qid):
                    record = bytes(msg.record)
                    assert codec.check_record(record, 0) == (codec.RECORD, len(record))
                    want = _message(worker_module, topic, qid, msg.queue_offset)
                    assert (msg.topic, msg.body, msg.tags, msg.keys, msg.properties) == (
                        want.topic,
                        want.body,
                        want.tags,
                        want.keys,
                        want.properties,
                    ), "a record the writer never wrote"
                    everything.append(msg)
        harness.assert_log_contiguous(everything)
        # The recovered store keeps going where the log ends.
        last = max((m.commitlog_offset for m in everything), default=-1)
        start = store.max_offset("C1", 0)
        (result,) = store.put("C1", 0, [_message(worker_module, "C1", 0, start)])
        assert result.queue_offset == start
        assert result.commitlog_offset > last
    finally:
        store.close()


@pytest.mark.slow
@pytest.mark.timeout(60 + 30 * CRASH_RUNS)
@pytest.mark.parametrize("writes", ["put", "put_many"])
def test_sigkill_loses_nothing_acknowledged(harness, worker_module, writes):
    """Kill a writer N times at random moments; after each, recovery keeps every ack
    (the writer's batches stored one put each, or several per put_many)."""
    if writes == "put_many":
        probe = harness.open()
        probe.close()
        if not isinstance(probe, MultiQueuePut):
            pytest.skip(f"{type(probe).__name__} is no MultiQueuePut")
    seed = int(os.environ.get("MQCORE_CRASH_SEED", random.randrange(1 << 30)))
    rnd = random.Random(seed)
    all_acked: list[dict[str, Any]] = []
    for run in range(CRASH_RUNS):
        acked = _kill_at_random(harness, rnd, run, many=writes == "put_many")
        all_acked += acked
        try:
            _verify(harness, worker_module, all_acked)
        except AssertionError as exc:
            raise AssertionError(
                f"crash run {run + 1}/{CRASH_RUNS} (MQCORE_CRASH_SEED={seed}): {exc}"
            ) from exc


def test_acked_line_parser_ignores_partial_and_log_lines():
    """Only complete JSON lines count as acknowledgements."""
    text = '{"t":"C1","q":0}\n2026-01-01 [debug] log line\n{"t":"C2"'
    assert _acked(text) == [{"t": "C1", "q": 0}]
