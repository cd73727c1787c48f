"""What a push consumer says of topics it finds no route for: a subscribed topic that does not
exist is warned of once; the group's own retry topic, not registered yet, is not warned of."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path
from typing import Any

import pytest
from mqtest import wait_until
from structlog.testing import capture_logs

from mqcore import Broker, ConsumeConcurrentlyStatus, PushConsumer
from mqcore.server import NamesrvServer, Server, registration

pytestmark = pytest.mark.timeout(120)


def _consumer(broker: Any, *topics: str, **kw: Any) -> PushConsumer:
    c = PushConsumer("g", broker, rebalance_interval=0.05, **kw)
    for topic in topics:
        c.subscribe(topic)
    c.register_message_listener(lambda msgs, ctx: ConsumeConcurrentlyStatus.CONSUME_SUCCESS)
    return c


def _about(logs: list[dict[str, Any]], topic: str) -> list[tuple[str, str]]:
    return [(e["log_level"], e["event"]) for e in logs if e.get("topic") == topic]


def test_a_misspelt_topic_is_warned_of_once(tmp_path: Path, store_name: str) -> None:
    with Broker(tmp_path, store=store_name, auto_create_topic_enable=False) as broker:
        broker.create_topic("Orders", queue_nums=2)
        with capture_logs() as logs:
            c = _consumer(broker, "Orders", "Ordres")
            c.start()
            try:
                # Many rebalances, each finding no route for the misspelt topic.
                assert wait_until(lambda: len(_about(logs, "Ordres")) >= 5, timeout=30)
                assert len(c.assigned_queues("Orders")) == 2
            finally:
                c.shutdown()
    about = _about(logs, "Ordres")
    assert about[0] == ("warning", "consumer_topic_not_exist")
    assert set(about[1:]) == {("debug", "rebalance_no_route")}
    [warned] = [e for e in logs if e["event"] == "consumer_topic_not_exist"]
    assert warned["group"] == "g" and "mqcore topic create" in warned["hint"]


def test_a_new_group_s_retry_topic_not_registered_yet_is_no_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a name server, the retry topic the broker creates at the group's first heartbeat
    has no route until the name server hears of it (a broker registers it before answering,
    but a name server can miss that registration): normal, so logged at debug only."""
    with Broker(tmp_path / "data") as broker:
        broker.create_topic("T", queue_nums=2)
    # The broker registers its topics once, at start, and not again while the test runs: the
    # registration its first heartbeat asks for reaches no name server.
    monkeypatch.setattr(registration, "_CHECK_S", 3600.0)

    def unheard(self: registration.NamesrvRegistrar) -> concurrent.futures.Future[None]:
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        fut.set_result(None)
        return fut

    monkeypatch.setattr(registration.NamesrvRegistrar, "register_now", unheard)
    with (
        NamesrvServer("127.0.0.1:0") as namesrv,
        Server(tmp_path / "data", "127.0.0.1:0", settings={"namesrv_addr": namesrv.address}),
        capture_logs() as logs,
    ):
        c = _consumer(None, "T", namesrv_addr=namesrv.address)
        c.start()
        try:
            assert wait_until(lambda: len(_about(logs, "%RETRY%g")) >= 3, timeout=30)
            assert len(c.assigned_queues("T")) == 2
        finally:
            c.shutdown()
    assert ("debug", "rebalance_no_route") in _about(logs, "%RETRY%g")
    assert not [e for e in logs if e["log_level"] == "warning"]
