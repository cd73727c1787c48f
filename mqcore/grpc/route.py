"""QueryRoute and QueryAssignment: a topic's queues, all served at one gRPC address.

A 5.x client sends every later call to the endpoints a route names. mqcore's gRPC listener
serves the whole broker, so the endpoints are the address the client asked with (the
request's ``endpoints``, which is how it reached this server), else the listener's own.
"""

from __future__ import annotations

from typing import Any

from mqcore.broker import Broker
from mqcore.broker.topics import PERM_READ, PERM_WRITE
from mqcore.grpc.checks import check_group, check_topic
from mqcore.grpc.convert import GrpcStatusError, accepted_types, status
from mqcore.grpc.pb import definition, service
from mqcore.grpc.send import topic_message_type
from mqcore.hostport import split_host_port

__all__ = ["Router", "endpoints_of"]

Code = definition.Code
Permission = definition.Permission
MASTER_ID = 0


def endpoints_of(address: str) -> Any:
    """``HOST:PORT`` as ``Endpoints`` (IPv4 or a domain name)."""
    host, port = split_host_port(address, "grpc address")
    parts = host.split(".")
    ipv4 = len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)
    scheme = definition.AddressScheme.IPv4 if ipv4 else definition.AddressScheme.DOMAIN_NAME
    return definition.Endpoints(scheme=scheme, addresses=[definition.Address(host=host, port=port)])


def _permission(readable: bool, writable: bool) -> int:
    if readable and writable:
        return int(Permission.READ_WRITE)
    if readable:
        return int(Permission.READ)
    if writable:
        return int(Permission.WRITE)
    return int(Permission.NONE)


class Router:
    """Routes and assignments of one broker, served at ``address`` (``HOST:PORT``)."""

    def __init__(self, broker: Broker, address: str) -> None:
        self.broker = broker
        self.address = address

    def _endpoints(self, asked: Any) -> Any:
        if asked is not None and len(asked.addresses) > 0:
            return definition.Endpoints(scheme=asked.scheme, addresses=list(asked.addresses))
        return endpoints_of(self.address)

    def _broker(self, asked: Any) -> Any:
        return definition.Broker(
            name=self.broker.config.broker_name, id=MASTER_ID, endpoints=self._endpoints(asked)
        )

    def query_route(self, request: Any) -> Any:
        """The ``QueryRouteResponse``: one ``MessageQueue`` per queue, with its permission and
        the message types the topic accepts."""
        topic = check_topic(request.topic)
        route = self.broker.get_route_info_by_topic(topic)  # TOPIC_NOT_FOUND when missing
        types = accepted_types(topic_message_type(self.broker, topic))
        broker = self._broker(request.endpoints)
        queues = []
        for data in route.queue_datas:
            readable = bool(data.perm & PERM_READ)
            writable = bool(data.perm & PERM_WRITE)
            for queue_id in range(max(data.read_queue_nums, data.write_queue_nums, 1)):
                queues.append(
                    definition.MessageQueue(
                        topic=request.topic,
                        id=queue_id,
                        permission=_permission(
                            readable and queue_id < data.read_queue_nums,
                            writable and queue_id < data.write_queue_nums,
                        ),
                        broker=broker,
                        accept_message_types=types,
                    )
                )
        return service.QueryRouteResponse(status=status(Code.OK), message_queues=queues)

    def query_assignment(self, request: Any, fifo: bool) -> Any:
        """The ``QueryAssignmentResponse`` of a push consumer: the whole broker (queue -1)
        for a concurrent group, each queue for a FIFO group, as the proxy assigns."""
        topic = check_topic(request.topic)
        check_group(request.group)
        route = self.broker.get_route_info_by_topic(topic)
        broker = self._broker(request.endpoints)
        assignments = []
        for data in route.queue_datas:
            if not data.perm & PERM_READ or data.read_queue_nums <= 0:
                continue
            permission = _permission(True, bool(data.perm & PERM_WRITE))
            ids = range(data.read_queue_nums) if fifo else (-1,)
            for queue_id in ids:
                queue = definition.MessageQueue(
                    topic=request.topic, id=queue_id, permission=permission, broker=broker
                )
                assignments.append(definition.Assignment(message_queue=queue))
        if not assignments:
            raise GrpcStatusError(Code.FORBIDDEN, f"topic {topic!r} has no readable queue")
        return service.QueryAssignmentResponse(status=status(Code.OK), assignments=assignments)
