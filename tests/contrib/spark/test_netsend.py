"""The network sink's sends across two broker groups: a dead master's rows go to the other
group, pinned rows do not (no Spark: the task's engine, with real servers)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import pyarrow as pa
from mqserve import ServeProcess
from structlog.testing import capture_logs

from mqcore import Kernel
from mqcore.client.admin import MQAdmin
from mqcore.client.transport_remote import RemoteTransport
from mqcore.contrib.spark.netbatch import uniq_prefix
from mqcore.contrib.spark.netsend import SendSettings, send_batches
from mqcore.errors import MQClientError
from mqcore.server import NamesrvServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def groups(tmp_path: Path) -> Iterator[tuple[str, dict[str, ServeProcess]]]:
    """A name server and two broker groups (a master each) serving topic T, 2 queues each."""
    with NamesrvServer("127.0.0.1:0") as ns:
        started: dict[str, ServeProcess] = {}
        try:
            for name in ("broker-a", "broker-b"):
                group = ServeProcess(tmp_path / name)
                group.start(
                    "127.0.0.1:0",
                    f"namesrv_addr={ns.address}",
                    f"broker_name={name}",
                    "register_name_server_period_ms=300",
                )
                started[name] = group
                with MQAdmin(group.address) as admin:
                    admin.create_topic("T", 2)
            deadline = time.monotonic() + 30
            while True:
                route = ns.tables.route("T")
                if route is not None and len(route.broker_datas) == 2:
                    break
                assert time.monotonic() < deadline, "the brokers did not register"
                time.sleep(0.1)
            yield ns.address, started
        finally:
            for group in started.values():
                if group.proc is not None and group.proc.poll() is None:
                    group.stop()


def _count(group: ServeProcess, topic: str) -> int:
    with Kernel().open_store("mmap", group.data_dir / "store", read_only=True) as store:
        return sum(store.max_offset(topic, q) for q in store.queue_ids(topic))


def _batch(rows: int, pinned: int | None = None) -> pa.RecordBatch:
    columns: dict[str, Any] = {"body": pa.array([b"r%d" % i for i in range(rows)], pa.binary())}
    if pinned is not None:
        columns["queue_id"] = pa.array([pinned] * rows, pa.int32())
    return pa.RecordBatch.from_pydict(columns)


def test_a_dead_groups_rows_go_to_the_other_master(groups: Any) -> None:
    """Sends to a killed master are sent again to the live group: every row is stored."""
    namesrv, started = groups
    client = RemoteTransport(namesrv)
    try:
        assert len(client.get_route_info_by_topic("T").broker_datas) == 2  # cached: both
        started["broker-b"].kill()
        with capture_logs() as logs:
            sent = send_batches(
                client, "T", [_batch(1000)], uniq_prefix(1, 0), 0, SendSettings(batch_size=50)
            )
        assert sent == 1000
        assert any(e["event"] == "spark_send_retried" and e["broker"] == "broker-b" for e in logs)
        assert _count(started["broker-a"], "T") == 1000
    finally:
        client.close()


def test_pinned_rows_wait_for_their_own_group(groups: Any) -> None:
    """Rows whose queue_id names the dead group's queue are not moved: the send fails
    naming the queue, and the live group holds none of them."""
    namesrv, started = groups
    client = RemoteTransport(namesrv)
    try:
        route = client.get_route_info_by_topic("T")
        queues = sorted(route.write_queues(), key=lambda q: (q.broker_name, q.queue_id))
        pin = next(i for i, q in enumerate(queues) if q.broker_name == "broker-b")
        started["broker-b"].kill()
        with pytest.raises(MQClientError, match="broker-b"):
            send_batches(
                client, "T", [_batch(10, pinned=pin)], uniq_prefix(1, 0), 0, SendSettings()
            )
        assert _count(started["broker-a"], "T") == 0
    finally:
        client.close()
