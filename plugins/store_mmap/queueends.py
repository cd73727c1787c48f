"""Each consume queue's end, recorded at a clean close and checked at the next open.

A consume-queue file damaged while the store was closed (zeroed or overwritten units) can end
in a way that looks like a queue's natural end: its units are trusted up to the first invalid
one. Recovery after a crash re-dispatches from a safe point anyway; after a clean close it
trusts the queues, so the writer records where each queue ended, in ``<root>/queue_ends.json``
(``{"topic/queue_id": max_offset}``), just before it removes the abort marker. The next
writer compares: a queue that now ends earlier (or is missing) is rebuilt from the commit log.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mqcore.atomicfile import read_json, write_json_atomic

__all__ = ["ENDS_FILE", "load", "save"]

ENDS_FILE = "queue_ends.json"


def save(root: str | os.PathLike[str], queues: Iterable[Any]) -> None:
    """Record ``max_offset`` of every consume queue (written atomically)."""
    ends = {f"{cq.topic}/{cq.queue_id}": cq.max_offset for cq in queues}
    write_json_atomic(Path(root) / ENDS_FILE, ends)


def load(root: str | os.PathLike[str]) -> dict[tuple[str, int], int]:
    """The recorded ends, by (topic, queue id); empty when none were recorded."""
    raw: Any = read_json(Path(root) / ENDS_FILE, {})
    out: dict[tuple[str, int], int] = {}
    if not isinstance(raw, dict):
        return out
    for key, end in raw.items():
        topic, _, qid = str(key).rpartition("/")
        if topic and qid.isdigit() and isinstance(end, int):
            out[(topic, int(qid))] = end
    return out
