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

__all__ = ["ENDS_FILE", "load", "load_log_end", "save"]

#: The key under which the commit log's end is recorded beside the queues' ends (a "/"-less
#: name no queue key can take).
LOG_END_KEY = "commitlog"

ENDS_FILE = "queue_ends.json"


def save(root: str | os.PathLike[str], queues: Iterable[Any], log_end: int | None = None) -> None:
    """Record ``max_offset`` of every consume queue, and the commit log's end when given
    (written atomically)."""
    ends: dict[str, int] = {f"{cq.topic}/{cq.queue_id}": cq.max_offset for cq in queues}
    if log_end is not None:
        ends[LOG_END_KEY] = log_end
    write_json_atomic(Path(root) / ENDS_FILE, ends)


def load_log_end(root: str | os.PathLike[str]) -> int:
    """The commit log's end recorded at the last clean close; -1 when none was."""
    raw: Any = read_json(Path(root) / ENDS_FILE, {})
    end = raw.get(LOG_END_KEY) if isinstance(raw, dict) else None
    return end if isinstance(end, int) else -1


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
