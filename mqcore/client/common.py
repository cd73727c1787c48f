"""What producers and consumers share: client ids, resolving ``broker=``, and validation."""

from __future__ import annotations

import os
import socket
import threading
from typing import Any

from mqcore.broker.broker import Broker, TopicRoute
from mqcore.broker.codes import NOT_FOUND_TOPIC_EXCEPTION, ResponseCode
from mqcore.errors import BrokerError, InvalidArgumentError, MQClientError

__all__ = ["ClientBase", "client_ip", "resolve_broker"]


def client_ip() -> str:
    """This host's address as RocketMQ clients report it (loopback when unknown)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def resolve_broker(broker: Any) -> Broker:
    """The in-process :class:`Broker` behind ``broker=`` (addresses come with remoting)."""
    if isinstance(broker, Broker):
        return broker
    if isinstance(broker, str):
        raise InvalidArgumentError(
            f"broker={broker!r}: connecting to an address needs the remoting client, which this "
            "version of mqcore does not have yet; pass an in-process Broker"
        )
    raise InvalidArgumentError(f"broker= must be a Broker, got {type(broker).__name__}")


class ClientBase:
    """Lifecycle and topic routes common to producers and consumers."""

    def __init__(self, group: str, broker: Any, instance_name: str | None) -> None:
        self.group = group
        self.broker = resolve_broker(broker)
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
