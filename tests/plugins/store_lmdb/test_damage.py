"""A damaged LMDB store: short or missing data.mdb, damaged pages, a full disk.

Each test damages the file itself and asserts the exact outcome. Opens that LMDB could
answer with SIGBUS or an assertion run in a child process, so a regression fails the test
instead of killing the test run.
"""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import lmdb
import pytest

from mqcore.errors import DiskFullError, StoreCorruptedError, StoreError
from mqcore.message import Message
from mqcore.plugins.store_lmdb import environment
from mqcore.plugins.store_lmdb.environment import check_length
from mqcore.plugins.store_lmdb.store import LmdbStore

PAGE = 4096


def fill(path: Path, batches: int = 300, **opts: object) -> list[bytes]:
    bodies = []
    with LmdbStore(path, **opts) as store:
        for i in range(batches):
            body = b"m%05d-" % i + bytes(500 + 40 * (i % 7))
            batch = [Message(topic="T", body=body) for _ in range(4)]
            store.put("T", 0, batch)
            bodies += [m.body for m in batch]
    return bodies


def in_child(code: str, path: Path) -> str:
    """Run ``code`` (``path`` bound, the store classes imported) in a child; its output, or
    ``died:<signal>`` when the process was killed."""
    script = "from pathlib import Path\nfrom mqcore.plugins.store_lmdb.store import LmdbStore\n"
    script += f"path = Path({str(path)!r})\n" + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    if done.returncode < 0:
        return f"died:{-done.returncode}"
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


OPEN = """
try:
    with LmdbStore(path, read_only={ro}) as store:
        print("opened", len(store.get("T", 0, 0, max_count=5000).messages))
except Exception as exc:
    print(type(exc).__name__, exc)
"""


# -- 7: data.mdb shorter than its meta pages say -------------------------------------------


def test_a_store_at_rest_is_never_short(tmp_path: Path) -> None:
    """Without writemap LMDB may leave its last free pages unwritten; a clean close pads
    them, so an exact length check never refuses a healthy store."""
    fill(tmp_path / "s", writemap=False)
    data = tmp_path / "s" / "data.mdb"
    assert check_length(data, 0) <= data.stat().st_size


@pytest.mark.parametrize("pages", [1, 31, 32, 255, 256, 1000])
@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writer"])
@pytest.mark.parametrize("writemap", [False, True], ids=["pwrite", "writemap"])
def test_a_short_data_file_is_refused_by_any_amount(
    tmp_path: Path, pages: int, read_only: bool, writemap: bool
) -> None:
    fill(tmp_path / "s", batches=3000, writemap=writemap)
    data = tmp_path / "s" / "data.mdb"
    end = check_length(data)
    cut = max(PAGE, min(end - pages * PAGE, data.stat().st_size - pages * PAGE))
    os.truncate(data, cut)
    out = in_child(OPEN.format(ro=read_only), tmp_path / "s")
    assert out.startswith("StoreError") and "is truncated" in out and "pages missing" in out
    assert data.stat().st_size == cut  # the refused open changed nothing


def test_slack_pages_are_allowed_only_when_asked(tmp_path: Path) -> None:
    """The store asks for them only next to a live writer (a reader) or after a writer died
    (a writer, which then pads the file)."""
    fill(tmp_path / "s", writemap=False)
    data = tmp_path / "s" / "data.mdb"
    end = check_length(data)
    os.truncate(data, end - PAGE)
    with pytest.raises(StoreError, match=r"\(1 pages missing\)"):
        check_length(data, 0)
    assert check_length(data, environment.SLACK_PAGES) == end
    os.truncate(data, end - (environment.SLACK_PAGES + 1) * PAGE)
    with pytest.raises(StoreError, match="truncated"):
        check_length(data, environment.SLACK_PAGES)


def test_writer_alive_reads_the_lock_file(tmp_path: Path) -> None:
    from mqcore.lockfile import LOCK_FILE_NAME, writer_alive

    assert writer_alive(tmp_path) is None
    (tmp_path / LOCK_FILE_NAME).write_text(f"{os.getpid()}\n")
    assert writer_alive(tmp_path) is True
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    (tmp_path / LOCK_FILE_NAME).write_text(child.stdout)  # a pid whose process is gone
    assert writer_alive(tmp_path) is False


@pytest.mark.parametrize("state", ["deleted", "emptied"])
def test_a_missing_or_empty_data_file_of_a_used_store_is_refused(
    tmp_path: Path, state: str
) -> None:
    fill(tmp_path / "s", batches=5)
    data = tmp_path / "s" / "data.mdb"
    if state == "deleted":
        data.unlink()
    else:
        data.write_bytes(b"")
    word = "missing" if state == "deleted" else "empty"
    with pytest.raises(StoreError, match=f"held data .* data.mdb is {word}"):
        LmdbStore(tmp_path / "s")
    assert not data.exists() or data.stat().st_size == 0  # not recreated as an empty store
    with pytest.raises(StoreError, match=f"data.mdb is {word}"):
        LmdbStore(tmp_path / "s", read_only=True)


def test_a_new_store_still_opens(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "new") as store:
        store.put("T", 0, [Message(topic="T", body=b"x")])
    with LmdbStore(tmp_path / "new") as store:
        assert store.max_offset("T", 0) == 1


# -- 7: a damaged page -----------------------------------------------------------------------


@pytest.mark.parametrize("read_only", [True, False], ids=["read-only", "writer"])
def test_a_damaged_page_is_a_store_corrupted_error(tmp_path: Path, read_only: bool) -> None:
    fill(tmp_path / "s", batches=300, writemap=False)
    data = tmp_path / "s" / "data.mdb"
    pages = data.stat().st_size // PAGE
    with data.open("r+b") as f:  # garbage over a page in the middle of the tree
        f.seek(pages // 6 * PAGE)
        f.write(random.Random(7).randbytes(PAGE))
    code = f"""
    from mqcore.errors import StoreCorruptedError
    try:
        with LmdbStore(path, read_only={read_only}) as store:
            store.get("T", 0, 0, max_count=5000)
        print("served")
    except StoreCorruptedError as exc:
        print("StoreCorruptedError", exc.path)
    except Exception as exc:
        print("other", type(exc).__module__, type(exc).__name__, exc)
    """
    out = in_child(code, tmp_path / "s")
    assert out == f"StoreCorruptedError {data}"


def test_read_errors_of_lmdb_are_store_corrupted_errors(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from mqcore.plugins.store_lmdb import scan

    fill(tmp_path / "s", batches=2)
    with LmdbStore(tmp_path / "s") as store:

        def broken(*args: object, **kwargs: object) -> None:
            raise lmdb.CorruptedError("mdb_cursor_get: MDB_CORRUPTED")

        monkeypatch.setattr(scan, "read_queue", broken)
        monkeypatch.setattr(scan, "record_at", broken)
        for read in (
            lambda: store.get("T", 0, 0),
            lambda: store.get_raw("T", 0, 0),
            lambda: store.message_at(0),
        ):
            with pytest.raises(StoreCorruptedError, match="damaged page") as info:
                read()
            assert info.value.path == str(tmp_path / "s" / "data.mdb")


# -- 8: a full disk without writemap ----------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs the privilege to mount; skipped without it)."""
    mnt = tmp_path / f"fs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip("mounting a small file system needs privileges")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.mark.parametrize(("size", "count"), [(1000, 1), (5000, 4), (70000, 1), (300, 16)])
def test_a_full_disk_without_writemap_is_always_disk_full(
    small_fs: Path, size: int, count: int
) -> None:
    acked = 0
    with LmdbStore(small_fs / "s", writemap=False, map_size=1 << 20) as store:
        failures = []
        for i in range(5000):
            batch = [Message(topic="T", body=bytes([i % 251]) * size)] * count
            try:
                store.put("T", 0, batch)
                acked += count
            except DiskFullError as exc:
                failures.append(exc.errno)
                if len(failures) == 30:
                    break
        # The disk filled (2 MiB), and every failure was a DiskFullError.
        assert failures == [errno.ENOSPC] * 30 and acked * size < 2 << 20
        got = store.get("T", 0, 0, max_count=100_000, max_bytes=1 << 30).messages
        assert len(got) == acked and store.max_offset("T", 0) == acked


def test_eio_at_commit_on_a_full_disk_is_disk_full(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """LMDB reports a short pwrite at commit as EIO: on a full file system, DiskFullError;
    with room left, a StoreError (a real I/O error)."""
    with LmdbStore(tmp_path / "s", writemap=False) as store:
        env = store._env

        class Failing:
            def __init__(self, real: object) -> None:
                self.real = real

            def begin(self, **kwargs: object) -> object:
                if kwargs.get("write"):
                    raise lmdb.Error("mdb_txn_commit: Input/output error")
                return self.real.begin(**kwargs)  # type: ignore[attr-defined]

        monkeypatch.setattr(lmdb.Error, "code", errno.EIO, raising=False)
        monkeypatch.setattr(env, "env", Failing(env.env))
        monkeypatch.setattr(environment, "_disk_nearly_full", lambda path, need: True)
        with pytest.raises(DiskFullError, match="disk full"):
            store.put("T", 0, [Message(topic="T", body=b"x")])
        monkeypatch.setattr(environment, "_disk_nearly_full", lambda path, need: False)
        with pytest.raises(StoreError, match="Input/output error") as info:
            store.put("T", 0, [Message(topic="T", body=b"x")])
        assert not isinstance(info.value, DiskFullError)
        monkeypatch.undo()


# -- 10: check_crc_on_read --------------------------------------------------------------------


def test_check_crc_on_read_reports_a_damaged_body(tmp_path: Path) -> None:
    with LmdbStore(tmp_path / "s") as store:
        for i in range(20):
            body = b"uniquebody%03d" % i
            store.put("T", 0, [Message(topic="T", body=body, keys=f"k{i}")])
        offset = store.get("T", 0, 5, max_count=1).messages[0].commitlog_offset
    data = tmp_path / "s" / "data.mdb"
    raw = data.read_bytes()
    assert b"uniquebody005" in raw
    data.write_bytes(raw.replace(b"uniquebody005", b"uniqueBODY005"))  # every copy of it
    with LmdbStore(tmp_path / "s") as store:  # off by default: served as stored
        assert store.get("T", 0, 5, max_count=1).messages[0].body == b"uniqueBODY005"
    with LmdbStore(tmp_path / "s", check_crc_on_read=True) as store:
        assert [m.body for m in store.get("T", 0, 0, max_count=5).messages][-1] == (
            b"uniquebody004"
        )
        for read in (
            lambda: store.get("T", 0, 0, max_count=10),
            lambda: store.get_raw("T", 0, 5, max_count=1),
            lambda: store.message_at(offset),
            lambda: store.lookup("T", "k5"),
        ):
            with pytest.raises(StoreCorruptedError, match="CRC mismatch") as info:
                read()
            assert info.value.offset == offset and info.value.path == str(data)
