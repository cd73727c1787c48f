"""RocketMQ's Java clients (``rocketmq-client`` 4.9.8 and the 5.x remoting client) against
``mqcore serve``: every way the producer sends, the push consumer's modes, the lite pull
consumer, the admin API as ``mqadmin`` drives it, and a SIGKILL of the server between a
consumer's runs. Each scenario runs in one JVM (tests/java/src) and reports JSON lines.
Run by the tox env ``java``."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mqjava import CLIENT_VERSIONS, events, require_java, run_scenario
from mqserve import ServeProcess

from mqcore.client.admin import MQAdmin

pytestmark = pytest.mark.timeout(300)


def _setups() -> list[Any]:
    """(client version, store): the 4.x client on every store under test, the 5.x client on
    the first (the stores differ behind the server, the clients in front of it)."""
    wanted = [s for s in os.environ.get("MQCORE_TEST_STORES", "mmap,lmdb").split(",") if s]
    v4, v5 = CLIENT_VERSIONS
    out = [pytest.param((v4, s), id=f"{v4}-{s}") for s in wanted]
    return [*out, pytest.param((v5, wanted[0]), id=f"{v5}-{wanted[0]}")]


class Setup:
    """A running ``mqcore serve`` and the client version that talks to it."""

    def __init__(self, version: str, server: ServeProcess, work: Path) -> None:
        self.version = version
        self.server = server
        self.work = work
        self.runs = 0

    @property
    def address(self) -> str:
        return self.server.address

    def topic(self, name: str, queues: int = 4) -> str:
        """Create topic ``name`` with ``queues`` queues (before any consumer starts: a
        consumer of an unknown topic waits for its next route refresh, 30 s)."""
        with MQAdmin(self.address) as admin:
            admin.create_topic(name, queues)
        return name

    def run(self, name: str, *args: str, timeout: float = 120) -> list[dict[str, Any]]:
        self.runs += 1
        work = self.work / f"{self.runs}-{name}"
        lines = run_scenario(self.version, work, name, self.address, *args, timeout=timeout)
        assert_all_served(self.server)
        return lines


def assert_all_served(server: ServeProcess) -> None:
    """Every request the clients sent was one the server serves (docs/remote.md lists the
    codes; any other is answered REQUEST_CODE_NOT_SUPPORTED and logged)."""
    assert server.log is not None
    unserved = [x for x in server.log.read_text().splitlines() if "request_not_supported" in x]
    assert not unserved, f"requests mqcore serve does not serve: {sorted(set(unserved))}"


@pytest.fixture(scope="module", params=_setups())
def setup(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    """One server per (client version, store), shared by the module's scenarios."""
    require_java()
    version, store = request.param
    base = tmp_path_factory.mktemp(f"java-{version}-{store}")
    srv = ServeProcess(base / "data", store=store, log=base / "serve.log")
    srv.start()
    try:
        yield Setup(version, srv, base / "clients")
    finally:
        srv.stop()


def _sent_ok(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent = [x for x in events(lines, "sent") if x["kind"] != "oneway"]
    assert sent and {x["status"] for x in sent} == {"SEND_OK"}
    return sent


def test_producer_sends_every_way(setup: Setup) -> None:
    """Sync (with a compressed body), async, oneway, batch, a queue selector and two delay
    levels: all stored, each where the client was told."""
    topic = setup.topic("JavaProduce")
    lines = setup.run("produce", topic)
    sent = _sent_ok(lines)
    kinds = defaultdict(list)
    for x in events(lines, "sent"):
        kinds[x["kind"]].append(x)
    assert {k: len(v) for k, v in kinds.items()} == {
        "sync": 5, "async": 4, "oneway": 2, "batch": 1, "selector": 12, "delay": 2,
    }  # fmt: skip
    assert kinds["batch"][0]["count"] == 8
    assert len(kinds["batch"][0]["msgId"].split(",")) == 8  # one id per message of the batch
    assert len({x["msgId"] for x in sent}) == len(sent)
    # The selector's queue: the same order id, the same queue, offsets rising.
    by_order: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for x in kinds["selector"]:
        by_order[x["orderId"]].append(x)
    for order_id, xs in by_order.items():
        assert {x["queueId"] for x in xs} == {order_id % 4}
        offsets = [x["queueOffset"] for x in xs]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)

    with MQAdmin(setup.address) as admin:
        big = admin.query_by_key(topic, "key-big")
        assert [m.body.decode() for m in big] == [kinds["sync"][4]["body"]]
        assert [m.properties.get("i") for m in admin.query_by_key(topic, "key-sync-2")] == ["2"]
        for body in ("oneway-0", "oneway-1", "async-3", "batch-7", "ordered-11"):
            assert [m.body.decode() for m in admin.query_by_key(topic, f"key-{body}")] == [body]
        # Delay levels 1 (1 s) and 2 (5 s): each lands in the topic once its time has come.
        deadline = time.monotonic() + 30
        delayed: dict[int, Any] = {}
        while len(delayed) < 2 and time.monotonic() < deadline:
            for level in (1, 2):
                found = admin.query_by_key(topic, f"key-delay-{level}")
                if found:
                    delayed[level] = found[0]
            time.sleep(0.2)
        assert sorted(delayed) == [1, 2], "the delayed messages never arrived"
        for level, wait_ms in ((1, 1000), (2, 5000)):
            m = delayed[level]
            assert m.body.decode() == f"delay-{level}"
            assert m.store_timestamp - m.born_timestamp >= wait_ms - 50
        stats = admin.topic_stats(topic)
        assert sum(o.max_offset for o in stats.offset_table.values()) == 5 + 4 + 2 + 8 + 12 + 2


def _received(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return events(lines, "received")


def test_push_concurrently_by_tag(setup: Setup) -> None:
    topic = setup.topic("JavaPushTag")
    got = _received(setup.run("push", topic, "CID_java_tag", "tag:TagA", "20", "10"))
    assert sorted(int(x["body"][2:]) for x in got) == list(range(0, 20, 2))
    assert {x["tags"] for x in got} == {"TagA"}
    assert {x["keys"] for x in got} == {f"k-{i}" for i in range(0, 20, 2)}
    # Concurrently: more than one consuming thread took part.
    assert len({x["thread"] for x in got}) > 1


def test_push_by_sql92(setup: Setup) -> None:
    topic = setup.topic("JavaPushSql")
    lines = setup.run("push", topic, "CID_java_sql", "sql:a >= 14 AND TAGS = 'TagB'", "20", "3")
    assert sorted(int(x["a"]) for x in _received(lines)) == [15, 17, 19]


def test_push_orderly(setup: Setup) -> None:
    """Orderly: per queue, messages arrive in the order sent, each queue on one thread at a
    time (the consumer locked it on the broker)."""
    topic = setup.topic("JavaPushOrderly")
    got = _received(setup.run("push", topic, "CID_java_orderly", "orderly", "20", "20"))
    assert sorted(int(x["a"]) for x in got) == list(range(20))
    per_queue: dict[int, list[int]] = defaultdict(list)
    for x in got:
        per_queue[x["queueId"]].append(int(x["a"]))
    assert set(per_queue) == {0, 1}
    for queue_id, seq in per_queue.items():
        assert seq == sorted(seq) and {s % 2 for s in seq} == {queue_id}


def test_push_clustering_shares_the_queues(setup: Setup) -> None:
    topic = setup.topic("JavaPushCluster")
    lines = setup.run("push", topic, "CID_java_cluster", "cluster", "40", "40")
    split = events(lines, "split")
    assert split and sum(split[0]["queues"]) == 4
    got = _received(lines)
    assert sorted(int(x["a"]) for x in got) == list(range(40))  # each once
    assert {x["consumer"] for x in got} == {0, 1}  # both members took part


def test_push_broadcasting_gives_every_member_all(setup: Setup) -> None:
    topic = setup.topic("JavaPushBroadcast")
    got = _received(setup.run("push", topic, "CID_java_broadcast", "broadcast", "10", "20"))
    for member in (0, 1):
        assert sorted(int(x["a"]) for x in got if x["consumer"] == member) == list(range(10))


def test_push_retries_then_dead_letter_queue(setup: Setup) -> None:
    """Every delivery fails: each message comes back once from the retry topic, then goes to
    the group's dead-letter queue (maxReconsumeTimes 1)."""
    topic = setup.topic("JavaPushDlq")
    group = "CID_java_dlq"
    got = _received(setup.run("push", topic, group, "dlq", "3", "6"))
    tries: dict[str, list[int]] = defaultdict(list)
    for x in got:
        tries[x["body"]].append(x["reconsumeTimes"])
    assert {b: sorted(t) for b, t in tries.items()} == {f"m-{i}": [0, 1] for i in range(3)}
    with MQAdmin(setup.address) as admin:
        dead = sorted(m.body.decode() for m in admin.dead_letters(group))
    assert dead == ["m-0", "m-1", "m-2"]


def test_lite_pull_subscribe_commits(setup: Setup) -> None:
    topic = setup.topic("JavaLiteSubscribe")
    group = "CID_java_lite"
    lines = setup.run("lite", topic, group, "subscribe", "16")
    assert sorted(int(x["body"][2:]) for x in _received(lines)) == list(range(16))
    assert events(lines, "committed") == [{"event": "committed", "sum": 16}]
    with MQAdmin(setup.address) as admin:
        stats = admin.consume_stats(group, topic)
        assert sum(o.consumer_offset for o in stats.offset_table.values()) == 16


def test_lite_pull_assign_and_seek(setup: Setup) -> None:
    topic = setup.topic("JavaLiteAssign")
    lines = setup.run("lite", topic, "CID_java_assign", "assign", "16")
    assert events(lines, "assigned") == [{"event": "assigned", "queues": 4}]
    got = _received(lines)
    sent = {x["body"]: x for x in events(lines, "sent")}
    wanted = sorted(b for b, x in sent.items() if x["queueOffset"] >= 2)
    assert sorted(x["body"] for x in got) == wanted
    assert min(x["queueOffset"] for x in got) == 2


def test_admin_as_mqadmin_uses_it(setup: Setup) -> None:
    """Topic create/list/route/stats, consumer progress, a message by either id and by key,
    and a reset of the group's offsets by time."""
    lines = setup.run("admin", "JavaAdmin", "CID_java_admin")

    def one(event: str) -> dict[str, Any]:
        found = events(lines, event)
        assert len(found) == 1, f"{event}: {found}"
        return found[0]

    cluster = one("cluster")
    assert cluster["masters"] == [setup.address]
    assert one("topicList")["has"] is True
    route = one("route")
    assert [(q["read"], q["write"], q["perm"]) for q in route["queues"]] == [(8, 8, 6)]
    assert [b["master"] for b in route["brokers"]] == [setup.address]
    assert one("consumed")["count"] == 10
    assert one("topicStats") == {"event": "topicStats", "queues": 8, "messages": 10}
    progress = one("progress")
    assert (progress["brokerOffset"], progress["consumerOffset"], progress["diff"]) == (10, 10, 0)
    assert one("viewByOffsetId")["body"] == "order 3"
    assert one("viewByOffsetId")["keys"] == "order-3"
    assert one("viewByUniqId")["body"] == "order 3"
    assert one("queryByKey")["bodies"] == ["order 5"]
    # mqcore resets a group with no member online itself (its members read the committed
    # offsets when they start), so mqadmin's fallback for CONSUMER_NOT_ONLINE is not needed.
    assert one("reset")["path"] == "broker:8"
    after = one("progressAfterReset")
    assert (after["brokerOffset"], after["consumerOffset"], after["diff"]) == (10, 0, 10)


def _await_persisted(data_dir: Path, key: str, total: int) -> None:
    """Until the broker's offsets file holds ``total`` for ``key`` (topic@group)."""
    path = data_dir / "config" / "consumerOffset.json"
    deadline = time.monotonic() + 20
    seen = None
    while time.monotonic() < deadline:
        try:
            seen = json.loads(path.read_text())["offsetTable"].get(key)
        except (OSError, ValueError):
            seen = None  # not written yet, or being replaced
        if seen and sum(seen.values()) == total:
            return
        time.sleep(0.05)
    raise AssertionError(f"{key} never persisted {total} in {path}: {seen}")


def test_consumer_resumes_after_sigkill_and_restart(setup: Setup, tmp_path: Path) -> None:
    """A group's committed offsets outlive a SIGKILL of the server: the next run gets only
    what was sent after."""
    srv = ServeProcess(tmp_path / "data", store=setup.server.store, log=tmp_path / "serve.log")
    addr = srv.start("127.0.0.1:0", "flush_consumer_offset_interval_ms=200")
    try:
        with MQAdmin(addr) as admin:
            admin.create_topic("JavaRestart", 4)

        def run(name: str, *args: str) -> list[dict[str, Any]]:
            setup.runs += 1
            work = setup.work / f"{setup.runs}-{name}"
            lines = run_scenario(setup.version, work, name, addr, *args)
            assert_all_served(srv)
            return lines

        assert len(_sent_ok(run("send", "JavaRestart", "0", "10"))) == 10
        first = _received(run("consume", "JavaRestart", "CID_java_restart", "10"))
        assert sorted(x["body"] for x in first) == sorted(f"m-{i}" for i in range(10))
        # The consumer committed on shutdown; the broker persists every 200 ms here.
        _await_persisted(tmp_path / "data", "JavaRestart@CID_java_restart", 10)
        srv.kill()
        addr = srv.start(addr, "flush_consumer_offset_interval_ms=200")
        assert len(_sent_ok(run("send", "JavaRestart", "10", "10"))) == 10
        second = _received(run("consume", "JavaRestart", "CID_java_restart", "10"))
        assert sorted(x["body"] for x in second) == sorted(f"m-{i}" for i in range(10, 20))
    finally:
        srv.stop()


def test_transaction_producer_commit_rollback_and_check(setup: Setup, tmp_path: Path) -> None:
    """TransactionMQProducer: a commit and a rollback decided at once, and two UNKNOW outcomes
    the broker's check resolves by calling the producer's checkLocalTransaction (one commits,
    one rolls back). The consumer, running throughout, sees the two committed messages only,
    and the checked one only after its check."""
    srv = ServeProcess(tmp_path / "data", store=setup.server.store, log=tmp_path / "serve.log")
    # Checks soon after the send: halves older than 1 s, a pass every 500 ms.
    addr = srv.start("127.0.0.1:0", "transaction_timeout=1000", "transaction_check_interval=500")
    try:
        with MQAdmin(addr) as admin:
            admin.create_topic("JavaTx", 4)
        setup.runs += 1
        work = setup.work / f"{setup.runs}-transaction"
        lines = run_scenario(setup.version, work, "transaction", addr, "JavaTx", "CID_java_tx")
        assert_all_served(srv)
        sent = {x["body"]: x for x in events(lines, "sent")}
        assert {b: (x["status"], x["state"]) for b, x in sent.items()} == {
            "commit": ("SEND_OK", "COMMIT_MESSAGE"),
            "rollback": ("SEND_OK", "ROLLBACK_MESSAGE"),
            "check-commit": ("SEND_OK", "UNKNOW"),
            "check-rollback": ("SEND_OK", "UNKNOW"),
        }
        assert {b: x["transactionId"] for b, x in sent.items()} == {
            b: x["msgId"] for b, x in sent.items()
        }
        executed = {x["body"]: x for x in events(lines, "executed")}
        assert {b: x["arg"] for b, x in executed.items()} == {b: f"arg-{b}" for b in sent}
        checked = events(lines, "checked")
        # Each undecided half checked (at least once: a check may repeat before the answer is
        # stored), carrying its real topic, keys and the transaction id of the send.
        assert {x["body"] for x in checked} == {"check-commit", "check-rollback"}
        for x in checked:
            assert (x["topic"], x["keys"]) == ("JavaTx", f"key-{x['body']}")
            assert x["transactionId"] == sent[x["body"]]["transactionId"]
        got = _received(lines)
        assert sorted(x["body"] for x in got) == ["check-commit", "commit"]
        assert {x["tags"] for x in got} == {"TagTx"}
        by_body = {x["body"]: x for x in got}
        assert by_body["commit"]["msgId"] == sent["commit"]["msgId"]
        assert by_body["check-commit"]["msgId"] == sent["check-commit"]["msgId"]
        # Undecided, no consumer saw it: its delivery comes after its first check.
        first_check = next(i for i, x in enumerate(lines) if x.get("event") == "checked"
                           and x["body"] == "check-commit")  # fmt: skip
        delivered = next(i for i, x in enumerate(lines) if x.get("event") == "received"
                         and x["body"] == "check-commit")  # fmt: skip
        assert first_check < delivered
        with MQAdmin(addr) as admin:
            for body in ("rollback", "check-rollback"):
                assert admin.query_by_key("JavaTx", f"key-{body}") == []
            stats = admin.topic_stats("JavaTx")
            assert sum(o.max_offset for o in stats.offset_table.values()) == 2
    finally:
        srv.stop()
