"""A standalone name server (``mqcore namesrv``): RocketMQ's NamesrvController, reduced to
what clients and brokers need: brokers register, clients ask for routes.

Brokers send REGISTER_BROKER (103) every ``register_name_server_period_ms`` (30 s) with their
group, id, address and (masters) their topic configuration; a broker not heard of for 120 s,
or whose connection closes, is removed (RocketMQ's ``BROKER_CHANNEL_EXPIRED_TIME`` and
``onChannelDestroy``). GET_ROUTEINFO_BY_TOPIC (105) answers every broker group that serves the
topic, each with all its members by id, and the topic's queues on each group's master.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import attrs

from mqcore.errors import ProtocolError
from mqcore.logs import get_logger
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.protocol.fields import CommandHeader, Kind, wire_field
from mqcore.protocol.route import BrokerData, QueueData, TopicRoute
from mqcore.remoting.command import RemotingCommand

__all__ = [
    "BROKER_EXPIRED_MS",
    "REGISTER_BROKER",
    "UNREGISTER_BROKER",
    "NameServer",
    "RegisterBrokerRequestHeader",
    "UnregisterBrokerRequestHeader",
]

log = get_logger(__name__)

REGISTER_BROKER = 103
UNREGISTER_BROKER = 104
BROKER_EXPIRED_MS = 120_000  # RocketMQ's BROKER_CHANNEL_EXPIRED_TIME


@attrs.frozen(kw_only=True)
class RegisterBrokerRequestHeader(CommandHeader):
    """REGISTER_BROKER (103) request; the body is RocketMQ's ``RegisterBrokerBody`` JSON."""

    broker_name: str = wire_field("brokerName", Kind.STRING, required=True)
    broker_addr: str = wire_field("brokerAddr", Kind.STRING, required=True)
    cluster_name: str = wire_field("clusterName", Kind.STRING, required=True)
    ha_server_addr: str | None = wire_field("haServerAddr", Kind.STRING)
    broker_id: int = wire_field("brokerId", Kind.LONG, required=True)


@attrs.frozen(kw_only=True)
class UnregisterBrokerRequestHeader(CommandHeader):
    """UNREGISTER_BROKER (104) request."""

    broker_name: str = wire_field("brokerName", Kind.STRING, required=True)
    broker_addr: str = wire_field("brokerAddr", Kind.STRING, required=True)
    cluster_name: str = wire_field("clusterName", Kind.STRING, required=True)
    broker_id: int = wire_field("brokerId", Kind.LONG, required=True)


@attrs.define
class _Member:
    broker_name: str
    broker_id: int
    cluster: str
    last_update: float
    connection: Any


class NameServer:
    """The route tables, and the remoting processor that serves them.

    :param expire_ms: a broker silent this long is dropped (120 s).
    :param clock: monotonic seconds (tests inject one).
    """

    def __init__(self, expire_ms: int = BROKER_EXPIRED_MS, clock: Any = time.monotonic) -> None:
        self.expire_ms = expire_ms
        self._clock = clock
        self._lock = threading.Lock()
        self._members: dict[str, _Member] = {}  # broker address -> member
        # topic -> broker name -> the queues its master registered
        self._queues: dict[str, dict[str, QueueData]] = {}
        self.inline_codes = frozenset(
            {
                RequestCode.GET_ROUTEINFO_BY_TOPIC,
                RequestCode.GET_BROKER_CLUSTER_INFO,
                REGISTER_BROKER,
            }
        )

    # -- tables --------------------------------------------------------------------------

    def register(
        self,
        header: RegisterBrokerRequestHeader,
        topics: dict[str, Any],
        connection: Any = None,
    ) -> None:
        """Record a broker and the topics it serves (replacing older ones): a master's, or a
        slave's while its group has no master registered.

        RocketMQ's name server takes topics from masters alone; a slave restarted while its
        master is down would then leave the group's topics unrouted, and new consumers could
        not read what the slave holds. A master's registration replaces the slave's again.
        """
        with self._lock:
            fresh = header.broker_addr not in self._members
            self._members[header.broker_addr] = _Member(
                header.broker_name, header.broker_id, header.cluster_name, self._clock(), connection
            )
            name = header.broker_name
            masterless = not any(
                m.broker_name == name and m.broker_id == 0 for m in self._members.values()
            )
            if header.broker_id == 0 or (masterless and topics):
                for table in self._queues.values():
                    table.pop(name, None)
                for topic, cfg in topics.items():
                    self._queues.setdefault(topic, {})[name] = QueueData(
                        name,
                        int(cfg.get("readQueueNums", 0)),
                        int(cfg.get("writeQueueNums", 0)),
                        int(cfg.get("perm", 6)),
                    )
                self._queues = {t: q for t, q in self._queues.items() if q}
        if fresh:
            log.info(
                "namesrv_broker_registered",
                broker=header.broker_name,
                broker_id=header.broker_id,
                addr=header.broker_addr,
            )

    def unregister(self, broker_addr: str, reason: str = "unregistered") -> None:
        """Forget the broker at ``broker_addr`` (its group's topics go with its last member)."""
        with self._lock:
            member = self._members.pop(broker_addr, None)
            if member is None:
                return
            name = member.broker_name
            if not any(m.broker_name == name for m in self._members.values()):
                # The whole group is gone; while a slave remains, its topics stay readable.
                for table in self._queues.values():
                    table.pop(name, None)
                self._queues = {t: q for t, q in self._queues.items() if q}
        log.info("namesrv_broker_removed", addr=broker_addr, reason=reason)

    def scan_expired(self) -> None:
        """Drop brokers that have not registered for ``expire_ms`` (call it periodically)."""
        limit = self._clock() - self.expire_ms / 1000
        with self._lock:
            stale = [a for a, m in self._members.items() if m.last_update < limit]
        for addr in stale:
            self.unregister(addr, "expired")

    def cluster_info(self) -> dict[str, Any]:
        """RocketMQ's ``ClusterInfo``: every group with its members, and groups by cluster."""
        self.scan_expired()
        groups: dict[str, dict[str, Any]] = {}
        clusters: dict[str, list[str]] = {}
        with self._lock:
            for addr, m in sorted(self._members.items()):
                data = groups.setdefault(
                    m.broker_name,
                    {"cluster": m.cluster, "brokerName": m.broker_name, "brokerAddrs": {}},
                )
                data["brokerAddrs"][str(m.broker_id)] = addr
                names = clusters.setdefault(m.cluster, [])
                if m.broker_name not in names:
                    names.append(m.broker_name)
        return {"brokerAddrTable": groups, "clusterAddrTable": clusters}

    def route(self, topic: str) -> TopicRoute | None:
        """The topic's route: every group with queues for it, with all its members."""
        self.scan_expired()
        with self._lock:
            queues = dict(self._queues.get(topic, {}))
            groups: dict[str, dict[int, str]] = {}
            clusters: dict[str, str] = {}
            for addr, m in self._members.items():
                if m.broker_name in queues:
                    groups.setdefault(m.broker_name, {})[m.broker_id] = addr
                    clusters[m.broker_name] = m.cluster
        if not queues:
            return None
        return TopicRoute(
            topic,
            [BrokerData(name, addrs, clusters[name]) for name, addrs in sorted(groups.items())],
            [queues[name] for name in sorted(queues)],
        )

    # -- remoting processor --------------------------------------------------------------

    def process(self, req: RemotingCommand, connection: Any) -> RemotingCommand:
        """Answer a request (REGISTER_BROKER, UNREGISTER_BROKER, GET_ROUTEINFO_BY_TOPIC,
        GET_BROKER_CLUSTER_INFO)."""
        try:
            if req.code == REGISTER_BROKER:
                h = req.read_header(RegisterBrokerRequestHeader)
                body = json.loads(bytes(req.body or b"{}") or b"{}")
                wrapper = body.get("topicConfigSerializeWrapper") or {}
                self.register(h, wrapper.get("topicConfigTable") or {}, connection)
                return RemotingCommand.response(ResponseCode.SUCCESS, None, to=req)
            if req.code == UNREGISTER_BROKER:
                u = req.read_header(UnregisterBrokerRequestHeader)
                self.unregister(u.broker_addr)
                return RemotingCommand.response(ResponseCode.SUCCESS, None, to=req)
            if req.code == RequestCode.GET_BROKER_CLUSTER_INFO:
                body = json.dumps(self.cluster_info()).encode()
                return RemotingCommand.response(ResponseCode.SUCCESS, None, None, body, to=req)
            if req.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
                topic = str((req.ext_fields or {}).get("topic", ""))
                route = self.route(topic)
                if route is None:
                    return RemotingCommand.response(
                        ResponseCode.TOPIC_NOT_EXIST,
                        f"No topic route info in name server for the topic: {topic}",
                        to=req,
                    )
                return RemotingCommand.response(
                    ResponseCode.SUCCESS, None, None, route.encode(), to=req
                )
        except (ProtocolError, ValueError, KeyError, TypeError) as exc:
            return RemotingCommand.response(ResponseCode.SYSTEM_ERROR, str(exc), to=req)
        return RemotingCommand.response(
            ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
            f"request type {req.code} not supported",
            to=req,
        )

    def connection_closed(self, connection: Any) -> None:
        """A broker's connection ended: it is gone (RocketMQ's onChannelDestroy)."""
        with self._lock:
            gone = [a for a, m in self._members.items() if m.connection is connection]
        for addr in gone:
            self.unregister(addr, "connection closed")
