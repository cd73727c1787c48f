"""What the message-field checks cost on the put path (separators, system property names).

Run: ``python bench/validation.py --store mmap --messages 20000 --runs 5``

Two measures, each with the checks as shipped and with them replaced by no-ops:

- per call, best of many repeats: building a ``Message`` (tags and keys, with and without
  three user properties) and one ``check_sent_message``, which the producer and the broker
  each run once per message;
- per message through ``Producer.send`` and ``Producer.send_batch`` of 32 on an embedded
  broker, in process CPU time (less sensitive to a busy machine than wall time), medians of
  ``--runs`` alternating runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import timeit
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mqcore.broker.broker as broker_mod
import mqcore.client.producer as producer_mod
import mqcore.message as message_mod
from mqcore import Broker, Message, Producer
from mqcore.validation import check_sent_message

PROPS = {"a": "1", "colour": "red", "trace": "x" * 20}
_REAL = (
    producer_mod.check_sent_message,
    broker_mod.check_sent_message,
    message_mod.check_text,
    message_mod.check_user_properties,
)


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


@contextmanager
def checks(on: bool) -> Iterator[None]:
    """The checks as shipped (``on``) or replaced by no-ops, restored on exit."""
    if not on:
        producer_mod.check_sent_message = broker_mod.check_sent_message = _noop
        message_mod.check_text = message_mod.check_user_properties = _noop
    try:
        yield
    finally:
        (
            producer_mod.check_sent_message,
            broker_mod.check_sent_message,
            message_mod.check_text,
            message_mod.check_user_properties,
        ) = _REAL


def _best_us(func: Callable[[], object], number: int = 20000, repeat: int = 15) -> float:
    return min(timeit.repeat(func, number=number, repeat=repeat)) / number * 1e6


def micro() -> list[str]:
    """Per-call costs, checks off and on."""
    body = os.urandom(1024)
    lines = []
    for label, props in (("tags+keys", None), ("tags+keys+3 properties", PROPS)):
        built = {}
        for on in (False, True):
            with checks(on):
                built[on] = _best_us(
                    lambda p=props: Message(topic="T", body=body, tags="A", keys="k1", properties=p)
                )
        msg = Message(topic="T", body=body, tags="A", keys="k1", properties=props)
        sent = _best_us(lambda m=msg: check_sent_message(m, "T"))
        lines.append(
            f"{label}: Message() {built[False]:.2f} -> {built[True]:.2f} us, "
            f"check_sent_message {sent:.2f} us"
        )
    return lines


def _sends(store: str, n: int, props: dict[str, str] | None) -> tuple[float, float]:
    """CPU microseconds per message of ``send`` and of ``send_batch`` (32)."""
    tmp = tempfile.mkdtemp(prefix="mqcore-bench-validation-")
    body = os.urandom(1024)
    try:
        with Broker(Path(tmp), store=store) as broker:
            broker.create_topic("S", queue_nums=8)
            broker.create_topic("B", queue_nums=8)
            with Producer("bench", broker=broker) as producer:
                msgs = [Message(topic="S", body=body, tags="A", keys=f"k{i}", properties=props)
                        for i in range(n)]  # fmt: skip
                t = time.process_time()
                for m in msgs:
                    producer.send(m)
                send = (time.process_time() - t) / n * 1e6
                msgs = [Message(topic="B", body=body, tags="A", keys=f"k{i}", properties=props)
                        for i in range(n)]  # fmt: skip
                t = time.process_time()
                for i in range(0, n, 32):
                    producer.send_batch(msgs[i : i + 32])
                batch = (time.process_time() - t) / n * 1e6
        return send, batch
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    """Print both measures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="mmap")
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for line in micro():
        print(line)
    for label, props in (("tags+keys", None), ("tags+keys+3 properties", PROPS)):
        runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        for _ in range(args.runs):
            for on in (False, True):
                with checks(on):
                    runs[on].append(_sends(args.store, args.messages, props))
        for on in (False, True):
            send = statistics.median(r[0] for r in runs[on])
            batch = statistics.median(r[1] for r in runs[on])
            print(
                f"{args.store} {label} checks {'on ' if on else 'off'}: send {send:.1f} us/msg, "
                f"send_batch(32) {batch:.1f} us/msg (CPU)"
            )


if __name__ == "__main__":
    main()
