"""The bundled offset stores ``broker`` (clustering) and ``local_file`` (broadcasting)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

import mqcore
from mqcore.atomicfile import backup_path
from mqcore.errors import InvalidArgumentError, StoreCorruptedError
from mqcore.interfaces import OffsetStore
from mqcore.message import MessageQueue

MQ0 = MessageQueue("T", "broker-a", 0)
MQ1 = MessageQueue("T", "broker-a", 1)
MQ_U = MessageQueue("U", "broker-a", 0)


class FakeBroker:
    """The two broker methods the ``broker`` store uses, over a dict, counting calls."""

    def __init__(self) -> None:
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.queries = 0
        self.commits: list[tuple[str, str, int, int]] = []
        self.fail = False

    def query_consumer_offset(self, consumer_group: str, mq: MessageQueue) -> int:
        self.queries += 1
        if self.fail:
            raise ConnectionError("broker down")
        return self.offsets.get((consumer_group, mq.topic, mq.queue_id), -1)

    def update_consumer_offset(
        self, consumer_group: str, mq: MessageQueue, commit_offset: int
    ) -> None:
        if self.fail:
            raise ConnectionError("broker down")
        self.commits.append((consumer_group, mq.topic, mq.queue_id, commit_offset))
        self.offsets[(consumer_group, mq.topic, mq.queue_id)] = commit_offset


@pytest.fixture(scope="module")
def kernel() -> mqcore.Kernel:
    return mqcore.Kernel(autoload=False)


@pytest.fixture
def fake() -> FakeBroker:
    return FakeBroker()


@pytest.fixture(params=["broker", "local_file"])
def make_store(
    request: pytest.FixtureRequest, kernel: mqcore.Kernel, fake: FakeBroker, tmp_path: Path
) -> Iterator[Callable[[], Any]]:
    """Builds stores of one kind sharing one backing place (a broker, a directory)."""
    if request.param == "broker":
        yield lambda: kernel.offset_store("broker", broker=fake, group="g")
    else:
        yield lambda: kernel.offset_store(
            "local_file", group="g", client_id="10.0.0.1@c1", store_dir=tmp_path
        )


# --- both stores ------------------------------------------------------------------------------


def test_registered_and_protocol(kernel: mqcore.Kernel, make_store: Callable[[], Any]) -> None:
    assert {"broker", "local_file"} <= set(kernel.names("offset_store"))
    assert isinstance(make_store(), OffsetStore)


def test_unknown_mq_gives_minus_one(make_store: Callable[[], Any]) -> None:
    store = make_store()
    store.load()
    assert store.read_offset(MQ0) == -1
    assert store.read_offset(MQ0, from_store=True) == -1
    store.update_offset(MQ1, 5)
    assert store.read_offset(MQ0) == -1


def test_caching_without_persist(make_store: Callable[[], Any]) -> None:
    store = make_store()
    store.update_offset(MQ0, 10)
    assert store.read_offset(MQ0) == 10
    # nothing reached the backing store yet
    assert store.read_offset(MQ0, from_store=True) == -1
    # ... and a READ_FROM_STORE miss does not clear the cache
    assert store.read_offset(MQ0) == 10


def test_increase_only(make_store: Callable[[], Any]) -> None:
    store = make_store()
    store.update_offset(MQ0, 10, increase_only=True)  # first value is always taken
    assert store.read_offset(MQ0) == 10
    store.update_offset(MQ0, 7, increase_only=True)
    assert store.read_offset(MQ0) == 10
    store.update_offset(MQ0, 12, increase_only=True)
    assert store.read_offset(MQ0) == 12
    store.update_offset(MQ0, 3)  # without increase_only it may move back (a reset)
    assert store.read_offset(MQ0) == 3


def test_persist_all_then_reload_after_restart(make_store: Callable[[], Any]) -> None:
    store = make_store()
    store.update_offset(MQ0, 10)
    store.update_offset(MQ1, 20)
    store.update_offset(MQ_U, 2**40)
    store.persist_all([MQ0, MQ1, MQ_U])
    restarted = make_store()
    restarted.load()
    assert restarted.read_offset(MQ0) == 10
    assert restarted.read_offset(MQ1) == 20
    assert restarted.read_offset(MQ_U, from_store=True) == 2**40


def test_unpersisted_progress_is_lost_by_a_crash(make_store: Callable[[], Any]) -> None:
    """The documented window: offsets cached since the last persist are not on disk."""
    store = make_store()
    store.update_offset(MQ0, 10)
    store.persist_all([MQ0])
    store.update_offset(MQ0, 15)  # the consumer dies before the next persist
    restarted = make_store()
    restarted.load()
    assert restarted.read_offset(MQ0) == 10


def test_persist_one(make_store: Callable[[], Any]) -> None:
    store = make_store()
    store.update_offset(MQ0, 10)
    store.update_offset(MQ1, 20)
    store.persist(MQ1)
    store.persist(MQ_U)  # not cached: nothing to do
    fresh = make_store()
    assert fresh.read_offset(MQ1, from_store=True) == 20
    assert fresh.read_offset(MQ0, from_store=True) == -1


def test_read_from_store_overrides_cache(make_store: Callable[[], Any]) -> None:
    writer, reader = make_store(), make_store()
    reader.update_offset(MQ0, 1)
    writer.update_offset(MQ0, 50)
    writer.persist_all([MQ0])
    assert reader.read_offset(MQ0) == 1
    assert reader.read_offset(MQ0, from_store=True) == 50
    assert reader.read_offset(MQ0) == 50  # the store's value is now cached


def test_remove_offset_and_clone(make_store: Callable[[], Any]) -> None:
    store = make_store()
    for mq, offset in ((MQ0, 1), (MQ1, 2), (MQ_U, 3)):
        store.update_offset(mq, offset)
    assert store.clone_offset_table("T") == {MQ0: 1, MQ1: 2}
    assert store.clone_offset_table() == {MQ0: 1, MQ1: 2, MQ_U: 3}
    clone = store.clone_offset_table("")
    clone[MQ0] = 99
    assert store.read_offset(MQ0) == 1, "clone_offset_table returns a copy"
    store.remove_offset(MQ1)
    store.remove_offset(MQ1)  # twice is harmless
    assert store.clone_offset_table("T") == {MQ0: 1}
    assert store.read_offset(MQ1) == -1


def test_empty_persist_all_does_nothing(make_store: Callable[[], Any]) -> None:
    store = make_store()
    store.update_offset(MQ0, 1)
    store.persist_all([])
    assert make_store().read_offset(MQ0, from_store=True) == -1
    assert store.read_offset(MQ0) == 1


def test_not_a_message_queue_is_refused(make_store: Callable[[], Any]) -> None:
    with pytest.raises(InvalidArgumentError, match="MessageQueue"):
        make_store().update_offset(("T", "broker-a", 0), 1)


@pytest.mark.timeout(60)
def test_concurrent_updates_and_persists(make_store: Callable[[], Any]) -> None:
    store = make_store()
    mqs = [MessageQueue("T", "broker-a", q) for q in range(4)]
    errors: list[BaseException] = []

    def consume(mq: MessageQueue) -> None:
        try:
            for offset in range(1, 501):
                store.update_offset(mq, offset, increase_only=True)
                if offset % 100 == 0:
                    store.persist_all(mqs)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=consume, args=(mq,)) for mq in mqs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    store.persist_all(mqs)
    restarted = make_store()
    restarted.load()
    assert {mq: restarted.read_offset(mq) for mq in mqs} == dict.fromkeys(mqs, 500)


# --- options --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("broker", {"group": "g"}, "needs option.*broker"),
        ("broker", {"broker": object(), "group": "g"}, "query_consumer_offset"),
        ("broker", {"broker": FakeBroker(), "group": ""}, "group"),
        ("broker", {"broker": FakeBroker(), "group": "g", "grup": 1}, "unknown option.*grup"),
        ("local_file", {"group": "g"}, "needs option.*client_id"),
        ("local_file", {"group": "..", "client_id": "c"}, "directory name"),
        ("local_file", {"group": "g", "client_id": "a/b"}, "directory name"),
        ("local_file", {"group": "g", "client_id": "c", "broker": 1}, "unknown option.*broker"),
    ],
)
def test_bad_options(kernel: mqcore.Kernel, name: str, options: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        kernel.offset_store(name, **options)


# --- broker ----------------------------------------------------------------------------------


def test_broker_memory_first_then_store(kernel: mqcore.Kernel, fake: FakeBroker) -> None:
    fake.offsets[("g", "T", 0)] = 42
    store = kernel.offset_store("broker", broker=fake, group="g")
    store.load()  # a no-op for the broker store
    assert fake.queries == 0
    assert store.read_offset(MQ0) == 42  # not cached: asks the broker
    assert store.read_offset(MQ0) == 42  # now cached
    assert fake.queries == 1
    assert store.read_offset(MQ0, from_store=True) == 42
    assert fake.queries == 2


def test_broker_persist_commits_and_drops_unowned(kernel: mqcore.Kernel, fake: FakeBroker) -> None:
    store = kernel.offset_store("broker", broker=fake, group="g")
    store.update_offset(MQ0, 10)
    store.update_offset(MQ1, 20)
    store.persist_all([MQ0])  # MQ1 was rebalanced away
    assert fake.commits == [("g", "T", 0, 10)]
    assert store.clone_offset_table() == {MQ0: 10}
    assert fake.offsets.get(("g", "T", 1)) is None


def test_broker_commits_only_what_changed_since_read_or_commit(
    kernel: mqcore.Kernel, fake: FakeBroker
) -> None:
    """A member that took a queue and consumed nothing from it does not commit the offset it
    read: the previous owner's last commit, landing after that read, stays."""
    fake.offsets[("g", "T", 0)] = 10
    old = kernel.offset_store("broker", broker=fake, group="g")
    new = kernel.offset_store("broker", broker=fake, group="g")
    old.update_offset(MQ0, 15)  # consumed up to 15, not committed yet
    assert new.read_offset(MQ0, True) == 10  # the next owner takes the queue
    old.persist(MQ0)  # the previous owner's release commit
    new.persist_all([MQ0])
    new.persist(MQ0)
    assert fake.commits == [("g", "T", 0, 15)]
    new.update_offset(MQ0, 17, True)  # now it has progress of its own
    new.persist_all([MQ0])
    new.persist_all([MQ0])  # committed once: unchanged since
    new.persist(MQ0)
    assert fake.commits == [("g", "T", 0, 15), ("g", "T", 0, 17)]


def test_broker_failures_are_logged_not_raised(kernel: mqcore.Kernel, fake: FakeBroker) -> None:
    store = kernel.offset_store("broker", broker=fake, group="g")
    store.update_offset(MQ0, 10)
    fake.fail = True
    with capture_logs() as logs:
        store.persist_all([MQ0])
        store.persist(MQ0)
        assert store.read_offset(MQ1) == -2  # RocketMQ's "the broker failed"
    assert [e["event"] for e in logs] == [
        "offset_commit_failed",
        "offset_commit_failed",
        "offset_query_failed",
    ]
    assert store.read_offset(MQ0) == 10, "a failed commit keeps the cached offset"
    fake.fail = False
    store.persist_all([MQ0])
    assert fake.offsets[("g", "T", 0)] == 10


def test_broker_groups_are_separate(kernel: mqcore.Kernel, fake: FakeBroker) -> None:
    a = kernel.offset_store("broker", broker=fake, group="a")
    b = kernel.offset_store("broker", broker=fake, group="b")
    a.update_offset(MQ0, 5)
    a.persist_all([MQ0])
    assert b.read_offset(MQ0) == -1


# --- local file ----------------------------------------------------------------------------


def local(kernel: mqcore.Kernel, tmp_path: Path, **options: Any) -> Any:
    options = {"group": "g", "client_id": "10.0.0.1@c1", "store_dir": tmp_path, **options}
    return kernel.offset_store("local_file", **options)


def test_local_file_layout_and_shape(kernel: mqcore.Kernel, tmp_path: Path) -> None:
    store = local(kernel, tmp_path)
    assert store.path == tmp_path / "10.0.0.1@c1" / "g" / "offsets.json"
    store.update_offset(MQ1, 7)
    store.update_offset(MQ0, 3)
    store.persist_all([MQ0, MQ1])
    obj = json.loads(store.path.read_text())
    assert obj["group"] == "g"
    assert obj["clientId"] == "10.0.0.1@c1"
    assert obj["offsetTable"] == [
        {"topic": "T", "brokerName": "broker-a", "queueId": 0, "offset": 3},
        {"topic": "T", "brokerName": "broker-a", "queueId": 1, "offset": 7},
    ]


def test_local_file_default_dir_honours_env(
    kernel: mqcore.Kernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MQCORE_OFFSETS_DIR", str(tmp_path / "env"))
    store = kernel.offset_store("local_file", group="g", client_id="c")
    assert store.path == tmp_path / "env" / "c" / "g" / "offsets.json"
    assert kernel.offset_store("local_file", group="g", client_id="c", store_dir=None).path == (
        store.path
    )
    monkeypatch.delenv("MQCORE_OFFSETS_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    store = kernel.offset_store("local_file", group="g", client_id="c")
    assert store.path == tmp_path / "home" / ".mqcore_offsets" / "c" / "g" / "offsets.json"


def test_local_file_keeps_entries_of_other_queues(kernel: mqcore.Kernel, tmp_path: Path) -> None:
    first = local(kernel, tmp_path)
    first.update_offset(MQ0, 1)
    first.update_offset(MQ1, 2)
    first.persist_all([MQ0, MQ1])
    second = local(kernel, tmp_path)
    second.update_offset(MQ0, 9)
    second.persist_all([MQ0])
    third = local(kernel, tmp_path)
    third.load()
    assert third.clone_offset_table() == {MQ0: 9, MQ1: 2}


def test_local_file_unchanged_offsets_are_not_rewritten(
    kernel: mqcore.Kernel, tmp_path: Path
) -> None:
    store = local(kernel, tmp_path)
    store.update_offset(MQ0, 1)
    store.persist_all([MQ0])
    store.update_offset(MQ0, 2)
    store.persist_all([MQ0])
    inode = store.path.stat().st_ino
    store.persist_all([MQ0])
    assert store.path.stat().st_ino == inode, "an idle consumer must not rewrite the file"
    assert json.loads(backup_path(store.path).read_text())["offsetTable"][0]["offset"] == 1


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[:30]),
        lambda p: p.write_bytes(b""),
        lambda p: p.write_text('{"offsetTable": [{"topic": "T"}]}'),
    ],
    ids=["truncated", "empty", "bad-entry"],
)
def test_local_file_corrupt_falls_back_to_backup(
    kernel: mqcore.Kernel, tmp_path: Path, damage: Callable[[Path], object]
) -> None:
    store = local(kernel, tmp_path)
    store.update_offset(MQ0, 10)
    store.persist_all([MQ0])
    store.update_offset(MQ0, 20)
    store.persist_all([MQ0])
    damage(store.path)
    restarted = local(kernel, tmp_path)
    with capture_logs() as logs:
        restarted.load()
    assert restarted.read_offset(MQ0) == 10
    assert "atomic_file_fallback_to_backup" in [e["event"] for e in logs]
    # the next persist repairs the main file
    restarted.persist_all([MQ0])
    assert json.loads(restarted.path.read_text())["offsetTable"][0]["offset"] == 10


def test_local_file_both_corrupt(kernel: mqcore.Kernel, tmp_path: Path) -> None:
    store = local(kernel, tmp_path)
    store.update_offset(MQ0, 10)
    store.persist_all([MQ0])
    store.persist_all([MQ0])
    store.path.write_text("{")
    backup_path(store.path).write_text("{")
    with pytest.raises(StoreCorruptedError, match="offsets.json"):
        local(kernel, tmp_path).load()
    with capture_logs() as logs:
        assert local(kernel, tmp_path).read_offset(MQ0, from_store=True) == -1
        # persisting still works: the cached offsets replace the unreadable file
        store.update_offset(MQ0, 11)
        store.persist_all([MQ0])
    local_events = [e["event"] for e in logs if e["event"].startswith("local_")]
    assert local_events == ["local_offsets_unreadable", "local_offsets_unreadable"]
    fresh = local(kernel, tmp_path)
    fresh.load()
    assert fresh.read_offset(MQ0) == 11


def test_local_file_write_error_is_logged(
    kernel: mqcore.Kernel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    store = local(kernel, tmp_path)
    store.update_offset(MQ0, 1)

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with capture_logs() as logs:
        store.persist_all([MQ0])
    monkeypatch.undo()
    assert [e["event"] for e in logs] == ["local_offsets_persist_failed"]
    store.persist_all([MQ0])  # retried once the disk has room
    assert local(kernel, tmp_path).read_offset(MQ0, from_store=True) == 1
