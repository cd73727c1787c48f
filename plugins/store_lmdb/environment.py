"""The LMDB environment of one store: opening, automatic map growth, background sync.

LMDB maps its file at a fixed size and refuses to grow past it (``MDB_MAP_FULL``). mqcore
users never see that: a write transaction that runs out of map is aborted, the map is
doubled and the transaction is replayed. A reader process whose map is smaller than the
file the writer grew adopts the new size when it begins its next transaction.

Flush modes map onto LMDB's own durability switches: SYNC_FLUSH commits with an fsync;
ASYNC_FLUSH commits without one (``sync=False, metasync=False``) and a background thread
syncs every ``flush_interval_ms``. A killed *process* loses nothing either way, because a
committed transaction is already in the operating system's page cache; the interval only
bounds what a machine crash can lose.
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import lmdb

from mqcore.errors import DiskFullError, StoreCorruptedError, StoreError
from mqcore.logs import get_logger
from mqcore.plugins.store_lmdb import layout

__all__ = ["Environment"]

log = get_logger(__name__)

T = TypeVar("T")

_MAX_DBS = 8
#: Bytes read or written after which the map is replaced to release its resident pages.
UNMAP_EVERY = 64 * 1024 * 1024
#: The map doubles while small, then grows by this much at a time.
GROW_STEP_MAX = 1024 * 1024 * 1024
#: ``writemap``: disk blocks reserved ahead of the data, as a share of the data (1/8), at
#: least ``RESERVE_AHEAD_MIN`` and at most ``RESERVE_AHEAD_MAX``.
RESERVE_AHEAD_MIN = 1024 * 1024
RESERVE_AHEAD_MAX = 64 * 1024 * 1024
#: ``writemap``: room a write transaction may take beyond the data, unless the caller says.
TXN_RESERVE = 1024 * 1024


# LMDB's meta pages (pages 0 and 1, native byte order): after the 16-byte page header come
# the magic and format version, and at fixed offsets the page size (the free-list
# database's md_pad), the last page in use and the transaction id.
_META_MAGIC = 0xBEEFC0DE
_META_HEAD = struct.Struct("=II")  # magic, version (at 16)
_META_PSIZE = struct.Struct("=I")  # at 40
_META_TAIL = struct.Struct("=QQ")  # last page number, txn id (at 136)
SLACK_PAGES = 256  # pages at the end that may be numbered but never written (see below)


def check_length(data: Path, slack_pages: int = 0) -> int:
    """Refuse a ``data.mdb`` shorter than its own meta pages say it is; returns where the
    pages the meta page numbers end (0 for a missing or empty file).

    LMDB maps the file and trusts it: a page past a truncated end kills the process
    (``SIGBUS``, or an assertion once ``writemap`` has extended the file with zeros).
    Reading the two meta pages first turns that into a clear error. Without ``writemap``,
    LMDB may number a few last pages it never writes (free pages, never read); mqcore's
    writer pads the file over them when it closes, so a store at rest is never short, and
    ``slack_pages`` (up to :data:`SLACK_PAGES`) is allowed only while a writer is live or
    after one died.
    """
    try:
        with open(data, "rb") as f:
            head = f.read(2 * 65536)
            # The size after the meta pages: a writer in another process only ever extends
            # the file before it commits a meta page naming the new pages.
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0  # LMDB initialises an empty file
    best: tuple[int, int, int] | None = None  # (txn id, end of the last page, page size)
    # The second meta page starts one page in; the page size is in the first (if intact).
    first_psize = _META_PSIZE.unpack_from(head, 40) if len(head) >= 44 else ()
    for base in {0, 4096, 8192, 16384, 65536, *first_psize}:
        if len(head) < base + 152:
            continue
        magic, _version = _META_HEAD.unpack_from(head, base + 16)
        if magic != _META_MAGIC:
            continue
        (psize,) = _META_PSIZE.unpack_from(head, base + 40)
        last_pg, txnid = _META_TAIL.unpack_from(head, base + 136)
        if best is None or txnid > best[0]:
            best = (txnid, (last_pg + 1) * psize, psize)
    if best is None:
        raise StoreError(
            f"{str(data)!r} is not an LMDB file, or both of its meta pages are damaged "
            f"({size} bytes); restore it from a copy, or remove the directory to start empty"
        )
    _txnid, end, psize = best
    # Without writemap, the last pages LMDB numbered need not be on disk (a page taken and
    # given back within one transaction is never written): while a writer is live, or
    # after it died, a file a few pages short is sound. A deeper cut, or any cut of a store
    # at rest, is not.
    if size < end - min(slack_pages, SLACK_PAGES) * psize:
        raise StoreError(
            f"{str(data)!r} is truncated: {size} bytes, but its meta page numbers pages up "
            f"to byte {end} ({(end - size + psize - 1) // psize} pages missing); restore it "
            "from a copy, or remove the directory to start empty"
        )
    return end


def _pad(data: Path, end: int) -> None:
    """Extend ``data.mdb`` with zeros up to ``end`` (pages LMDB numbered but never wrote:
    free pages, so their content does not matter), so no reader maps past its end."""
    fd = os.open(data, os.O_RDWR)
    try:
        if os.fstat(fd).st_size < end:
            os.ftruncate(fd, end)
            os.fsync(fd)
    finally:
        os.close(fd)


def _disk_nearly_full(path: Path, need: int) -> bool:
    """Whether the file system of ``path`` has less than ``need`` bytes free."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < need


class Environment:
    """One LMDB environment and its four sub-databases (see :mod:`.layout`)."""

    def __init__(
        self,
        path: Path,
        *,
        read_only: bool,
        sync: bool,
        map_size: int,
        max_readers: int,
        writemap: bool = False,
        slack_pages: int = 0,
        held_data: bool = False,
    ) -> None:
        self.path = path
        self.read_only = read_only
        #: LMDB writes pages straight into the shared map instead of ``pwrite``-ing copies.
        self.writemap = writemap and not read_only
        self._reserved = 0  # writemap: bytes of the file whose disk blocks are allocated
        self._can_reserve = self.writemap  # False too on a file system without fallocate
        self._end_hint = 0  # writemap: an upper bound of where LMDB's used pages end
        self._map_lock = threading.Lock()  # map replacement vs the background sync
        self._touched = 0  # bytes through the map since it was last (re)mapped
        if read_only and not (path / "data.mdb").exists():
            raise StoreError(
                f"no LMDB store at {str(path)!r} (data.mdb is missing); open it once without "
                f"read_only=True to create it"
            )
        data = path / "data.mdb"
        if held_data or (path / "lock.mdb").exists():
            try:
                size: int | None = data.stat().st_size
            except FileNotFoundError:
                size = None
            if not size:
                state = "missing" if size is None else "empty"
                raise StoreError(
                    f"the LMDB store at {str(path)!r} held data (its lock.mdb or STORE_KIND "
                    f"is there) but data.mdb is {state}; restore data.mdb from a copy, or "
                    "remove the directory to start an empty store"
                )
        end = check_length(data, slack_pages)
        if end and slack_pages and not read_only:
            _pad(data, end)  # a writer that died left free pages unwritten
        try:
            self.env = lmdb.open(
                str(path),
                map_size=map_size,
                max_dbs=_MAX_DBS,
                max_readers=max_readers,
                readonly=read_only,
                create=not read_only,
                sync=sync,
                metasync=sync,
                lock=True,
                writemap=self.writemap,
            )
        except lmdb.Error as exc:
            hint = ""
            if getattr(exc, "code", 0) in (errno.EACCES, errno.EPERM, errno.EROFS):
                hint = "; open it with read_only=True to read it" if not read_only else ""
            if "already open in this process" in str(exc):
                # LMDB allows one environment per file and process (its locks are per process).
                hint = (
                    "; LMDB lets a process open a store once: read through the store already "
                    "open (its reads see every committed batch), or open it read_only from "
                    "another process"
                )
            raise StoreError(f"cannot open LMDB store at {str(path)!r}: {exc}{hint}") from exc
        self._psize = int(self.env.stat()["psize"])
        if self.writemap:  # before anything is written through the map (open_db writes)
            try:
                self.ensure_room(TXN_RESERVE)
            except BaseException:
                self.env.close()
                raise
        self.log = self._open_db(layout.LOG_DB)
        self.cq = self._open_db(layout.CQ_DB)
        self.keyindex = self._open_db(layout.KEYINDEX_DB, dupsort=True)
        self.meta = self._open_db(layout.META_DB)

    def _open_db(self, name: bytes, *, dupsort: bool = False) -> Any:
        try:
            return self.env.open_db(name, create=not self.read_only, dupsort=dupsort)
        except lmdb.NotFoundError as exc:
            raise StoreError(
                f"LMDB store at {str(self.path)!r} has no sub-database {name.decode()!r}; "
                f"it was not created by mqcore or never finished opening"
            ) from exc
        except lmdb.MapFullError:
            self.grow()
            return self._open_db(name, dupsort=dupsort)

    @property
    def map_size(self) -> int:
        """The current map size in bytes."""
        return int(self.env.info()["map_size"])

    def grow(self) -> None:
        """Enlarge the map (the caller must hold no transaction of this environment).

        The map doubles up to :data:`GROW_STEP_MAX`, then grows by that much. A larger map
        takes no disk space by itself: with ``writemap``, blocks are reserved as the data
        grows (:meth:`ensure_room`).
        """
        old = self.map_size
        new = old + min(old, GROW_STEP_MAX)
        with self._map_lock:
            self.env.set_mapsize(new)
        self._touched = 0
        log.info("lmdb_map_grown", path=str(self.path), old_size=old, new_size=new)

    def used_end(self) -> int:
        """Where the pages LMDB has numbered so far end, in bytes from the file's start."""
        return (int(self.env.info()["last_pgno"]) + 1) * self._psize

    def ensure_room(self, extra: int) -> None:
        """``writemap``: have disk blocks allocated for ``extra`` bytes past the data.

        LMDB writes a writable map's pages in place, and the first write to a page of a
        sparse file that the file system cannot back kills the process with SIGBUS. So
        before each write transaction the store makes sure the blocks the transaction may
        take are allocated (``posix_fallocate``), reserving ahead in steps that grow with
        the data (:data:`RESERVE_AHEAD_MIN` .. :data:`RESERVE_AHEAD_MAX`). On a full disk
        this raises :class:`DiskFullError` before anything is written.
        """
        if not self._can_reserve:
            return
        if self._end_hint + extra <= self._reserved:
            self._end_hint += extra  # what the transaction may take, until measured again
            return
        end = self.used_end()
        if end + extra > self._reserved:
            ahead = min(max(end // 8, RESERVE_AHEAD_MIN), RESERVE_AHEAD_MAX)
            try:
                self._reserve(end + extra + ahead)
            except DiskFullError:
                self._reserve(end + extra)  # a nearly full disk: what this one needs
        self._end_hint = end + extra

    def _reserve(self, size: int) -> None:
        """Allocate the file's disk blocks up to ``size`` bytes (``writemap`` only)."""
        data = self.path / "data.mdb"
        try:
            fd = os.open(data, os.O_RDWR)
            try:
                os.posix_fallocate(fd, 0, size)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(
                    exc.errno,
                    f"disk full: cannot reserve {size} bytes for the LMDB store at "
                    f"{str(self.path)!r} (with writemap, disk blocks are reserved before "
                    f"LMDB writes through its map); nothing was written by this call and "
                    f"everything acknowledged before is intact; free space and retry, or "
                    f"open the store with writemap=False",
                ) from exc
            if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
                # A file system without fallocate: writes go on unreserved.
                log.warning("lmdb_reserve_unsupported", path=str(self.path), error=str(exc))
                self._can_reserve = False
                return
            raise StoreError(f"cannot reserve space for {str(data)!r}: {exc}") from exc
        self._reserved = max(self._reserved, size)

    def reserved_tail_bytes(self) -> int:
        """Bytes reserved past LMDB's last used page (free for writes; ``writemap`` only)."""
        if not self._can_reserve:
            return 0
        return max(0, self._reserved - self.used_end())

    def touched(self, nbytes: int) -> None:
        """Count ``nbytes`` read or written through the map (see :meth:`release_pages`)."""
        self._touched += nbytes

    def release_pages(self) -> None:
        """Past :data:`UNMAP_EVERY` touched bytes, map the file again to drop its pages.

        Every page a reader touches stays mapped, so a process that reads a large backlog
        would end up with the whole file in its resident set. Mapping the file again (same
        size) releases those pages from this process; they stay in the page cache. The
        caller must hold no transaction of this environment.
        """
        if self._touched >= UNMAP_EVERY:
            self._touched = 0
            with self._map_lock:
                self.env.set_mapsize(self.map_size)

    def begin(self) -> Any:
        """A read transaction on the newest committed snapshot (adopting a grown map).

        It runs with ``buffers=True``: keys and values are memoryviews into the map, valid
        until the transaction ends, so a reader copies only the bytes it keeps.
        """
        try:
            return self.env.begin(buffers=True)
        except lmdb.MapResizedError:
            # The writer (another process) grew the file beyond our map: adopt its size.
            with self._map_lock:
                self.env.set_mapsize(0)
            return self.env.begin(buffers=True)

    def write(self, work: Callable[[Any], T], room: int = TXN_RESERVE) -> T:
        """Run ``work(txn)`` in one write transaction, growing the map until it fits.

        ``room`` bounds the bytes of new pages the transaction may take (for the disk
        reservation of ``writemap``, see :meth:`ensure_room`).
        """
        self.ensure_room(room)
        while True:
            try:
                with self.env.begin(write=True) as txn:
                    return work(txn)
            except lmdb.MapFullError:
                # The transaction was aborted by the context manager; replay it on a bigger map.
                self.grow()
            except lmdb.DiskError as exc:
                raise DiskFullError(
                    errno.ENOSPC,
                    f"disk full while writing the LMDB store at {str(self.path)!r}; the last "
                    f"batch was not stored, everything acknowledged before it is intact; free "
                    f"space and retry",
                ) from exc
            except (lmdb.CorruptedError, lmdb.PageNotFoundError, lmdb.BadTxnError) as exc:
                # BadTxnError: an earlier step of this transaction met a damaged page.
                raise corrupted(self.path, exc) from exc
            except lmdb.Error as exc:
                code = getattr(exc, "code", 0)
                # Without writemap a short pwrite at commit is reported as EIO (LMDB has no
                # better code for it): on a file system with no room left, that is a full disk.
                if code == errno.ENOSPC or (
                    code == errno.EIO and _disk_nearly_full(self.path, room + TXN_RESERVE)
                ):
                    raise DiskFullError(
                        errno.ENOSPC,
                        f"disk full while writing the LMDB store at {str(self.path)!r}; the "
                        f"last batch was not stored, everything acknowledged before it is "
                        f"intact; free space and retry",
                    ) from exc
                raise StoreError(f"LMDB write to {str(self.path)!r} failed: {exc}") from exc

    def sync(self) -> None:
        """fsync everything committed so far."""
        # LMDB reads the meta page through the map to sync: never while it is replaced.
        with self._map_lock:
            self.env.sync(True)

    def close(self) -> None:
        """Close the environment (transactions must be finished).

        A writer without ``writemap`` first pads the file over the pages LMDB numbered but
        never wrote, so a store at rest is never shorter than its meta page says.
        """
        if not self.read_only and not self.writemap:
            try:
                end = self.used_end()
                _pad(self.path / "data.mdb", end)
            except (OSError, lmdb.Error) as exc:  # the data is intact; the next open checks
                log.warning("lmdb_pad_failed", path=str(self.path), error=str(exc))
        self.env.close()


def corrupted(path: Path, exc: Exception) -> StoreCorruptedError:
    """The error for a damaged page LMDB found (``lmdb.CorruptedError`` and kin)."""
    data = str(path / "data.mdb")
    return StoreCorruptedError(
        f"the LMDB store at {str(path)!r} has a damaged page ({exc}); restore data.mdb "
        "from a copy, or move the directory aside",
        path=data,
    )


class Syncer:
    """A background thread that syncs the environment every ``interval_ms`` (ASYNC_FLUSH)."""

    def __init__(
        self, env: Environment, interval_ms: int, sync: Callable[[], None] | None = None
    ) -> None:
        self._env = env
        self._sync = env.sync if sync is None else sync  # the store's: it notes the position
        self._interval = interval_ms / 1000.0
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"mqcore-lmdb-sync-{env.path.name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._sync()
            except lmdb.Error as exc:  # never kill the thread: the next round retries
                log.warning("lmdb_sync_failed", path=str(self._env.path), error=str(exc))

    def stop(self) -> None:
        """Stop the thread and wait for it (bounded)."""
        self._stop.set()
        self._thread.join(timeout=10.0)
