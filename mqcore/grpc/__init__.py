"""RocketMQ 5's gRPC messaging service (``apache.rocketmq.v2.MessagingService``) on a broker,
so the 5.x clients (Java, Go, C#, C++, Node.js, Rust, Python) connect to ``mqcore serve
--grpc-listen HOST:PORT``. Needs the ``mqcore[grpc]`` extra.

- :mod:`~mqcore.grpc.server`: :class:`GrpcServer`, the listener on its own thread and loop;
- :mod:`~mqcore.grpc.service`: the servicer, one method per call, each answering a Status;
- :mod:`~mqcore.grpc.route`: QueryRoute and QueryAssignment;
  :mod:`~mqcore.grpc.send`: SendMessage; :mod:`~mqcore.grpc.settings`: the Settings the
  Telemetry stream answers; :mod:`~mqcore.grpc.clients`: the clients and their streams;
- :mod:`~mqcore.grpc.convert` and :mod:`~mqcore.grpc.checks`: codes, hashes, the proxy's
  request checks; :mod:`~mqcore.grpc.pb`: the protocol's classes (from the official client).

Importing this package does not import grpcio; :class:`GrpcServer` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mqcore.grpc.server import GrpcServer

__all__ = ["GrpcServer"]


def __getattr__(name: str) -> Any:
    if name == "GrpcServer":
        from mqcore.grpc.server import GrpcServer

        return GrpcServer
    raise AttributeError(name)
