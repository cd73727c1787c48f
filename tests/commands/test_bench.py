"""``mqcore bench`` and its engine: phases, JSON output, errors, fsync counting.

The engine is checked against a small in-memory store registered through a plugin object,
so these tests do not depend on which real stores exist; the end-to-end tests run the
real command against every registered store and skip when none is registered yet.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from mqcore import Kernel, Message, hookimpl
from mqcore.benchmark import (
    TOPIC,
    BenchConfig,
    FsyncCounter,
    message_pool,
    run_bench,
)
from mqcore.cli import main
from mqcore.codec import host_bytes, pack, prepare
from mqcore.message import MessageExt
from mqcore.store import FlushMode, GetResult, GetStatus, PutResult, RawGetResult


class MemoryStore:
    """Just enough of the store contract for the bench: put, get, get_raw, max_offset."""

    def __init__(self, path: Any, flush_mode: FlushMode = FlushMode.ASYNC_FLUSH) -> None:
        self.path = Path(path)
        self.flush_mode = FlushMode.parse(flush_mode)
        self.queues: dict[tuple[str, int], list[bytes]] = {}
        self.fd = os.open(self.path / "marker", os.O_CREAT | os.O_RDWR)
        self.closed = False

    def put(self, topic: str, queue_id: int, messages: Sequence[Message]) -> list[PutResult]:
        queue = self.queues.setdefault((topic, queue_id), [])
        data = pack(
            prepare(messages, 1),
            queue_id=queue_id,
            queue_offset=len(queue),
            commitlog_offset=0,
            store_timestamp=2,
            store_host=host_bytes("127.0.0.1:10911"),
        )
        out, pos = [], 0
        for _ in messages:
            size = int.from_bytes(data[pos : pos + 4], "big")
            queue.append(data[pos : pos + size])
            out.append(PutResult("id", len(queue) - 1, 0, 2, size))
            pos += size
        if self.flush_mode is FlushMode.SYNC_FLUSH:
            os.fsync(self.fd)
        return out

    def _slice(self, topic: str, queue_id: int, offset: int, max_count: int) -> list[bytes]:
        return self.queues.get((topic, queue_id), [])[offset : offset + max_count]

    def get(self, topic: str, queue_id: int, offset: int, max_count: int = 32, **_: Any) -> Any:
        found = self._slice(topic, queue_id, offset, max_count)
        status = GetStatus.FOUND if found else GetStatus.NO_NEW_MSG
        top = self.max_offset(topic, queue_id)
        return GetResult(status, [MessageExt(r) for r in found], offset + len(found), 0, top)

    def get_raw(self, topic: str, queue_id: int, offset: int, max_count: int = 32, **_: Any) -> Any:
        found = self._slice(topic, queue_id, offset, max_count)
        status = GetStatus.FOUND if found else GetStatus.NO_NEW_MSG
        top = self.max_offset(topic, queue_id)
        return RawGetResult(status, [memoryview(r) for r in found], offset + len(found), 0, top)

    def max_offset(self, topic: str, queue_id: int) -> int:
        return len(self.queues.get((topic, queue_id), []))

    def close(self) -> None:
        if not self.closed:
            os.close(self.fd)
            self.closed = True

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LosingStore(MemoryStore):
    """Acknowledges puts but never finds anything: the bench must notice."""

    def get(self, topic: str, queue_id: int, offset: int, max_count: int = 32, **_: Any) -> Any:
        return GetResult(GetStatus.NO_NEW_MSG, [], offset, 0, offset)


class MemoryStorePlugin:
    """Registers the test stores under names no real plugin uses."""

    @hookimpl
    def mqcore_register_stores(self, register: Any) -> None:
        register("bench_memory", MemoryStore)
        register("bench_losing", LosingStore)


def memory_kernel() -> Kernel:
    return Kernel(plugins=[MemoryStorePlugin()], autoload=False)


def test_pool_is_a_multiple_of_the_batch_with_distinct_bodies() -> None:
    pool = message_pool(100, 7)
    assert len(pool) % 7 == 0 and len(pool) >= 1024
    assert all(len(m.body) == 100 and m.topic == TOPIC for m in pool)
    assert len({m.body for m in pool}) == len(pool)


@pytest.mark.parametrize("batch", [1, 7, 32])
def test_run_bench_produces_and_consumes_every_message(batch: int) -> None:
    seen: list[tuple[str, int, int]] = []
    config = BenchConfig(store="bench_memory", messages=1000, size=64, batch=batch)
    result = run_bench(config, kernel=memory_kernel(), progress=lambda *a: seen.append(a))
    assert set(result.phases) == {"produce", "consume", "consume_raw"}
    for phase in result.phases.values():
        assert phase.messages == 1000
        assert phase.nbytes == 1000 * 64
        assert phase.seconds > 0 and phase.msgs_per_s > 0
    assert ("produce", 1000, 1000) in seen and ("consume_raw", 1000, 1000) in seen
    data = result.as_dict()
    assert data["produce_msgs_per_s"] > 0 and data["consume_msgs_per_s"] > 0
    assert data["produce_cpu_msgs_per_s"] > 0 and data["consume_raw_cpu_msgs_per_s"] > 0
    assert data["peak_rss_mib"] > 1
    assert "fsyncs_per_s" not in data  # async flush: nothing to count
    puts = data["puts_per_s"] * result.phases["produce"].seconds
    assert puts == pytest.approx(-(-1000 // batch), rel=0.01)


def test_threads_in_sync_mode_report_puts_and_fsyncs(tmp_path: Path) -> None:
    config = BenchConfig(
        store="bench_memory",
        messages=400,
        size=16,
        batch=1,
        flush="sync",
        threads=4,
        data_dir=str(tmp_path / "kept"),
    )
    result = run_bench(config, kernel=memory_kernel())
    data = result.as_dict()
    assert data["consume_msgs_per_s"] > 0 and result.phases["consume"].messages == 400
    assert data["fsyncs"] == 400  # the memory store fsyncs once per put
    assert data["puts_per_s"] == pytest.approx(data["fsyncs_per_s"], rel=0.01)
    assert (tmp_path / "kept" / "marker").exists()  # --data-dir is kept


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_rss_mode_reports_anonymous_and_file_peaks() -> None:
    config = BenchConfig(store="bench_memory", messages=2000, size=512, rss=True)
    data = run_bench(config, kernel=memory_kernel()).as_dict()
    assert 1 < data["peak_rss_anon_mib"] <= data["peak_rss_mib"]
    assert data["peak_rss_file_mib"] > 0  # the interpreter's own mapped files


def test_temporary_directory_is_removed(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[Path] = []
    real = MemoryStore.__init__

    def spy(self: MemoryStore, path: Any, **kw: Any) -> None:
        made.append(Path(path))
        real(self, path, **kw)

    monkeypatch.setattr(MemoryStore, "__init__", spy)
    run_bench(BenchConfig(store="bench_memory", messages=10, size=8), kernel=memory_kernel())
    assert made and not made[0].exists()


def test_lost_messages_are_an_error() -> None:
    with pytest.raises(Exception, match="NO_NEW_MSG"):
        run_bench(BenchConfig(store="bench_losing", messages=10, size=8), kernel=memory_kernel())


def test_fsync_counter_counts_and_restores(tmp_path: Path) -> None:
    import mmap

    real_fsync, real_mmap = os.fsync, mmap.mmap
    path = tmp_path / "f"
    path.write_bytes(bytes(4096))
    with FsyncCounter() as counter, path.open("r+b") as f:
        os.fsync(f.fileno())
        m = mmap.mmap(f.fileno(), 4096)
        m[:2] = b"hi"
        m.flush()
        m.close()
    assert counter.count == 2
    assert os.fsync is real_fsync and mmap.mmap is real_mmap


def _invoke(args: list[str]) -> Any:
    return CliRunner().invoke(main, ["bench", *args])


def test_cli_json_with_memory_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mqcore.benchmark.Kernel", memory_kernel)
    result = _invoke(["--store", "bench_memory", "-n", "200", "--size", "32", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["store"] == "bench_memory" and data["messages"] == 200
    for key in ("produce", "consume", "consume_raw"):
        assert data[f"{key}_msgs_per_s"] > 0 and data[f"{key}_mb_per_s"] > 0


def test_cli_table_with_memory_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mqcore.benchmark.Kernel", memory_kernel)
    result = _invoke(["--store", "bench_memory", "-n", "100", "--size", "16", "--rss"])
    assert result.exit_code == 0, result.output
    assert "msgs/s" in result.stdout and "MB/s" in result.stdout
    assert "peak RSS" in result.stdout


def test_unknown_store_lists_the_registered_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mqcore.benchmark.Kernel", memory_kernel)
    result = _invoke(["--store", "nosuch", "-n", "10", "--json"])
    assert result.exit_code == 1
    assert "unknown store 'nosuch'" in result.output
    assert "bench_memory" in result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # a clean click error, not a crash


# --- the real stores -------------------------------------------------------------------

REAL_STORES = [n for n in Kernel().names("store") if not n.startswith("bench_")]


@pytest.mark.parametrize(
    "store",
    REAL_STORES
    or [pytest.param("none", marks=pytest.mark.skip(reason="no store is registered yet"))],
)
def test_real_store_through_cli_runner(store: str) -> None:
    result = _invoke(["--store", store, "-n", "300", "--size", "100", "--batch", "8", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["store"] == store and data["produce_msgs_per_s"] > 0
    assert data["consume_msgs_per_s"] > 0 and data["consume_raw_msgs_per_s"] > 0


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "store",
    REAL_STORES
    or [pytest.param("none", marks=pytest.mark.skip(reason="no store is registered yet"))],
)
def test_real_store_through_a_subprocess(store: str, tmp_path: Path) -> None:
    script = Path(sys.executable).with_name("mqcore")
    cmd = (
        [str(script)]
        if script.exists()
        else [sys.executable, "-c", "from mqcore.cli import main; main()"]
    )
    args = ["bench", "--store", store, "-n", "500", "--size", "256", "--json"]
    args += ["--data-dir", str(tmp_path / "data")]
    proc = subprocess.run(cmd + args, capture_output=True, text=True, timeout=100, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)  # stdout is exactly one JSON object
    assert data["messages"] == 500 and data["produce_msgs_per_s"] > 0
    assert data["consume_msgs_per_s"] > 0
    assert any((tmp_path / "data").iterdir())


def test_store_options_reach_the_store() -> None:
    """-o NAME=VALUE passes store options (JSON values); bad ones are clear errors."""
    ok = _invoke(["-n", "200", "--size", "64", "-o", "segment_size=65536", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["consume_msgs_per_s"] > 0
    unknown = _invoke(["-n", "10", "-o", "no_such_option=1", "--json"])
    assert unknown.exit_code != 0
    assert "no_such_option" in unknown.output and "segment_size" in unknown.output
    malformed = _invoke(["-n", "10", "-o", "segment_size"])
    assert malformed.exit_code == 2 and "NAME=VALUE" in malformed.output
    invalid = _invoke(["-n", "10", "-o", "segment_size=tiny", "--json"])
    assert invalid.exit_code != 0 and "segment_size" in invalid.output


def test_threads_progress_counts_the_whole_phase() -> None:
    """With several queues, each read phase's bar ends at the phase's total, as the table."""
    seen: list[tuple[str, int, int]] = []
    config = BenchConfig(store="bench_memory", messages=400, size=16, batch=1, threads=4)
    result = run_bench(config, kernel=memory_kernel(), progress=lambda *a: seen.append(a))
    for phase in ("produce", "consume", "consume_raw"):
        reports = [(done, total) for name, done, total in seen if name == phase]
        assert reports[-1] == (400, 400) == (result.phases[phase].messages, 400)
        assert all(total == 400 for _, total in reports)
        assert [d for d, _ in reports] == sorted(d for d, _ in reports)  # never goes back


def test_json_names_the_store_options() -> None:
    """A figure says what it measured: ``-o`` options are echoed (check_crc_on_read here)."""
    result = _invoke(["--store", "mmap", "-n", "200", "--json", "-o", "check_crc_on_read=true"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["store_options"] == {"check_crc_on_read": True}
    assert data["consume_msgs_per_s"] > 0
