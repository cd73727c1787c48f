"""Several processes on one store directory: readers beside a writer, one writer at a time."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
from typing import Any

import pytest

from mqcore import errors

needs_lockfile = pytest.mark.skipif(
    importlib.util.find_spec("mqcore.lockfile") is None,
    reason="mqcore.lockfile (the writer lock) is not there yet",
)


def _read_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The next JSON line of a worker (its log lines go to stderr)."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        stderr = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"worker exited ({proc.returncode}) without a line:\n{stderr}")
    return dict(json.loads(line))


def _finish(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.communicate(timeout=30)


def _check_queue(harness: Any, reader: Any, worker_module: Any, topic: str, qid: int) -> int:
    """Every readable message of a queue is complete and the one the writer wrote there."""
    msgs = harness.read_queue(reader, topic, qid)
    for msg in msgs:
        want = worker_module.make_message(topic, qid, msg.queue_offset)
        assert (msg.body, msg.tags, msg.keys, msg.properties) == (
            want.body,
            want.tags,
            want.keys,
            want.properties,
        )
    return len(msgs)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_read_only_sees_a_consistent_prefix_while_another_process_writes(harness, worker_module):
    """A reader sees only complete, acknowledged-or-newer data; refresh() shows more."""
    topics = ["RW1", "RW2"]
    proc = harness.worker(
        "write", topics=topics, queues=2, batches=60, batch_max=6, sleep_ms=10, seed=7
    )
    try:
        acked = {(t, q): 0 for t in topics for q in range(2)}

        def take(n: int) -> None:
            for _ in range(n):
                line = _read_line(proc)
                acked[line["t"], line["q"]] = line["qo"] + line["n"]

        take(1)
        reader = harness.open(read_only=True)
        seen_counts = []
        for _ in range(6):
            snapshot = dict(acked)
            reader.refresh()
            seen = 0
            for (topic, qid), count in snapshot.items():
                n = _check_queue(harness, reader, worker_module, topic, qid)
                assert n >= count, f"{topic}/{qid}: acknowledged {count}, reader sees {n}"
                seen += n
            seen_counts.append(seen)
            take(5)
        take(60 - 1 - 6 * 5)
        assert proc.wait(timeout=60) == 0
        reader.refresh()
        total = sum(_check_queue(harness, reader, worker_module, t, q) for t, q in acked)
        assert total == sum(acked.values())
        assert seen_counts == sorted(seen_counts) and seen_counts[-1] > seen_counts[0]
    finally:
        _finish(proc)


@needs_lockfile
@pytest.mark.timeout(120)
def test_second_writer_process_gets_store_locked_error(harness):
    """A second writer fails naming the holder; a killed holder's lock is taken over."""
    store = harness.open()
    rival = harness.worker("try_open")
    try:
        answer = _read_line(rival)
    finally:
        _finish(rival)
    assert answer.get("error") == "StoreLockedError", answer
    assert str(os.getpid()) in answer["message"]
    store.close()

    holder = harness.worker("hold")
    try:
        ready = _read_line(holder)
        with pytest.raises(errors.StoreLockedError) as info:
            harness.open()
        assert str(ready["ready"]) in str(info.value)
        reader = harness.open(read_only=True)  # readers need no lock
        reader.close()
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    finally:
        _finish(holder)
    taken = harness.open()
    assert list(taken.topics()) == []
