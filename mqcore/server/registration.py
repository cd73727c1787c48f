"""A broker's registration with its name servers (RocketMQ's BrokerOuterAPI.registerBrokerAll).

Every ``register_name_server_period_ms`` (30 s), and as soon as its topic table changes, the
broker sends REGISTER_BROKER to each name server in ``namesrv_addr`` (``;``-separated): its
group, id, address, replication address and topics. On close it unregisters.

A request that creates a topic (a group's first heartbeat creates its retry topic, an admin
creates one) is answered once the name servers know of it (:meth:`NamesrvRegistrar.register_now`),
as RocketMQ's broker registers before it answers: a client that asks for the route right
after would otherwise find the topic on the masters that registered it first and not yet on
the others, and keep that partial route for 30 s.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from typing import TYPE_CHECKING, Any

from mqcore.logs import get_logger
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.fastjson import loads
from mqcore.protocol.headers import GetRouteInfoRequestHeader
from mqcore.protocol.route import TopicRoute
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand
from mqcore.server.namesrv import (
    REGISTER_BROKER,
    UNREGISTER_BROKER,
    RegisterBrokerRequestHeader,
    UnregisterBrokerRequestHeader,
)

if TYPE_CHECKING:
    from mqcore.broker.broker import Broker

__all__ = ["NamesrvRegistrar"]

log = get_logger(__name__)

_CHECK_S = 0.5  # how often the topic table is compared with what was registered
_ROUTE_TIMEOUT_S = 1.5  # a route asked of the name servers for a client (below its 3 s)


class NamesrvRegistrar:
    """Keeps ``broker`` registered at ``address`` with its name servers; owns a thread.

    :param broker: the broker.
    :param address: ``host:port`` clients reach the broker at.
    :param ha_address: its replication port (masters), or None.
    """

    def __init__(self, broker: Broker, address: str, ha_address: str | None = None) -> None:
        cfg = broker.config
        self.broker = broker
        self.address = address
        self.ha_address = ha_address
        self.namesrvs = [a.strip() for a in (cfg.namesrv_addr or "").split(";") if a.strip()]
        self.period = cfg.register_name_server_period_ms / 1000
        self._client = RemotingClient()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._waiting: list[concurrent.futures.Future[None]] = []
        self._waiting_lock = threading.Lock()
        self._counter = 0
        # The first round before the constructor returns: a server that says it is up is
        # already in every reachable name server's routes (a name server that is down gets
        # it on a later round).
        self._registered = self.register_once()
        self._due = time.monotonic() + self.period
        self._thread = threading.Thread(
            target=self._run, name=f"mqcore-register-{cfg.broker_name}", daemon=True
        )
        self._thread.start()

    def _topics(self) -> dict[str, Any]:
        topics = {t.topic_name: t.to_json() for t in self.broker.topics.all()}
        template = self.broker.auto_create_template
        if template is not None:  # producers take its route for a topic not created yet
            topics.setdefault(template.topic_name, template.to_json())
        return topics

    def register_once(self) -> dict[str, Any]:
        """Register with every name server now; returns the topics registered."""
        cfg = self.broker.config
        topics = self._topics()
        self._counter += 1
        body = json.dumps(
            {
                "topicConfigSerializeWrapper": {
                    "topicConfigTable": topics,
                    "dataVersion": {"timestamp": int(time.time() * 1000), "counter": self._counter},
                },
                "filterServerList": [],
            }
        ).encode()
        header = RegisterBrokerRequestHeader(
            broker_name=cfg.broker_name,
            broker_addr=self.address,
            cluster_name=cfg.broker_cluster_name,
            ha_server_addr=self.ha_address,
            broker_id=cfg.broker_id,
        )
        for addr in self.namesrvs:
            try:
                resp = self._client.invoke(
                    addr, RemotingCommand.request(REGISTER_BROKER, header, body), 3.0
                )
                if resp.code != 0:
                    log.warning("namesrv_register_refused", namesrv=addr, remark=resp.remark)
            except Exception as exc:  # that name server is down: the next round retries
                log.info("namesrv_register_failed", namesrv=addr, error=str(exc))
        return topics

    def register_now(self) -> concurrent.futures.Future[None]:
        """Register again at once: the future is done when a registration that read the topic
        table after this call has been sent to every name server (each answered or failed)."""
        fut: concurrent.futures.Future[None] = concurrent.futures.Future()
        with self._waiting_lock:
            if self._stop.is_set():
                fut.set_result(None)
                return fut
            self._waiting.append(fut)
        self._wake.set()
        return fut

    def route(self, topic: str) -> TopicRoute | None:
        """``topic``'s route as the first name server that knows it answers (every broker
        group), or None when none knows it or none answers."""
        request = RemotingCommand.request(
            RequestCode.GET_ROUTEINFO_BY_TOPIC, GetRouteInfoRequestHeader(topic=topic)
        )
        for addr in self.namesrvs:
            try:
                resp = self._client.invoke(addr, request, _ROUTE_TIMEOUT_S)
            except Exception as exc:  # that name server is down: the next one
                log.info("namesrv_route_failed", namesrv=addr, topic=topic, error=str(exc))
                continue
            if resp.code == ResponseCode.SUCCESS and resp.body:
                return TopicRoute.from_json(topic, loads(resp.body))
        return None

    def _run(self) -> None:
        registered: dict[str, Any] | None = self._registered
        due = self._due
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                self._wake.clear()
                with self._waiting_lock:
                    waiting, self._waiting = self._waiting, []
                try:
                    if waiting or registered is None or now >= due or self._topics() != registered:
                        due = now + self.period
                        registered = self.register_once()
                except Exception:  # a bug in one round must not end registration for good
                    log.exception("namesrv_register_round_failed")
                finally:
                    for fut in waiting:
                        fut.set_result(None)
                self._wake.wait(_CHECK_S)
        finally:
            with self._waiting_lock:
                waiting, self._waiting = self._waiting, []
            for fut in waiting:
                fut.set_result(None)  # closing: nobody waits for a registration any more

    def close(self) -> None:
        """Stop, unregister from every name server (best effort), close the connections."""
        with self._waiting_lock:
            self._stop.set()
        self._wake.set()
        self._thread.join(timeout=10)
        cfg = self.broker.config
        header = UnregisterBrokerRequestHeader(
            broker_name=cfg.broker_name,
            broker_addr=self.address,
            cluster_name=cfg.broker_cluster_name,
            broker_id=cfg.broker_id,
        )
        for addr in self.namesrvs:
            try:
                self._client.invoke(addr, RemotingCommand.request(UNREGISTER_BROKER, header), 3.0)
            except Exception as exc:  # gone already: it expires us anyway
                log.info("namesrv_unregister_failed", namesrv=addr, error=str(exc))
        self._client.close()
