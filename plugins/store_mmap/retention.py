"""Retention: delete old commit-log segments and trim consume queues and index to match.

As RocketMQ's CleanCommitLogService (the rules: :mod:`mqcore.retentionrules`): a segment is
*expired* when its file was last modified more than ``file_reserved_time_hours`` ago. The
cleaner deletes expired segments in the ``delete_when`` hours, or at any hour while the disk
holding the store is fuller than ``disk_max_used_space_ratio`` percent; a manual pass (a
direct ``delete_expired_files()``) deletes them at any hour. Only while the disk is fuller
than ``disk_space_clean_forcibly_ratio`` percent do the oldest segments go whatever their
age, until the disk is back within it. Segments go oldest first and the segment being
written is never deleted. Consume queues and the index move their minimum
offsets forward *before* the segments disappear, so a reader sees ``OFFSET_TOO_SMALL`` rather
than a unit pointing at a deleted file. Views already handed out stay valid: a deleted
segment stays mapped until the last view of it is dropped.
"""

from __future__ import annotations

import os
import shutil
import threading
from typing import TYPE_CHECKING, Protocol

from mqcore.logs import get_logger
from mqcore.retentionrules import plan

from .parts import StoreParts

if TYPE_CHECKING:
    from .options import MmapStoreOptions

__all__ = [
    "CLEAN_INTERVAL",
    "CleanService",
    "ScheduledCleaning",
    "delete_oldest",
    "disk_used_ratio",
    "expired_count",
]

log = get_logger(__name__)

CLEAN_INTERVAL = 10.0  # seconds between passes (RocketMQ's cleanResourceInterval)


def disk_used_ratio(path: str | os.PathLike[str]) -> float:
    """Percentage of the disk holding ``path`` that is in use (df's Use%)."""
    usage = shutil.disk_usage(path)
    # As df's Use%: blocks reserved for root (or otherwise unavailable) count as neither.
    capacity = usage.used + usage.free
    return 100.0 * usage.used / capacity if capacity else 0.0


def expired_count(
    parts: StoreParts, now: float, options: MmapStoreOptions, *, manual: bool = True
) -> int:
    """How many of the oldest segments a retention pass deletes (see the module docstring);
    ``manual``: a direct call, else the cleaner's pass.

    Reads file times and disk usage only: the store calls it without its write lock.
    """
    reserved = float(options.file_reserved_time_hours) * 3600.0
    files = parts.commitlog.files
    if len(files) < 2:
        return 0
    usage = shutil.disk_usage(parts.path)
    rules = plan(
        used=usage.used,
        capacity=usage.used + usage.free,
        now=now,
        manual=manual,
        max_used_ratio=options.disk_max_used_space_ratio,
        clean_forcibly_ratio=options.disk_space_clean_forcibly_ratio,
        delete_when=options.delete_when,
    )
    over = rules.force_over  # bytes to free whatever their age (<= 0: none)
    count = 0
    for mf in files[:-1]:  # never the segment being written
        try:
            age = now - os.stat(mf.path).st_mtime
        except FileNotFoundError:
            age = reserved + 1
        if rules.expired and age > reserved:
            reason = "expired"
        elif over > 0:
            reason = "disk_full"
        else:
            break
        count += 1
        over -= mf.file_size
        log.info(
            "segment_expiring",
            path=str(mf.path),
            reason=reason,
            age_s=round(age),
            expired_by=rules.reason or None,
        )
    return count


def delete_oldest(parts: StoreParts, count: int) -> int:
    """Delete up to ``count`` of the oldest segments, never the last, after moving the
    consume queues and the index past them; returns how many went (write lock held)."""
    commitlog = parts.commitlog
    files = commitlog.files
    count = min(count, len(files) - 1)
    if count <= 0:
        return 0
    new_min = files[count].file_from_offset
    # Queues first: readers must never follow a unit into a deleted segment.
    for cq in list(parts.queues.values()):
        cq.delete_expired(new_min)
    parts.index.delete_expired(new_min)
    gone = commitlog.delete_segments(count)
    log.info("segments_deleted", count=len(gone), min_offset=commitlog.min_offset)
    return len(gone)


class ScheduledCleaning(Protocol):
    """What the cleaner thread calls: the store's retention pass as the schedule runs it."""

    def delete_expired_files(self, now: float | None = None, *, scheduled: bool = False) -> int:
        """One retention pass (see :meth:`.store.MmapStore.delete_expired_files`)."""
        ...


class CleanService:
    """The cleaner thread: a scheduled retention pass of ``store`` every
    :data:`CLEAN_INTERVAL` seconds."""

    def __init__(self, store: ScheduledCleaning, interval: float = CLEAN_INTERVAL) -> None:
        self._store = store
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mqcore-mmap-clean", daemon=True)

    def start(self) -> CleanService:
        """Start the thread; returns ``self``."""
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._store.delete_expired_files(scheduled=True)
            except Exception as exc:  # retention must never take the store down
                log.error("retention_failed", error=str(exc))

    def stop(self) -> None:
        """Stop and join the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
