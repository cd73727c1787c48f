"""The broker's consumer offset table: commits, queries, administration, persistence."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from mqcore.atomicfile import backup_path
from mqcore.broker.offsets import CONSUMER_OFFSET_FILE, ConsumerOffsetManager
from mqcore.errors import InvalidArgumentError, StoreCorruptedError

HOST = "127.0.0.1:50000"


@pytest.fixture
def manager(tmp_path: Path) -> ConsumerOffsetManager:
    return ConsumerOffsetManager.in_data_dir(tmp_path)


def reopen(m: ConsumerOffsetManager) -> ConsumerOffsetManager:
    """A new manager on the same file, as after a broker restart."""
    fresh = ConsumerOffsetManager(m.path)
    fresh.load()
    return fresh


def test_in_data_dir_uses_rocketmq_layout(tmp_path: Path) -> None:
    m = ConsumerOffsetManager.in_data_dir(tmp_path)
    assert m.path == tmp_path / "config" / "consumerOffset.json"
    assert tmp_path / CONSUMER_OFFSET_FILE == m.path


def test_directory_path_is_refused_with_advice(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="in_data_dir"):
        ConsumerOffsetManager(tmp_path)


def test_unknown_offset_is_minus_one(manager: ConsumerOffsetManager) -> None:
    assert manager.query_offset("g", "T", 0) == -1
    manager.commit_offset(HOST, "g", "T", 0, 5)
    assert manager.query_offset("g", "T", 1) == -1
    assert manager.query_offset("other", "T", 0) == -1
    assert manager.query_group_offsets("g", "U") == {}


def test_commit_and_query(manager: ConsumerOffsetManager) -> None:
    manager.commit_offset(HOST, "g", "T", 0, 10)
    manager.commit_offset(HOST, "g", "T", 1, 20)
    manager.commit_offset(HOST, "g", "T", 0, 11)
    assert manager.query_offset("g", "T", 0) == 11
    assert manager.query_group_offsets("g", "T") == {0: 11, 1: 20}
    # the dict returned is a copy
    manager.query_group_offsets("g", "T")[0] = 999
    assert manager.query_offset("g", "T", 0) == 11


def test_moving_back_is_accepted_and_logged(manager: ConsumerOffsetManager) -> None:
    manager.commit_offset(HOST, "g", "T", 0, 10)
    with capture_logs() as logs:
        manager.commit_offset(HOST, "g", "T", 0, 3)
    assert manager.query_offset("g", "T", 0) == 3
    assert [(e["event"], e["previous"], e["client_host"]) for e in logs] == [
        ("consumer_offset_moved_back", 10, HOST)
    ]


def test_a_reset_moving_back_is_no_warning(manager: ConsumerOffsetManager) -> None:
    """An operator's reset moves offsets back on purpose: logged at debug level only."""
    manager.commit_offset(HOST, "g", "T", 0, 10)
    with capture_logs() as logs:
        manager.commit_offset("", "g", "T", 0, 3, reset=True)
    assert manager.query_offset("g", "T", 0) == 3
    assert [(e["event"], e["log_level"]) for e in logs] == [("consumer_offset_moved_back", "debug")]


@pytest.mark.parametrize(
    ("group", "topic", "queue_id", "offset", "match"),
    [
        ("", "T", 0, 0, "group"),
        ("g@x", "T", 0, 0, "'@'"),
        ("g", "T@y", 0, 0, "'@'"),
        ("g", "T", -1, 0, "queue_id=-1"),
        ("g", "T", 0, -5, "offset=-5"),
    ],
)
def test_bad_commit_arguments(
    manager: ConsumerOffsetManager, group: str, topic: str, queue_id: int, offset: int, match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        manager.commit_offset(HOST, group, topic, queue_id, offset)
    assert manager.offset_table() == {}


def test_groups_and_topics_lookups(manager: ConsumerOffsetManager) -> None:
    manager.commit_offset(HOST, "g1", "T", 0, 1)
    manager.commit_offset(HOST, "g2", "T", 0, 1)
    manager.commit_offset(HOST, "g1", "U", 0, 1)
    manager.commit_offset(HOST, "g1", "%RETRY%g1", 0, 1)
    assert manager.groups_by_topic("T") == {"g1", "g2"}
    assert manager.groups_by_topic("nope") == set()
    assert manager.topics_by_group("g1") == {"T", "U", "%RETRY%g1"}
    assert manager.topics_by_group("g2") == {"T"}
    assert manager.group_topic_map() == {"g1": {"T", "U", "%RETRY%g1"}, "g2": {"T"}}


def test_remove_group_and_topic(manager: ConsumerOffsetManager) -> None:
    manager.commit_offset(HOST, "g1", "T", 0, 1)
    manager.commit_offset(HOST, "g2", "T", 0, 2)
    manager.commit_offset(HOST, "g1", "U", 0, 3)
    manager.commit_offset(HOST, "g2", "U", 0, 4)
    assert manager.remove_group("g1") == 2
    assert manager.topics_by_group("g1") == set()
    assert manager.query_offset("g2", "T", 0) == 2
    assert manager.remove_topic("U") == 1
    assert manager.offset_table() == {"T@g2": {0: 2}}
    assert manager.remove_group("absent") == 0
    assert manager.remove_topic("absent") == 0


def test_remove_group_does_not_touch_groups_with_a_common_prefix(
    manager: ConsumerOffsetManager,
) -> None:
    manager.commit_offset(HOST, "g", "T", 0, 1)
    manager.commit_offset(HOST, "gg", "T", 0, 2)
    manager.commit_offset(HOST, "g", "TT", 0, 3)
    manager.remove_group("g")
    manager.remove_topic("T")
    assert manager.offset_table() == {}
    manager.commit_offset(HOST, "gg", "T", 0, 2)
    manager.commit_offset(HOST, "g", "TT", 0, 3)
    manager.remove_group("g")
    assert manager.offset_table() == {"T@gg": {0: 2}}


def test_clone_offset(manager: ConsumerOffsetManager) -> None:
    manager.commit_offset(HOST, "src", "T", 0, 7)
    manager.commit_offset(HOST, "src", "T", 3, 9)
    manager.commit_offset(HOST, "dst", "T", 5, 100)
    assert manager.clone_offset("src", "dst", "T") is True
    assert manager.query_group_offsets("dst", "T") == {0: 7, 3: 9}
    # a copy: later commits of the source do not show in the destination
    manager.commit_offset(HOST, "src", "T", 0, 8)
    assert manager.query_offset("dst", "T", 0) == 7
    assert manager.clone_offset("missing", "dst2", "T") is False
    assert manager.groups_by_topic("T") == {"src", "dst"}


def test_dirty_tracking(manager: ConsumerOffsetManager) -> None:
    assert not manager.dirty
    assert manager.persist() is False
    assert not manager.path.exists()
    manager.commit_offset(HOST, "g", "T", 0, 1)
    assert manager.dirty
    assert manager.persist() is True
    assert not manager.dirty
    mtime = manager.path.stat().st_mtime_ns
    # the same offset again changes nothing: no rewrite
    manager.commit_offset(HOST, "g", "T", 0, 1)
    assert not manager.dirty
    assert manager.persist() is False
    assert manager.path.stat().st_mtime_ns == mtime
    for change in (
        lambda: manager.commit_offset(HOST, "g", "T", 0, 2),
        lambda: manager.clone_offset("g", "h", "T"),
        lambda: manager.remove_group("h"),
        lambda: manager.remove_topic("T"),
    ):
        change()
        assert manager.dirty
        assert manager.persist() is True
    # removing what is not there is not a change
    manager.remove_topic("T")
    assert not manager.dirty


def test_file_has_rocketmq_shape(manager: ConsumerOffsetManager) -> None:
    manager.commit_offset(HOST, "g", "T", 0, 10)
    manager.commit_offset(HOST, "g", "T", 1, 20)
    manager.commit_offset(HOST, "CID_other", "%RETRY%g", 0, 3)
    manager.persist()
    obj = json.loads(manager.path.read_text())
    assert obj["offsetTable"] == {"T@g": {"0": 10, "1": 20}, "%RETRY%g@CID_other": {"0": 3}}
    assert obj["dataVersion"]["counter"] == 1
    assert obj["dataVersion"]["timestamp"] > 0


def test_round_trip_and_restart(manager: ConsumerOffsetManager) -> None:
    for q in range(8):
        manager.commit_offset(HOST, "g", "T", q, q * 1000 + 2**33)
    manager.commit_offset(HOST, "g2", "T", 0, 1)
    manager.persist()
    restarted = reopen(manager)
    assert restarted.offset_table() == manager.offset_table()
    assert restarted.query_offset("g", "T", 7) == 7000 + 2**33
    assert not restarted.dirty
    # the data version continues across restarts
    restarted.commit_offset(HOST, "g", "T", 0, 1)
    restarted.persist()
    assert json.loads(restarted.path.read_text())["dataVersion"]["counter"] == 2


def test_load_of_new_broker(manager: ConsumerOffsetManager) -> None:
    assert manager.load() is False
    assert manager.offset_table() == {}


def test_load_replaces_memory(manager: ConsumerOffsetManager) -> None:
    manager.commit_offset(HOST, "g", "T", 0, 5)
    manager.persist()
    manager.commit_offset(HOST, "g", "T", 0, 6)
    manager.commit_offset(HOST, "h", "T", 0, 6)
    assert manager.load() is True
    assert manager.offset_table() == {"T@g": {0: 5}}
    assert not manager.dirty


def test_load_reads_the_file_apache_rocketmq_writes(manager: ConsumerOffsetManager) -> None:
    """Apache RocketMQ's broker writes this file with fastjson: tabs, and queue ids as bare
    numbers (not JSON); a broker started on its directory reads the offsets."""
    manager.path.parent.mkdir(parents=True, exist_ok=True)
    manager.path.write_text(
        '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n'
        '\t\t"timestamp":1795924815019\n\t},\n\t"groupTopicMap":{},\n'
        '\t"offsetTable":{\n\t\t"T@g":{\n\t\t\t0:5,\n\t\t\t1:7\n\t\t}\n\t},\n'
        '\t"pullOffsetTable":{}\n}'
    )
    assert manager.load() is True
    assert manager.offset_table() == {"T@g": {0: 5, 1: 7}}


def test_crash_between_persists_loses_only_the_unpersisted_window(
    manager: ConsumerOffsetManager,
) -> None:
    """Commits after the last persist are lost by a crash; older ones survive.

    This is the documented window (at most one persist interval, 5 s in the broker): the
    group re-reads from the older offset, so messages are delivered again, never skipped.
    """
    manager.commit_offset(HOST, "g", "T", 0, 100)
    manager.commit_offset(HOST, "g", "T", 1, 50)
    manager.persist()
    manager.commit_offset(HOST, "g", "T", 0, 132)  # not persisted: the process "dies" here
    manager.commit_offset(HOST, "g", "U", 0, 9)
    after_crash = reopen(manager)
    assert after_crash.query_offset("g", "T", 0) == 100
    assert after_crash.query_offset("g", "T", 1) == 50
    assert after_crash.query_offset("g", "U", 0) == -1


def test_crash_during_persist_keeps_previous_file(
    manager: ConsumerOffsetManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager.commit_offset(HOST, "g", "T", 0, 1)
    manager.persist()
    manager.commit_offset(HOST, "g", "T", 0, 2)
    real_replace = os.replace

    def crash(src: str, dst: str) -> None:
        if Path(dst) == manager.path:
            raise OSError("simulated crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        manager.persist()
    monkeypatch.undo()
    assert manager.dirty, "a failed persist must be retried"
    assert reopen(manager).query_offset("g", "T", 0) == 1
    assert manager.persist() is True
    assert reopen(manager).query_offset("g", "T", 0) == 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[:20]),  # torn write
        lambda p: p.write_bytes(b""),
        lambda p: p.unlink(),
        lambda p: p.write_text('{"something": "else"}'),  # valid JSON, wrong shape
        lambda p: p.write_text('{"offsetTable": {"no-separator": {"0": 1}}}'),
        lambda p: p.write_text('{"offsetTable": {"T@g": {"0": "12"}}}'),
    ],
    ids=["truncated", "empty", "missing", "wrong-shape", "bad-key", "bad-offset"],
)
def test_damaged_file_falls_back_to_backup(manager: ConsumerOffsetManager, damage) -> None:
    manager.commit_offset(HOST, "g", "T", 0, 10)
    manager.persist()
    manager.commit_offset(HOST, "g", "T", 0, 20)
    manager.persist()
    damage(manager.path)
    with capture_logs() as logs:
        restarted = reopen(manager)
    assert restarted.query_offset("g", "T", 0) == 10
    assert "atomic_file_fallback_to_backup" in [e["event"] for e in logs]


def test_both_files_damaged_refuses_to_start(manager: ConsumerOffsetManager) -> None:
    manager.commit_offset(HOST, "g", "T", 0, 10)
    manager.persist()
    manager.commit_offset(HOST, "g", "T", 0, 20)
    manager.persist()
    manager.path.write_text("{")
    backup_path(manager.path).write_text("[]")
    fresh = ConsumerOffsetManager(manager.path)
    with capture_logs() as logs, pytest.raises(StoreCorruptedError, match="consumerOffset.json"):
        fresh.load()
    assert "consumer_offsets_unreadable" in [e["event"] for e in logs]


def test_replace_table(manager: ConsumerOffsetManager) -> None:
    manager.commit_offset(HOST, "old", "T", 0, 1)
    manager.persist()
    manager.replace_table({"T@g": {"0": 5, 1: 6}})
    assert manager.offset_table() == {"T@g": {0: 5, 1: 6}}
    assert manager.dirty


@pytest.mark.timeout(60)
def test_concurrent_commits_from_threads(manager: ConsumerOffsetManager) -> None:
    """Many committing threads and a persisting thread: nothing lost, file always loadable."""
    n_threads, n_commits = 8, 300
    errors: list[BaseException] = []
    stop = threading.Event()
    start = threading.Barrier(n_threads + 1, timeout=10)

    def committer(i: int) -> None:
        try:
            start.wait()
            for offset in range(1, n_commits + 1):
                manager.commit_offset(HOST, f"g{i % 2}", "T", i, offset)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    def persister() -> None:
        try:
            while not stop.is_set():
                manager.persist()
                reopen(manager)  # every intermediate file must load
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=committer, args=(i,)) for i in range(n_threads)]
    saver = threading.Thread(target=persister)
    for t in threads:
        t.start()
    saver.start()
    start.wait()
    for t in threads:
        t.join(timeout=30)
    stop.set()
    saver.join(timeout=30)
    assert not any(t.is_alive() for t in [*threads, saver])
    assert errors == []
    manager.persist()
    restarted = reopen(manager)
    for i in range(n_threads):
        assert restarted.query_offset(f"g{i % 2}", "T", i) == n_commits
    assert restarted.groups_by_topic("T") == {"g0", "g1"}
