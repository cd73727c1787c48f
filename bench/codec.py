"""Encode and decode rates of the commit-log record codec, without any store around it.

    python bench/codec.py                   # 1 KiB bodies, 200,000 messages
    python bench/codec.py --size 100 --messages 500000 --json

Encode is :func:`mqcore.codec.prepare` + :func:`mqcore.codec.pack`, per batch of 1 and of
32 messages, for plain messages (body only, as ``mqcore bench`` sends) and tagged ones
(tag, key and one user property; decoding uses these). Decode builds a
:class:`mqcore.message.MessageExt` over each record of one packed buffer and reads (a) the
header only, (b) the body, (c) body and properties.
The best of ``--runs`` is kept: the codec does no I/O, so the fastest run is the least
disturbed one.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable

from mqcore import batch
from mqcore.codec import host_bytes, pack, prepare
from mqcore.message import Message, MessageExt

HOST = host_bytes("127.0.0.1:10911")


def messages(size: int, count: int = 1024, plain: bool = False) -> list[Message]:
    """Random bodies; tagged and keyed with one user property unless ``plain``."""
    rng = random.Random(5)
    if plain:  # what `mqcore bench` stores
        return [Message(topic="BenchTopic", body=rng.randbytes(size)) for _ in range(count)]
    return [
        Message(
            topic="BenchTopic",
            body=rng.randbytes(size),
            tags="TagA",
            keys=f"key-{i}",
            properties={"source": "bench"},
        )
        for i in range(count)
    ]


def encode_rate(pool: list[Message], n: int, batch: int) -> float:
    """Messages per second through prepare + pack in batches of ``batch``."""
    batches = [pool[i : i + batch] for i in range(0, len(pool) - batch + 1, batch)]
    rounds = max(1, n // batch)
    t0 = time.perf_counter()
    offset = 0
    for r in range(rounds):
        chunk = batches[r % len(batches)]
        prepared = prepare(chunk, 1_700_000_000_000)
        data = pack(
            prepared,
            queue_id=0,
            queue_offset=r * batch,
            commitlog_offset=offset,
            store_timestamp=1_700_000_000_001,
            store_host=HOST,
        )
        offset += len(data)
    return rounds * batch / (time.perf_counter() - t0)


def packed_records(pool: list[Message]) -> tuple[bytes, list[int]]:
    """All of ``pool`` packed in one buffer, and the position of each record."""
    data = pack(
        prepare(pool, 1_700_000_000_000),
        queue_id=0,
        queue_offset=0,
        commitlog_offset=0,
        store_timestamp=1_700_000_000_001,
        store_host=HOST,
    )
    positions, pos = [], 0
    while pos < len(data):
        positions.append(pos)
        pos += int.from_bytes(data[pos : pos + 4], "big")
    return data, positions


def decode_rate(pool: list[Message], n: int, read: Callable[[MessageExt], object]) -> float:
    """Messages per second: build a MessageExt over each record and ``read`` it."""
    data, positions = packed_records(pool)
    view = memoryview(data)
    rounds = max(1, n // len(positions))
    t0 = time.perf_counter()
    for _ in range(rounds):
        for pos in positions:
            read(MessageExt(view, pos))
    return rounds * len(positions) / (time.perf_counter() - t0)


READERS: dict[str, Callable[[MessageExt], object]] = {
    "decode header only": lambda m: m.queue_offset,
    "decode + body": lambda m: m.body,
    "decode + body + properties": lambda m: (m.body, m.tags, m.keys, m.properties),
}


def main(argv: list[str] | None = None) -> int:
    """Print encode and decode rates (or one JSON object with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    pool = messages(args.size)
    plain = messages(args.size, plain=True)
    cases: dict[str, Callable[[], float]] = {
        "encode plain, batch 1": lambda: encode_rate(plain, args.messages, 1),
        "encode plain, batch 32": lambda: encode_rate(plain, args.messages, 32),
        "encode tagged, batch 1": lambda: encode_rate(pool, args.messages, 1),
        "encode tagged, batch 32": lambda: encode_rate(pool, args.messages, 32),
    }
    for name, reader in READERS.items():
        cases[name] = lambda reader=reader: decode_rate(pool, args.messages, reader)
    rates = {name: max(case() for _ in range(args.runs)) for name, case in cases.items()}
    if args.json:
        out = {"messages": args.messages, "size": args.size, "speedups": batch.SPEEDUPS}
        print(json.dumps({**out, "msgs_per_s": rates}))
        return 0
    loops = "C speedups" if batch.SPEEDUPS else "pure Python"
    print(
        f"codec ({loops}), {args.size} B bodies, best of {args.runs} runs of "
        f"{args.messages:,} messages"
    )
    for name, rate in rates.items():
        mb = rate * args.size / 1e6
        print(f"  {name:<30}{rate:>14,.0f} msgs/s {mb:>10,.1f} MB/s  {1e6 / rate:6.2f} us/msg")
    return 0


if __name__ == "__main__":
    sys.exit(main())
