"""What producers and consumers share: client ids, resolving ``broker=``, and validation."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from mqcore.client.api import BrokerAPI
from mqcore.errors import BrokerError, InvalidArgumentError, MQClientError
from mqcore.protocol.codes import NOT_FOUND_TOPIC_EXCEPTION, ResponseCode
from mqcore.protocol.route import TopicRoute

__all__ = ["ClientBase", "client_ip", "resolve_broker"]


def client_ip() -> str:
    """This host's address as RocketMQ clients report it (loopback when unknown)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def resolve_broker(broker: Any = None, namesrv_addr: str | None = None) -> BrokerAPI:
    """The transport behind ``broker=`` / ``namesrv_addr=``: a direct one for an in-process
    :class:`~mqcore.broker.Broker`, a remoting one for ``"host:port[;host:port]"``."""
    from mqcore.broker.broker import Broker  # the embedded transport is optional for remotes

    if broker is not None and namesrv_addr is not None:
        raise InvalidArgumentError("pass broker= or namesrv_addr=, not both")
    if isinstance(broker, Broker):
        from mqcore.client.transport_embedded import EmbeddedTransport

        return EmbeddedTransport(broker)
    addr = namesrv_addr if namesrv_addr is not None else broker
    if isinstance(addr, str):
        from mqcore.client.transport_remote import RemoteTransport

        return RemoteTransport(addr)
    if broker is None and namesrv_addr is None:
        raise InvalidArgumentError("a client needs broker= (a Broker or 'host:port')")
    raise InvalidArgumentError(
        f"broker= must be a Broker or a 'host:port' string, got {type(broker).__name__}"
    )


class ClientBase:
    """Lifecycle and topic routes common to producers and consumers."""

    def __init__(
        self,
        group: str,
        broker: Any,
        instance_name: str | None,
        namesrv_addr: str | None = None,
    ) -> None:
        self.group = group
        #: The client/broker seam (:class:`~mqcore.client.api.BrokerAPI`): every broker call
        #: goes through it, in-process or over the network.
        self.broker: BrokerAPI = resolve_broker(broker, namesrv_addr)
        self.kernel = self.broker.kernel
        # RocketMQ replaces the default instance name by the pid so that two clients of one
        # group in different processes on one host get different ids.
        self.instance_name = instance_name or str(os.getpid())
        self.client_id = f"{client_ip()}@{self.instance_name}"
        self._state_lock = threading.Lock()
        self._started = False
        self._shutdown = False

    def _check_running(self) -> None:
        if not self._started or self._shutdown:
            state = "shut down" if self._shutdown else "not started"
            raise MQClientError(
                f"{type(self).__name__} of group {self.group!r} is {state}; call start() first",
                code=ResponseCode.SERVICE_NOT_AVAILABLE,
            )

    def _claim_shutdown(self) -> bool:
        """Mark the client shut down; True when it was running and the caller must stop it."""
        with self._state_lock:
            was_running = self._started and not self._shutdown
            self._shutdown = True
            return was_running

    def route(self, topic: str) -> TopicRoute:
        """The topic's route, or RocketMQ's "No route info of this topic" error."""
        try:
            return self.broker.get_route_info_by_topic(topic)
        except BrokerError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                raise MQClientError(
                    f"No route info of this topic: {topic}", code=NOT_FOUND_TOPIC_EXCEPTION
                ) from exc
            raise

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def start(self) -> None:
        """Start the client (idempotent)."""
        raise NotImplementedError

    def shutdown(self) -> None:
        """Stop the client (idempotent)."""
        raise NotImplementedError
