"""``mqcore serve --metrics-listen``: Prometheus text at /metrics, /healthz and /readyz, each
family moving by what the broker did, and nothing left behind by close()."""

from __future__ import annotations

import socket
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from mqtest import wait_until

from mqcore import Message, MessageQueue
from mqcore.client.producer import Producer
from mqcore.client.pull_consumer import PullConsumer
from mqcore.commands.serve import serve
from mqcore.errors import InvalidArgumentError
from mqcore.protocol.codes import RequestCode
from mqcore.server import Server

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = pytest.mark.timeout(120)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode()


def _scrape(server: Server) -> Samples:
    """Every sample of /metrics, by name and labels (the text must parse)."""
    assert server.metrics is not None
    status, text = _get(f"http://{server.metrics.address}/metrics")
    assert status == 200
    out: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return _value(after, name, **labels) - _value(before, name, **labels)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with Server(tmp_path, "127.0.0.1:0", "mmap", metrics_listen="127.0.0.1:0") as s:
        s.broker.create_topic("M", queue_nums=2)
        yield s


def test_each_family_moves_by_what_the_broker_did(server: Server) -> None:
    before = _scrape(server)
    batch = [Message(topic="M", body=b"b" * 100, keys=f"k{i}") for i in range(5)]
    with Producer("pg", namesrv_addr=server.address) as producer:
        batched = producer.send_batch(batch)
        singles = [producer.send(Message(topic="M", body=b"s" * 50)) for _ in range(3)]
        # A timer message, held until long after the test
        far = int(time.time() * 1000) + 3_600_000
        producer.send(Message(topic="M", body=b"later", deliver_time_ms=far))
        after_put = _scrape(server)
    assert all(r.message_queue.topic == "M" for r in [batched, *singles])
    assert _delta(before, after_put, "rocketmq_producer_messages_total", topic="M") == 8
    # The bytes put are the commit log's growth: every record stored went to topic M, but
    # for the timer message, which went to the timer topic.
    size = "rocketmq_producer_message_size_bytes_total"
    topics = {dict(labels)["topic"] for name, labels in after_put if name == size}
    put_bytes = sum(_delta(before, after_put, size, topic=t) for t in topics)
    assert put_bytes == _delta(before, after_put, "mqcore_store_commitlog_bytes")
    assert _delta(before, after_put, "rocketmq_producer_messages_total", topic="M") * 50 < (
        put_bytes
    )
    assert _delta(before, after_put, "mqcore_timer_pending_messages") == 1
    # One request per send: the batch under its own code, the others as SEND_MESSAGE_V2
    # (the timer message too).
    count = "mqcore_request_duration_seconds_count"
    batch_code, single_code = (
        str(int(RequestCode.SEND_BATCH_MESSAGE)),
        str(int(RequestCode.SEND_MESSAGE_V2)),
    )
    assert _delta(before, after_put, count, code=batch_code) == 1
    assert _delta(before, after_put, count, code=single_code) == 4

    batch_queue = batched.message_queue
    high = server.broker.store.max_offset("M", batch_queue.queue_id)
    assert high >= 5
    with PullConsumer("cg", namesrv_addr=server.address) as consumer:
        assert wait_until(
            lambda: (
                _value(_scrape(server), "rocketmq_group_count_of_online_consumers", group="cg") == 1
            ),
            10,
        )
        assert _value(_scrape(server), "mqcore_connections") >= 1
        pulled = 0
        pulls = 0
        for queue_id in (0, 1):
            mq = MessageQueue("M", batched.message_queue.broker_name, queue_id)
            result = consumer.pull(mq, "*", 0, 3)
            pulls += 1
            pulled += len(result.msg_found_list)
        # At most three from each queue
        assert pulled == sum(min(3, server.broker.store.max_offset("M", q)) for q in (0, 1))
        assert pulled >= 4
        before_pull = after_put
        after_pull = _scrape(server)
        assert _delta(before_pull, after_pull, "rocketmq_consumer_messages_total",
                      topic="M", group="cg") == pulled  # fmt: skip
        pull_code = str(int(RequestCode.PULL_MESSAGE))
        assert _delta(before_pull, after_pull, count, code=pull_code) == pulls
        # The group commits 2 of the batch's queue: it lags by the rest.
        consumer.update_consume_offset(batch_queue, 2)
    lagging = _scrape(server)
    assert (
        _value(
            lagging,
            "rocketmq_group_diff",
            group="cg",
            topic="M",
            queue_id=str(batch_queue.queue_id),
        )
        == high - 2
    )
    server.broker.update_consumer_offset("cg", "M", batch_queue.queue_id, high)
    caught_up = _scrape(server)
    assert (
        _value(
            caught_up,
            "rocketmq_group_diff",
            group="cg",
            topic="M",
            queue_id=str(batch_queue.queue_id),
        )
        == 0
    )

    assert _value(caught_up, "mqcore_store_disk_bytes") > 0
    total = _value(caught_up, "mqcore_disk_bytes", state="total")
    assert 0 < _value(caught_up, "mqcore_disk_bytes", state="used") <= total
    assert _value(caught_up, "process_resident_memory_bytes") > 0
    assert ("process_cpu_seconds_total", frozenset()) in caught_up
    # A master with no slave connected: the replication family is there, without a slave.
    assert _value(caught_up, "mqcore_replication_connections") == 0


def test_health_and_readiness(server: Server) -> None:
    assert server.metrics is not None
    base = f"http://{server.metrics.address}"
    assert _get(f"{base}/healthz") == (200, "ok\n")
    assert _get(f"{base}/readyz") == (200, "ok\n")
    server._serving = False  # as while the server starts or stops
    assert _get(f"{base}/readyz") == (503, "not ready\n")
    assert _get(f"{base}/healthz")[0] == 200


def test_close_stops_the_listener_and_its_thread(tmp_path: Path) -> None:
    import threading

    threads = set(threading.enumerate())
    server = Server(tmp_path, "127.0.0.1:0", metrics_listen="127.0.0.1:0")
    assert server.metrics is not None
    host, port = server.metrics.address.rsplit(":", 1)
    assert any(t.name == "mqcore-metrics" for t in threading.enumerate())
    server.close()
    with pytest.raises(OSError):
        socket.create_connection((host, int(port)), timeout=2).close()
    assert wait_until(lambda: set(threading.enumerate()) <= threads, 10)
    # The broker no longer carries the counting plugin.
    assert not server.broker.kernel.pm.has_plugin("mqcore-metrics")


def test_without_metrics_nothing_counts(tmp_path: Path) -> None:
    with Server(tmp_path, "127.0.0.1:0") as server:
        assert server.metrics is None
        assert server.processor.pulled is None
        assert server.remoting.processor is server.processor
        assert not server.broker.kernel.hook.mqcore_messages_stored.get_hookimpls()


def test_a_taken_metrics_port_is_refused_and_nothing_leaks(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(InvalidArgumentError, match=f"127.0.0.1:{port}.*--metrics-listen"):
            Server(tmp_path, "127.0.0.1:0", metrics_listen=f"127.0.0.1:{port}")
    # The store was closed: it opens again.
    with Server(tmp_path, "127.0.0.1:0"):
        pass


def test_serve_without_prometheus_client_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # import fails
    result = CliRunner().invoke(
        serve,
        ["--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), "--metrics-listen", "127.0.0.1:0"],
    )
    assert result.exit_code == 1
    assert "pip install 'mqcore[metrics]'" in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_replication_lag_per_slave(tmp_path: Path) -> None:
    with Server(tmp_path / "m", "127.0.0.1:0", metrics_listen="127.0.0.1:0") as master:
        master.broker.create_topic("R", queue_nums=1)
        master.broker.send_message("R", 0, [Message(topic="R", body=b"x" * 1000)])
        alone = _scrape(master)
        assert _value(alone, "mqcore_replication_connections") == 0
        assert not [k for k in alone if k[0] == "mqcore_replication_lag_bytes"]
        slave_settings = {
            "broker_role": "SLAVE",
            "broker_id": 1,
            "ha_master_address": master.ha_address,
        }
        with Server(tmp_path / "s", "127.0.0.1:0", settings=slave_settings) as slave:
            label = f"1@{slave.address}"

            def caught_up() -> bool:
                got = _scrape(master)
                return (
                    ("mqcore_replication_lag_bytes", frozenset({("slave", label)})) in got
                    and _value(got, "mqcore_replication_lag_bytes", slave=label) == 0
                    and _value(got, "mqcore_replication_connections") == 1
                )

            assert wait_until(caught_up, 20)
            assert slave.broker.store.max_offset("R", 0) == 1


def test_half_messages_pending_by_topic(server: Server) -> None:
    """rocketmq_half_messages counts the undecided transactions of each real topic."""
    from mqcore import LocalTransactionState, TransactionProducer

    class Undecided:
        def execute_local_transaction(self, msg: Message, arg: object) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

        def check_local_transaction(self, msg: object) -> LocalTransactionState:
            return LocalTransactionState.UNKNOW

    before = _scrape(server)
    with TransactionProducer("txp", namesrv_addr=server.address, listener=Undecided()) as p:
        for _ in range(2):
            p.send_message_in_transaction(Message(topic="M", body=b"undecided"))
    after = _scrape(server)
    assert _delta(before, after, "rocketmq_half_messages", topic="M") == 2
    assert _value(after, "rocketmq_half_messages", topic="RMQ_SYS_TRANS_HALF_TOPIC") == 0


def test_flush_and_dispatch_lag_of_the_store(tmp_path: Path, store_name: str) -> None:
    """rocketmq_storage_flush_behind_bytes: an ASYNC_FLUSH store whose flush is an hour away
    shows a put's bytes until it is flushed; rocketmq_storage_dispatch_behind_bytes stays 0
    (a put dispatches its records before it returns)."""
    lazy = {"store_options": {"flush_mode": "ASYNC_FLUSH", "flush_interval_ms": 3_600_000}}
    with Server(
        tmp_path, "127.0.0.1:0", store_name, settings=lazy, metrics_listen="127.0.0.1:0"
    ) as server:
        server.broker.create_topic("F", queue_nums=1)
        flush, dispatch = (
            "rocketmq_storage_flush_behind_bytes",
            "rocketmq_storage_dispatch_behind_bytes",
        )
        server.broker.store.flush()
        before = _scrape(server)
        assert (flush, frozenset({("store", store_name)})) in before
        assert _value(before, flush, store=store_name) == 0
        results = server.broker.send_message("F", 0, [Message(topic="F", body=b"f" * 500)] * 4)
        put = _scrape(server)
        assert _delta(before, put, flush, store=store_name) == sum(r.size for r in results)
        assert (dispatch, frozenset({("store", store_name)})) in put
        assert _value(put, dispatch, store=store_name) == 0
        server.broker.store.flush()
        flushed = _scrape(server)
        assert _value(flushed, flush, store=store_name) == 0
        assert _value(flushed, dispatch, store=store_name) == 0
