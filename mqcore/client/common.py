"""What producers and consumers share: client ids, resolving ``broker=``, and validation."""

from __future__ import annotations

import os
import socket
import threading
import time
import weakref
from typing import Any

from mqcore.client.api import BrokerAPI
from mqcore.errors import BrokerError, InvalidArgumentError, MQClientError, NoRouteInfoError
from mqcore.protocol.codes import NOT_FOUND_TOPIC_EXCEPTION, ResponseCode
from mqcore.protocol.route import TopicRoute

__all__ = ["DEFAULT_INSTANCE_NAME", "ClientBase", "client_ip", "resolve_broker"]

#: RocketMQ's default instance name (``rocketmq.client.name``).
DEFAULT_INSTANCE_NAME = "DEFAULT"

# Running clients of this process by (role, client id, group): RocketMQ's MQClientInstance
# refuses a second producer or consumer of one group under one client id. Weak values: a
# client dropped without shutdown() frees its name when it is collected.
_RUNNING: weakref.WeakValueDictionary[tuple[str, str, str], ClientBase] = (
    weakref.WeakValueDictionary()
)
_RUNNING_LOCK = threading.Lock()


def client_ip() -> str:
    """This host's address as RocketMQ clients report it (loopback when unknown)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


def resolve_broker(
    broker: Any = None,
    namesrv_addr: str | None = None,
    *,
    credentials: Any = None,
    tls: Any = None,
) -> BrokerAPI:
    """The transport behind ``broker=`` / ``namesrv_addr=``: a direct one for an in-process
    :class:`~mqcore.broker.Broker`, a remoting one for ``"host:port[;host:port]"``.

    A broker is recognised by what the embedded transport calls on it
    (:class:`~mqcore.client.transport_embedded.InProcessBroker`): the clients import nothing
    of :mod:`mqcore.broker`. ``credentials`` (an ACL account's ``(access_key, secret_key)``)
    and ``tls`` (True or an :class:`ssl.SSLContext`) are for a remote server only.
    """
    if broker is not None and namesrv_addr is not None:
        raise InvalidArgumentError("pass broker= or namesrv_addr=, not both")
    addr = namesrv_addr if namesrv_addr is not None else broker
    if isinstance(addr, str):
        from mqcore.client.transport_remote import RemoteTransport

        return RemoteTransport(addr, credentials=credentials, tls=tls)
    if credentials is not None or tls:
        raise InvalidArgumentError(
            "credentials= and tls= are for a remote server (broker='host:port'); an "
            "in-process broker checks no ACL"
        )
    from mqcore.client.transport_embedded import EmbeddedTransport, InProcessBroker

    if isinstance(broker, InProcessBroker):
        return EmbeddedTransport(broker)
    if broker is None and namesrv_addr is None:
        raise InvalidArgumentError("a client needs broker= (a Broker or 'host:port')")
    raise InvalidArgumentError(
        f"broker= must be a Broker or a 'host:port' string, got {type(broker).__name__}"
    )


class ClientBase:
    """Lifecycle and topic routes common to producers and consumers.

    The client id is ``<ip>@<instance name>``. An instance name left at its default
    (``DEFAULT``) is replaced at :meth:`start` by ``<pid>#<monotonic ns>`` for producers and
    clustering consumers (RocketMQ 4.9's ``changeInstanceNameToPID``), so every client object
    is a member of its own; broadcasting consumers keep ``DEFAULT``, so that their local
    offset file is found again by the next process.
    """

    #: "producer" or "consumer": a group name is unique per role and client id.
    role = "client"

    def __init__(
        self,
        group: str,
        broker: Any,
        instance_name: str | None,
        namesrv_addr: str | None = None,
        credentials: Any = None,
        tls: Any = None,
    ) -> None:
        self.group = group
        #: The client/broker seam (:class:`~mqcore.client.api.BrokerAPI`): every broker call
        #: goes through it, in-process or over the network.
        self.broker: BrokerAPI = resolve_broker(
            broker, namesrv_addr, credentials=credentials, tls=tls
        )
        self.kernel = self.broker.kernel
        self.instance_name = instance_name or DEFAULT_INSTANCE_NAME
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

    def _claim_client_id(self, unique: bool) -> None:
        """At start: make the id (``unique``: a default instance name becomes
        ``<pid>#<monotonic ns>``) and refuse a second running client of this role and group
        under the same id in this process, as RocketMQ does."""
        if unique and self.instance_name == DEFAULT_INSTANCE_NAME:
            self.instance_name = f"{os.getpid()}#{time.monotonic_ns()}"
            self.client_id = f"{client_ip()}@{self.instance_name}"
        key = (self.role, self.client_id, self.group)
        with _RUNNING_LOCK:
            other = _RUNNING.get(key)
            if other is not None and other is not self:
                raise MQClientError(
                    f"The {self.role} group[{self.group}] has been created before, specify "
                    f"another name please: a running {type(other).__name__} of this process "
                    f"already uses client id {self.client_id!r}; give this one another "
                    "instance_name, or shut the other down first"
                )
            _RUNNING[key] = self

    def _release_client_id(self) -> None:
        """Free the id taken by :meth:`_claim_client_id` (at shutdown)."""
        key = (self.role, self.client_id, self.group)
        with _RUNNING_LOCK:
            if _RUNNING.get(key) is self:
                del _RUNNING[key]

    def _claim_shutdown(self) -> bool:
        """Mark the client shut down; True when it was running and the caller must stop it."""
        with self._state_lock:
            was_running = self._started and not self._shutdown
            self._shutdown = True
            return was_running

    def route(self, topic: str, *, fresh: bool = False) -> TopicRoute:
        """The topic's route (``fresh``: asked again now, not cached), or RocketMQ's
        "No route info of this topic" error (:class:`~mqcore.errors.NoRouteInfoError`)."""
        try:
            if fresh:
                return self.broker.refresh_route(topic)
            return self.broker.get_route_info_by_topic(topic)
        except BrokerError as exc:
            if exc.code == ResponseCode.TOPIC_NOT_EXIST:
                raise NoRouteInfoError(
                    f"No route info of this topic: {topic}; create it first (`mqcore topic "
                    f"create {topic}`, or Broker.create_topic) or turn on the broker's "
                    "auto_create_topic_enable",
                    topic=topic,
                    code=NOT_FOUND_TOPIC_EXCEPTION,
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
