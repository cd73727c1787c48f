"""The 5.x clients the endpoint knows: each one's settings and its telemetry stream.

A client says who it is (producer of some topics, or consumer of a group and its
subscriptions) in the Settings of its Telemetry stream; later calls (Heartbeat,
QueryAssignment, NotifyClientTermination) are answered from them. A client is forgotten when
it says it terminates, or when its last stream ends and it sends no heartbeat for the
broker's channel expiry; the table never holds more than ``max_clients``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import attrs

from mqcore.grpc.convert import GrpcStatusError
from mqcore.grpc.pb import definition

__all__ = ["ClientRegistry", "GrpcClient"]

Code = definition.Code
ClientType = definition.ClientType
CONSUMER_TYPES = frozenset({ClientType.PUSH_CONSUMER, ClientType.SIMPLE_CONSUMER})


@attrs.define
class GrpcClient:
    """One client: the Settings it sent, its open telemetry streams, when it was last seen."""

    client_id: str
    settings: Any = None
    streams: list[asyncio.Queue[Any]] = attrs.field(factory=list)
    last_seen: float = attrs.field(factory=time.monotonic)

    @property
    def is_consumer(self) -> bool:
        """Whether it is a push or simple consumer."""
        return self.settings is not None and self.settings.client_type in CONSUMER_TYPES

    @property
    def group(self) -> str | None:
        """A consumer's group."""
        if self.settings is None or not self.settings.HasField("subscription"):
            return None
        return str(self.settings.subscription.group.name)


class ClientRegistry:
    """Clients by id (the ``x-mq-client-id`` header), bounded and thread-safe."""

    def __init__(self, max_clients: int = 10_000, expiry_s: float = 120.0) -> None:
        self.max_clients = max_clients
        self.expiry_s = expiry_s
        self._lock = threading.Lock()
        self._clients: dict[str, GrpcClient] = {}

    def __len__(self) -> int:
        return len(self._clients)

    def get(self, client_id: str) -> GrpcClient | None:
        """The client, refreshed as seen, or None."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is not None:
                client.last_seen = time.monotonic()
            return client

    def _entry(self, client_id: str) -> GrpcClient:
        client = self._clients.get(client_id)
        if client is None:
            if len(self._clients) >= self.max_clients:
                self._expire()
            if len(self._clients) >= self.max_clients:
                raise GrpcStatusError(
                    Code.TOO_MANY_REQUESTS,
                    f"this endpoint serves at most {self.max_clients} clients",
                )
            client = self._clients[client_id] = GrpcClient(client_id)
        client.last_seen = time.monotonic()
        return client

    def update_settings(self, client_id: str, settings: Any) -> GrpcClient:
        """Record what ``client_id`` says it is."""
        with self._lock:
            client = self._entry(client_id)
            client.settings = settings
            return client

    def attach(self, client_id: str, stream: asyncio.Queue[Any]) -> None:
        """A telemetry stream of ``client_id`` opened (``stream`` feeds its replies)."""
        with self._lock:
            self._entry(client_id).streams.append(stream)

    def detach(self, client_id: str, stream: asyncio.Queue[Any]) -> None:
        """That stream ended."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is not None and stream in client.streams:
                client.streams.remove(stream)

    def remove(self, client_id: str) -> GrpcClient | None:
        """Forget ``client_id`` (it terminated); the entry it had, or None."""
        with self._lock:
            return self._clients.pop(client_id, None)

    def streams_of(self, client_id: str) -> list[asyncio.Queue[Any]]:
        """The open telemetry streams of ``client_id``."""
        with self._lock:
            client = self._clients.get(client_id)
            return list(client.streams) if client is not None else []

    def clients(self) -> list[GrpcClient]:
        """Every known client."""
        with self._lock:
            return list(self._clients.values())

    def _expire(self) -> list[GrpcClient]:
        now = time.monotonic()
        gone = [
            c for c in self._clients.values() if not c.streams and now - c.last_seen > self.expiry_s
        ]
        for c in gone:
            del self._clients[c.client_id]
        return gone

    def expire(self) -> list[GrpcClient]:
        """Forget the clients without a stream, unseen for ``expiry_s``; those forgotten."""
        with self._lock:
            return self._expire()
