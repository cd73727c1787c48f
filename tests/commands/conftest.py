"""Fixtures of the command tests: a name server with two broker groups, or one server."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import pytest

from mqcore.client.transport_remote import RemoteTransport
from mqcore.errors import TopicNotExistError
from mqcore.server import NamesrvServer, Server

FAST = {"register_name_server_period_ms": 300}


def wait_for(cond: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@attrs.define
class Cluster:
    """Where the commands point (``address``) and the broker groups behind it."""

    address: str
    brokers: dict[str, Server]

    def routed(self, topic: str) -> bool:
        """Whether the name server routes ``topic`` to every broker group."""
        transport = RemoteTransport(self.address)
        try:
            route = transport.get_route_info_by_topic(topic)
            return len(route.broker_datas) == len(self.brokers)
        except TopicNotExistError:
            return False
        finally:
            transport.close()

    def wait_routed(self, topic: str) -> None:
        """Until the name server routes ``topic`` to every broker group."""
        wait_for(lambda: self.routed(topic))


@pytest.fixture(params=["namesrv", "serve"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Cluster]:
    if request.param == "serve":
        with Server(tmp_path / "a", "127.0.0.1:0") as srv:
            yield Cluster(srv.address, {"broker-a": srv})
        return
    with NamesrvServer("127.0.0.1:0") as ns:
        a_settings = {**FAST, "namesrv_addr": ns.address, "broker_name": "broker-a"}
        b_settings = {**a_settings, "broker_name": "broker-b"}
        with (
            Server(tmp_path / "a", "127.0.0.1:0", settings=a_settings) as a,
            Server(tmp_path / "b", "127.0.0.1:0", settings=b_settings) as b,
        ):
            wait_for(lambda: len(ns.tables.cluster_info()["brokerAddrTable"]) == 2)
            yield Cluster(ns.address, {"broker-a": a, "broker-b": b})
