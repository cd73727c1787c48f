"""RocketMQ's IndexFile and IndexService: find commit-log offsets by ``topic#key``.

Layout of one file in ``<root>/index/`` (RocketMQ's, big-endian), named by its creation time
as ``yyyyMMddHHmmssSSS`` (UTC; names strictly increase):

- a 40-byte header: begin timestamp 8, end timestamp 8, begin phy offset 8, end phy offset 8,
  used hash slot count 4, index count 4 (starts at 1: entry 0 is never used);
- ``max_hash_slots`` slots of 4 bytes: the number of the newest entry whose key hashes there;
- ``max_index_count`` entries of 20 bytes: key hash 4, phy offset 8, time diff 4 (seconds
  since the begin timestamp), previous entry in the same slot 4 (0 ends the chain).

Key hash = ``abs(String.hashCode("topic#key"))`` (0 for ``Integer.MIN_VALUE``); slot = hash
% slot count. A file takes ``max_index_count - 1`` entries, then a new file starts.

API used by the store:

- ``IndexService(root, max_hash_slots=5_000_000, max_index_count=20_000_000,
  read_only=False, max_mapped_files=2, preallocate=False)``; on open, entries written after
  the last header update (a killed writer) are removed and their slots repaired.
  ``preallocate`` reserves each file's disk blocks when it is created. Without it (the
  default) a file starts with blocks for its header and hash slots only, and entries get
  theirs a chunk at a time before they are written: a 420 MB file costs what it holds, and
  a full disk raises :class:`~mqcore.errors.DiskFullError` before anything is written,
  never a SIGBUS from a write through the map into a hole.
- ``put_keys(batch)``: ``batch`` is an iterable of ``(topic, keys, commitlog_offset,
  store_timestamp)``, ``keys`` a sequence of key strings (empty ones are skipped). Records at
  or below ``end_phy_offset`` are skipped (already indexed), so re-dispatching is harmless.
  Records must come in commit-log order.
- ``query(topic, key, max_count, begin_ts=0, end_ts=None) -> list[int]``: commit-log offsets,
  **newest first**, no duplicates. Hashes collide: the store must re-check topic and keys.
  Times are compared at the index's one-second resolution (as RocketMQ).
- ``end_phy_offset`` / ``end_timestamp``: the last indexed record (-1 / 0 when none).
- ``truncate(max_commitlog_offset)``: removes entries at/after a cut commit-log tail (recovery;
  then re-put the records past the cut). ``delete_expired(min_commitlog_offset) -> int``:
  deletes old files whose entries all point below (the newest file is kept).
- ``refresh()`` (read-only openers), ``flush()``, ``close()``.
"""

from __future__ import annotations

import datetime as dt
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from operator import itemgetter
from pathlib import Path

import attrs

from mqcore import speedups
from mqcore.codec import string_hash_code
from mqcore.errors import InvalidArgumentError, StoreClosedError, StoreCorruptedError
from mqcore.logs import get_logger

from . import mappedfile
from .filemaps import FileMaps

__all__ = [
    "ENTRY",
    "ENTRY_SIZE",
    "HEADER",
    "HEADER_SIZE",
    "SPEEDUPS",
    "IndexService",
    "index_key_hash",
    "py_put_entries",
]

log = get_logger(__name__)

HEADER = struct.Struct(">qqqqii")  # begin ts, end ts, begin phy, end phy, slot count, count
HEADER_SIZE = HEADER.size  # 40
_RESERVE_CHUNK = 1 << 20  # bytes of entries given disk blocks at a time (52,428 entries)
ENTRY = struct.Struct(">iqii")  # key hash, phy offset, time diff (s), previous entry
ENTRY_SIZE = ENTRY.size  # 20
_SLOT = struct.Struct(">i")
_SLOT_SIZE = _SLOT.size
_INT_MAX = 0x7FFFFFFF
_KEYS = itemgetter(1)  # the keys of a put_keys record
_pack_header = HEADER.pack_into  # the header as _File.header() gives it, in place


# A producer's unique id (mqcore.uniqkey) is 32 hex digits: 20 the same for every message of
# a process, 8 of time that change each millisecond, then a 4-digit counter. Java's hash of
# a + b is hash(a) * 31**len(b) + hash(b) (mod 2**32), so the hash of ``topic#`` and the
# first 28 digits is kept (ids made in one millisecond share it) and the counter's 4 digits
# are hashed by pairs from a table: every message's unique id is indexed, and hashing was
# most of an entry's cost.
_UNIQ_HEAD = 28
_UNIQ_TAIL_WEIGHT = pow(31, 4, 1 << 32)
_HEX = "0123456789ABCDEF"
_HEX_PAIRS = {a + b: ord(a) * 31 + ord(b) for a in _HEX for b in _HEX}
_head_hashes: dict[str, int] = {}


def index_key_hash(topic: str, key: str) -> int:
    """RocketMQ's indexKeyHashMethod over ``topic#key``: a non-negative 31-bit int."""
    pairs = _HEX_PAIRS
    if len(key) == 32 and key[28:30] in pairs and key[30:] in pairs:
        head = f"{topic}#{key[:_UNIQ_HEAD]}"
        start = _head_hashes.get(head)
        if start is None:
            if len(_head_hashes) >= 4096:
                _head_hashes.clear()
            start = _head_hashes[head] = string_hash_code(head) & 0xFFFFFFFF
        h = (start * _UNIQ_TAIL_WEIGHT + pairs[key[28:30]] * 961 + pairs[key[30:]]) & 0xFFFFFFFF
        h = h - (1 << 32) if h & 0x80000000 else h
    else:
        h = string_hash_code(f"{topic}#{key}")
    return 0 if h == -(1 << 31) else abs(h)


def py_put_entries(
    mm: mmap.mmap | bytearray,
    records: list[tuple[str, Sequence[str], int, int]],
    pos: int,
    key_pos: int,
    last_phy: int,
    slots: int,
    entries_at: int,
    limit: int,
    count: int,
    begin_phy: int,
    begin_ts: int,
    end_phy: int,
    end_ts: int,
) -> tuple[int, int, int, int, int, int, int, int, int]:
    """Write the entries of ``records[pos:]`` into one index file's map, until it is full.

    The reference for the C loop ``put_entries`` of ``mqcore.plugins.store_mmap._keyindex``
    (used when it was built; ``MQCORE_NO_SPEEDUPS=1`` selects this one). ``key_pos`` is -1 to
    start at record ``pos`` (skipped when at or below ``last_phy``, already indexed), or the key
    of record ``pos`` to resume at in a new file. ``count``, ``begin_*`` and ``end_*`` are the
    file's header values. Returns ``(pos, key_pos, count, last_phy, new_slots, begin_phy,
    begin_ts, end_phy, end_ts)``: ``pos`` is ``len(records)`` when all are indexed, else the
    file is full and ``(pos, key_pos)`` is where to resume. The header itself is not written.
    """
    unpack_slot, pack_slot, pack_entry = _SLOT.unpack_from, _SLOT.pack_into, ENTRY.pack_into
    new_slots = 0
    n = len(records)
    full = False
    while pos < n and not full:
        topic, keys, phy, store_ts = records[pos]
        if key_pos < 0:
            if phy <= last_phy:
                pos += 1
                continue
            last_phy = phy
            key_pos = 0
        while key_pos < len(keys):
            key = keys[key_pos]
            if not key:
                key_pos += 1
                continue
            if count >= limit:
                full = True  # the caller starts a file and resumes here
                break
            if count == 1:
                begin_phy, begin_ts = phy, store_ts
            key_hash = index_key_hash(topic, key)
            slot_pos = HEADER_SIZE + (key_hash % slots) * _SLOT_SIZE
            prev = unpack_slot(mm, slot_pos)[0]
            if prev <= 0 or prev >= count:
                prev = 0
                new_slots += 1
            diff = (store_ts - begin_ts) // 1000 if begin_ts > 0 else 0
            diff = min(max(diff, 0), _INT_MAX)
            # The entry (with its link) is complete before the slot points at it.
            pack_entry(mm, entries_at + count * ENTRY_SIZE, key_hash, phy, diff, prev)
            pack_slot(mm, slot_pos, count)
            count += 1
            end_phy, end_ts = phy, store_ts
            key_pos += 1
        if not full:
            key_pos = -1
            pos += 1
    key_pos = key_pos if full else -1
    return pos, key_pos, count, last_phy, new_slots, begin_phy, begin_ts, end_phy, end_ts


_keyindex = speedups.load("keyindex")
#: True when the key index's entries are written by the C loop of the ``keyindex`` speedups.
SPEEDUPS = _keyindex is not None
_put_entries: Callable[..., tuple[int, int, int, int, int, int, int, int, int]] = (
    py_put_entries if _keyindex is None else _keyindex.put_entries
)


def _name_for(ms: int) -> str:
    stamp = dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)
    return stamp.strftime("%Y%m%d%H%M%S") + f"{ms % 1000:03d}"


def _ms_of(name: str) -> int:
    stamp = dt.datetime.strptime(name[:14], "%Y%m%d%H%M%S").replace(tzinfo=dt.timezone.utc)
    return int(stamp.timestamp()) * 1000 + int(name[14:])


@attrs.define
class _File:
    """One index file's header, mirrored in memory (the writer's copy is authoritative)."""

    path: Path
    begin_ts: int = 0
    end_ts: int = 0
    begin_phy: int = 0
    end_phy: int = 0
    slot_count: int = 0
    count: int = 1  # published: entries below it are complete
    reserved: int = 0  # bytes from the start known to have disk blocks (writer only)

    def header(self) -> bytes:
        """The 40 header bytes of these values."""
        return HEADER.pack(
            self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, self.count
        )

    def load(self, raw: bytes) -> None:
        """Take the values from 40 header bytes (an index count below 1 reads as 1)."""
        fields = HEADER.unpack(raw)
        self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count, count = fields
        self.count = max(1, count)

    def time_matched(self, begin: int, end: int) -> bool:
        """RocketMQ's isTimeMatched: the file's time range meets [begin, end]."""
        return (
            (begin < self.begin_ts and end > self.end_ts)
            or self.begin_ts <= begin <= self.end_ts
            or self.begin_ts <= end <= self.end_ts
        )


class IndexService:
    """The key index over every index file; see the module docstring for the API."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        max_hash_slots: int = 5_000_000,
        max_index_count: int = 20_000_000,
        read_only: bool = False,
        max_mapped_files: int = 2,
        preallocate: bool = False,
    ) -> None:
        if max_hash_slots < 1 or max_index_count < 2:
            raise InvalidArgumentError(
                f"need max_hash_slots >= 1 and max_index_count >= 2, got {max_hash_slots} "
                f"and {max_index_count}"
            )
        self.directory = Path(root) / "index"
        self.max_hash_slots = max_hash_slots
        self.max_index_count = max_index_count
        self.read_only = read_only
        self.max_mapped_files = max(1, max_mapped_files)
        self.preallocate = preallocate  # reserve disk blocks at creation (see consumequeue)
        self._entries_at = HEADER_SIZE + max_hash_slots * _SLOT_SIZE
        self.file_size = self._entries_at + max_index_count * ENTRY_SIZE
        self._files: list[_File] = []
        self._maps: FileMaps[Path] = FileMaps(
            Path, self.file_size, read_only=read_only, max_mapped=max_mapped_files
        )
        self._lock = threading.Lock()  # guards changes of _files
        self._closed = False
        #: the index directory was missing (a new store, or deleted to ask for a rebuild):
        #: recovery indexes the whole commit log
        self.rebuild = not read_only and not self.directory.is_dir()
        if not read_only:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._load()

    # --- files --------------------------------------------------------------------------

    def _load(self) -> None:
        files: list[_File] = []
        names = sorted(os.listdir(self.directory)) if self.directory.is_dir() else []
        for name in names:
            path = self.directory / name
            if name.endswith(".tmp") and not self.read_only:
                path.unlink()  # a file creation interrupted before its rename
                continue
            if len(name) != 17 or not name.isdigit():
                continue
            size = path.stat().st_size
            if size != self.file_size:
                raise StoreCorruptedError(
                    f"index file {path} has {size} bytes, expected {self.file_size} "
                    f"({self.max_hash_slots} slots, {self.max_index_count} entries); open "
                    "with the sizes it was written with, or delete the index directory to rebuild "
                    "the index from the commit log",
                    path=str(path),
                )
            meta = _File(path)
            with open(path, "rb") as fh:
                meta.load(fh.read(HEADER_SIZE))
            if files and meta.count <= 1:
                # An empty file starts where the one before ends, as when it was created.
                prev = files[-1]
                meta.begin_phy = meta.end_phy = prev.end_phy
                meta.begin_ts = meta.end_ts = prev.end_ts
            files.append(meta)
        self._files = files
        self._maps.clear()
        if files and not self.read_only:
            last = files[-1]
            self._remove_entries(last, last.count, self._written_end(last))
            # Blocks of what is written are there; more are reserved before they are needed.
            last.reserved = self._entries_at + last.count * ENTRY_SIZE

    def _map(self, meta: _File) -> mmap.mmap | None:
        if not self.read_only and self._files and meta is self._files[-1]:
            return self._maps.pin(meta.path)  # the writer's file stays mapped
        return self._maps.get(meta.path)

    def _new_file(self) -> _File:
        """Start a file after the last one (RocketMQ's getAndCreateLastIndexFile)."""
        ms = int(time.time() * 1000)
        if self._files:
            ms = max(ms, _ms_of(self._files[-1].path.name) + 1)
        path = self.directory / _name_for(ms)
        meta = _File(path)
        if self._files:
            prev = self._files[-1]
            meta.begin_phy = meta.end_phy = prev.end_phy
            meta.begin_ts = meta.end_ts = prev.end_ts
        # Header and slots are written anywhere at any time: their blocks come first.
        first = self.file_size if self.preallocate else self._entries_at + _RESERVE_CHUNK
        meta.reserved = min(self.file_size, first)
        fd = mappedfile._create(path, self.file_size, meta.reserved)
        try:
            os.pwrite(fd, meta.header(), 0)  # a crash before this is repaired by _load
        finally:
            os.close(fd)
        with self._lock:
            self._files.append(meta)
        log.debug("index_file_created", path=str(path))
        return meta

    def _delete_file(self, meta: _File) -> None:
        self._maps.forget(meta.path)
        with self._lock:
            self._files.remove(meta)
        try:
            meta.path.unlink()
        except FileNotFoundError:
            pass

    def _check_writable(self) -> None:
        if self._closed:
            raise StoreClosedError(f"index service on {self.directory} is closed")
        if self.read_only:
            raise InvalidArgumentError(
                f"index on {self.directory} is open read-only; open it without "
                "read_only=True to change it"
            )

    # --- tail repair --------------------------------------------------------------------

    def _written_end(self, meta: _File) -> int:
        """First entry number at/after ``count`` that is all zero (unpublished entries end)."""
        mm = self._map(meta)
        assert mm is not None
        end = meta.count
        zero = bytes(ENTRY_SIZE)
        while end < self.max_index_count:
            pos = self._entries_at + end * ENTRY_SIZE
            if mm[pos : pos + ENTRY_SIZE] == zero:
                break
            end += 1
        return end

    def _remove_entries(self, meta: _File, keep: int, end: int) -> None:
        """Remove entries [keep, end) of ``meta``: unlink them from their slots, zero them."""
        published = meta.count
        if end <= keep and published <= keep:
            return
        mm = self._map(meta)
        assert mm is not None
        meta.count = min(published, keep)  # unpublish first: queries stop seeing them
        for i in range(end - 1, keep - 1, -1):
            key_hash, _, _, prev = ENTRY.unpack_from(mm, self._entries_at + i * ENTRY_SIZE)
            slot_pos = HEADER_SIZE + (key_hash % self.max_hash_slots) * _SLOT_SIZE
            if _SLOT.unpack_from(mm, slot_pos)[0] == i:
                # Entries are removed newest first, so the slot head is always the newest.
                restored = prev if 0 < prev < i else 0
                _SLOT.pack_into(mm, slot_pos, restored)
                if restored == 0 and i < published:  # unpublished ones were never counted
                    meta.slot_count = max(0, meta.slot_count - 1)
        start = self._entries_at + keep * ENTRY_SIZE
        mm[start : self._entries_at + end * ENTRY_SIZE] = bytes((end - keep) * ENTRY_SIZE)
        # When only unpublished entries went, the header already describes what is left.
        if 1 < keep < published:
            _, phy, diff, _ = ENTRY.unpack_from(mm, self._entries_at + (keep - 1) * ENTRY_SIZE)
            meta.end_phy = phy
            # Only seconds survive: end where the last entry's second ends.
            meta.end_ts = meta.begin_ts + diff * 1000 + 999
        elif keep < published:
            meta.end_phy, meta.end_ts = meta.begin_phy, meta.begin_ts
        mm[:HEADER_SIZE] = meta.header()
        self._maps.mark_dirty(meta.path)
        log.info("index_entries_removed", path=str(meta.path), kept=keep, removed=end - keep)

    # --- writing ------------------------------------------------------------------------

    @property
    def end_phy_offset(self) -> int:
        """Commit-log offset of the last indexed record; -1 when nothing was indexed."""
        for meta in reversed(self._files):
            if meta.count > 1 or meta is not self._files[0]:
                return meta.end_phy
        return -1

    @property
    def end_timestamp(self) -> int:
        """Store timestamp of the last indexed record (ms); 0 when nothing was indexed."""
        return self._files[-1].end_ts if self.end_phy_offset >= 0 else 0

    def put_keys(self, batch: Iterable[tuple[str, Sequence[str], int, int]]) -> int:
        """Index ``(topic, keys, commitlog_offset, store_timestamp)`` records; returns entries.

        Records at or below :attr:`end_phy_offset` are skipped (already indexed). The header
        (and so what queries see) is updated once at the end of the batch.
        """
        if self._closed or self.read_only:
            self._check_writable()
        records = batch if type(batch) is list else list(batch)
        files = self._files
        meta: _File | None = files[-1] if files else None
        # end_phy_offset, inlined: one-message puts call this once per message
        last_phy = -1
        if meta is not None:
            last_phy = meta.end_phy if meta.count > 1 or len(files) > 1 else -1
        # Entries this batch may add (an upper bound); their blocks are reserved before
        # anything is written, so a full disk fails the batch cleanly.
        # (one-message puts: no iterator machinery)
        pending = len(records[0][1]) if len(records) == 1 else sum(map(len, map(_KEYS, records)))
        if not pending:
            return 0
        limit = self.max_index_count
        if meta is None:
            if not any(key for keys in map(_KEYS, records) for key in keys):
                return 0  # a file is created for a first key, not before
            meta = self._new_file()
        if meta.reserved < self._entries_at + min(limit, meta.count + pending) * ENTRY_SIZE:
            self._reserve(meta, min(limit, meta.count + pending))
        added = 0
        pos, key_pos = 0, -1
        while True:
            tail = self._maps.tail
            mm = tail[1] if tail is not None and tail[0] is meta.path else self._map(meta)
            assert mm is not None
            start = meta.count
            (pos, key_pos, count, last_phy, new_slots, *ends) = _put_entries(
                mm, records, pos, key_pos, last_phy, self.max_hash_slots, self._entries_at,
                limit, start, meta.begin_phy, meta.begin_ts, meta.end_phy, meta.end_ts,
            )  # fmt: skip
            if count > start:
                meta.begin_phy, meta.begin_ts, meta.end_phy, meta.end_ts = ends
                meta.slot_count += new_slots
                meta.count = count  # publish
                _pack_header(
                    mm, 0, meta.begin_ts, meta.end_ts, meta.begin_phy, meta.end_phy,
                    meta.slot_count, count,
                )  # fmt: skip
                self._maps.mark_dirty(meta.path)
                added += count - start
            if pos >= len(records):
                return added
            # The file is full: go on in a new one, where the stopped record resumes.
            meta = self._new_file()
            self._reserve(meta, min(limit, meta.count + pending - added))

    def _reserve(self, meta: _File, entries: int) -> None:
        """Give ``meta``'s file disk blocks for its first ``entries`` entries (and more)."""
        upto = self._entries_at + entries * ENTRY_SIZE
        if upto <= meta.reserved:
            return
        upto = min(self.file_size, max(upto, meta.reserved + _RESERVE_CHUNK))
        fd = os.open(meta.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            with mappedfile.disk_full_as_error(meta.path, "growing"):
                mappedfile._grow(fd, upto)  # allocated ranges are skipped
        finally:
            os.close(fd)
        meta.reserved = upto

    # --- reading ------------------------------------------------------------------------

    def query(
        self,
        topic: str,
        key: str,
        max_count: int,
        begin_ts: int = 0,
        end_ts: int | None = None,
    ) -> list[int]:
        """Commit-log offsets of records indexed under ``topic#key``, newest first.

        Candidates only: different keys may share a hash, so check each record's topic and
        keys. ``begin_ts``/``end_ts`` bound the store time (ms, inclusive, one-second
        resolution); files outside the range are not read.
        """
        if self._closed:
            raise StoreClosedError(f"index service on {self.directory} is closed")
        end = (1 << 63) - 1 if end_ts is None else end_ts
        key_hash = index_key_hash(topic, key)
        slot_pos = HEADER_SIZE + (key_hash % self.max_hash_slots) * _SLOT_SIZE
        found: list[int] = []
        seen: set[int] = set()
        for meta in reversed(list(self._files)):
            if len(found) >= max_count:
                break
            count = meta.count
            if count > 1 and meta.time_matched(begin_ts, end):
                self._select(meta, count, key_hash, slot_pos, begin_ts, end, max_count, found, seen)
            if meta.begin_ts < begin_ts:
                break  # older files only hold older entries
        return found

    def _select(
        self,
        meta: _File,
        count: int,
        key_hash: int,
        slot_pos: int,
        begin: int,
        end: int,
        max_count: int,
        found: list[int],
        seen: set[int],
    ) -> None:
        mm = self._map(meta)
        if mm is None:
            return
        unpack_entry, entries_at, begin_file = ENTRY.unpack_from, self._entries_at, meta.begin_ts
        at = _SLOT.unpack_from(mm, slot_pos)[0]
        if at >= self.max_index_count:
            return
        while at > 0 and len(found) < max_count:
            hash_read, phy, diff, prev = unpack_entry(mm, entries_at + at * ENTRY_SIZE)
            if at < count:  # entries at/after count are being written: only follow them
                if diff < 0:
                    break
                stamp = begin_file + diff * 1000
                if hash_read == key_hash and begin <= stamp <= end and phy not in seen:
                    seen.add(phy)
                    found.append(phy)
                if stamp < begin:
                    break
            if prev >= at:
                break  # links always point back; anything else is damage
            at = prev

    # --- maintenance --------------------------------------------------------------------

    def truncate(self, max_commitlog_offset: int) -> None:
        """Remove every entry pointing at or past ``max_commitlog_offset`` (a cut tail)."""
        self._check_writable()
        while self._files:
            meta = self._files[-1]
            if meta.count <= 1 and len(self._files) > 1:
                self._delete_file(meta)  # an empty newest file hides nothing; drop it
                continue
            if meta.count > 1 and meta.begin_phy >= max_commitlog_offset:
                if len(self._files) > 1:
                    self._delete_file(meta)
                    continue
                self._remove_entries(meta, 1, meta.count)
                break
            if meta.count <= 1 or meta.end_phy < max_commitlog_offset:
                break
            mm = self._map(meta)
            assert mm is not None
            lo, hi = 1, meta.count  # phy offsets increase with the entry number
            while lo < hi:
                mid = (lo + hi) // 2
                phy = ENTRY.unpack_from(mm, self._entries_at + mid * ENTRY_SIZE)[1]
                if phy < max_commitlog_offset:
                    lo = mid + 1
                else:
                    hi = mid
            self._remove_entries(meta, lo, meta.count)
            break

    def delete_expired(self, min_commitlog_offset: int) -> int:
        """Delete the oldest files whose entries all point below ``min_commitlog_offset``.

        RocketMQ's deleteExpiredFile: the newest file is always kept. Returns files deleted.
        """
        self._check_writable()
        deleted = 0
        for meta in list(self._files[:-1]):
            if meta.end_phy >= min_commitlog_offset:
                break
            self._delete_file(meta)
            deleted += 1
        if deleted:
            log.info("index_files_deleted", count=deleted, directory=str(self.directory))
        return deleted

    def refresh(self) -> None:
        """Read-only openers: see files and entries another process added since."""
        if self._closed:
            raise StoreClosedError(f"index service on {self.directory} is closed")
        self._load()

    def flush(self) -> None:
        """fdatasync every file written since the last flush."""
        if not self._closed:
            self._maps.flush()

    def close(self) -> None:
        """Flush and unmap; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self._maps.close()

    def __repr__(self) -> str:
        return f"IndexService({str(self.directory)!r}, files={len(self._files)})"
