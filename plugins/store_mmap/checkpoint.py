"""RocketMQ's StoreCheckpoint file and the abort marker of an unclean shutdown.

``<root>/checkpoint`` holds, big-endian, as RocketMQ's: physic msg timestamp 8 (store time of
the last flushed commit-log record), logics msg timestamp 8 (last flushed consume-queue
unit), index msg timestamp 8 (last flushed index entry), master flushed offset 8, confirm
phy offset 8, zero-padded to one 4 KiB page. RocketMQ rewrites the page in place; here a
save goes through :func:`mqcore.atomicfile.write_atomic` (temporary file, fsync, rename,
fsync of the directory, previous version kept as ``checkpoint.bak``), so a crash leaves
either the old or the new checkpoint, never a mix.

``<root>/abort`` exists while a writer has the store open: created at start, removed on a
clean shutdown. Finding it at start means the last run crashed and recovery must scan.

API used by the store::

    cp = StoreCheckpoint.load(root)          # zeros when there is no file yet
    cp.physic_msg_timestamp = ts; cp.save()  # fields are plain attributes
    cp.min_timestamp, cp.min_timestamp_index # where abnormal recovery starts (RocketMQ's)
    create_abort_marker(root); had_abnormal_shutdown(root); remove_abort_marker(root)
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import attrs

from mqcore.atomicfile import read_with_backup, write_atomic
from mqcore.logs import get_logger

__all__ = [
    "ABORT_FILE",
    "CHECKPOINT_FILE",
    "StoreCheckpoint",
    "create_abort_marker",
    "had_abnormal_shutdown",
    "remove_abort_marker",
]

log = get_logger(__name__)

CHECKPOINT_FILE = "checkpoint"
ABORT_FILE = "abort"
_FIELDS = struct.Struct(">qqqqq")
_PAGE = 4096
_MIN_SIZE = 24  # the three timestamps; older writers may stop there


@attrs.define
class StoreCheckpoint:
    """The store's flush progress (RocketMQ's StoreCheckpoint); ``save()`` persists it."""

    path: Path
    physic_msg_timestamp: int = 0
    logics_msg_timestamp: int = 0
    index_msg_timestamp: int = 0
    master_flushed_offset: int = 0
    confirm_phy_offset: int = 0

    @classmethod
    def load(cls, root: str | os.PathLike[str]) -> StoreCheckpoint:
        """Read ``<root>/checkpoint`` (or its backup); all fields are 0 when there is none.

        :raises StoreCorruptedError: when neither file holds the three timestamps.
        """
        path = Path(root) / CHECKPOINT_FILE
        raw = read_with_backup(path, lambda data: len(data) >= _MIN_SIZE)
        if raw is None:
            return cls(path)
        raw = raw[: _FIELDS.size].ljust(_FIELDS.size, b"\0")
        return cls(path, *_FIELDS.unpack(raw))

    def save(self) -> None:
        """Write atomically and durably (see the module docstring)."""
        data = _FIELDS.pack(
            self.physic_msg_timestamp,
            self.logics_msg_timestamp,
            self.index_msg_timestamp,
            self.master_flushed_offset,
            self.confirm_phy_offset,
        ).ljust(_PAGE, b"\0")
        write_atomic(self.path, data)

    @property
    def min_timestamp(self) -> int:
        """RocketMQ's getMinTimestamp: the older of commit log and consume queues, less 3 s."""
        return max(0, min(self.physic_msg_timestamp, self.logics_msg_timestamp) - 3000)

    @property
    def min_timestamp_index(self) -> int:
        """RocketMQ's getMinTimestampIndex: :attr:`min_timestamp`, bounded by the index's."""
        return min(self.min_timestamp, self.index_msg_timestamp)


def _fsync_dir(directory: Path) -> None:
    # The marker's presence is what matters, so the directory entry itself must be durable.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def create_abort_marker(root: str | os.PathLike[str]) -> None:
    """Create ``<root>/abort`` (durably) when a writer opens the store."""
    directory = Path(root)
    directory.mkdir(parents=True, exist_ok=True)
    fd = os.open(directory / ABORT_FILE, os.O_WRONLY | os.O_CREAT, 0o644)
    os.close(fd)
    _fsync_dir(directory)


def remove_abort_marker(root: str | os.PathLike[str]) -> None:
    """Remove ``<root>/abort`` after a clean shutdown (everything flushed first)."""
    directory = Path(root)
    try:
        (directory / ABORT_FILE).unlink()
    except FileNotFoundError:
        return
    _fsync_dir(directory)


def had_abnormal_shutdown(root: str | os.PathLike[str]) -> bool:
    """True when ``<root>/abort`` exists: the last writer did not shut down cleanly."""
    found = (Path(root) / ABORT_FILE).exists()
    if found:
        log.info("store_abnormal_shutdown_detected", root=str(root))
    return found
