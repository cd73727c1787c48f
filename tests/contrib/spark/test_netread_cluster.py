"""Reading a cluster over the network: two broker groups (a master and a slave each) behind a
name server; one read spans both groups, and a master SIGKILLed mid-read changes no row."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("pyspark")

from mqserve import ServeProcess, free_port

from mqcore import Message, Producer
from mqcore.client.admin import MQAdmin
from mqcore.protocol import admin_bodies, headers
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand
from mqcore.server import NamesrvServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

TOPIC = "Spread"
PER_GROUP = 4  # queues on each group
MESSAGES = 16_000


def _wait(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _stats(client: RemotingClient, addr: str) -> dict[int, int]:
    """Each queue's max offset of ``TOPIC`` as ``addr`` holds it."""
    cmd = RemotingCommand.request(
        RequestCode.GET_TOPIC_STATS_INFO, headers.GetTopicStatsInfoRequestHeader(topic=TOPIC)
    )
    resp = client.invoke(addr, cmd, 5.0)
    if resp.code != ResponseCode.SUCCESS:
        return {}
    table = admin_bodies.TopicStatsTable.decode(resp.body or b"{}").offset_table
    return {mq.queue_id: s.max_offset for mq, s in table.items()}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A name server (in-process) and groups broker-a and broker-b, each a master and a
    slave in processes of their own, holding ``MESSAGES`` messages of ``TOPIC``."""
    base = tmp_path_factory.mktemp("cluster")
    with NamesrvServer("127.0.0.1:0") as ns:
        procs: dict[str, ServeProcess] = {}
        fast = ["register_name_server_period_ms=300", "slave_synchronize_interval_ms=200"]
        try:
            for group in ("broker-a", "broker-b"):
                ha = free_port()
                master = ServeProcess(base / f"{group}-m")
                master.start(
                    "127.0.0.1:0", f"namesrv_addr={ns.address}", f"broker_name={group}",
                    f"ha_listen_port={ha}", *fast,
                )  # fmt: skip
                slave = ServeProcess(base / f"{group}-s")
                slave.start(
                    "127.0.0.1:0", f"namesrv_addr={ns.address}", f"broker_name={group}",
                    "broker_role=SLAVE", "broker_id=1", f"ha_master_address=127.0.0.1:{ha}",
                    *fast,
                )  # fmt: skip
                procs[f"{group}-m"], procs[f"{group}-s"] = master, slave
            with MQAdmin(ns.address) as admin:
                _wait(
                    lambda: sum(len(m) for m in admin.brokers().values()) == 4,
                    "four members registered",
                )
                admin.create_topic(TOPIC, PER_GROUP)
            with Producer("pg", namesrv_addr=ns.address) as producer:
                _wait(
                    lambda: len(producer.route(TOPIC, fresh=True).write_queues()) == 2 * PER_GROUP,
                    "both groups in the route",
                )
                for start in range(0, MESSAGES, 200):
                    producer.send_batch(
                        [
                            Message(topic=TOPIC, body=b"%d" % n, keys=f"k{n}", tags="T")
                            for n in range(start, start + 200)
                        ]
                    )
            client = RemotingClient()
            try:
                for group in ("broker-a", "broker-b"):
                    m, s = procs[f"{group}-m"].address, procs[f"{group}-s"].address
                    _wait(
                        lambda m=m, s=s: _stats(client, m) == _stats(client, s), f"{group} synced"
                    )
            finally:
                client.close()
            yield {"namesrv": ns.address, **procs}
        finally:
            for proc in procs.values():
                if proc.proc is not None and proc.proc.poll() is None:
                    proc.stop()


def _rows(df: Any) -> list[tuple[Any, ...]]:
    return sorted(
        tuple(r) for r in df.select("topic", "queue_id", "queue_offset", "msg_id", "body").collect()
    )


def test_one_read_spans_both_groups_and_a_killed_master_changes_no_row(
    spark: Any, cluster: dict[str, Any]
) -> None:
    """Criterion 3: every message once, from both groups; the same rows again while
    broker-a's master is SIGKILLed during the read (its slave serves the rest)."""

    def load() -> Any:
        return (
            spark.read.format("mqcore")
            .option("namesrv", cluster["namesrv"])
            .option("topic", TOPIC)
            .option("pull_batch_size", "32")
            .option("pulls_in_flight", "1")
            .load()
        )

    before = _rows(load())
    assert len(before) == MESSAGES
    assert sorted(int(r[4]) for r in before) == list(range(MESSAGES))
    hosts = {r[3][:16] for r in before}  # the store host part of each msg_id
    assert len(hosts) == 2, "the read spans both broker groups"

    result: list[Any] = []
    failure: list[BaseException] = []

    def read() -> None:
        try:
            result.extend(_rows(load()))
        except BaseException as exc:  # handed to the test thread
            failure.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    tracker = spark.sparkContext.statusTracker()
    _wait(lambda: bool(tracker.getActiveStageIds()) or not reader.is_alive(), "the read to start")
    cluster["broker-a-m"].kill()
    reader.join(timeout=600)
    assert not reader.is_alive()
    assert not failure, failure
    assert result == before
