"""Every client suite runs on both transports (the ``transport`` fixture, autouse).

``embedded``: clients given a :class:`~mqcore.broker.Broker` call it directly. ``remote``:
the same tests, but each client handed a ``Broker`` is connected instead to a remoting server
started in front of that broker, so it drives the broker over RocketMQ frames on a loopback
socket. The tests themselves do not change: one client code path, two transports.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import mqcore.client.common as common

TRANSPORTS = ["embedded", "remote"]


@pytest.fixture(params=TRANSPORTS, autouse=True)
def transport(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Each client transport under test."""
    if request.param == "embedded":
        yield "embedded"
        return
    from mqcore.broker import Broker
    from mqcore.client.transport_remote import RemoteTransport
    from mqcore.remoting.server import RemotingServer
    from mqcore.server.processor import BrokerProcessor

    servers: list[tuple[Any, Any, str]] = []
    resolve = common.resolve_broker

    def remote(broker: Any = None, namesrv_addr: str | None = None, **security: Any) -> Any:
        if not isinstance(broker, Broker):
            return resolve(broker, namesrv_addr, **security)
        # The client gets the broker's kernel, as an application configures its remote
        # clients with the same plugins (hooks, filters) as its embedded ones.
        for _, target, addr in servers:
            if target is broker:
                return RemoteTransport(addr, kernel=broker.kernel)
        processor = BrokerProcessor(broker, "")
        server = RemotingServer(processor, "127.0.0.1", 0)
        host, port = server.start()
        processor.address = addr = f"{host}:{port}"
        servers.append((server, broker, addr))
        return RemoteTransport(addr, kernel=broker.kernel)

    monkeypatch.setattr(common, "resolve_broker", remote)
    try:
        yield "remote"
    finally:
        for server, _, _ in servers:
            server.close()
