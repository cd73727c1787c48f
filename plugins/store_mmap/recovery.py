"""Recovery when a writer opens the store: find the end of valid data, repair, re-dispatch.

1. Pick a safe point to scan from. After a clean shutdown (no abort marker): the last three
   segments, as RocketMQ's recoverNormally. After a crash: the newest segment whose first
   record is older than the checkpoint's flush time, as RocketMQ's recoverAbnormally (the
   whole log when there is no checkpoint yet). The scan also starts early enough to cover the
   records the consume queues have not dispatched.
2. Validate every record from there with :func:`mqcore.codec.check_record` (CRC on). The
   first invalid record ends the data. If it is a torn tail (nothing valid follows it) the
   tail is cut: the segment's positions move back and the rest of it is zeroed. If valid
   records follow it, the damage is in the middle of acknowledged data:
   :class:`~mqcore.errors.StoreCorruptedError` names the file and offset. (RocketMQ cuts
   there too; mqcore refuses, because cutting would silently drop acknowledged messages.)
3. Truncate consume-queue units and index entries pointing at or past the cut.
4. Re-dispatch the records the consume queues (and the index) miss, in commit-log order,
   through the store's :class:`~.dispatch.Dispatcher`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

from mqcore.codec import BLANK, check_record, scan_valid
from mqcore.errors import CodecError, StoreCorruptedError
from mqcore.logs import get_logger
from mqcore.message import MessageExt
from mqcore.record.layout import (
    BLANK_MAGIC_CODE,
    HEADER_SIZE,
    MESSAGE_MAGIC_CODE,
    POS_STORE_TIMESTAMP,
    SIZE_MAGIC,
)

from . import queueends
from .checkpoint import StoreCheckpoint, had_abnormal_shutdown
from .dispatch import Dispatcher
from .mappedfile import MappedFile, segment_name
from .parts import QueueKey, StoreParts

__all__ = ["find_end", "recover"]

log = get_logger(__name__)

_MAGIC = struct.pack(">i", MESSAGE_MAGIC_CODE)
_I64 = struct.Struct(">q")
NORMAL_RECOVERY_SEGMENTS = 3  # RocketMQ's recoverNormally starts at the third-last file


def _first_timestamp(mf: MappedFile) -> int:
    """Store timestamp of the first record of a segment (0 if it does not start with one)."""
    size, magic = SIZE_MAGIC.unpack_from(mf.view, 0)
    if magic != MESSAGE_MAGIC_CODE or size <= POS_STORE_TIMESTAMP + 8 or size > mf.file_size:
        return 0
    return int(_I64.unpack_from(mf.view, POS_STORE_TIMESTAMP)[0])


def safe_start(files: list[MappedFile], abnormal: bool, min_timestamp: int) -> int:
    """Index of the segment to start scanning from (see the module docstring)."""
    if not abnormal:
        return max(0, len(files) - NORMAL_RECOVERY_SEGMENTS)
    for index in range(len(files) - 1, -1, -1):
        ts = _first_timestamp(files[index])
        if ts and ts <= min_timestamp:
            return index
    return 0


def _valid_data_after(files: list[MappedFile], index: int, pos: int) -> tuple[int, int] | None:
    """Where a valid record lies after the bad one at (``index``, ``pos``), if anywhere.

    Returns ``(segment index, position)`` of the first one found, else None.
    """
    mf = files[index]
    at = pos + 5  # the bad record's own magic code is at pos + 4
    while True:
        found = mf.find(_MAGIC, at)
        if found < 0:
            break
        start = found - 4
        if start >= pos + 1:
            try:
                check_record(mf.view, start, mf.file_size)
                return index, start
            except CodecError:
                pass
        at = found + 1
    for later in range(index + 1, len(files)):
        try:
            check_record(files[later].view, 0, files[later].file_size)
            return later, 0
        except CodecError:
            continue
    return None


_COPY_ALIGN = 16  # the smallest vector store of a memcpy: what its loop aligns to


def _torn_batch_head(view: memoryview, pos: int, base: int, acked_start: int) -> bool:
    """Whether a hole at ``pos`` followed by valid records is an interrupted batch copy.

    A batch is written with one memcpy, and glibc's memcpy stores the first bytes of a
    mid-sized copy *last* (its loop runs over aligned addresses, then the unaligned head is
    stored): a process killed during a put can leave the batch's records in place but the
    head of its first header still zero, up to an aligned position (the mapped file starts on
    a page, so positions align as addresses do). So the header's first 8 bytes are zero, or
    its size and the start of its magic code are, up to a 16-byte boundary, followed by the
    rest of the magic code. That batch was never acknowledged (its consume-queue units are
    written after the copy), so no unit may point past the hole. Anything else (other damage
    to the header, or acknowledged records after it) is corruption of acknowledged data.
    """
    if acked_start > base + pos:
        return False
    head = bytes(view[pos : pos + 8])
    zeros = len(head) - len(head.lstrip(b"\0"))
    if zeros == len(head):
        return True
    # A real record's size is never 0, so a zero size field means the head is missing; the
    # record at pos must not be one a unit points at (the batch was never dispatched).
    return (
        zeros >= 4
        and (pos + zeros) % _COPY_ALIGN == 0
        and acked_start < base + pos
        and head[zeros:] == _MAGIC[zeros - 4 :]
    )


def find_end(
    files: list[MappedFile], start_index: int, start_pos: int = 0, acked_start: int = -1
) -> tuple[int, int]:
    """Validate records from (``start_index``, ``start_pos``); returns the end of valid data.

    The end is ``(segment index, position)``; a segment that ends with a blank marker is
    followed by the next one. ``acked_start`` is the commit-log offset of the last record a
    consume queue points at: a put returns only after its units are written, so nothing
    after it was ever acknowledged. Raises :class:`StoreCorruptedError` when an invalid
    record is followed by valid ones that were acknowledged.
    """
    index, pos = start_index, start_pos
    while index < len(files):
        mf = files[index]
        view, limit, base = mf.view, mf.file_size, mf.file_from_offset
        while pos < limit:
            pos = scan_valid(view, pos, limit)  # the fast path over valid records
            if pos >= limit:
                break
            try:
                kind, size = check_record(view, pos, limit, base_offset=base)
            except CodecError as exc:
                later = _valid_data_after(files, index, pos)
                if later is not None and _torn_batch_head(view, pos, base, acked_start):
                    later = None
                if later is not None:
                    where = files[later[0]].file_from_offset + later[1]
                    raise StoreCorruptedError(
                        f"commit-log file {str(mf.path)!r} is corrupted at offset {base + pos} "
                        f"(position {pos} in the file: {exc}) and valid records follow at "
                        f"offset {where}; refusing to cut acknowledged messages. Restore the "
                        "file from a replica or backup, or move the store aside",
                        path=str(mf.path),
                        offset=base + pos,
                    ) from exc
                return index, pos
            if kind == BLANK:
                pos = limit
                break
            pos += size
        if index + 1 == len(files):
            return index, pos
        index += 1
        pos = 0
    return max(0, len(files) - 1), 0


def iter_records(
    files: list[MappedFile], offset: int, end: int
) -> Iterator[tuple[MappedFile, int]]:
    """(segment, position) of every record from commit-log ``offset`` to ``end`` (validated)."""
    for mf in files:
        if mf.file_end_offset <= offset or mf.file_from_offset >= end:
            continue
        pos = max(0, offset - mf.file_from_offset)
        stop = min(mf.file_size, end - mf.file_from_offset)
        view = mf.view
        while pos + 8 <= stop:
            size, magic = SIZE_MAGIC.unpack_from(view, pos)
            if magic == BLANK_MAGIC_CODE:
                break  # a blank marker: the rest of the segment is empty
            if magic != MESSAGE_MAGIC_CODE or size < HEADER_SIZE or pos + size > mf.file_size:
                # Not the end of the data (that is a blank marker, or ``end``): a damaged
                # header in the middle of the log. Skipping to the next segment would drop
                # every record after it without a word.
                raise StoreCorruptedError(
                    f"commit-log file {str(mf.path)!r} has no valid record header at offset "
                    f"{mf.file_from_offset + pos} (position {pos} in the file: size {size}, "
                    f"magic {magic & 0xFFFFFFFF:#010x}) while rebuilding the consume queues "
                    "and index; restore the file from a replica or backup, or move the store "
                    "aside",
                    path=str(mf.path),
                    offset=mf.file_from_offset + pos,
                )
            yield mf, pos
            pos += size


def recover(parts: StoreParts, dispatcher: Dispatcher, checkpoint: StoreCheckpoint | None) -> None:
    """Bring commit log, consume queues and index to a consistent state (see module doc)."""
    commitlog = parts.commitlog
    files = commitlog.files
    index = parts.index
    abnormal = had_abnormal_shutdown(parts.path)
    flushed_ts = checkpoint.physic_msg_timestamp if checkpoint is not None else 0
    if not files:
        held = sorted(
            f"{t}-{q}" for (t, q), cq in parts.queues.items() if cq.max_physical_offset >= 0
        )
        if flushed_ts or held:
            what = (
                f"consume queues {', '.join(held[:5])} point into it"
                if held
                else (f"the checkpoint records messages flushed up to store time {flushed_ts}")
            )
            raise StoreCorruptedError(
                f"commit log {str(commitlog.directory)!r} has no segment files but {what}: "
                "the files are missing; restore them from a replica or backup, or move the "
                "store aside",
                path=str(commitlog.directory),
                offset=0,
            )
        for cq in parts.queues.values():
            cq.truncate_dirty(0)
        index.truncate(0)
        return
    start = safe_start(
        files, abnormal, checkpoint.min_timestamp_index if checkpoint is not None else 0
    )
    dispatched = parts.dispatched_end()
    first = files[0].file_from_offset
    if dispatched < first:
        start = 0  # nothing (still stored) was dispatched: rebuild from the first segment
    else:
        holder = commitlog.file_for(max(first, dispatched - 1))
        if holder is not None:
            start = min(start, files.index(holder))
    newest = parts.newest_unit()
    # A put returns only after its units are written: nothing after this was acknowledged.
    acked_start = newest[0] if newest is not None else -1
    if not abnormal:
        acked_start = 2**63 - 1  # no batch is torn without a crash: a hole is damage
    end_index, end_pos = find_end(files, start, 0, acked_start)
    end = files[end_index].file_from_offset + end_pos
    _check_complete(parts, files, end, abnormal, flushed_ts)
    if end_index + 1 < len(files) or end_pos < files[end_index].wrote_position or abnormal:
        log.warning(
            "commitlog_recovered",
            abnormal=abnormal,
            end_offset=end,
            scanned_from=files[start].file_from_offset,
        )
    commitlog.truncate(end)
    # After a clean close a unit past the end is damage (the log is complete: checked above).
    past_end = {key for key, cq in parts.queues.items() if cq.max_physical_offset > end}
    for cq in parts.queues.values():
        cq.truncate_dirty(end)
    index.truncate(end)
    recorded = {} if abnormal else queueends.load(parts.path)
    repair_from = _damaged_queues(parts, recorded, past_end if not abnormal else set())
    _redispatch(parts, dispatcher, files[start].file_from_offset, end, abnormal, repair_from)
    # Units below the first stored record point at segments retention deleted.
    parts.correct_min_offsets()
    commitlog.release_cold_pages()  # the scan mapped pages it will not read again


def _check_complete(
    parts: StoreParts, files: list[MappedFile], end: int, abnormal: bool, flushed_ts: int
) -> None:
    """Refuse a commit log whose newest data is missing (a deleted or lost newest segment).

    The checkpoint holds the store time of the last record flushed, and store times never go
    back, so the log must still hold a record at least that new. After a crash, consume-queue
    units may also point past the last file: they were written after their records, so the
    file holding those records was lost.
    """
    last = files[-1]
    directory = parts.commitlog.directory
    if abnormal:
        beyond = parts.dispatched_end()
        if beyond > last.file_end_offset:
            missing = segment_name(last.file_end_offset)
            raise StoreCorruptedError(
                f"commit log {str(directory)!r} ends with file "
                f"{last.path.name} but consume queues point at offset {beyond - 1}: segment "
                f"{missing} (and any after it) is missing; restore it from a replica or "
                "backup, or move the store aside",
                path=str(directory / missing),
                offset=last.file_end_offset,
            )
    # A clean close records where the log ended: ending before that now means lost files
    # (store times alone cannot tell when the newest records share one millisecond).
    recorded_end = -1 if abnormal else queueends.load_log_end(parts.path)
    if recorded_end > last.file_end_offset:
        missing = segment_name(last.file_end_offset)
        raise StoreCorruptedError(
            f"commit log {str(directory)!r} ended at offset {recorded_end} "
            f"at its last clean close but now ends with file {last.path.name}: the newest "
            f"segment ({missing} or later) is missing; restore it from a replica or backup, "
            "or move the store aside",
            path=str(directory / missing),
            offset=last.file_end_offset,
        )
    if flushed_ts and not _holds_newer(parts, end, flushed_ts):
        missing = segment_name(last.file_end_offset)
        raise StoreCorruptedError(
            f"the checkpoint records messages flushed up to store time {flushed_ts}, but the "
            f"commit log {str(directory)!r} ends at offset {end} (file "
            f"{last.path.name}) with older records: the newest segment ({missing} or later) "
            "is missing or was cut; restore it from a replica or backup, or move the store "
            "aside",
            path=str(directory / missing),
            offset=end,
        )


def _damaged_queues(
    parts: StoreParts, recorded: dict[QueueKey, int], past_end: set[QueueKey]
) -> int | None:
    """Where to re-dispatch from so that damaged consume queues are rebuilt, or None.

    A queue is damaged when its recovery cut units that were not a clean end, when it ends
    before the end recorded at the last clean close (or is missing), or when its units pointed
    past the end of a complete log.
    """
    for key in recorded.keys() - parts.queues.keys():
        parts.queue_for_write(*key)  # its directory is gone: rebuild it whole
    frm: int | None = None
    for key, cq in parts.queues.items():
        if cq.damaged_at is None and cq.max_offset >= recorded.get(key, 0) and key not in past_end:
            continue
        start = (
            cq.max_physical_offset if cq.max_physical_offset >= 0 else parts.commitlog.min_offset
        )
        log.warning(
            "consume_queue_rebuilding",
            topic=key[0],
            queue_id=key[1],
            from_queue_offset=cq.max_offset,
            recorded_end=recorded.get(key),
            from_offset=start,
        )
        frm = start if frm is None else min(frm, start)
    return frm


def _redispatch(
    parts: StoreParts,
    dispatcher: Dispatcher,
    scan_from: int,
    end: int,
    abnormal: bool,
    repair_from: int | None = None,
) -> None:
    commitlog = parts.commitlog
    index = parts.index
    files = commitlog.files
    # Dispatch runs in commit-log order, so every record before the furthest unit of any
    # queue was dispatched; the index may lag one batch behind (keys are indexed last).
    dispatched = parts.dispatched_end()
    index_end = index.end_phy_offset
    if dispatched < 0:
        frm = commitlog.min_offset
    elif abnormal:
        # After a crash (as RocketMQ): everything from the safe point again. A queue may
        # have lost units that another queue's later units do not account for (its file
        # was not flushed before a power loss); units already present are skipped.
        frm = max(commitlog.min_offset, scan_from)
    else:
        frm = dispatched
        if 0 <= index_end < frm:
            # Both are record boundaries; records before the scan start were not validated.
            frm = max(index_end, scan_from)
    if repair_from is not None:
        frm = max(commitlog.min_offset, min(frm, repair_from))
    if index.rebuild:
        frm = commitlog.min_offset  # consume-queue units already present are skipped
        log.warning("index_rebuilding", from_offset=frm, to_offset=end)
    feed = dispatcher.from_log(
        index_after=index_end,
        advice="delete the consumequeue directory to rebuild every queue from the commit log",
    )
    for mf, pos in iter_records(files, frm, end):
        feed.add(MessageExt(mf.view, pos), mf.file_from_offset + pos)
    feed.finish()
    if not feed.last_ts:
        parts.last_store_ts = _last_timestamp(files, end)
    if feed.count:
        log.info("records_redispatched", count=feed.count, from_offset=frm, to_offset=end)


def _holds_newer(parts: StoreParts, end: int, ts: int) -> bool:
    """Whether the commit log before ``end`` holds a record stored at ``ts`` or later.

    The newest record a consume queue points at usually answers at once; otherwise the
    newest segments are read back to their last record.
    """
    newest = parts.newest_unit(end)
    if newest is not None and parts.store_timestamp(newest[0]) >= ts:
        return True
    return _last_record_timestamp(parts.commitlog.files, end) >= ts


def _last_record_timestamp(files: list[MappedFile], end: int) -> int:
    """Store time of the last record before ``end`` (newest segment first), 0 if none."""
    for mf in reversed(files):
        if mf.file_from_offset >= end:
            continue
        last: Any = None
        for found in iter_records([mf], mf.file_from_offset, end):
            last = found
        if last is not None:
            return int(_I64.unpack_from(last[0].view, last[1] + POS_STORE_TIMESTAMP)[0])
    return 0


def _last_timestamp(files: list[MappedFile], end: int) -> int:
    last: Any = 0
    for mf, pos in iter_records(files[-1:], files[-1].file_from_offset, end):
        last = (mf, pos)
    if not last:
        return 0
    return int(_I64.unpack_from(last[0].view, last[1] + POS_STORE_TIMESTAMP)[0])
