"""Consumer groups on the broker: heartbeats, subscriptions, expiry and change notifications."""

from __future__ import annotations

import threading
import time

import attrs

from mqcore.logs import get_logger
from mqcore.message import MessageQueue
from mqcore.protocol.channel import ClientChannel
from mqcore.protocol.heartbeat import ConsumerData, SubscriptionData

__all__ = ["ConsumerData", "ConsumerManager", "SubscriptionData"]

log = get_logger(__name__)


@attrs.define
class _Client:
    client_id: str
    last_update_ms: int
    channel: ClientChannel | None


@attrs.define
class _Group:
    data: ConsumerData
    clients: dict[str, _Client] = attrs.field(factory=dict)


class ConsumerManager:
    """Who is in each consumer group, and what they subscribe to."""

    def __init__(self, channel_expired_timeout_ms: int = 120_000) -> None:
        self.channel_expired_timeout_ms = channel_expired_timeout_ms
        self._lock = threading.Lock()
        self._groups: dict[str, _Group] = {}

    def register(
        self,
        client_id: str,
        data: ConsumerData,
        channel: ClientChannel | None = None,
        now_ms: int | None = None,
    ) -> bool:
        """Record a heartbeat; returns True (and notifies the group) when membership changed.

        ``channel`` is how the broker reaches the client (membership notices, offset resets).
        """
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            group = self._groups.get(data.group_name)
            if group is None:
                group = self._groups[data.group_name] = _Group(data)
            group.data = data
            client = group.clients.get(client_id)
            changed = client is None
            if client is None:
                group.clients[client_id] = _Client(client_id, now, channel)
            else:
                client.last_update_ms = now
                if channel is not None:
                    client.channel = channel
        if changed:
            log.info("consumer_registered", group=data.group_name, client_id=client_id)
            self._notify(data.group_name)
        return changed

    def unregister(self, client_id: str, group_name: str) -> bool:
        """Remove a client from a group; notifies the rest when it was a member."""
        with self._lock:
            group = self._groups.get(group_name)
            removed = group is not None and group.clients.pop(client_id, None) is not None
        if removed:
            log.info("consumer_unregistered", group=group_name, client_id=client_id)
            self._notify(group_name)
        return removed

    def unregister_connection(self, client_id: str, connection: object) -> list[str]:
        """Remove ``client_id`` from each group it heartbeats over ``connection`` (its channel's
        connection), notifying the rest; returns those groups.

        RocketMQ removes a closed channel's members, not every member of that id: another
        client of the same id (a producer and a consumer of one process under one instance
        name) keeps its own connection, and stays in its groups when this one closes.
        """
        with self._lock:
            names = [
                name
                for name, group in self._groups.items()
                if (c := group.clients.get(client_id)) is not None
                and getattr(c.channel, "connection", None) is connection
            ]
        return [name for name in names if self.unregister(client_id, name)]

    def client_ids(self, group_name: str) -> list[str]:
        """The group's live client ids, sorted."""
        with self._lock:
            group = self._groups.get(group_name)
            return sorted(group.clients) if group else []

    def group_data(self, group_name: str) -> ConsumerData | None:
        """The latest heartbeat data of the group."""
        with self._lock:
            group = self._groups.get(group_name)
            return group.data if group else None

    def groups(self) -> list[str]:
        """Groups with at least one client."""
        with self._lock:
            return sorted(name for name, g in self._groups.items() if g.clients)

    def scan_expired(self, now_ms: int | None = None) -> list[tuple[str, str]]:
        """Drop clients silent for longer than the expiry; returns (group, client id) pairs."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        dropped: list[tuple[str, str]] = []
        with self._lock:
            for name, group in self._groups.items():
                for cid, client in list(group.clients.items()):
                    if now - client.last_update_ms > self.channel_expired_timeout_ms:
                        del group.clients[cid]
                        dropped.append((name, cid))
        for name, cid in dropped:
            log.warning("consumer_expired", group=name, client_id=cid)
        for name in {name for name, _ in dropped}:
            self._notify(name)
        return dropped

    def channels(self, group_name: str) -> list[tuple[str, ClientChannel]]:
        """(client id, channel) of the group's live members that left a channel."""
        with self._lock:
            group = self._groups.get(group_name)
            if group is None:
                return []
            return [(c.client_id, c.channel) for c in group.clients.values() if c.channel]

    def notify_reset(self, group_name: str, topic: str, offsets: dict[MessageQueue, int]) -> int:
        """Tell every member of the group with a channel that an operator moved its offsets
        in ``topic`` (RocketMQ's RESET_CONSUMER_CLIENT_OFFSET); returns how many were told."""
        told = 0
        for client_id, channel in self.channels(group_name):
            try:
                channel.reset_offset(group_name, topic, dict(offsets))
                told += 1
            except Exception:  # a client's channel must not break the broker
                log.exception("reset_offset_notice_failed", group=group_name, client_id=client_id)
        return told

    def _notify(self, group_name: str) -> None:
        # RocketMQ's NOTIFY_CONSUMER_IDS_CHANGED, to every member of the group.
        for client_id, channel in self.channels(group_name):
            try:
                channel.consumer_ids_changed(group_name)
            except Exception:  # a client's channel must not break the broker
                log.exception(
                    "consumer_ids_changed_notice_failed", group=group_name, client_id=client_id
                )
