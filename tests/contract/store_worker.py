"""A separate process for the contract suite: a writer to kill, a lock holder, a rival writer.

Run as ``python store_worker.py MODE SPEC_JSON``; SPEC has ``store``, ``path``, ``options``.
Every line on stdout is one JSON object written with a single ``os.write`` (atomic on a
pipe), so a line the parent reads is complete, and a printed batch was acknowledged.

Modes:

- ``write``: put batches into ``topics`` x ``queues`` (``batches`` of them, forever when
  -1), ``sleep_ms`` apart; after each acknowledged batch print
  ``{"t", "q", "qo", "n", "co": [commit-log offsets], "ids": [...], "h": body hash}``.
  Message contents are a pure function of (topic, queue id, queue offset):
  :func:`make_message`, which the tests import to check what they read. With ``many``,
  each round is one ``put_many`` of 1 to 4 such batches (a store's ``MultiQueuePut``), and
  a line per batch is printed once it returns.
- ``hold``: open the store for writing, print ``{"ready": pid}``, wait for stdin to close.
- ``try_open``: open the store for writing; print ``{"opened": true}`` or
  ``{"error": class name, "message": text}``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import sys
import time
from typing import Any

import structlog

from mqcore import Kernel, Message
from mqcore.message import PROPERTY_UNIQ_KEY
from mqcore.storecaps import PutRequest


def make_message(topic: str, queue_id: int, queue_offset: int) -> Message:
    """The message the writer stores at ``(topic, queue_id, queue_offset)``."""
    rnd = random.Random(f"{topic}/{queue_id}/{queue_offset}")
    body = rnd.randbytes(rnd.choice([0, 1, 17, 300, 1000]))
    return Message(
        topic=topic,
        body=body,
        tags=rnd.choice([None, "A", "B", "C"]),
        keys=f"k{queue_offset} q{queue_id}",
        properties={"i": str(queue_offset), "u": "h\u00e9\u2713"},
    )


def uniq_id(topic: str, queue_id: int, queue_offset: int) -> str:
    """A unique id (32 hex digits, as a producer's) for the message at these offsets."""
    return hashlib.md5(f"{topic}/{queue_id}/{queue_offset}".encode()).hexdigest().upper()


def body_hash(bodies: list[bytes]) -> str:
    """Hash of a batch's bodies (length-prefixed, so boundaries count)."""
    h = hashlib.sha256()
    for body in bodies:
        h.update(len(body).to_bytes(4, "big"))
        h.update(body)
    return h.hexdigest()


def _emit(obj: Any) -> None:
    os.write(1, (json.dumps(obj, separators=(",", ":")) + "\n").encode())


def _write(spec: dict[str, Any]) -> None:
    rnd = random.Random(spec.get("seed", 0))
    topics = spec.get("topics", ["T"])
    queues = spec.get("queues", 1)
    batches = spec.get("batches", -1)
    batch_max = spec.get("batch_max", 8)
    sleep = spec.get("sleep_ms", 0) / 1000.0
    many = spec.get("many", False)
    with Kernel().open_store(spec["store"], spec["path"], **spec["options"]) as store:
        done = 0
        while batches < 0 or done < batches:
            requests = []
            ends: dict[tuple[str, int], int] = {}
            for _ in range(rnd.randint(1, 4) if many else 1):
                topic = rnd.choice(topics)
                qid = rnd.randrange(queues)
                start = ends.get((topic, qid))
                if start is None:
                    start = store.max_offset(topic, qid)
                count = rnd.randint(1, batch_max)
                ends[topic, qid] = start + count
                msgs = [make_message(topic, qid, start + i) for i in range(count)]
                if spec.get("uniq"):  # as a producer sends them: indexed like a key
                    for i, msg in enumerate(msgs):
                        msg.properties[PROPERTY_UNIQ_KEY] = uniq_id(topic, qid, start + i)
                requests.append(PutRequest(topic, qid, msgs))
            if many:
                slots = store.put_many(requests)
            else:
                (only,) = requests
                slots = [store.put(only.topic, only.queue_id, only.messages)]
            for request, results in zip(requests, slots, strict=True):
                if not isinstance(results, list):
                    raise results
                _emit(
                    {
                        "t": request.topic,
                        "q": request.queue_id,
                        "qo": results[0].queue_offset,
                        "n": len(results),
                        "co": [r.commitlog_offset for r in results],
                        "ids": [r.msg_id for r in results],
                        "h": body_hash([m.body for m in request.messages]),
                    }
                )
            done += 1
            if sleep:
                time.sleep(sleep)


def _hold(spec: dict[str, Any]) -> None:
    with Kernel().open_store(spec["store"], spec["path"], **spec["options"]):
        _emit({"ready": os.getpid()})
        sys.stdin.read()


def _try_open(spec: dict[str, Any]) -> None:
    try:
        store = Kernel().open_store(spec["store"], spec["path"], **spec["options"])
    except Exception as exc:
        _emit({"error": type(exc).__name__, "message": str(exc)})
    else:
        store.close()
        _emit({"opened": True})


def main() -> None:
    """Entry point: ``store_worker.py MODE SPEC_JSON``."""
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    # stdout carries the protocol; the store's log lines go to stderr (this is a program,
    # not the library, so it may configure logging).
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    {"write": _write, "hold": _hold, "try_open": _try_open}[mode](spec)


if __name__ == "__main__":
    main()
