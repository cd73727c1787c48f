"""The protocol's generated classes, from the official RocketMQ 5 Python client.

``apache.rocketmq.v2`` (``definition.proto`` and ``service.proto``) is published, compiled, in
the ``rocketmq-python-client`` package as ``rocketmq.grpc_protocol``; mqcore takes the message
classes and the service's registration function from there instead of keeping its own copy
of the ``.proto`` files. Both come with the ``mqcore[grpc]`` extra.
"""

from __future__ import annotations

from typing import Any

from mqcore.errors import MQError

__all__ = ["definition", "grpc", "service", "service_grpc"]

try:
    import grpc
    from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise MQError(
        f"the gRPC endpoint needs the mqcore[grpc] extra (grpcio and rocketmq-python-client): "
        f"{exc}; install it with: pip install 'mqcore[grpc]'"
    ) from exc

#: ``definition.proto``: Code, Status, Resource, Message, Settings, MessageQueue...
definition: Any = definition_pb2
#: ``service.proto``: the requests and responses of ``MessagingService``
service: Any = service_pb2
#: the servicer base class and ``add_MessagingServiceServicer_to_server``
service_grpc: Any = service_pb2_grpc
